"""MIG GPU instance profiles: what one GPU model can be partitioned into, and where.

A profile is what NVML's `GetGpuInstanceProfileInfo` and `GetGpuInstancePossiblePlacements`
report for one GPU instance profile (what `nvidia-smi mig -lgip` and `-lgipp` list): its
engines, its memory and the memory slices an instance takes at each possible start. Dynamic
MIG publishes every profile x placement of a GPU as a device; the simulated NVML enforces the
same placements when it creates instances.

The tables are NVIDIA's for the GPU models the simulation offers (MIG user guide, "Supported
MIG Profiles"), the profiles a full compute instance can fill: memory in MiB as the driver
reports it, placements as `-lgipp` lists them. Pure data: no NVML here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Final

# Architectures that switch MIG mode on and off without a GPU reset (Hopper and later).
# NB: an architecture not listed is treated as needing a reset, the safe side.
RESET_FREE_MIG_TOGGLE: Final = frozenset({"Hopper", "Blackwell"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class MigProfile:
    """One GPU instance profile of a GPU model, as `nvidia-smi mig -lgip` lists it."""

    name: str
    profile_id: int
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int = 0
    encoders: int = 0
    jpeg_engines: int = 0
    ofa_engines: int = 0
    # Memory slices one instance takes, and the starts it may be placed at.
    placement_size: int = 1
    placement_starts: tuple[int, ...] = (0,)

    @property
    def memory_bytes(self) -> int:
        """The instance's memory in bytes (NVML's MiB, 2^20 bytes each)."""
        return self.memory_mib * 1024 * 1024


def _profile(
    name: str, profile_id: int, memory_mib: int, engines: tuple[int, int, int, int, int, int],
    placement_size: int, placement_starts: tuple[int, ...],
) -> MigProfile:
    """A table row: `engines` = (multiprocessors, copy engines, decoders, encoders, jpeg, ofa)."""
    sms, copy, dec, enc, jpeg, ofa = engines
    return MigProfile(
        name=name, profile_id=profile_id, memory_mib=memory_mib, multiprocessors=sms,
        copy_engines=copy, decoders=dec, encoders=enc, jpeg_engines=jpeg, ofa_engines=ofa,
        placement_size=placement_size, placement_starts=placement_starts,
    )


_ONE: Final = (0, 1, 2, 3, 4, 5, 6)
_TWO: Final = (0, 2, 4, 6)

A100_40GB: Final = (
    _profile("1g.5gb", 19, 4864, (14, 1, 0, 0, 0, 0), 1, _ONE),
    _profile("1g.5gb+me", 20, 4864, (14, 1, 1, 0, 1, 1), 1, _ONE),
    _profile("1g.10gb", 15, 9856, (14, 1, 1, 0, 0, 0), 2, _TWO),
    _profile("2g.10gb", 14, 9856, (28, 2, 1, 0, 0, 0), 2, (0, 2, 4)),
    _profile("3g.20gb", 9, 19968, (42, 3, 2, 0, 0, 0), 4, (0, 4)),
    _profile("4g.20gb", 5, 19968, (56, 4, 2, 0, 0, 0), 4, (0,)),
    _profile("7g.40gb", 0, 40192, (98, 7, 5, 0, 1, 1), 8, (0,)),
)

A100_80GB: Final = (
    _profile("1g.10gb", 19, 9728, (14, 1, 0, 0, 0, 0), 1, _ONE),
    _profile("1g.10gb+me", 20, 9728, (14, 1, 1, 0, 1, 1), 1, _ONE),
    _profile("1g.20gb", 15, 19968, (14, 1, 1, 0, 0, 0), 2, _TWO),
    _profile("2g.20gb", 14, 19968, (28, 2, 1, 0, 0, 0), 2, (0, 2, 4)),
    _profile("3g.40gb", 9, 40192, (42, 3, 2, 0, 0, 0), 4, (0, 4)),
    _profile("4g.40gb", 5, 40192, (56, 4, 2, 0, 0, 0), 4, (0,)),
    _profile("7g.80gb", 0, 81152, (98, 7, 5, 0, 1, 1), 8, (0,)),
)

H100_80GB: Final = (
    _profile("1g.10gb", 19, 9984, (16, 1, 1, 0, 1, 0), 1, _ONE),
    _profile("1g.10gb+me", 20, 9984, (16, 1, 1, 0, 1, 1), 1, _ONE),
    _profile("1g.20gb", 15, 20096, (26, 1, 1, 0, 1, 0), 2, _TWO),
    _profile("2g.20gb", 14, 20096, (32, 2, 2, 0, 2, 0), 2, (0, 2, 4)),
    _profile("3g.40gb", 9, 40448, (60, 3, 3, 0, 3, 0), 4, (0, 4)),
    _profile("4g.40gb", 5, 40448, (64, 4, 4, 0, 4, 0), 4, (0,)),
    _profile("7g.80gb", 0, 81152, (132, 8, 7, 0, 7, 1), 8, (0,)),
)

# NB: GB200 memory sizes are the guide's rounded down to whole 128 MiB steps, so that the
# largest profile fits the simulated GPU's 189471 MiB and two halves fit the whole.
GB200: Final = (
    _profile("1g.23gb", 19, 23552, (18, 1, 1, 0, 1, 0), 1, _ONE),
    _profile("1g.23gb+me", 20, 23552, (18, 1, 1, 0, 1, 1), 1, _ONE),
    _profile("1g.47gb", 15, 47360, (18, 1, 1, 0, 1, 0), 2, _TWO),
    _profile("2g.47gb", 14, 47360, (34, 2, 2, 0, 2, 0), 2, (0, 2, 4)),
    _profile("3g.93gb", 9, 94720, (70, 3, 3, 0, 3, 0), 4, (0, 4)),
    _profile("4g.93gb", 5, 94720, (72, 4, 4, 0, 4, 0), 4, (0,)),
    _profile("7g.186gb", 0, 189440, (148, 8, 7, 0, 7, 1), 8, (0,)),
)

# Product name (as NVML reports it) -> the model's profiles.
BY_PRODUCT: Final[Mapping[str, tuple[MigProfile, ...]]] = {
    "NVIDIA A100-SXM4-40GB": A100_40GB,
    "NVIDIA A100-SXM4-80GB": A100_80GB,
    "NVIDIA H100 80GB HBM3": H100_80GB,
    "NVIDIA GB200": GB200,
}


def toggles_without_reset(architecture: str) -> bool:
    """Whether a GPU of this architecture enters and leaves MIG mode without a reset."""
    return architecture in RESET_FREE_MIG_TOGGLE
