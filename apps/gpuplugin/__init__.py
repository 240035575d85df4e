"""`gpu-kubelet-plugin`: the `gpu.nvidia.com` half (full GPUs, MIG devices, VFIO functions)."""
