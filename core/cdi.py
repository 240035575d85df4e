"""CDI specs that hand prepared devices to the container runtime.

One spec per claim (`k8s.compute-domain.nvidia.com/claim`): the kubelet returns the fully
qualified device ids and the runtime applies the spec's edits. `cdiVersion` is the lowest
version whose features the spec uses, so that older runtimes accept our files; the rules
mirror the CDI project's minimum-version checks (DESIGN §3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core import models, names

# fileMode 0666: every container process may open its channel; access is gated by the claim.
CHANNEL_FILE_MODE = 0o666
# Every device of ours carries its ComputeDomain in this env var: the daemon reads it, and a
# checkpoint rebuilt from CDI files learns which domain holds each channel (DESIGN §5).
DOMAIN_ENV = "COMPUTE_DOMAIN_UUID"

_EARLIEST_VERSION = "0.3.0"


def channel_device_name(claim_uid: str, channel_id: int) -> str:
    """CDI device name of one channel of a claim: `<claimUID>-channel-<N>`."""
    return f"{claim_uid}-channel-{channel_id}"


def daemon_device_name(claim_uid: str) -> str:
    """CDI device name of a daemon claim's device: `<claimUID>-daemon`."""
    return f"{claim_uid}-daemon"


def qualified_name(device_name: str) -> str:
    """`k8s.compute-domain.nvidia.com/claim=<device>` as the kubelet returns it."""
    return f"{names.CDI_KIND_CLAIM}={device_name}"


def qualified_device_id(claim_uid: str, channel_id: int) -> str:
    """Fully qualified CDI id of a claim's channel device."""
    return qualified_name(channel_device_name(claim_uid, channel_id))


def qualified_daemon_id(claim_uid: str) -> str:
    """Fully qualified CDI id of a daemon claim's device."""
    return qualified_name(daemon_device_name(claim_uid))


def channel_path(channel_id: int) -> str:
    return f"{names.IMEX_CHANNEL_DIR}/channel{channel_id}"


def channel_devices(
    *, claim_uid: str, channel_ids: Sequence[int], major: int, domain_id: str
) -> list[models.JSONObject]:
    """CDI devices for the channels of a claim, one device node each, sorted by channel id.

    Each also sets `COMPUTE_DOMAIN_UUID=<domain_id>` (valid from CDI 0.3.0), so the spec alone
    proves which ComputeDomain holds the channel.
    """
    return [
        {
            "name": channel_device_name(claim_uid, channel_id),
            "containerEdits": {
                "env": [f"{DOMAIN_ENV}={domain_id}"],
                "deviceNodes": [
                    {
                        "path": channel_path(channel_id),
                        "type": "c",
                        "major": major,
                        "minor": channel_id,
                        "fileMode": CHANNEL_FILE_MODE,
                    }
                ]
            },
        }
        for channel_id in sorted(set(channel_ids))
    ]


def daemon_devices(*, claim_uid: str, domain_id: str) -> list[models.JSONObject]:
    """The single CDI device of a driver-managed daemon claim: tells the daemon its domain."""
    return [
        {
            "name": daemon_device_name(claim_uid),
            "containerEdits": {"env": [f"{DOMAIN_ENV}={domain_id}"]},
        }
    ]


def spec_with_devices(devices: Sequence[Mapping[str, Any]]) -> models.JSONObject:
    """A claim-class spec holding `devices`, stamped with the minimum cdiVersion they need."""
    spec: models.JSONObject = {
        "kind": names.CDI_KIND_CLAIM,
        "devices": [dict(device) for device in devices],
    }
    return {"cdiVersion": minimum_cdi_version(spec), **spec}


def claim_spec(
    *, claim_uid: str, channel_ids: Sequence[int], major: int, domain_id: str
) -> models.JSONObject:
    """CDI spec of a channel claim: device `<claimUID>-channel-<N>` per channel id."""
    return spec_with_devices(
        channel_devices(
            claim_uid=claim_uid, channel_ids=channel_ids, major=major, domain_id=domain_id
        )
    )


def daemon_claim_spec(*, claim_uid: str, domain_id: str) -> models.JSONObject:
    """CDI spec of a driver-managed daemon claim: device `<claimUID>-daemon`."""
    return spec_with_devices(daemon_devices(claim_uid=claim_uid, domain_id=domain_id))


def minimum_cdi_version(spec: Mapping[str, Any]) -> str:
    """The lowest CDI spec version that supports every feature `spec` uses.

    Follows the CDI project's rules: 0.3.0 is the earliest; mount `type` needs 0.4.0; a device
    name not starting with a letter or a device node `hostPath` needs 0.5.0; annotations or a
    dotted class need 0.6.0; intelRdt or additionalGids need 0.7.0; intelRdt schemata /
    enableMonitoring or netDevices need 1.1.0.
    """
    devices = [d for d in spec.get("devices") or () if isinstance(d, Mapping)]
    edits = [e for e in (spec.get("containerEdits"), *(d.get("containerEdits") for d in devices))
             if isinstance(e, Mapping)]
    if any(_uses_v110(e) for e in edits):
        return "1.1.0"
    if any(e.get("intelRdt") is not None or e.get("additionalGids") for e in edits):
        return "0.7.0"
    if spec.get("annotations") or any(d.get("annotations") for d in devices):
        return "0.6.0"
    if "." in _class_of(str(spec.get("kind", ""))):
        return "0.6.0"
    if any(not _starts_with_letter(str(d.get("name", ""))) for d in devices):
        return "0.5.0"
    if any(node.get("hostPath") for e in edits for node in _items(e, "deviceNodes")):
        return "0.5.0"
    if any(mount.get("type") for e in edits for mount in _items(e, "mounts")):
        return "0.4.0"
    return _EARLIEST_VERSION


def _uses_v110(edits: Mapping[str, Any]) -> bool:
    rdt = edits.get("intelRdt")
    if isinstance(rdt, Mapping) and (
        rdt.get("schemata") is not None or rdt.get("enableMonitoring")
    ):
        return True
    return bool(edits.get("netDevices"))


def _items(edits: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return [item for item in edits.get(key) or () if isinstance(item, Mapping)]


def _class_of(kind: str) -> str:
    vendor, _, klass = kind.partition("/")
    return klass if vendor and klass else ""


def _starts_with_letter(name: str) -> bool:
    # NB: CDI checks only the first byte and only ASCII letters; an empty name needs nothing.
    return not name or ("a" <= name[0] <= "z" or "A" <= name[0] <= "Z")
