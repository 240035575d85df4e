"""The plugin leaves its fabric judgment in each per-domain directory (`fabric-health.json`).

A driver-managed IMEX daemon pod has no NVML, so the ComputeDomain plugin writes its judgment
where the daemon mounts `/imexd` (`<plugin dir>/domains/<cdUID>`): when a daemon claim is
prepared (a new daemon reads the current judgment at once), in every domain directory on each
change (degrade, recovery), and at start (a file an earlier run left may be stale). The
simulated driver root's fabric state file stands in for NVML.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "daemon"))

import test_daemon_claim_cdi as claims

from adapters.fs import fabric_health_file
from adapters.nvml import simulated
from apps.cli import embedded
from core import kinds, models, names
from core.computedomain import fabric_health

GUARD_S = 30.0
INTERVAL_S = 0.05


@pytest.fixture
def rack() -> Iterator[embedded.Embedded]:
    """One GB200 node, driver-managed, its fabric re-read every 50 ms."""
    with embedded.running(workdir="", mode="driverManaged", profile="gb200-nvl72",
                          node_limit=1, clique_refresh_interval_s=INTERVAL_S) as env:
        yield env


def _domains_root(env: embedded.Embedded) -> pathlib.Path:
    return pathlib.Path(claims._node(env).settings.plugin_dir) / "domains"


def _judgment(directory: pathlib.Path) -> fabric_health.FabricHealth | None:
    return fabric_health_file.read(str(directory))


def _wait_judgment(directory: pathlib.Path, *, healthy: bool) -> fabric_health.FabricHealth:
    embedded.wait_until(
        lambda: (found := _judgment(directory)) is not None and found.healthy == healthy,
        timeout_s=GUARD_S, what=f"{directory}/fabric-health.json saying healthy={healthy}")
    found = _judgment(directory)
    assert found is not None
    return found


def _fabric_file(env: embedded.Embedded) -> str:
    return embedded.fabric_state_file(env.workdir, claims._node(env).name)


def test_every_domain_dir_gets_the_judgment_on_prepare_and_on_each_change(
    rack: embedded.Embedded,
) -> None:
    domain_id = claims._domain(rack)
    ref = claims._daemon_claim(rack, "daemon-a", domain_id=domain_id)
    assert claims._prepare(rack, ref).error == ""
    prepared = _domains_root(rack) / domain_id
    assert _judgment(prepared) == fabric_health.NOT_JUDGED, "there before the daemon starts"
    other = _domains_root(rack) / "another-domain"
    other.mkdir()  # a domain directory whose claim this plugin run has not prepared (yet)
    node = claims._node(rack)
    sick = simulated.SimulatedInventory(
        profile="gb200-nvl72", node_name=node.name).fabric_records()[3].gpu_uuid

    simulated.degrade_simulated_fabric(_fabric_file(rack), gpu_uuid=sick,
                                       state=models.FabricState.IN_PROGRESS, status_ok=True)

    for directory in (prepared, other):
        found = _wait_judgment(directory, healthy=False)
        assert (found.reason, found.describe()) == ("InProgress", f"{sick} state=InProgress")

    simulated.restore_simulated_fabric(_fabric_file(rack))

    for directory in (prepared, other):
        assert _wait_judgment(directory, healthy=True) == fabric_health.NOT_JUDGED
    assert not [p.name for p in prepared.iterdir() if p.name.endswith(".tmp")]


def test_a_daemon_claim_prepared_while_degraded_finds_the_degraded_judgment(
    rack: embedded.Embedded,
) -> None:
    simulated.degrade_simulated_fabric(_fabric_file(rack))
    _wait_until_tainted(rack)  # judged, while no domain directory exists yet
    domain_id = claims._domain(rack)
    ref = claims._daemon_claim(rack, "daemon-a", domain_id=domain_id)

    assert claims._prepare(rack, ref).error == ""

    found = _judgment(_domains_root(rack) / domain_id)
    assert found is not None and found.reason == "Failed", "written with the claim's spec"


def _wait_until_tainted(env: embedded.Embedded) -> None:
    embedded.wait_until(
        lambda: any(d.get("taints") for s in env.cluster.list(kinds.RESOURCE_SLICE.kind).items
                    if s["spec"]["driver"] == names.DRIVER_NAME
                    for d in s["spec"].get("devices") or ()),
        timeout_s=GUARD_S, what="the devices tainted fabric-degraded")


def test_a_stale_file_is_rewritten_when_the_plugin_starts(rack: embedded.Embedded) -> None:
    current = claims._node(rack)
    current.kubelet.close()
    current.plugin.stop(grace_s=0)
    stale = _domains_root(rack) / "left-by-an-earlier-run"
    stale.mkdir(parents=True)
    (stale / fabric_health.FILE_NAME).write_bytes(fabric_health.encode(fabric_health.judge([
        models.FabricRecord(gpu_uuid="GPU-old", state=models.FabricState.NOT_STARTED,
                            cluster_uuid=b"\x01" * 16)])))
    killed_write = stale / f".{fabric_health.FILE_NAME}.x1y2.tmp"
    killed_write.write_text("{", encoding="utf-8")

    embedded.start_node(rack, current.name, profile="gb200-nvl72", retry_budget_s=0.2,
                        clique_refresh_interval_s=3600)

    assert _judgment(stale) == fabric_health.NOT_JUDGED
    assert not killed_write.exists(), "a write killed half-way leaves nothing behind"
