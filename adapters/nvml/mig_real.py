"""`core.ports.MigPartitioner` over real NVML: each create or destroy in a child process.

The child is `adapters.nvml.migctl`; after a create, the regular probe (`NvmlInventory`)
reads the new device back, so its UUID, ids and capability minors come from one place.
An NVML refusal (placement taken, MIG mode pending a reset) is a `errors.PermanentError`;
the child crashing, hanging or answering nonsense is `NvmlMigFailed`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from adapters.driverlib import child
from adapters.nvml import real
from core import errors
from core.gpu import devices

logger = logging.getLogger(__name__)

MIGCTL_MODULE = "adapters.nvml.migctl"
DEFAULT_TIMEOUT_S = 120.0  # NB: creating a GPU instance can take seconds under load


class NvmlMigFailed(real.NvmlError):
    """The MIG child process crashed, hung or printed no answer."""


class NvmlMigPartitioner:
    """Creates and destroys MIG devices through `migctl`, reading them back via `inventory`."""

    def __init__(
        self,
        *,
        inventory: real.NvmlInventory,
        command: Sequence[str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.inventory = inventory
        self.command = tuple(command or (sys.executable, "-m", MIGCTL_MODULE))
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"NvmlMigPartitioner(command={self.command!r}, timeout_s={self.timeout_s})"

    def create_mig_device(self, placement: devices.MigPlacement) -> devices.MigDeviceInfo:
        """Create the device, then probe it back; PermanentError where NVML refused."""
        self._run("create", placement)
        for mig in self.inventory.gpu_inventory().migs:
            if devices.MigPlacement.of(mig) == placement:
                logger.info("event=mig_created device=%s uuid=%s", mig.name, mig.uuid)
                return mig
        raise NvmlMigFailed(
            f"NVML created a GPU instance at {placement} but the probe does not list it"
        )

    def destroy_mig_device(self, placement: devices.MigPlacement) -> bool:
        """Destroy the device; False when there was none."""
        changed = self._run("destroy", placement)
        logger.info("event=mig_destroyed placement=%s existed=%s", placement, changed)
        return changed

    def _run(self, action: str, placement: devices.MigPlacement) -> bool:
        args = (
            *self.command, action, str(placement.parent_minor), str(placement.gi_profile_id),
            str(placement.placement_start),
        )
        text = " ".join(args)
        try:
            done = child.run(args, timeout_s=self.timeout_s, env=self.inventory.child_env())
        except child.ChildTimedOut as exc:
            raise NvmlMigFailed(
                f"MIG {action} did not finish within {self.timeout_s:g}s and was killed "
                f"(command: {text}); check nvidia-smi and dmesg on the node"
            ) from exc
        except child.ChildNotStarted as exc:
            raise NvmlMigFailed(
                f"cannot start MIG {action} (command: {text}): {exc.__cause__}"
            ) from exc
        answer = child.last_json_object(done.stdout)
        if done.returncode != 0 or answer is None:
            raise NvmlMigFailed(
                f"MIG {action} exited with status {done.returncode} and no answer (command: "
                f"{text}); stderr: {done.stderr_tail}"
            )
        if answer.get("ok") is not True:
            raise errors.PermanentError(
                f"NVML refused to {action} MIG device {placement}: {answer.get('error')}"
            )
        return answer.get("changed") is True

