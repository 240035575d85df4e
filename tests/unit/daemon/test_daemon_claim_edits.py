"""The daemon claim's CDI edits and the IMEX mgmt capability parsing (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from core import errors, models, names
from core.computedomain import daemon_claim, node_facts

CD = models.ComputeDomain(
    meta=models.ObjectMeta(name="train", namespace="team", uid="cd-1"),
    spec=models.ComputeDomainSpec(channel=models.ChannelSpec(resource_claim_template_name="r")),
)
MGMT = node_facts.ImexMgmtDevice(path="/dev/nvidia-caps/nvidia-cap1", major=511, minor=1,
                             file_mode=256)
NODE = node_facts.ImexNodeFacts(node_name=names.NodeName("n1"), clique_id="u.7", channel_major=242,
                        boot_id="b", imex_mgmt=MGMT, daemon_config_root="/plugin/domains")
PROC_DEVICES = "Character devices:\n  1 mem\n195 nvidia\n511 nvidia-caps\n\nBlock devices:\n" \
               "  8 sd\n"


def test_nvidia_caps_major_comes_from_the_character_devices() -> None:
    assert daemon_claim.nvidia_caps_major(PROC_DEVICES) == 511
    assert daemon_claim.nvidia_caps_major("Character devices:\nBlock devices:\n511 nvidia-caps\n") \
        is None


def test_capability_file_gives_the_device_path_minor_and_decimal_mode() -> None:
    text = "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
    assert daemon_claim.parse_mgmt_capability(text, major=511) == MGMT


def test_a_capability_file_without_a_minor_is_a_config_error() -> None:
    with pytest.raises(errors.ConfigError, match="DeviceFileMinor"):
        daemon_claim.parse_mgmt_capability("DeviceFileMode: 256\n", major=511)


def test_edits_carry_domain_env_clique_mount_and_device() -> None:
    (device,) = daemon_claim.daemon_devices(claim_uid="c-1", domain=CD, node=NODE)
    assert device["name"] == "c-1-daemon"
    assert device["containerEdits"] == {
        "env": ["COMPUTE_DOMAIN_UUID=cd-1", "COMPUTE_DOMAIN_NAME=train",
                "COMPUTE_DOMAIN_NAMESPACE=team", "CLIQUE_ID=u.7"],
        "mounts": [{"hostPath": "/plugin/domains/cd-1", "containerPath": "/imexd",
                    "options": ["rw", "nosuid", "nodev", "bind"]}],
        "deviceNodes": [{"path": "/dev/nvidia-caps/nvidia-cap1", "type": "c", "major": 511,
                         "minor": 1, "fileMode": 256}],
    }


def test_a_node_without_fabric_gets_no_mgmt_device_and_an_empty_clique() -> None:
    node = dataclasses.replace(NODE, clique_id="")
    (device,) = daemon_claim.daemon_devices(claim_uid="c-1", domain=CD, node=node)
    assert "deviceNodes" not in device["containerEdits"]
    assert "CLIQUE_ID=" in device["containerEdits"]["env"]
    daemon_claim.check_node_can_run_daemon(dataclasses.replace(node, imex_mgmt=None))


def test_a_clique_node_without_the_mgmt_device_refuses_daemon_claims_saying_why() -> None:
    with pytest.raises(errors.PermanentError, match="fabric-imex-mgmt"):
        daemon_claim.check_node_can_run_daemon(dataclasses.replace(NODE, imex_mgmt=None))


def test_the_host_drivers_imex_binaries_are_mounted_read_only_on_the_daemons_path() -> None:
    binaries = tuple(
        daemon_claim.imex_binary(host_driver_root="/run/nvidia/driver", relative_path=path)
        for path in ("usr/bin/nvidia-imex", "usr/sbin/nvidia-imex-ctl")
    )
    node = dataclasses.replace(NODE, imex_binaries=binaries)
    (device,) = daemon_claim.daemon_devices(claim_uid="c-1", domain=CD, node=node)
    mounts = {m["containerPath"]: m for m in device["containerEdits"]["mounts"]}
    assert mounts["/usr/bin/nvidia-imex"]["hostPath"] == "/run/nvidia/driver/usr/bin/nvidia-imex"
    assert mounts["/usr/bin/nvidia-imex-ctl"]["hostPath"] == (
        "/run/nvidia/driver/usr/sbin/nvidia-imex-ctl"
    )
    assert all("ro" in mounts[p]["options"] for p in ("/usr/bin/nvidia-imex",
                                                       "/usr/bin/nvidia-imex-ctl"))
    assert mounts[daemon_claim.CONTAINER_CONFIG_DIR]["options"][0] == "rw"
