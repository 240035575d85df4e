"""The ComputeDomain half (`compute-domain.nvidia.com`) of the pure core.

The controller's planning (`controlling`, the objects it owns in `objects`, IMEX channels in
`channels` and `channel_prepare`), the kubelet plugin's (`preparing`, NVLink `cliques`,
host-managed IMEX in `hostimex`), the IMEX modes and their switch safety (`modes`,
`modeswitch`), and the IMEX daemon's: `membership` claims a daemon's entry and index among its
peers, `imexconfig` renders the files `nvidia-imex` reads, `daemon_claim` is what the kubelet
plugin hands a daemon pod through CDI.
"""
