"""Simulated NVML's MIG state outliving the plugin process (a state file in the driver root).

Covers: with a state file, a second simulation of the node (a restarted plugin) sees the MIG
devices the first created and no longer those it destroyed, Hopper's MIG mode included; a
file of another profile is ignored; the `simulated:<profile>` discovery keeps its state in a
simulated driver root (the directory `simulated_driverroot.install` makes) and nowhere else.
"""

from __future__ import annotations

import pathlib

from adapters.fs import simulated_driverroot
from adapters.nvml import gpu_simulation, inventory
from core.gpu import devices


def _1g(minor: int, start: int) -> devices.MigPlacement:
    return devices.MigPlacement(parent_minor=minor, gi_profile_id=19, placement_start=start)


def _migs(sim: gpu_simulation.SimulatedGpus) -> set[str]:
    return {m.name for m in sim.gpu_inventory().migs}


def test_a_second_simulation_sees_what_the_first_created_and_destroyed(
    tmp_path: pathlib.Path,
) -> None:
    path = str(tmp_path / "mig-state.json")
    first = gpu_simulation.simulated_gpus("hgx-h100", state_path=path)
    first.create_mig_device(_1g(0, 3))
    first.create_mig_device(_1g(1, 0))
    first.destroy_mig_device(_1g(1, 0))

    second = gpu_simulation.simulated_gpus("hgx-h100", state_path=path)

    assert _migs(second) == _migs(first) == {"gpu-0-mig-1g10gb-19-3"}
    assert [g.mig_enabled for g in second.gpu_inventory().gpus][:2] == [True, False]
    assert second.destroy_mig_device(_1g(0, 3))
    assert _migs(gpu_simulation.simulated_gpus("hgx-h100", state_path=path)) == set()


def test_a_state_file_of_another_profile_is_ignored(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "mig-state.json")
    gpu_simulation.simulated_gpus("hgx-h100", state_path=path).create_mig_device(_1g(0, 0))
    a100 = gpu_simulation.simulated_gpus("a100-mig", state_path=path)
    assert len(a100.gpu_inventory().migs) == 4  # the profile's own devices


def test_the_simulated_discovery_keeps_state_in_a_simulated_driver_root_only(
    tmp_path: pathlib.Path,
) -> None:
    assert gpu_simulation.state_path_in(str(tmp_path)) is None
    simulated_driverroot.install(str(tmp_path / "driver"), ld_cache=False)
    found = inventory.gpu_discovery_from_spec(
        "simulated:hgx-h100", node_name="n", driver_root=str(tmp_path / "driver"))
    assert isinstance(found, gpu_simulation.SimulatedGpus)
    found.create_mig_device(_1g(2, 0))
    again = inventory.gpu_discovery_from_spec(
        "simulated:hgx-h100", node_name="n", driver_root=str(tmp_path / "driver"))
    assert isinstance(again, gpu_simulation.SimulatedGpus)
    assert _migs(again) == {"gpu-2-mig-1g10gb-19-0"}
