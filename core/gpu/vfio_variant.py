"""Which VFIO driver module a GPU is passed through with: `vfio-pci` or a vendor variant.

Upstream (go-nvlib's nvpassthrough `FindBestVFIOVariant`) reads the host's
`/lib/modules/<kernel release>/modules.alias`: every line `alias vfio_pci:<pattern> <module>`
names a variant driver for the PCI devices its pattern matches (e.g. `nvgrace_gpu_vfio_pci` for
Grace Hopper and Grace Blackwell GPUs). The device's own modalias (sysfs `modalias`,
`pci:v000010DEd00002342sv...`) is split into vendor, device, subvendor, subdevice, base class,
subclass and interface; a pattern matches when each field is equal or `*`, and the match with
the fewest wildcards wins. No match, or no vfio_pci alias at all: plain `vfio-pci`.

Pure: the adapter reads the two files and passes their text.
"""

from __future__ import annotations

import dataclasses
from typing import Final

DEFAULT_MODULE: Final = "vfio-pci"
_ALIAS_PREFIX: Final = "alias vfio_pci:"
# The modalias fields in order, each introduced by its key (after the leading "v").
_KEYS: Final = ("d", "sv", "sd", "bc", "sc", "i")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModAlias:
    """A PCI modalias split into its fields (a pattern's may be `*`)."""

    vendor: str
    device: str
    subvendor: str
    subdevice: str
    base_class: str
    subclass: str
    interface: str

    def fields(self) -> tuple[str, ...]:
        return (
            self.vendor, self.device, self.subvendor, self.subdevice, self.base_class,
            self.subclass, self.interface,
        )


def parse_modalias(text: str) -> ModAlias:
    """`pci:v...d...sv...sd...bc...sc...i...` split into fields; ValueError if not that shape."""
    _, found, rest = text.strip().partition("pci:")
    if not found or not rest.startswith("v"):
        raise ValueError(f"{text.strip()!r} is not a PCI modalias (pci:v...d...sv...)")
    rest = rest[1:]
    values: list[str] = []
    for key in _KEYS:
        value, found, rest = rest.partition(key)
        if not found:
            raise ValueError(f"{text.strip()!r} has no {key!r} field")
        values.append(value)
    values.append(rest)
    vendor, device, subvendor, subdevice, base_class, subclass, interface = values
    return ModAlias(
        vendor=vendor, device=device, subvendor=subvendor, subdevice=subdevice,
        base_class=base_class, subclass=subclass, interface=interface,
    )


def vfio_aliases(modules_alias: str) -> tuple[tuple[ModAlias, str], ...]:
    """(pattern, module) of each `alias vfio_pci:...` line of a modules.alias file, in order;
    lines that do not parse are skipped, as upstream skips them."""
    found: list[tuple[ModAlias, str]] = []
    for line in modules_alias.splitlines():
        line = line.strip()
        if not line.startswith(_ALIAS_PREFIX):
            continue
        parts = line.split(" ", 2)
        if len(parts) != 3:
            continue
        try:
            found.append((parse_modalias(parts[1]), parts[2]))
        except ValueError:
            continue
    return tuple(found)


def best_module(device: ModAlias, aliases: tuple[tuple[ModAlias, str], ...]) -> str:
    """The module of the matching pattern with the fewest wildcards (the first of equals);
    `DEFAULT_MODULE` when none matches."""
    best, fewest = DEFAULT_MODULE, None
    for pattern, module in aliases:
        wildcards = 0
        for have, want in zip(device.fields(), pattern.fields(), strict=True):
            if want == "*":
                wildcards += 1
            elif have != want:
                break
        else:
            if fewest is None or wildcards < fewest:
                best, fewest = module, wildcards
    return best
