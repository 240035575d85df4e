"""The one name -> constructor map of GPU inventories (`--nvml=real|simulated:<profile>`).

The ComputeDomain half's fabric profiles (`adapters.nvml.simulated`) and the GPU half's
GPU profiles (`adapters.nvml.gpu_simulation`) are separate sets; `real` serves both.
"""

from __future__ import annotations

from adapters.nvml import gpu_simulation, real, simulated
from core import errors, ports

REAL_SPEC = "real"
SIMULATED_PREFIX = "simulated:"
DRIVER_SEPARATOR = "@"


def inventory_from_spec(
    spec: str, *, node_name: str, driver_root: str = "/"
) -> ports.DeviceInventory:
    """The inventory a flag value names; ConfigError saying the accepted values otherwise.

    Constructing `real` touches nothing: NVML is first probed by `fabric_records()`, in a
    child that loads libnvidia-ml from `driver_root` (the host driver's mount point).
    `simulated:<profile>@<driver version>` simulates another driver than the default one;
    its fabric can be degraded through a file under `driver_root` (`simulated.fabric_state_path`).
    """
    if spec == REAL_SPEC:
        return real.NvmlInventory(driver_root=driver_root)
    if spec.startswith(SIMULATED_PREFIX):
        profile, _, version = spec.removeprefix(SIMULATED_PREFIX).partition(DRIVER_SEPARATOR)
        try:
            return simulated.SimulatedInventory(
                profile=profile, node_name=node_name,
                driver_version=version or simulated.DEFAULT_DRIVER_VERSION,
                fabric_state_file=simulated.fabric_state_path(driver_root),
            )
        except ValueError as exc:
            raise errors.ConfigError(f"invalid GPU inventory {spec!r}: {exc}") from exc
    choices = ", ".join(f"{SIMULATED_PREFIX}{profile}" for profile in simulated.PROFILES)
    raise errors.ConfigError(
        f"invalid GPU inventory {spec!r}: use {REAL_SPEC!r} (NVML) or one of {choices}"
    )


def gpu_discovery_from_spec(
    spec: str, *, node_name: str, driver_root: str = "/"
) -> ports.GpuDiscovery:
    """The GPU discovery a flag value names (`real` or `simulated:<GPU profile>`).

    ConfigError saying the accepted values otherwise. As for `inventory_from_spec`,
    constructing `real` touches nothing until `gpu_inventory()` probes.
    """
    if spec == REAL_SPEC:
        return real.NvmlInventory(driver_root=driver_root)
    if spec.startswith(SIMULATED_PREFIX):
        profile = spec.removeprefix(SIMULATED_PREFIX)
        if profile in gpu_simulation.gpu_profile_names():
            return gpu_simulation.simulated_gpus(
                profile, node_name=node_name,
                state_path=gpu_simulation.state_path_in(driver_root),
            )
    choices = ", ".join(
        f"{SIMULATED_PREFIX}{profile}" for profile in gpu_simulation.gpu_profile_names()
    )
    raise errors.ConfigError(
        f"invalid GPU discovery {spec!r}: use {REAL_SPEC!r} (NVML) or one of {choices}"
    )
