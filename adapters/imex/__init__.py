"""The IMEX side of a node: files `nvidia-imex` reads, its supervised child, `nvidia-imex-ctl`.

Also the kubelet plugin's half of driver-managed IMEX: per-domain config directories created and
removed with the daemon claims' CDI specs, and the management capability device it hands out.
"""
