"""Simulated NVML creating and destroying MIG devices (dynamic MIG).

Covers: a created device shows in the inventory with the placement's facts and cap minors;
MIG mode switched on for it and off after the last one on Hopper, kept on Ampere; every
refusal NVML would give (unknown GPU, not MIG capable, unknown profile, placement not the
profile's, memory slices taken, engines exhausted, MIG mode off on Ampere); destroy is
idempotent; GPU instance ids are reused once free.
"""

from __future__ import annotations

import dataclasses

import pytest

from adapters import nvml
from core import errors, ports
from core.gpu import devices

# H100 80GB profile ids: 1g.10gb 19, 1g.10gb+me 20, 2g.20gb 14, 3g.40gb 9, 7g.80gb 0.
_1G = 19
_1G_ME = 20
_3G = 9
_7G = 0


def _at(minor: int, profile_id: int, start: int) -> devices.MigPlacement:
    return devices.MigPlacement(parent_minor=minor, gi_profile_id=profile_id, placement_start=start)


def test_simulated_gpus_is_a_mig_partitioner() -> None:
    partitioner: ports.MigPartitioner = nvml.simulated_gpus("hgx-h100")
    assert partitioner.destroy_mig_device(_at(0, _1G, 0)) is False


def test_create_enables_mig_mode_on_hopper_and_lists_the_device() -> None:
    gpus = nvml.simulated_gpus("hgx-h100")
    created = gpus.create_mig_device(_at(2, _3G, 4))
    inventory = gpus.gpu_inventory()
    assert inventory.migs == (created,)
    assert created.name == "gpu-2-mig-3g40gb-9-4"
    assert (created.parent_minor, created.profile, created.placement_size) == (2, "3g.40gb", 4)
    assert created.gi_id == 1 and created.ci_id == 0
    assert created.gi_cap_minor == nvml.gpu_simulation.mig_cap_minor(gpu_minor=2, gi_id=1)
    assert created.parent_uuid == inventory.gpus[2].uuid
    assert devices.MigPlacement.of(created) == _at(2, _3G, 4)
    assert [gpu.mig_enabled for gpu in inventory.gpus] == [i == 2 for i in range(8)]


def test_destroying_the_last_device_leaves_mig_mode_on_hopper() -> None:
    gpus = nvml.simulated_gpus("hgx-h100")
    gpus.create_mig_device(_at(0, _1G, 0))
    gpus.create_mig_device(_at(0, _1G, 1))
    assert gpus.destroy_mig_device(_at(0, _1G, 0)) is True
    assert gpus.gpu_inventory().gpus[0].mig_enabled is True
    assert gpus.destroy_mig_device(_at(0, _1G, 1)) is True
    assert gpus.gpu_inventory().migs == ()
    assert gpus.gpu_inventory().gpus[0].mig_enabled is False
    assert gpus.destroy_mig_device(_at(0, _1G, 1)) is False


def test_ampere_keeps_mig_mode_and_reuses_free_gpu_instance_ids() -> None:
    gpus = nvml.simulated_gpus("a100-mig")
    before = {m.name for m in gpus.gpu_inventory().migs}
    assert gpus.destroy_mig_device(_at(0, 9, 4)) is True  # 3g.20gb, gi 2
    assert gpus.destroy_mig_device(_at(0, 14, 0)) is True  # 2g.10gb, gi 3
    assert gpus.destroy_mig_device(_at(0, 19, 2)) and gpus.destroy_mig_device(_at(0, 19, 3))
    assert gpus.gpu_inventory().migs == ()
    assert gpus.gpu_inventory().gpus[0].mig_enabled is True  # Ampere: leaving needs a reset
    again = gpus.create_mig_device(_at(0, 0, 0))
    assert (again.profile, again.gi_id) == ("7g.40gb", 1)
    assert before.isdisjoint({m.name for m in gpus.gpu_inventory().migs})


def test_mig_mode_off_on_ampere_refuses_to_create() -> None:
    gpus = nvml.simulated_gpus("a100-mig")
    with pytest.raises(errors.PermanentError, match=r"MIG mode is off on gpu-1.*needs a reset"):
        gpus.create_mig_device(_at(1, 19, 0))
    assert gpus.gpu_inventory().gpus[1].mig_enabled is False


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (_at(8, _1G, 0), "no GPU with minor 8"),
        (_at(0, 42, 0), "has no GPU instance profile 42"),
        (_at(0, _3G, 2), r"3g.40gb cannot be placed at 2.*start at \[0, 4\]"),
        (_at(0, _1G, 7), "1g.10gb cannot be placed at 7"),
    ],
)
def test_placements_nvml_does_not_offer_are_refused(
    placement: devices.MigPlacement, message: str
) -> None:
    gpus = nvml.simulated_gpus("hgx-h100")
    with pytest.raises(errors.PermanentError, match=message):
        gpus.create_mig_device(placement)
    assert gpus.gpu_inventory().migs == ()
    assert not any(gpu.mig_enabled for gpu in gpus.gpu_inventory().gpus)


def test_overlapping_memory_slices_are_refused() -> None:
    gpus = nvml.simulated_gpus("hgx-h100")
    gpus.create_mig_device(_at(0, _3G, 4))
    with pytest.raises(errors.PermanentError, match=r"slices \[5\] overlap.*gpu-0-mig-3g40gb-9-4"):
        gpus.create_mig_device(_at(0, _1G, 5))
    with pytest.raises(errors.PermanentError, match="overlap"):
        gpus.create_mig_device(_at(0, _7G, 0))
    assert len(gpus.gpu_inventory().migs) == 1


def test_engines_of_the_gpu_cannot_be_exceeded() -> None:
    gpus = nvml.simulated_gpus("hgx-h100")
    gpus.create_mig_device(_at(0, _1G_ME, 0))
    with pytest.raises(errors.PermanentError, match=r"ofaEngines 1 in use \+ 1 wanted exceeds"):
        gpus.create_mig_device(_at(0, _1G_ME, 1))


def test_not_mig_capable_gpu_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    profile = nvml.gpu_simulation.gpu_profile("hgx-h100")
    plain = dataclasses.replace(profile, name="plain", mig_capable=False)
    monkeypatch.setitem(nvml.gpu_simulation._PROFILES, "plain", plain)
    gpus = nvml.simulated_gpus("plain")
    with pytest.raises(errors.PermanentError, match=r"gpu-0 .* is not MIG capable"):
        gpus.create_mig_device(_at(0, _1G, 0))
