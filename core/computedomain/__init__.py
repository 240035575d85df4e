"""The ComputeDomain half of the pure core: the IMEX daemon's planning.

`membership` claims a daemon's entry and index among its peers, `imexconfig` renders the files
`nvidia-imex` reads, `daemon_claim` is what the kubelet plugin hands a daemon pod through CDI.
"""
