"""Channel isolation end to end on the embedded deployment (real gRPC, files, CEL allocation).

Two ComputeDomains on one GB200 rack get different channels; their pods, placed on one node
through slot devices, get CDI edits naming different `/dev/nvidia-caps-imex-channels/channel<N>`
with the node's major; a third ComputeDomain on a full cluster reports exhaustion with nothing
created for it, and gets a channel once the others and their claims are gone.
"""

from __future__ import annotations

import os
import subprocess
import sys

from apps.cli import channel_scenario, embedded
from core.computedomain import channels, controlling

MAJOR = 242  # what the embedded node files write into /proc/devices


def _quiet(_line: str) -> None:
    return None


def _node(channel: int) -> str:
    return f"/dev/nvidia-caps-imex-channels/channel{channel} (major {MAJOR}, minor {channel})"


def test_two_domains_on_one_rack_get_different_channels_and_device_nodes() -> None:
    with embedded.running(workdir="", mode="hostManaged", isolation="channel") as env:
        report = channel_scenario.run(env, say=_quiet)
    assert report.channels == {"training-a": 1, "training-b": 2}
    assert report.prepare_errors == {}
    assert len(set(report.pod_nodes.values())) == 1, "all pods share one node through slots"
    assert report.device_paths == {
        "training-a-worker-0": (_node(1),),
        "training-b-worker-0": (_node(2),),
        "training-a-worker-1": (_node(1),),
    }
    assert report.exhausted_condition == ""  # 2,047 channels: no exhaustion
    assert (report.leftover_cdi_files, report.leftover_checkpoint_entries) == (0, 0)
    assert report.cd_deleted and report.rct_deleted


def test_a_third_domain_on_a_full_cluster_reports_exhaustion_then_gets_a_freed_channel() -> None:
    with embedded.running(workdir="", mode="hostManaged", isolation="channel",
                          max_channels=3) as env:
        report = channel_scenario.run(env, say=_quiet)
    assert report.channels["training-c"] is None
    assert report.exhausted_condition == (
        f"{controlling.CHANNEL_ASSIGNED_CONDITION}=False {channels.EXHAUSTED_REASON}"
    )
    assert len(report.exhausted_events) == 1
    assert "all 2 channels (1..2) are held" in report.exhausted_events[0]
    assert report.third_channel_after_free == 1
    assert (report.leftover_cdi_files, report.leftover_checkpoint_entries) == (0, 0)


def test_demo_command_shows_two_domains_with_their_own_channels() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "apps.cli", "demo", "--mode", "hostManaged", "--isolation",
         "channel", "--channels-max", "3"],
        capture_output=True, text=True, timeout=120, check=False,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))),
    )
    assert done.returncode == 0, done.stderr
    for expected in (
        "slot-0, slot-1",
        "training-a: status Ready, status.channelID 1",
        "training-b: status Ready, status.channelID 2",
        "/dev/nvidia-caps-imex-channels/channel1",
        "/dev/nvidia-caps-imex-channels/channel2",
        "ChannelAssigned=False IMEXChannelsExhausted, ResourceClaimTemplate created: False",
        "0 CDI spec files, 0 checkpoint entries",
    ):
        assert expected in done.stdout, f"missing {expected!r} in:\n{done.stdout}"
