"""NVML's raw values become the strings upstream publishes: brand, architecture, versions,
PCI bus ids and PCIe roots, NUMA nodes, MIG profile names, and MIG capability minors."""

from __future__ import annotations

import hypothesis
import pytest
from hypothesis import strategies as st

from adapters.nvml import _facts

MIB = 2**20
A100_40GB = 40960 * MIB
H100_80GB = 81559 * MIB


@pytest.mark.parametrize(
    ("brand", "name"), [(14, "Nvidia"), (2, "Tesla"), (0, "Unknown"), (5, "GeForce")]
)
def test_brand_enum_reads_as_upstream_names_it(brand: int, name: str) -> None:
    assert _facts.brand_name(brand) == name


@pytest.mark.parametrize(
    ("architecture", "name"),
    [(7, "Ampere"), (8, "Ada Lovelace"), (9, "Hopper"), (10, "Blackwell"), (0xFFFFFFFF, "Unknown")],
)
def test_architecture_enum_reads_as_upstream_names_it(architecture: int, name: str) -> None:
    assert _facts.architecture_name(architecture) == name


def test_enum_values_newer_than_the_tables_are_none_not_a_guess() -> None:
    assert _facts.brand_name(99) is None
    assert _facts.architecture_name(42) is None
    assert _facts.addressing_mode_name(7) is None


@pytest.mark.parametrize(("mode", "name"), [(0, "None"), (1, "HMM"), (2, "ATS")])
def test_addressing_modes(mode: int, name: str) -> None:
    assert _facts.addressing_mode_name(mode) == name


@pytest.mark.parametrize(
    ("version", "text"), [(13000, "13.0"), (12080, "12.8"), (12020, "12.2"), (11040, "11.4")]
)
def test_cuda_driver_version_is_major_dot_minor(version: int, text: str) -> None:
    assert _facts.cuda_driver_version(version) == text


def test_compute_capability_is_dotted() -> None:
    assert _facts.compute_capability(9, 0) == "9.0"


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("00000000:1B:00.0", "0000:1b:00.0"),
        (b"00000000:C3:00.0\x00\x00junk", "0000:c3:00.0"),
        ("00000008:01:00.0", "0008:01:00.0"),
        ("0000:1b:00.0", "0000:1b:00.0"),
        ("00010000:01:00.0", "00010000:01:00.0"),  # a domain that needs all 8 digits stays
    ],
)
def test_pci_bus_id_is_normalised_as_sysfs_writes_it(raw: str | bytes, normalised: str) -> None:
    assert _facts.pci_bus_id(raw) == normalised


def test_is_pci_bus_id() -> None:
    assert _facts.is_pci_bus_id("0000:1b:00.0")
    assert not _facts.is_pci_bus_id("00000000:1B:00.0")


@pytest.mark.parametrize(
    ("path", "root"),
    [
        ("/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:1b:00.0", "pci0000:15"),
        ("/host/sys/devices/pci0008:00/0008:00:00.0/0008:01:00.0", "pci0008:00"),
        ("/sys/devices/platform/some-gpu", None),
    ],
)
def test_pcie_root_is_the_root_complex_in_the_resolved_sysfs_path(
    path: str, root: str | None
) -> None:
    assert _facts.pcie_root(path) == root


@pytest.mark.parametrize(("text", "node"), [("1\n", 1), ("0", 0), ("-1\n", None), ("x", None)])
def test_numa_node_file(text: str, node: int | None) -> None:
    assert _facts.numa_node(text) == node


@pytest.mark.parametrize(
    ("gi_index", "ci_index", "memory_mib", "device_bytes", "name"),
    [
        # A100-SXM4-40GB, `nvidia-smi mig -lgip`: memory of each GPU instance profile.
        (0x0, 0x0, 4864, A100_40GB, "1g.5gb"),
        (0x7, 0x0, 4864, A100_40GB, "1g.5gb+me"),
        (0x9, 0x0, 9856, A100_40GB, "1g.10gb"),
        (0x1, 0x1, 9856, A100_40GB, "2g.10gb"),
        (0x2, 0x2, 19968, A100_40GB, "3g.20gb"),
        (0x3, 0x3, 19968, A100_40GB, "4g.20gb"),
        (0x4, 0x4, 40192, A100_40GB, "7g.40gb"),
        # H100 80GB.
        (0x0, 0x0, 9984, H100_80GB, "1g.10gb"),
        (0x9, 0x0, 19968, H100_80GB, "1g.20gb"),
        (0x2, 0x2, 40192, H100_80GB, "3g.40gb"),
        (0x4, 0x4, 80384, H100_80GB, "7g.80gb"),
        # A compute instance smaller than its GPU instance.
        (0x2, 0x0, 19968, A100_40GB, "1c.3g.20gb"),
        (0xD, 0x0, 4864, A100_40GB, "1g.5gb-me"),
    ],
)
def test_mig_profile_names_match_nvidia_smi(
    gi_index: int, ci_index: int, memory_mib: int, device_bytes: int, name: str
) -> None:
    assert (
        _facts.mig_profile_name(
            gi_profile_index=gi_index,
            ci_profile_index=ci_index,
            mig_memory_mib=memory_mib,
            device_memory_bytes=device_bytes,
        )
        == name
    )


def test_unknown_profile_indices_have_no_name() -> None:
    assert (
        _facts.mig_profile_name(
            gi_profile_index=0x40, ci_profile_index=0, mig_memory_mib=1, device_memory_bytes=1
        )
        is None
    )
    assert (
        _facts.mig_profile_name(
            gi_profile_index=0, ci_profile_index=0x40, mig_memory_mib=1, device_memory_bytes=1
        )
        is None
    )


@hypothesis.given(device_gib=st.integers(1, 512), eighths=st.integers(1, 8))
def test_mig_memory_gb_is_the_eighths_share_of_the_gpus_whole_gib(
    device_gib: int, eighths: int
) -> None:
    # An instance holding just under k/8 of the memory is named as k/8 of it.
    device_bytes = device_gib * 2**30
    memory_mib = (device_bytes * eighths // 8) // MIB - 1
    hypothesis.assume(memory_mib > device_bytes * (eighths - 1) // 8 // MIB)
    expected = int(eighths * device_gib / 8 + 0.5)
    assert (
        _facts.mig_memory_gb(device_memory_bytes=device_bytes, mig_memory_mib=memory_mib)
        == expected
    )


def test_mig_memory_of_a_gpu_without_memory_is_zero() -> None:
    assert _facts.mig_memory_gb(device_memory_bytes=0, mig_memory_mib=10) == 0


def test_mig_minors_are_parsed_per_gpu_instance_and_compute_instance() -> None:
    text = "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n\ngarbage\n"
    text += "gpu1/gi2/ci3/access 160\n"
    assert _facts.parse_mig_minors(text) == {
        (0, 1, None): 12,
        (0, 1, 0): 13,
        (1, 2, 3): 160,
    }
