"""The kubelet-plugin plumbing both plugins share (DESIGN §10).

`driver.ClaimDriver` runs kubelet calls against the checkpoint and the CDI root: retries,
in-flight tracking, rollback, recovery of a corrupt or unreadable checkpoint, stale clean-up,
each in a module of its own that it composes. Each half supplies its device logic as a
`claim_half.ClaimHalf` (`apps.kubeletplugin.driver.ComputeDomainHalf` for ComputeDomains,
`apps.gpuplugin.driver.GpuHalf` for GPUs).
"""
