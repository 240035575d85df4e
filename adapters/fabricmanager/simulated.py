"""A simulated Fabric Manager (`core.ports.FabricManager`) with a real HGX partition table.

Fabric Manager is a service apart from the plugin: its activations outlive a plugin restart
or crash. So, with a state file (in a simulated driver root: `state_path_in`), the active
partition ids live in that file, read on every call and replaced atomically on every change,
and a restarted plugin (or a test) sees what the previous one left active. Without one, they
live in the object. The rules are Fabric Manager's: an unknown partition id is refused, and
so is activating a partition that shares GPUs with another active one (FM_ST_IN_USE);
activating an active partition or deactivating an inactive one changes nothing (upstream's
Manager checks the state first, so that a retried prepare or unprepare is not an error).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections.abc import Iterable
from typing import Final

from core import errors
from core.gpu import fm_partitions

log = logging.getLogger(__name__)

# Beside the simulated GPUs' MIG state (`adapters.nvml.gpu_simulation.STATE_DIR`), which
# `adapters.fs.simulated_driverroot.install` creates.
STATE_DIR: Final = "var/lib/nvidia-simulated"
STATE_FILE: Final = "fabricmanager-state.json"


def state_path_in(driver_root: str) -> str | None:
    """The simulated Fabric Manager's state file in a simulated driver root; None where the
    root has no simulated state directory (a real root, or none)."""
    directory = os.path.join(driver_root, STATE_DIR)
    return os.path.join(directory, STATE_FILE) if os.path.isdir(directory) else None


class SimulatedFabricManager:
    """`core.ports.FabricManager` over a fixed partition table (thread-safe)."""

    def __init__(
        self,
        *,
        table: Iterable[fm_partitions.Partition] = fm_partitions.HGX_8GPU_PARTITIONS,
        state_path: str | None = None,
    ) -> None:
        self._table = tuple(
            dataclasses.replace(p, active=False) for p in fm_partitions.check_partitions(table)
        )
        self._ids = frozenset(p.partition_id for p in self._table)
        self._state_path = state_path
        self._lock = threading.Lock()
        self._active: frozenset[int] = frozenset()

    def __repr__(self) -> str:
        return f"SimulatedFabricManager(partitions={len(self._table)}, state={self._state_path!r})"

    def partitions(self) -> tuple[fm_partitions.Partition, ...]:
        """The table, each partition marked active or not as Fabric Manager has it now."""
        with self._lock:
            active = self._load()
        return tuple(dataclasses.replace(p, active=p.partition_id in active) for p in self._table)

    def activate(self, partition_id: int) -> None:
        """Activate `partition_id`; PermanentError if unknown or its GPUs are taken."""
        with self._lock:
            partition = self._known(partition_id)
            active = self._load()
            if partition_id in active:
                log.info("event=fm_partition_already_active partition=%d", partition_id)
                return
            for other in self._table:
                if other.partition_id in active and other.module_ids & partition.module_ids:
                    raise errors.PermanentError(
                        f"cannot activate Fabric Manager partition {partition_id} (modules "
                        f"{sorted(partition.module_ids)}): active partition "
                        f"{other.partition_id} holds modules "
                        f"{sorted(other.module_ids & partition.module_ids)} (FM_ST_IN_USE)"
                    )
            self._store(active | {partition_id})
        log.info(
            "event=fm_partition_activated partition=%d modules=%s",
            partition_id, ",".join(map(str, sorted(partition.module_ids))),
        )

    def deactivate(self, partition_id: int) -> None:
        """Deactivate `partition_id`; PermanentError if unknown."""
        with self._lock:
            self._known(partition_id)
            active = self._load()
            if partition_id not in active:
                log.info("event=fm_partition_already_inactive partition=%d", partition_id)
                return
            self._store(active - {partition_id})
        log.info("event=fm_partition_deactivated partition=%d", partition_id)

    def _known(self, partition_id: int) -> fm_partitions.Partition:
        for partition in self._table:
            if partition.partition_id == partition_id:
                return partition
        known = ", ".join(str(p.partition_id) for p in self._table)
        raise errors.PermanentError(
            f"Fabric Manager has no partition {partition_id} (it supports: {known})"
        )

    def _load(self) -> frozenset[int]:
        if self._state_path is None:
            return self._active
        try:
            with open(self._state_path, encoding="utf-8") as handle:
                state = json.load(handle)
        except FileNotFoundError:
            return frozenset()
        except (OSError, ValueError) as exc:
            raise errors.PermanentError(
                f"simulated Fabric Manager state {self._state_path} is unreadable: {exc}; "
                "remove it to start with no partition active"
            ) from exc
        ids = state.get("active") if isinstance(state, dict) else None
        if not isinstance(ids, list) or not all(
            type(i) is int and i in self._ids for i in ids
        ):
            raise errors.PermanentError(
                f"simulated Fabric Manager state {self._state_path} holds {state!r}, not "
                "{\"active\": [<partition ids of this table>]}; remove it to start with no "
                "partition active"
            )
        return frozenset(ids)

    def _store(self, active: frozenset[int]) -> None:
        if self._state_path is None:
            self._active = active
            return
        temp = f"{self._state_path}.{os.getpid()}.tmp"
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump({"active": sorted(active)}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, self._state_path)
