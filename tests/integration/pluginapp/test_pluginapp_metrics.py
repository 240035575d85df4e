"""Each prepare and unprepare, successful or not, moves our series and upstream's (issue 19).

Covers: `nvidia_dra_requests_total` / `_request_duration_seconds` per kubelet call,
`nvidia_dra_node_prepare_errors_total` and `nvidia_dra_node_unprepare_errors_total` with our
`kind` and upstream's `error_type`, `nvidia_dra_prepared_devices` by upstream's `device_type`,
`nvidia_dra_requests_inflight` while a claim is handled, the classifiers of device types.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pluginapp_env import create_claim, create_domain, node, prepare, unprepare

from apps.cli import embedded
from apps.pluginkit import metrics as plugin_metrics
from apps.pluginkit import per_claim
from core import models, names
from core.gpu import checkpoint_records as gpu_records

CD = {"driver": names.DRIVER_NAME}


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        yield deployment


def _value(env: embedded.Embedded, name: str, **labels: str) -> float:
    simulated = node(env)
    full = {**CD, "node": simulated.settings.node_name, **labels}
    value = simulated.plugin.metrics.registry.get_sample_value(name, full)
    return 0.0 if value is None else value


def test_a_prepare_and_unprepare_move_ours_and_upstreams_series(env: embedded.Embedded) -> None:
    text = node(env).plugin.metrics.exposition().decode()
    for operation in ("prepare", "unprepare"):  # as upstream: there at 0 before any call
        assert f'nvidia_dra_requests_inflight{{driver="{names.DRIVER_NAME}"' in text
        assert f'operation="{operation}"' in text
    ref = create_claim(env, "a", domain_id=create_domain(env))

    assert prepare(env, ref).error == ""
    assert _value(env, "nvidia_dra_requests_total", operation="prepare") == 1
    assert _value(env, "nvidia_dra_request_duration_seconds_count", operation="prepare") == 1
    assert _value(env, "nvidia_dra_prepared_devices", device_type="channel") == 1
    assert _value(env, "nvidia_dra_prepared_devices", device_type="daemon") == 0
    assert _value(env, "nvidia_dra_requests_inflight", operation="prepare") == 0

    assert unprepare(env, ref).error == ""
    assert _value(env, "nvidia_dra_requests_total", operation="unprepare") == 1
    assert _value(env, "nvidia_dra_prepared_devices", device_type="channel") == 0


def test_failures_are_counted_by_operation_with_our_kind_and_upstreams_error_type(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    bad = create_claim(env, "b", domain_id=domain, allocation_mode="All")
    assert prepare(env, bad).error
    prepare_errors = {"operation": "prepare", "kind": "permanent", "error_type": "prepare_devices"}
    assert _value(env, "nvidia_dra_node_prepare_errors_total", **prepare_errors) == 1
    assert _value(env, "nvidia_dra_requests_total", operation="prepare") == 1
    assert _value(env, "nvidia_dra_prepared_devices", device_type="channel") == 0

    malformed = models.ClaimRef(uid=names.ClaimUID("../x"), namespace="default", name="x")
    assert unprepare(env, malformed).error
    unprepare_errors = {
        "operation": "unprepare", "kind": "permanent", "error_type": "unprepare_devices",
    }
    assert _value(env, "nvidia_dra_node_unprepare_errors_total", **unprepare_errors) == 1
    assert _value(env, "nvidia_dra_requests_total", operation="unprepare") == 1
    # Upstream's split: an unprepare failure is no prepare failure.
    assert _value(env, "nvidia_dra_node_prepare_errors_total", **prepare_errors) == 1
    assert "nvidia_dra_node_prepare_errors_total{" not in _lines_with(env, 'operation="unprepare"')


def _lines_with(env: embedded.Embedded, needle: str) -> str:
    text = node(env).plugin.metrics.exposition().decode()
    return "\n".join(line for line in text.splitlines() if needle in line)


def test_requests_inflight_counts_the_claim_being_handled() -> None:
    metrics = plugin_metrics.PluginMetrics(node_name="n")
    labels = {**CD, "node": "n", "operation": "prepare"}
    seen: list[float | None] = []

    def handle(ref: models.ClaimRef, deadline: float) -> tuple[models.PreparedDevice, ...]:
        seen.append(metrics.registry.get_sample_value("nvidia_dra_requests_inflight", labels))
        if ref.name == "fails":
            raise RuntimeError("boom")
        return ()

    refs = tuple(
        models.ClaimRef(uid=names.ClaimUID(f"uid-{n}"), namespace="ns", name=n)
        for n in ("ok", "fails")
    )
    results = per_claim.answer_each_claim(
        "prepare", refs, handle, call=None, retry_budget_s=1.0, metrics=metrics
    )
    assert seen == [1.0, 1.0]
    assert metrics.registry.get_sample_value("nvidia_dra_requests_inflight", labels) == 0
    assert results[names.ClaimUID("uid-fails")].error
    internal = {**labels, "kind": "internal", "error_type": "prepare_devices"}
    assert metrics.registry.get_sample_value("nvidia_dra_node_prepare_errors_total", internal) == 1


def test_upstream_duration_buckets_are_all_there() -> None:
    text = plugin_metrics.PluginMetrics(node_name="n").exposition().decode()
    for bound in ("0.05", "0.1", "0.2", "0.4", "0.8", "1.6", "3.2", "6.4", "12.8", "45.0"):
        assert f'le="{bound}"' in text, bound


@pytest.mark.parametrize(("name", "expected"), [
    ("channel-0", "channel"), ("slot-3", "channel"), ("daemon-0", "daemon"),
    ("channel-x", "unknown"), ("gpu-0", "unknown"),
])
def test_computedomain_device_types(name: str, expected: str) -> None:
    assert names.prepared_device_type(name) == expected


@pytest.mark.parametrize(("name", "expected"), [
    ("gpu-0", "gpu"), ("gpu-1-mig-1g.10gb-19-0", "mig"), ("gpu-vfio-0", "vfio"),
    ("channel-0", "unknown"),
])
def test_gpu_device_types(name: str, expected: str) -> None:
    assert gpu_records.prepared_device_type(name) == expected


def test_gpu_metrics_carry_the_gpu_driver_and_its_device_types() -> None:
    metrics = plugin_metrics.PluginMetrics(
        node_name="n", driver=names.GPU_DRIVER_NAME,
        device_type_of=gpu_records.prepared_device_type,
        device_types=gpu_records.PREPARED_DEVICE_TYPES,
    )
    for kind in ("gpu", "mig", "vfio", "unknown"):
        labels = {"driver": "gpu.nvidia.com", "node": "n", "device_type": kind}
        assert metrics.registry.get_sample_value("nvidia_dra_prepared_devices", labels) == 0
