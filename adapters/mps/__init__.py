"""Adapter for MPS control daemons: their Deployments, their host directories, and the
`nvidia-cuda-mps-control` program the daemon's container runs (`control`).

Only this package runs `nvidia-cuda-mps-control`, `mount` and `umount` for MPS; its stand-in
for tests, the demo and the bench is in `simulated`.
"""
