"""`compute-domain-daemon`: one per node of a driver-managed ComputeDomain; wraps `nvidia-imex`."""
