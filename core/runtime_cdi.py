"""Does the node's container runtime apply our CDI specs? A judgment on the runtime's CRI answer.

Why: our prepares answer the kubelet with CDI device ids. A runtime with CDI off (containerd
before 2.0 unless `enable_cdi = true`), without CDI (containerd before 1.7, CRI-O before 1.23) or
not reading our CDI root starts the pod anyway, and the container silently lacks its GPU or IMEX
channel. Version strings of forks cannot be trusted, so for containerd the runtime's own config
decides: the CRI `Status(verbose=true)` answer carries it as JSON under info key "config", with
`enableCDI` (since 1.7) and `cdiSpecDirs`. CRI-O reports no such config; it has had CDI, always
on, since 1.23.

Pure: the adapter (`adapters.cri`) asks the runtime; this module only reads the answer.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any

# Where containerd and CRI-O look for CDI specs when not told otherwise.
DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
CRIO_MIN_CDI = (1, 23)
CONTAINERD_MIN_CDI = "1.7"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"


class Verdict(enum.StrEnum):
    """What the runtime's answer says about our CDI specs."""

    APPLIED = "applied"  # CDI on and our CDI root among its spec dirs
    CDI_OFF = "cdi_off"  # CDI disabled, or a runtime too old to have it
    ROOT_NOT_WATCHED = "root_not_watched"  # CDI on, our root not among its spec dirs
    UNKNOWN = "unknown"  # not reachable, or an answer we do not understand: do not refuse


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeAnswer:
    """The runtime's CRI answers: `Version` (name, version) and `Status(verbose=true)`'s info."""

    name: str
    version: str
    info: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, *, name: str, version: str, info: Mapping[str, str]) -> RuntimeAnswer:
        """An answer with its info map sorted (values compare equal whatever the map order)."""
        return cls(name=name, version=version, info=tuple(sorted(info.items())))

    @property
    def label(self) -> str:
        """`name version`, for messages."""
        return f"{self.name or 'unnamed runtime'} {self.version}".strip()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Unreachable:
    """The runtime could not be asked: where we looked, and why it failed."""

    endpoint: str
    reason: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Judgment:
    """The verdict, the runtime it is about, and a message an operator can act on."""

    verdict: Verdict
    runtime: str
    message: str

    @property
    def refusing(self) -> bool:
        """Prepares are refused: the runtime would start the pod without our devices."""
        return self.verdict in (Verdict.CDI_OFF, Verdict.ROOT_NOT_WATCHED)


def normalize_dir(path: str) -> str:
    """A spec dir as a comparable absolute path: normalized, and /var/run spelled /run.

    NB: /var/run is a symlink to /run on every distribution a kubelet runs on, so a runtime
    reading /run/cdi reads what we write to /var/run/cdi.
    """
    # NB: normpath keeps a leading "//" (POSIX allows it a meaning); no runtime gives it one.
    normal = "/" + posixpath.normpath("/" + path.strip()).lstrip("/")
    if normal == "/var/run" or normal.startswith("/var/run/"):
        normal = "/run" + normal[len("/var/run"):]
    return normal


def judge(observed: RuntimeAnswer | Unreachable, *, cdi_root: str) -> Judgment:
    """Decide whether `observed` applies the CDI specs we write under `cdi_root` (host path)."""
    if isinstance(observed, Unreachable):
        return Judgment(
            verdict=Verdict.UNKNOWN, runtime=observed.endpoint or "-",
            message=(
                f"the container runtime could not be asked whether it applies CDI specs "
                f"({observed.reason}); prepares go on unchecked: mount the runtime's CRI socket "
                "into the plugin (chart value kubeletPlugin.containerRuntimeEndpoint) to check"
            ),
        )
    config = _containerd_config(dict(observed.info))
    if config is not None and "enableCDI" in config:
        return _judge_config(observed, config, cdi_root=cdi_root)
    name = observed.name.lower()
    if name in ("cri-o", "crio"):
        return _judge_crio(observed, cdi_root=cdi_root)
    if "containerd" in name and config is not None:
        # A config without `enableCDI`: a containerd from before CDI support (1.6 and older).
        return Judgment(
            verdict=Verdict.CDI_OFF, runtime=observed.label,
            message=(
                f"the container runtime {observed.label} has no CDI support (its config has "
                f"no enableCDI), so containers would start without the devices this driver "
                f"prepares: upgrade containerd to {CONTAINERD_MIN_CDI} or newer and enable CDI"
            ),
        )
    return Judgment(
        verdict=Verdict.UNKNOWN, runtime=observed.label,
        message=(
            f"the container runtime {observed.label} does not say whether it applies CDI specs "
            f"(no containerd config in its verbose status); prepares go on unchecked: make sure "
            f"it has CDI on and reads {cdi_root}"
        ),
    )


def _containerd_config(info: Mapping[str, str]) -> dict[str, object] | None:
    raw = info.get("config")
    if raw is None:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _judge_config(
    observed: RuntimeAnswer, config: Mapping[str, object], *, cdi_root: str
) -> Judgment:
    enabled = config.get("enableCDI")
    if not isinstance(enabled, bool):
        return Judgment(
            verdict=Verdict.UNKNOWN, runtime=observed.label,
            message=(
                f"the container runtime {observed.label} reports enableCDI={enabled!r}, not a "
                "boolean; prepares go on unchecked"
            ),
        )
    fix = (
        f'set enable_cdi = true and cdi_spec_dirs (including {cdi_root}) in '
        f'{CONTAINERD_CONFIG} under [plugins."io.containerd.grpc.v1.cri"] (containerd 2: '
        f"[plugins.'io.containerd.cri.v1.runtime']), then restart containerd; or upgrade to "
        f"containerd 2.0 or newer, where CDI is on by default"
    )
    if not enabled:
        return Judgment(
            verdict=Verdict.CDI_OFF, runtime=observed.label,
            message=(
                f"the container runtime {observed.label} has CDI disabled (enableCDI=false), so "
                f"containers would start without the devices this driver prepares: {fix}"
            ),
        )
    raw_dirs = config.get("cdiSpecDirs", list(DEFAULT_SPEC_DIRS))
    if raw_dirs is None:
        # NB: Go encodes an unset slice as null; containerd then uses its defaults.
        raw_dirs = list(DEFAULT_SPEC_DIRS)
    if not isinstance(raw_dirs, list) or not all(isinstance(d, str) for d in raw_dirs):
        return Judgment(
            verdict=Verdict.UNKNOWN, runtime=observed.label,
            message=(
                f"the container runtime {observed.label} reports cdiSpecDirs={raw_dirs!r}, not "
                "a list of paths; prepares go on unchecked"
            ),
        )
    return _judge_dirs(observed.label, tuple(raw_dirs), cdi_root=cdi_root, fix=fix)


def _judge_dirs(
    label: str, spec_dirs: tuple[str, ...], *, cdi_root: str, fix: str
) -> Judgment:
    watched = {normalize_dir(d) for d in spec_dirs}
    shown = ",".join(spec_dirs) or "none"
    if normalize_dir(cdi_root) in watched:
        return Judgment(
            verdict=Verdict.APPLIED, runtime=label,
            message=f"the container runtime {label} applies CDI specs from {shown}",
        )
    return Judgment(
        verdict=Verdict.ROOT_NOT_WATCHED, runtime=label,
        message=(
            f"the container runtime {label} reads CDI specs from {shown}, not from this "
            f"driver's CDI root {cdi_root}, so containers would start without the devices this "
            f"driver prepares: add {cdi_root} to the runtime's CDI spec dirs ({fix}), or set "
            f"the chart's kubeletPlugin.cdiRoot to one of its dirs"
        ),
    )


_VERSION = re.compile(r"v?(\d+)\.(\d+)")


def _judge_crio(observed: RuntimeAnswer, *, cdi_root: str) -> Judgment:
    found = _VERSION.match(observed.version.strip())
    if found is None:
        return Judgment(
            verdict=Verdict.UNKNOWN, runtime=observed.label,
            message=(
                f"the container runtime {observed.label} has a version this driver cannot read; "
                "prepares go on unchecked"
            ),
        )
    if (int(found.group(1)), int(found.group(2))) < CRIO_MIN_CDI:
        return Judgment(
            verdict=Verdict.CDI_OFF, runtime=observed.label,
            message=(
                f"the container runtime {observed.label} has no CDI support, so containers "
                f"would start without the devices this driver prepares: upgrade CRI-O to "
                f"{CRIO_MIN_CDI[0]}.{CRIO_MIN_CDI[1]} or newer"
            ),
        )
    # NB: CRI-O does not report its cdi_spec_dirs; with the defaults it reads our usual root.
    fix = "set cdi_spec_dirs in CRI-O's crio.conf [crio.runtime] and restart CRI-O"
    judged = _judge_dirs(observed.label, DEFAULT_SPEC_DIRS, cdi_root=cdi_root, fix=fix)
    if judged.verdict is Verdict.APPLIED:
        return judged
    return Judgment(
        verdict=Verdict.UNKNOWN, runtime=observed.label,
        message=(
            f"the container runtime {observed.label} has CDI but does not report its spec "
            f"dirs, and this driver's CDI root {cdi_root} is not among CRI-O's defaults "
            f"({','.join(DEFAULT_SPEC_DIRS)}): {fix} if it does not read {cdi_root}"
        ),
    )


# The Node condition the plugins keep (`kubectl describe node`): True while prepares are refused.
CONDITION_TYPE = "ContainerRuntimeCDIDisabled"
_CONDITION = {
    Verdict.APPLIED: ("False", "CDIApplied"),
    Verdict.CDI_OFF: ("True", "CDIOff"),
    Verdict.ROOT_NOT_WATCHED: ("True", "CDIRootNotWatched"),
    Verdict.UNKNOWN: ("Unknown", "RuntimeNotUnderstood"),
}


def node_conditions(
    current: Sequence[Mapping[str, Any]], judged: Judgment, *, now: str
) -> list[dict[str, Any]] | None:
    """The Node's `status.conditions` with ours set to `judged` (None: nothing changes).

    Every other condition is kept as it is (a JSON merge patch replaces the whole list); the
    transition time moves only when the status does, as Kubernetes conditions do.
    """
    status, reason = _CONDITION[judged.verdict]
    ours = [c for c in current if c.get("type") == CONDITION_TYPE]
    previous = ours[0] if ours else None
    if previous is not None and (previous.get("status"), previous.get("reason"),
                                 previous.get("message")) == (status, reason, judged.message):
        return None
    transition = (
        str(previous.get("lastTransitionTime", now))
        if previous is not None and previous.get("status") == status else now
    )
    condition = {
        "type": CONDITION_TYPE, "status": status, "reason": reason, "message": judged.message,
        "lastHeartbeatTime": now, "lastTransitionTime": transition,
    }
    kept = [dict(c) for c in current if c.get("type") != CONDITION_TYPE]
    return [*kept, condition]


def refusing_nodes(nodes: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    """(name, message) of each Node whose condition says its runtime ignores our CDI specs,
    sorted by name (what `computedomain preflight` reports)."""
    found: list[tuple[str, str]] = []
    for node in nodes:
        status = node.get("status")
        conditions = status.get("conditions") if isinstance(status, Mapping) else None
        for condition in conditions if isinstance(conditions, list) else ():
            if (isinstance(condition, Mapping) and condition.get("type") == CONDITION_TYPE
                    and condition.get("status") == "True"):
                meta = node.get("metadata")
                name = meta.get("name", "") if isinstance(meta, Mapping) else ""
                found.append((str(name), str(condition.get("message", ""))))
    return tuple(sorted(found))
