"""The node's NVLink fabric health judged from its fabric records (`fabric_health`).

Covers: which GPU states degrade a node (and which do not: no fabric, all-zero cluster UUID);
the reason chosen when GPUs fail differently; the taint and health states every published
device gets; the daemon's entry status; agreement with what CrashOnNVLinkFabricErrors refuses
at start (a property over random records); the shared taint helpers (`core.device_taints`).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import device_health, device_taints, errors, models
from core.computedomain import cliques, fabric_health

CLUSTER = bytes.fromhex("8c2b3f4e5a6d4e7f8091a2b3c4d5e6f7")
S = models.FabricState
H = device_health.HealthStatus
READY, NOT_READY = models.DomainStatus.READY, models.DomainStatus.NOT_READY


def _gpu(n: int, state: S = S.COMPLETED, *, ok: bool = True,
         cluster: bytes = CLUSTER) -> models.FabricRecord:
    return models.FabricRecord(gpu_uuid=f"GPU-{n}", state=state, cluster_uuid=cluster,
                               clique_id=1, status_ok=ok)


@pytest.mark.parametrize(
    "records",
    [
        [_gpu(i) for i in range(4)],
        [_gpu(i, S.NOT_SUPPORTED, cluster=b"\x00" * 16) for i in range(8)],
        [_gpu(0, cluster=b"\x00" * 16), _gpu(1)],
        [],
    ],
    ids=["all-completed-ok", "no-fabric-h100", "zero-cluster-uuid", "no-gpus"],
)
def test_a_node_is_healthy_unless_a_gpu_fabric_is_supported_but_unusable(
    records: list[models.FabricRecord],
) -> None:
    health = fabric_health.judge(records)
    assert health.healthy and health.reason == "" and health.describe() == ""
    assert fabric_health.taint(health) is None


@pytest.mark.parametrize(
    ("record", "reason", "described"),
    [
        (_gpu(2, S.COMPLETED, ok=False), "Failed", "GPU-2 state=Completed status=error"),
        (_gpu(2, S.IN_PROGRESS), "InProgress", "GPU-2 state=InProgress"),
        (_gpu(2, S.NOT_STARTED), "NotStarted", "GPU-2 state=NotStarted"),
        # A registration not complete yet whose status already says error.
        (_gpu(2, S.IN_PROGRESS, ok=False), "InProgress", "GPU-2 state=InProgress status=error"),
    ],
    ids=["completed-with-error", "in-progress", "not-started", "in-progress-error"],
)
def test_one_unusable_gpu_degrades_the_node_naming_it_and_its_state(
    record: models.FabricRecord, reason: str, described: str
) -> None:
    health = fabric_health.judge([_gpu(0), _gpu(1), record, _gpu(3)])
    assert not health.healthy
    assert (health.reason, health.describe()) == (reason, described)
    assert [g.gpu_uuid for g in health.degraded] == ["GPU-2"]


def test_the_most_severe_reason_names_the_taint_and_every_gpu_is_described_in_order() -> None:
    health = fabric_health.judge(
        [_gpu(3, S.IN_PROGRESS), _gpu(1, S.COMPLETED, ok=False), _gpu(2, S.NOT_STARTED)])
    assert health.reason == "Failed"
    assert health.describe() == ("GPU-1 state=Completed status=error; GPU-2 state=NotStarted; "
                                 "GPU-3 state=InProgress")
    assert fabric_health.judge([_gpu(1, S.IN_PROGRESS), _gpu(2, S.NOT_STARTED)]).reason == (
        "NotStarted")


def test_the_same_records_give_the_same_judgment() -> None:
    records = [_gpu(1, S.IN_PROGRESS), _gpu(0)]
    assert fabric_health.judge(records) == fabric_health.judge(list(reversed(records)))
    assert fabric_health.judge([_gpu(0)]) == fabric_health.NOT_JUDGED


def test_a_degraded_node_taints_every_published_device_noschedule_with_the_reason() -> None:
    health = fabric_health.judge([_gpu(0, S.IN_PROGRESS)])
    taint = device_taints.DeviceTaint(key="compute-domain.nvidia.com/fabric-degraded",
                                      value="InProgress")
    assert fabric_health.taint(health) == taint and taint.blocks_scheduling
    assert str(taint) == "compute-domain.nvidia.com/fabric-degraded=InProgress:NoSchedule"
    assert fabric_health.device_taints_of(health, ["daemon-0", "channel-0", "channel-0"]) == {
        "channel-0": (taint,), "daemon-0": (taint,)}
    assert fabric_health.device_taints_of(fabric_health.NOT_JUDGED, ["channel-0"]) == {}


def test_published_devices_are_unhealthy_while_degraded_and_healthy_otherwise() -> None:
    degraded = fabric_health.judge([_gpu(0, S.COMPLETED, ok=False)])
    seen = fabric_health.observations(degraded, ["channel-0", "daemon-0"])
    assert sorted(seen) == ["channel-0", "daemon-0"]
    assert seen["channel-0"].status is H.UNHEALTHY
    assert seen["channel-0"].message == (
        "NVLink fabric degraded (GPU-0 state=Completed status=error): tainted "
        "compute-domain.nvidia.com/fabric-degraded=Failed:NoSchedule")
    healthy = fabric_health.observations(fabric_health.judge([_gpu(0)]), ["channel-0"])
    assert healthy == {"channel-0": device_health.Observation(
        status=H.HEALTHY, message=fabric_health.HEALTHY_MESSAGE)}


@pytest.mark.parametrize(
    ("imex", "records", "want"),
    [
        (READY, [_gpu(0)], READY),
        (NOT_READY, [_gpu(0)], NOT_READY),
        (READY, [_gpu(0, S.IN_PROGRESS)], NOT_READY),
        (NOT_READY, [_gpu(0, S.IN_PROGRESS)], NOT_READY),
    ],
    ids=["ready-healthy", "imex-not-ready", "ready-but-degraded", "both"],
)
def test_the_daemon_entry_is_never_ready_while_the_fabric_is_degraded(
    imex: models.DomainStatus, records: list[models.FabricRecord], want: models.DomainStatus
) -> None:
    assert fabric_health.daemon_status(imex, fabric_health.judge(records)) is want


_records = st.lists(
    st.builds(
        _gpu,
        st.integers(min_value=0, max_value=7),
        st.sampled_from(list(S)),
        ok=st.booleans(),
        cluster=st.sampled_from([CLUSTER, b"\x00" * 16]),
    ),
    max_size=8,
    unique_by=lambda record: record.gpu_uuid,
)


@given(_records)
def test_degraded_exactly_when_crash_on_nvlink_fabric_errors_would_refuse_to_start(
    records: list[models.FabricRecord],
) -> None:
    # NB: one cluster UUID and clique id throughout, so only the fabric state can refuse.
    health = fabric_health.judge(records)
    try:
        cliques.clique_id_from_fabric(records, strict=True)
        refused = False
    except errors.PermanentError as exc:
        refused = True
        assert all(gpu.gpu_uuid in exc.message for gpu in health.degraded)
    assert refused == (not health.healthy)


# ---------------------------------------------------------------- the shared taint helpers


def test_with_taints_adds_taints_in_the_api_shape_and_leaves_other_devices_alone() -> None:
    published: list[models.JSONObject] = [
        {"name": "channel-0", "attributes": {"id": {"int": 0}}},
        {"name": "daemon-0", "taints": [{"key": "other", "effect": "NoSchedule"}]},
        {"name": "slot-0"},
    ]
    noschedule = device_taints.DeviceTaint(key="k", value="v")
    informs = device_taints.DeviceTaint(key="a", effect=device_taints.TaintEffect.NONE)
    got = device_taints.with_taints(
        published, {"channel-0": (noschedule, informs), "daemon-0": (noschedule,)})
    assert got == [
        {"name": "channel-0", "attributes": {"id": {"int": 0}},
         "taints": [{"key": "a", "effect": "None"},
                    {"key": "k", "value": "v", "effect": "NoSchedule"}]},
        {"name": "daemon-0", "taints": [{"key": "other", "effect": "NoSchedule"},
                                        {"key": "k", "value": "v", "effect": "NoSchedule"}]},
        {"name": "slot-0"},
    ]
    assert published[0].get("taints") is None, "the input is not changed"


def test_effect_none_taints_are_left_out_where_the_api_server_does_not_know_them() -> None:
    informs = device_taints.DeviceTaint(key="a", effect=device_taints.TaintEffect.NONE)
    assert not informs.blocks_scheduling and str(informs) == "a:None"
    got = device_taints.with_taints([{"name": "gpu-0"}], {"gpu-0": (informs,)},
                                    effect_none=False)
    assert got == [{"name": "gpu-0"}]


@pytest.mark.parametrize(
    ("version", "supported"),
    [("v1.34.4", False), ("v1.35.0", True), ("1.36", True), ("v2.0.0", True)],
)
def test_effect_none_is_known_from_kubernetes_1_35(version: str, supported: bool) -> None:
    assert device_taints.effect_none_supported(version) is supported


def test_a_version_without_major_and_minor_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Kubernetes version"):
        device_taints.effect_none_supported("latest")
