"""The checkpoint upstream's kubelet plugins leave behind, read for a takeover. Pure.

Upstream (kubernetes-sigs/dra-driver-nvidia-gpu, `cmd/*-kubelet-plugin/checkpoint.go` and
`checkpointv.go`) writes `<plugin dir>/checkpoint.json`, the name our releases before the
takeover support wrote too. Its shape: `{"checksum": N, "v1": {...}, "v2": {...}}` in Go's
compact `encoding/json` output (struct field order, no spaces). `v2` holds `checksum`,
`preparedClaims` (claim UID -> `checkpointState`, `status`, `preparedDevices`, `name`,
`namespace`[, `abortedAt`]) and `nodeBootID`; `v1` the PrepareCompleted claims alone, for
upstream's own downgrades.

The checksums are the kubelet checkpoint manager's: FNV-1a (32 bit) over the text spew
prints for the marshalled bytes, `([]uint8)[b0 b1 ...]` (decimal bytes, one space apart).
`v2.checksum` covers the marshalled `v2` with its checksum set to 0; the top-level one covers
`{"checksum":0,"v1":<v1>}`. Go's encoder is deterministic, so the bytes it hashed are the
file's own: the `v2` member's text with its checksum value replaced by `0`.

Older files are read too (`Format`): releases 25.3.0-rc.3 to 25.3.x wrote `v1` alone (no
states, names or boot ID: every claim PrepareCompleted, the boot taken as the current one, as
upstream does), and 25.3.0-rc.1/rc.2 wrote `v1.preparedClaims` as claim UID -> list of
device groups, each device's `device` in the kubelet protobuf's JSON (`request_names`,
`pool_name`, `device_name`, `cdi_device_ids`); the top-level checksum is the same. A MIG
device's details sit under `info` before 25.8 and under `concrete` after.

Only the fields a takeover needs are interpreted: which claims are prepared, in what state,
and the devices (with the CDI device ids) the kubelet was answered with. Each half turns
these into its own entries (`computedomain.upstream_import`, `gpu.upstream_import`), with
`Notice`s for what it adopts without being able to manage.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Any, Final, Generic, TypeVar

from core import errors, models, names

P = TypeVar("P")

# Upstream's checkpointState values (a V1-only file's claims are all PrepareCompleted).
_STATES: Final = {
    "PrepareStarted": models.ClaimState.PREPARE_STARTED,
    "PrepareCompleted": models.ClaimState.PREPARE_COMPLETED,
    "PrepareAborted": models.ClaimState.PREPARE_ABORTED,
}
# The members of an upstream PreparedDevice, one of which is set: the ComputeDomain
# plugin's `channel`/`daemon`, the GPU plugin's `gpu`/`mig`/`vfio`.
DEVICE_KINDS: Final = ("channel", "daemon", "gpu", "mig", "vfio")


class Format(enum.Enum):
    """Which of upstream's checkpoint layouts a file holds."""

    V2 = "v2"  # 25.8 and later: `v2` (states, names, boot ID) beside `v1`
    V1 = "v1"  # 25.3.0-rc.3 to 25.3.x: `v1` claim objects alone
    RC2503 = "2503rc2"  # 25.3.0-rc.1/rc.2: `v1` claim UID -> device groups


class Origin(enum.Enum):
    """Who wrote a `checkpoint.json`."""

    OURS = "ours"  # our own format (versions 1 and 2: `version`, `entries`, a hex checksum)
    UPSTREAM = "upstream"  # upstream's plugins (a numeric `checksum` beside `v1`/`v2`)
    UNKNOWN = "unknown"  # neither (not JSON, or another shape): left alone


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpstreamDevice:
    """One prepared device of an upstream claim."""

    device: models.PreparedDevice
    # Which member of upstream's PreparedDevice was set (one of DEVICE_KINDS).
    kind: str
    # That member's `info` (`concrete` for a MIG device): e.g. {"id": 3} for a channel,
    # {"uuid": "GPU-..."} for a full GPU.
    info: Mapping[str, Any]
    # The device group's `configState` (e.g. {"Type": ..., "ComputeDomain": <uid>}).
    config_state: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpstreamClaim:
    claim_uid: names.ClaimUID
    namespace: str
    name: str
    state: models.ClaimState
    devices: tuple[UpstreamDevice, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpstreamCheckpoint:
    # The boot the file was last validated on ("" in a file without `v2`).
    boot_id: str
    # Sorted by claim UID.
    claims: tuple[UpstreamClaim, ...]
    format: Format = Format.V2


@dataclasses.dataclass(frozen=True, kw_only=True)
class Notice:
    """Something about an adopted claim the operator must know (a log line and a Node Event)."""

    claim_uid: names.ClaimUID
    # The Event reason, e.g. "UpstreamMPSLeftAsIs".
    reason: str
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Adoption(Generic[P]):
    """A half's entries for upstream's claims, and what it could not take over in full."""

    checkpoint: models.Checkpoint[P]
    # Sorted by claim UID, then reason.
    notices: tuple[Notice, ...] = ()


def claim_label(claim: UpstreamClaim) -> str:
    """`namespace/name (uid)`, or `(name unknown) (uid)` for a claim of an older file."""
    who = f"{claim.namespace}/{claim.name}" if claim.name else "(name unknown)"
    return f"{who} ({claim.claim_uid})"


def origin(data: bytes) -> Origin:
    """Who wrote `data` (the bytes of a `checkpoint.json`); never raises."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return Origin.UNKNOWN
    if not isinstance(document, dict):
        return Origin.UNKNOWN
    if isinstance(document.get("version"), int) and "entries" in document:
        return Origin.OURS
    checksum = document.get("checksum")
    if type(checksum) is int and ("v1" in document or "v2" in document):
        return Origin.UPSTREAM
    return Origin.UNKNOWN


def go_checksum(data: bytes) -> int:
    """`checksum.New(data)` of the kubelet's checkpoint manager, for a byte slice."""
    text = "([]uint8)[" + " ".join(str(b) for b in data) + "]"
    value = 0x811C9DC5
    for byte in text.encode("ascii"):
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def decode(data: bytes) -> UpstreamCheckpoint:
    """Upstream's checkpoint, checksums verified; raises only CheckpointCorruptError."""
    try:
        text = data.decode("utf-8")
        members = _member_spans(text, 0)
        document = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise _corrupt(f"not valid JSON ({err})") from None
    if not isinstance(document, dict) or type(document.get("checksum")) is not int:
        raise _corrupt("no numeric top-level 'checksum'")
    v1 = members.get("v1")
    v1_text = '{"checksum":0' + (f',"v1":{text[v1[0]:v1[1]]}' if v1 else "") + "}"
    if go_checksum(v1_text.encode("utf-8")) != document["checksum"]:
        raise _corrupt("the top-level (v1) checksum does not match")
    v2 = members.get("v2")
    try:
        if v2 is not None:
            v2_text = text[v2[0]:v2[1]]
            inner = _member_spans(v2_text, 0)
            stored = document["v2"].get("checksum") if isinstance(document["v2"], dict) else None
            if "checksum" not in inner or type(stored) is not int:
                raise _corrupt("'v2' has no numeric 'checksum'")
            start, end = inner["checksum"]
            zeroed = v2_text[:start] + "0" + v2_text[end:]
            if go_checksum(zeroed.encode("utf-8")) != stored:
                raise _corrupt("the v2 checksum does not match")
            return _from_v2(document["v2"])
        return _from_v1(document.get("v1"))
    except (ValueError, TypeError, AttributeError, KeyError) as err:
        raise _corrupt(
            f"unexpected shape ({err}); the layouts read are upstream's v2 (25.8 and later), "
            "v1 alone (25.3.0-rc.3 to 25.3.x) and 25.3.0-rc.2's"
        ) from None


def _corrupt(reason: str) -> errors.CheckpointCorruptError:
    return errors.CheckpointCorruptError(
        f"upstream's plugin checkpoint cannot be read: {reason}; it is left in place "
        "untouched and prepared claims are taken from this plugin's own CDI specs only, so "
        "the claims upstream's plugin prepared on this node are not held here: drain the "
        "node's pods that use them (or roll back to upstream's plugin and let it unprepare "
        "them), then restart this plugin"
    )


def _member_spans(text: str, start: int) -> dict[str, tuple[int, int]]:
    """The text span of each member's value of the JSON object starting at `start`."""
    decoder = json.JSONDecoder()
    spans: dict[str, tuple[int, int]] = {}
    at = _skip(text, start)
    if text[at:at + 1] != "{":
        raise ValueError("not a JSON object")
    at = _skip(text, at + 1)
    if text[at:at + 1] == "}":
        return spans
    while True:
        key, at = decoder.raw_decode(text, at)
        if not isinstance(key, str):
            raise ValueError("an object key is not a string")
        at = _skip(text, at)
        if text[at:at + 1] != ":":
            raise ValueError("':' expected")
        begin = _skip(text, at + 1)
        _, end = decoder.raw_decode(text, begin)
        spans[key] = (begin, end)
        at = _skip(text, end)
        if text[at:at + 1] == "}":
            return spans
        if text[at:at + 1] != ",":
            raise ValueError("',' or '}' expected")
        at = _skip(text, at + 1)


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _from_v2(v2: Mapping[str, Any]) -> UpstreamCheckpoint:
    claims = v2.get("preparedClaims") or {}
    boot_id = v2.get("nodeBootID") or ""
    if not isinstance(claims, dict) or not isinstance(boot_id, str):
        raise ValueError("'v2.preparedClaims' is not an object or 'nodeBootID' not a string")
    out = []
    for uid in sorted(claims):
        raw = claims[uid]
        state = _STATES.get(raw.get("checkpointState"))
        if state is None:
            raise ValueError(f"claim {uid}: unknown checkpointState {raw.get('checkpointState')!r}")
        out.append(UpstreamClaim(
            claim_uid=names.ClaimUID(uid),
            namespace=_opt_str(raw, "namespace"),
            name=_opt_str(raw, "name"),
            state=state,
            devices=_devices(raw.get("preparedDevices")),
        ))
    return UpstreamCheckpoint(boot_id=boot_id, claims=tuple(out), format=Format.V2)


def _from_v1(v1: Any) -> UpstreamCheckpoint:
    claims = (v1 or {}).get("preparedClaims") or {}
    if not isinstance(claims, dict):
        raise ValueError("'v1.preparedClaims' is not an object")
    # 25.3.0-rc.2 and before: a claim is its list of device groups, not an object.
    rc2503 = any(isinstance(c, list) for c in claims.values())
    if rc2503 and not all(isinstance(c, list) for c in claims.values()):
        raise ValueError("'v1.preparedClaims' mixes claim objects and device-group lists")
    return UpstreamCheckpoint(
        boot_id="",
        format=Format.RC2503 if rc2503 else Format.V1,
        claims=tuple(
            UpstreamClaim(
                claim_uid=names.ClaimUID(uid), namespace="", name="",
                state=models.ClaimState.PREPARE_COMPLETED,
                devices=_devices(
                    claims[uid] if rc2503 else claims[uid].get("preparedDevices")
                ),
            )
            for uid in sorted(claims)
        ),
    )


def _devices(groups: Any) -> tuple[UpstreamDevice, ...]:
    out: list[UpstreamDevice] = []
    for group in groups or ():
        config_state = group.get("configState") or {}
        for item in group.get("devices") or ():
            kind = next((k for k in DEVICE_KINDS if item.get(k) is not None), None)
            if kind is None:
                raise ValueError("a prepared device has none of " + "/".join(DEVICE_KINDS))
            member = item[kind]
            # A MIG device's details: `concrete` since 25.8, `info` before.
            info = (member.get("concrete") if kind == "mig" else None) or member.get("info") or {}
            device = member.get("device") or {}
            out.append(UpstreamDevice(
                device=models.PreparedDevice(
                    request_names=tuple(str(r) for r in _field(device, "Requests") or ()),
                    pool_name=str(_field(device, "PoolName") or ""),
                    device_name=str(_field(device, "DeviceName") or ""),
                    cdi_device_ids=tuple(str(i) for i in _field(device, "CDIDeviceIDs") or ()),
                ),
                kind=kind,
                info=dict(info),
                config_state=dict(config_state),
            ))
    return tuple(out)


# The kubelet protobuf's JSON names of a Device's fields (25.3.0-rc.2 and before).
_PROTOBUF_FIELDS: Final = {
    "Requests": "request_names",
    "PoolName": "pool_name",
    "DeviceName": "device_name",
    "CDIDeviceIDs": "cdi_device_ids",
}


def _field(device: Mapping[str, Any], go_name: str) -> Any:
    """A Device field under its Go name (25.3.0-rc.3 and later) or its protobuf JSON name."""
    value = device.get(go_name)
    return value if value is not None else device.get(_PROTOBUF_FIELDS[go_name])


def _opt_str(raw: Mapping[str, Any], key: str) -> str:
    value = raw.get(key, "")
    if not isinstance(value, str):
        raise ValueError(f"{key!r} is not a string")
    return value


def entry(
    claim: UpstreamClaim, *, record: P, now: float
) -> models.CheckpointEntry[P]:
    """Our entry for an adopted upstream claim, holding the half's `record`."""
    return models.CheckpointEntry(
        claim_uid=claim.claim_uid,
        namespace=claim.namespace,
        name=claim.name,
        state=claim.state,
        record=record,
        devices=tuple(d.device for d in claim.devices),
        updated_at=now,
    )
