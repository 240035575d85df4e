"""The demo scenario as an end-to-end test on the embedded deployment, in both IMEX modes.

Everything real but the cluster and the GPUs: gRPC over unix sockets, registration through
the registration socket, checkpoint and CDI files on disk, CEL-evaluated allocation.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from apps.cli import embedded, scenario
from core import names


def _quiet(_line: str) -> None:
    return None


def test_host_managed_demo_gives_channel_zero_and_leaves_nothing_behind() -> None:
    with embedded.running(workdir="", profile="gb200-nvl72", mode="hostManaged") as env:
        report = scenario.run(env, say=_quiet, workers=4)
    assert len(set(report.clique_ids.values())) == 1 and all(report.clique_ids.values())
    assert report.slices == 18
    assert report.cd_status_after_create == "Ready"
    assert len(report.prepared) == 4
    assert len(set(report.pod_nodes.values())) == 4  # one channel-0 per node: pods spread
    for cdi_ids in report.prepared.values():
        assert len(cdi_ids) == 1
        assert cdi_ids[0].startswith(f"{names.CDI_KIND_CLAIM}=")
        assert cdi_ids[0].endswith("-channel-0")
    assert report.cdi_device_nodes == [{
        "path": "/dev/nvidia-caps-imex-channels/channel0", "type": "c",
        "major": 242, "minor": 0, "fileMode": 0o666,
    }]
    assert "allocationMode 'All'" in report.negative_error
    assert any("PrepareFailed" in line for line in report.negative_events)
    assert report.cd_deleted and report.rct_deleted
    assert (report.leftover_cdi_files, report.leftover_checkpoint_entries) == (0, 0)


@pytest.mark.slow
def test_driver_managed_demo_waits_for_imex_daemons_then_prepares() -> None:
    with embedded.running(
        workdir="", profile="gb200-nvl72", mode="driverManaged", node_limit=4
    ) as env:
        report = scenario.run(env, say=_quiet, workers=2)
    assert report.cd_status_after_create == "NotReady"  # no daemon has reported yet
    assert len(report.prepared) == 2
    assert "does not exist in namespace demo" in report.negative_error
    assert report.cd_deleted and report.rct_deleted
    assert (report.leftover_cdi_files, report.leftover_checkpoint_entries) == (0, 0)


def test_host_managed_demo_on_a_node_without_fabric_offers_no_channel_to_schedule() -> None:
    with embedded.running(workdir="", profile="h100", mode="hostManaged") as env:
        report = scenario.run(env, say=_quiet, workers=4)
    assert report.prepared == {}
    # The node without an NVLink clique publishes no channel device: the pod is not placed.
    [error] = report.schedule_errors.values()
    assert "no device on node 'h100-node01'" in error
    assert (report.leftover_cdi_files, report.leftover_checkpoint_entries) == (0, 0)


def test_two_racks_have_two_cliques() -> None:
    with embedded.running(workdir="", profile="gb200-2racks", mode="hostManaged") as env:
        report = scenario.run(env, say=_quiet, workers=1)
    assert len(set(report.clique_ids.values())) == 2
    assert len(report.clique_ids) == 36


@pytest.mark.slow
def test_demo_command_narrates_and_exits_zero() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "apps.cli", "demo"],
        capture_output=True, text=True, timeout=120, check=False,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))),
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for expected in (
        "18 kubelet plugins registered",
        "ResourceClaimTemplate demo/training-channel",
        "NodePrepareResources on gb200-rack1-node01",
        "/dev/nvidia-caps-imex-channels/channel0",
        "negative case (allocationMode: All)",
        "Warning PrepareFailed",
        "0 CDI spec files, 0 checkpoint entries",
    ):
        assert expected in out, f"missing {expected!r} in demo output:\n{out}"


def test_demo_rejects_an_invalid_mode_with_the_config_message() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "apps.cli", "demo", "--mode", "driverManaged", "--isolation",
         "channel"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2  # bad configuration (issue 17), refused before the banner
    assert done.stdout == ""
    assert "isolation 'channel' is only valid with mode hostManaged" in done.stderr
