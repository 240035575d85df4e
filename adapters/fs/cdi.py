"""The CDI root: one JSON spec file per prepared claim, written so a runtime never sees half.

Container runtimes read every `*.json`/`*.yaml` file in the CDI root when a container
starts, so a spec appears by atomic rename only. File names come from
`core.names.cdi_spec_file_name`; other vendors' files in the same root are left alone.

Upstream's plugins name a claim's spec the same but `.yaml` (the CDI library's default). A
claim adopted from upstream's checkpoint keeps that file as its spec: `read` falls back to
it, `delete` removes it too, and `write` removes it after writing ours, so the runtime never
finds one device defined by two files for longer than that unlink.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from adapters.fs import _atomic
from core import errors, names

logger = logging.getLogger(__name__)

CDI_ROOT_MODE = 0o755
CDI_FILE_MODE = 0o644
_SPEC_SUFFIX = ".json"
UPSTREAM_SPEC_SUFFIX = ".yaml"
_SPEC_PREFIX = names.cdi_spec_file_name("")[: -len(_SPEC_SUFFIX)]


def claim_uid_from_file_name(
    file_name: str, prefix: str = _SPEC_PREFIX
) -> names.ClaimUID | None:
    """The claim UID encoded in one of our spec file names, or None for any other file."""
    if not (file_name.startswith(prefix) and file_name.endswith(_SPEC_SUFFIX)):
        return None
    uid = file_name[len(prefix) : -len(_SPEC_SUFFIX)]
    return names.ClaimUID(uid) if uid else None


class CDIDirectory:
    """`core.ports.CDIStore` on a directory (default `/var/run/cdi` in the apps).

    `file_name` names a claim's spec file (the ComputeDomain half's by default); both halves
    share the CDI root, each seeing only files of its own name pattern.
    """

    def __init__(
        self, root: str, *, file_name: Callable[[str], str] = names.cdi_spec_file_name
    ) -> None:
        self.root = os.path.abspath(root)
        self._file_name = file_name
        self._prefix = file_name("")[: -len(_SPEC_SUFFIX)]

    def __repr__(self) -> str:
        return f"CDIDirectory({self.root!r})"

    def spec_path(self, claim_uid: names.ClaimUID) -> str:
        """Where the spec of `claim_uid` lives (whether or not it exists)."""
        _check_claim_uid(claim_uid)
        return os.path.join(self.root, self._file_name(claim_uid))

    def upstream_spec_path(self, claim_uid: names.ClaimUID) -> str:
        """Where upstream's plugin keeps the spec of `claim_uid` (an adopted claim's)."""
        return self.spec_path(claim_uid)[: -len(_SPEC_SUFFIX)] + UPSTREAM_SPEC_SUFFIX

    def write(self, claim_uid: names.ClaimUID, spec: Mapping[str, Any]) -> None:
        """Write atomically (temp, rename), mode 0644; replaces any old spec.

        NB: not fsynced. A spec is derived state: the claim's checkpoint entry is the durable
        record, and a lost spec is rebuilt from it (`plan_restore_spec`). Only a power loss
        can lose an unsynced file, and it reboots the node: the boot-ID rule drops prepared
        state and start-up deletes the specs left over.
        """
        path = self.spec_path(claim_uid)
        data = (json.dumps(spec, indent=2, sort_keys=True) + "\n").encode()
        self._ensure_root()
        _atomic.write_atomically(path, data, mode=CDI_FILE_MODE, durable=False)
        logger.debug("cdi spec written claim_uid=%s path=%s", claim_uid, path)
        # An adopted claim's spec is now ours: upstream's would define the same devices.
        self._unlink(self.upstream_spec_path(claim_uid))

    def delete(self, claim_uid: names.ClaimUID) -> None:
        """Remove the claim's spec; a missing file (or root) is success."""
        path = self.spec_path(claim_uid)
        _atomic.fault_point(_atomic.CDI_UNLINK)
        self._unlink(path)
        # An adopted claim's spec is upstream's file.
        self._unlink(self.upstream_spec_path(claim_uid))

    def _unlink(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        # NB: no directory fsync, for the reason `write` gives.
        logger.debug("cdi spec deleted path=%s", path)

    def remove_temp_files(self) -> tuple[str, ...]:
        """Delete temp files a killed write left in the root (ours only); returns their paths."""
        return _atomic.remove_temp_files(self.root, self._prefix)

    def claim_uids(self) -> frozenset[names.ClaimUID]:
        """Claims with one of our spec files in the root (temp and foreign files ignored)."""
        try:
            entries = os.listdir(self.root)
        except FileNotFoundError:
            return frozenset()
        found = (claim_uid_from_file_name(entry, self._prefix) for entry in entries)
        return frozenset(uid for uid in found if uid is not None)

    def read(self, claim_uid: names.ClaimUID) -> Mapping[str, Any] | None:
        """The parsed spec of that claim, or None; DecodeError if the file is not a JSON object."""
        path = self.spec_path(claim_uid)
        try:
            with open(path, "rb") as spec_file:
                raw = spec_file.read()
        except FileNotFoundError:
            return self._read_upstream(claim_uid)
        try:
            spec = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise errors.DecodeError(
                f"CDI spec {path} is not valid JSON ({exc}); delete the file or unprepare the "
                "claim so the driver can rewrite it",
                field=path,
            ) from exc
        if not isinstance(spec, dict):
            raise errors.DecodeError(
                f"CDI spec {path} holds a JSON {type(spec).__name__}, not an object; delete the "
                "file or unprepare the claim so the driver can rewrite it",
                field=path,
            )
        return spec

    def _read_upstream(self, claim_uid: names.ClaimUID) -> Mapping[str, Any] | None:
        """Upstream's `.yaml` spec of an adopted claim, or None."""
        path = self.upstream_spec_path(claim_uid)
        try:
            with open(path, "rb") as spec_file:
                raw = spec_file.read()
        except FileNotFoundError:
            return None
        try:
            spec = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise errors.DecodeError(
                f"CDI spec {path} (written by the upstream plugin) is not valid YAML ({exc})",
                field=path,
            ) from exc
        if not isinstance(spec, dict):
            raise errors.DecodeError(f"CDI spec {path} is not a YAML mapping", field=path)
        return spec

    def _ensure_root(self) -> None:
        if os.path.isdir(self.root):
            return
        with contextlib.suppress(FileExistsError):
            os.makedirs(self.root, mode=CDI_ROOT_MODE)
            # NB: makedirs' mode is filtered by the umask; set the bits the runtime needs.
            os.chmod(self.root, CDI_ROOT_MODE)


def _check_claim_uid(claim_uid: str) -> None:
    if not claim_uid or "/" in claim_uid or "\0" in claim_uid or claim_uid in (".", ".."):
        raise ValueError(f"claim UID {claim_uid!r} cannot name a CDI spec file")
