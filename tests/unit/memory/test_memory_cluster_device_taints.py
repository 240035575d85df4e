"""The embedded API server stores ResourceSlice device taints as kube-apiserver does (checked
against kube-apiserver v1.34.4): one without gate DRADeviceTaints (the default before 1.36)
drops `devices[].taints` without a word, before its validation (so even an effect it would
refuse passes)."""

from __future__ import annotations

import datetime
from typing import Any

from adapters.memory import cluster as memory_cluster

NOW = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
XID = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}


def _slice(*taints: dict[str, str]) -> dict[str, Any]:
    device: dict[str, Any] = {"name": "gpu-0"}
    if taints:
        device["taints"] = list(taints)
    return {"metadata": {"name": "node-1-gpu"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "node-1",
                     "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
                     "devices": [device]}}


def _cluster(**kwargs: Any) -> memory_cluster.InMemoryCluster:
    return memory_cluster.InMemoryCluster(clock=lambda: NOW, **kwargs)


def test_taints_are_kept_by_default() -> None:
    made = _cluster().create("ResourceSlice", _slice(XID))
    assert made["spec"]["devices"][0]["taints"] == [XID]


def test_a_server_without_device_taints_drops_them_silently() -> None:
    cluster = _cluster(server_version="v1.34.4", device_taints=False)
    made = cluster.create("ResourceSlice", _slice(XID))
    assert made["spec"]["devices"] == [{"name": "gpu-0"}]
    patched = cluster.patch("ResourceSlice", namespace="", name="node-1-gpu", patch={"spec": {
        "devices": [{"name": "gpu-0", "taints": [XID]}]}})
    assert patched["spec"]["devices"] == [{"name": "gpu-0"}]
    # Dropped before validation, as the real one does: even effect None passes on 1.34.
    cluster.delete("ResourceSlice", namespace="", name="node-1-gpu")
    cluster.create("ResourceSlice", _slice({"key": "k", "effect": "None"}))
