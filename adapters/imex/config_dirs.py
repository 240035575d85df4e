"""Per-domain IMEX config directories, created and removed with the daemon claims' CDI specs.

A daemon claim's CDI spec bind-mounts `<root>/<cdUID>` at `/imexd`. This wraps the plugin's
`CDIStore` so the directory (with the `imexd.cfg.tmpl` the daemon renders) exists before the
spec that mounts it is written, and is removed when the last spec on this node mounting it is
deleted (a replacement daemon pod whose claim was prepared before the old one was unprepared
keeps it). The planners stay unaware: the spec itself says which directory it mounts.
`on_prepared` (the plugin's) is called with each such directory before the spec is written:
it leaves the node's fabric judgment there for the daemon.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any

from adapters.imex import files
from core import names, ports
from core.computedomain import daemon_claim

log = logging.getLogger(__name__)


class DaemonConfigDirs:
    """A `core.ports.CDIStore` that also keeps the daemon claims' mounted directories."""

    def __init__(
        self, inner: ports.CDIStore, *, root: str, template: str,
        on_prepared: Callable[[str], None] | None = None,
    ) -> None:
        self._inner = inner
        self._root = os.path.abspath(root)
        self._template = template
        self._on_prepared = on_prepared

    def write(self, claim_uid: names.ClaimUID, spec: Mapping[str, Any]) -> None:
        for directory in self._mounted_dirs(spec):
            os.makedirs(directory, mode=0o755, exist_ok=True)
            path = os.path.join(directory, daemon_claim.TEMPLATE_FILE_NAME)
            if files.write_text(path, self._template):
                log.info("event=imex_config_dir_prepared claim=%s dir=%s", claim_uid, directory)
            if self._on_prepared is not None:
                self._on_prepared(directory)
        self._inner.write(claim_uid, spec)

    def delete(self, claim_uid: names.ClaimUID) -> None:
        spec = self._inner.read(claim_uid)
        self._inner.delete(claim_uid)
        gone = self._mounted_dirs(spec) if spec is not None else set()
        if not gone:
            return
        still_used: set[str] = set()
        for other in self._inner.claim_uids():
            other_spec = self._inner.read(other)
            if other_spec is not None:
                still_used |= self._mounted_dirs(other_spec)
        for directory in sorted(gone - still_used):
            shutil.rmtree(directory, ignore_errors=True)
            log.info("event=imex_config_dir_removed claim=%s dir=%s", claim_uid, directory)

    def claim_uids(self) -> frozenset[names.ClaimUID]:
        return self._inner.claim_uids()

    def read(self, claim_uid: names.ClaimUID) -> Mapping[str, Any] | None:
        return self._inner.read(claim_uid)

    def _mounted_dirs(self, spec: Mapping[str, Any]) -> set[str]:
        # NB: only directories under our root: a hand-edited spec must never make us delete
        # anything else on the host.
        found: set[str] = set()
        for device in spec.get("devices") or ():
            edits = device.get("containerEdits") if isinstance(device, Mapping) else None
            for mount in (edits or {}).get("mounts") or ():
                if not isinstance(mount, Mapping):
                    continue
                if mount.get("containerPath") != daemon_claim.CONTAINER_CONFIG_DIR:
                    continue
                host = os.path.abspath(str(mount.get("hostPath") or ""))
                if os.path.dirname(host) == self._root:
                    found.add(host)
        return found
