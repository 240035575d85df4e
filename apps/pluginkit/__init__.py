"""The kubelet-plugin plumbing both plugins share (DESIGN §10).

`driver.ClaimDriver` runs kubelet calls against the checkpoint and the CDI root: retries,
in-flight tracking, rollback, recovery of a corrupt or unreadable checkpoint, stale clean-up.
Each half supplies its device logic by overriding a few hooks (`apps.kubeletplugin.driver`
for ComputeDomains, `apps.gpuplugin.driver` for GPUs).
"""
