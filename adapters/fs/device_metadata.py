"""Device metadata files on the host (KEP-5304, gate DeviceMetadata), and their CDI specs.

Writes what `core.device_metadata` plans: each request's metadata file under the plugin
directory (mode 0644, directories 0755, as the kubelet plugin helper) and the CDI spec that
mounts it, in the CDI root; both by atomic rename, so a container runtime never reads half
a file. Removal takes a claim's whole metadata directory and every metadata spec of its UID.
"""

from __future__ import annotations

import json
import logging
import os
import shutil

from adapters.fs import _atomic
from core import device_metadata, errors, names

log = logging.getLogger(__name__)

FILE_MODE = 0o644
DIR_MODE = 0o755


class MetadataFiles:
    """`core.ports.DeviceMetadataStore` on the host's plugin directory and CDI root."""

    def __init__(self, *, driver: str, plugin_dir: str, cdi_root: str) -> None:
        self.driver = driver
        self.plugin_dir = plugin_dir
        self.cdi_root = cdi_root

    def __repr__(self) -> str:
        return f"MetadataFiles(plugin_dir={self.plugin_dir!r}, cdi_root={self.cdi_root!r})"

    def write(self, planned: tuple[device_metadata.RequestMetadata, ...]) -> None:
        """Write every request's file, then its spec (a spec never names a missing file)."""
        try:
            for item in planned:
                os.makedirs(os.path.dirname(item.file_path), mode=DIR_MODE, exist_ok=True)
                _atomic.write_atomically(
                    item.file_path, item.content.encode(), mode=FILE_MODE, durable=False
                )
                os.makedirs(self.cdi_root, mode=DIR_MODE, exist_ok=True)
                _atomic.write_atomically(
                    os.path.join(self.cdi_root, item.spec_file_name),
                    json.dumps(item.spec, indent=2).encode(), mode=FILE_MODE, durable=False,
                )
        except OSError as exc:
            raise errors.RetryableError(
                f"cannot write device metadata file {exc.filename or ''} ({exc.strerror}); "
                f"the plugin directory ({self.plugin_dir}) and CDI root ({self.cdi_root}) must "
                "be writable"
            ) from exc

    def remove(self, *, claim_uid: names.ClaimUID, namespace: str, name: str) -> None:
        """Remove the claim's metadata files and specs; idempotent."""
        directory = device_metadata.claim_dir(self.plugin_dir, namespace=namespace, name=name)
        prefix = device_metadata.spec_file_prefix(self.driver, claim_uid=claim_uid)
        try:
            shutil.rmtree(directory, ignore_errors=False)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise errors.RetryableError(
                f"cannot remove device metadata directory {directory} ({exc.strerror})"
            ) from exc
        try:
            listed = os.listdir(self.cdi_root)
        except FileNotFoundError:
            listed = []
        for file_name in listed:
            if file_name.startswith(prefix) and file_name.endswith(".json"):
                try:
                    os.unlink(os.path.join(self.cdi_root, file_name))
                except FileNotFoundError:
                    continue
                log.debug("event=device_metadata_spec_removed file=%s", file_name)
