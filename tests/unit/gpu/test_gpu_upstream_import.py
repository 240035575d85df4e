"""`core.gpu.upstream_import`: upstream's VFIO and MPS claims taken over by the GPU half.

Covered: a VFIO function's PCI address (from upstream's `pciBusID`, else matched through the
UUID upstream derives from it, else through the device name) so that unprepare gives it back
to the nvidia driver; a function found nowhere (a Notice, the claim still adopted); an MPS
claim (adopted, with a Notice naming upstream's control daemon that stays as it is).
"""

from __future__ import annotations

from typing import Any

from gpu_prep_fixtures import vfio

from core import models, names, upstream_checkpoint
from core.gpu import devices, upstream_import

UID = names.ClaimUID("5d2e8c40-bbbb-4bbb-8bbb-000000000003")
PCI = "0000:41:00.0"
# What upstream gives the function at PCI (uuid5 of the address in the DNS namespace).
PCI_UUID = "c6d656ef-bc10-58ab-8b52-b6bd2b19e909"
INVENTORY = devices.GpuInventory(vfios=(
    vfio(0, pci_bus_id="0000:40:00.0", uuid="other-uuid"),
    vfio(1, pci_bus_id=PCI, uuid=PCI_UUID, parent_minor=11),
))


def _claim(kind: str, name: str, info: dict[str, Any], config_state: dict[str, Any]) -> Any:
    device = models.PreparedDevice(
        request_names=("r",), pool_name="node-a", device_name=name,
        cdi_device_ids=(f"k8s.gpu.nvidia.com/claim={UID}-{name}",),
    )
    return upstream_checkpoint.UpstreamCheckpoint(boot_id="b", claims=(
        upstream_checkpoint.UpstreamClaim(
            claim_uid=UID, namespace="team-a", name="vm", state=models.ClaimState.PREPARE_COMPLETED,
            devices=(upstream_checkpoint.UpstreamDevice(
                device=device, kind=kind, info=info, config_state=config_state),),
        ),
    ))


def _adopt(upstream: Any) -> upstream_checkpoint.Adoption[Any]:
    return upstream_import.adopt(upstream, inventory=INVENTORY, boot_id="b", now=1.0)


def _held(adoption: upstream_checkpoint.Adoption[Any]) -> Any:
    (held,) = adoption.checkpoint.entries[UID].record.held
    return held


def test_a_vfio_function_keeps_the_pci_address_upstream_recorded() -> None:
    adoption = _adopt(_claim("vfio", "gpu-vfio-7", {"uuid": "x", "pciBusID": "0000:99:00.0"}, {}))
    held = _held(adoption)
    assert (held.kind, held.pci_bus_id) == (devices.VFIO_TYPE, "0000:99:00.0")
    assert adoption.notices == ()


def test_a_vfio_function_of_an_older_release_is_found_by_its_uuid() -> None:
    # 25.12.0 and before record only the UUID; the name's index may differ from ours.
    adoption = _adopt(_claim("vfio", "gpu-vfio-0", {"uuid": PCI_UUID}, {}))
    held = _held(adoption)
    assert (held.pci_bus_id, held.gpu_minor) == (PCI, 11)
    assert adoption.notices == ()


def test_a_vfio_function_without_a_known_uuid_is_found_by_its_name() -> None:
    held = _held(_adopt(_claim("vfio", "gpu-vfio-1", {}, {})))
    assert held.pci_bus_id == PCI


def test_a_vfio_function_found_nowhere_is_adopted_with_a_notice() -> None:
    adoption = _adopt(_claim("vfio", "gpu-vfio-9", {"uuid": "gone"}, {}))
    assert _held(adoption).pci_bus_id == ""
    (notice,) = adoption.notices
    assert notice.claim_uid == UID and notice.reason == "UpstreamVfioAddressUnknown"
    assert "team-a/vm" in notice.message and "gpu-vfio-9" in notice.message
    assert "vfio-pci" in notice.message  # says what to rebind by hand


def test_an_mps_claim_is_adopted_and_its_control_daemon_named() -> None:
    daemon = f"{UID}-1a2b3"
    adoption = _adopt(_claim("gpu", "gpu-0", {"uuid": "GPU-0"},
                             {"mpsControlDaemonID": daemon, "mpsApplied": True}))
    entry = adoption.checkpoint.entries[UID]
    assert entry.state is models.ClaimState.PREPARE_COMPLETED
    assert [d.device_name for d in entry.devices] == ["gpu-0"]
    (notice,) = adoption.notices
    assert notice.reason == "UpstreamMPSLeftAsIs"
    assert f"mps-control-daemon-{daemon}" in notice.message
    assert f"mps/{daemon}" in notice.message
    assert "stays as upstream left it" in notice.message


def test_a_claim_without_mps_or_vfio_has_no_notice() -> None:
    adoption = _adopt(_claim("gpu", "gpu-0", {"uuid": "GPU-0"}, {"mpsControlDaemonID": ""}))
    assert adoption.notices == ()


def test_a_recorded_uuid_found_nowhere_is_not_matched_by_name() -> None:
    # The function upstream bound is not discovered; the one we call gpu-vfio-1 is another.
    adoption = _adopt(_claim("vfio", "gpu-vfio-1", {"uuid": "gone"}, {}))
    assert _held(adoption).pci_bus_id == ""
    assert [n.reason for n in adoption.notices] == ["UpstreamVfioAddressUnknown"]
