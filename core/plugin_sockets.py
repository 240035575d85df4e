"""The names of a kubelet plugin's two unix sockets, fixed or per pod.

With a pod UID (a rolling update on a 1.33+ kubelet), each plugin pod registers under names of
its own, so a new pod can register and serve beside the old one until the old is gone: the
kubelet refuses a second registration that names an endpoint it already has. Without one, the
fixed names of every release before: `<driver>-reg.sock` and `dra.sock`.

The per-pod registration name is the one the kubelet's own helper library picks (the kubelet
does not parse it; keeping it makes our sockets look like any other driver's to an operator):
`<driver>-<uid>-reg.sock`, shortened to a digest of the UID, then of driver and UID, when the
path would not fit in a unix socket address.
"""

from __future__ import annotations

import base64
import hashlib
import posixpath
from typing import Final

REGISTRATION_SUFFIX: Final = "-reg.sock"
DRA_SOCKET: Final = "dra.sock"
# The longest path a unix socket address holds on Linux (sun_path, without the NUL).
UNIX_PATH_MAX: Final = 108
# Digest bytes of the shortened names: ample for uniqueness among a node's plugin pods.
_UID_DIGEST_BYTES: Final = 8
_DRIVER_UID_DIGEST_BYTES: Final = 16


def _digest(text: str, size: int) -> str:
    raw = hashlib.sha256(text.encode()).digest()[:size]
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def registration_socket_name(driver: str, *, pod_uid: str = "", registry_dir: str = "") -> str:
    """The registration socket's file name in `registry_dir` (deterministic).

    Without `pod_uid`: `<driver>-reg.sock`. With it, the first of `<driver>-<uid>-reg.sock`,
    `<driver>-<digest(uid)>-reg.sock`, `dra-<digest(driver, uid)>-reg.sock` whose full path
    fits; the last one when none does (the bind then fails with the path in its message).
    """
    if not pod_uid:
        return f"{driver}{REGISTRATION_SUFFIX}"
    candidates = (
        f"{driver}-{pod_uid}{REGISTRATION_SUFFIX}",
        f"{driver}-{_digest(pod_uid, _UID_DIGEST_BYTES)}{REGISTRATION_SUFFIX}",
        f"dra-{_digest(driver + chr(0) + pod_uid, _DRIVER_UID_DIGEST_BYTES)}"
        f"{REGISTRATION_SUFFIX}",
    )
    for name in candidates:
        if len(posixpath.join(registry_dir, name)) <= UNIX_PATH_MAX:
            return name
    return candidates[-1]


def dra_socket_name(*, pod_uid: str = "", plugin_dir: str = "") -> str:
    """The DRA service socket's file name in `plugin_dir` (deterministic).

    The plugin directory is the driver's own, so `dra-<uid>.sock` is unique per pod
    (`dra-<digest(uid)>.sock` when that path would not fit); `dra.sock` without a UID.
    """
    if not pod_uid:
        return DRA_SOCKET
    name = f"dra-{pod_uid}.sock"
    if len(posixpath.join(plugin_dir, name)) <= UNIX_PATH_MAX:
        return name
    return f"dra-{_digest(pod_uid, _UID_DIGEST_BYTES)}.sock"


def is_dra_socket_name(name: str) -> bool:
    """Whether `name` is a DRA service socket of some plugin pod (fixed or per pod)."""
    return name == DRA_SOCKET or (name.startswith("dra-") and name.endswith(".sock"))
