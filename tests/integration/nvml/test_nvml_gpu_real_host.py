"""On a GPU host: what the real probe reports for the GPU half matches what nvidia-smi says.

Skipped where libnvidia-ml is absent (every CI runner); on a GPU host run
`.venv/bin/pytest -q -s tests/integration/nvml/test_nvml_gpu_real_host.py` as is. It
prints the inventory for the record and checks each GPU against
`nvidia-smi --query-gpu` (when nvidia-smi is on PATH).
"""

from __future__ import annotations

import csv
import ctypes.util
import dataclasses
import json
import os
import re
import shutil
import subprocess

import pytest

from adapters import nvml
from adapters.nvml import _facts
from core import ports

HAS_NVML = ctypes.util.find_library("nvidia-ml") is not None
QUERY = "index,uuid,name,pci.bus_id,memory.total,compute_cap,driver_version,mig.mode.current"

pytestmark = pytest.mark.skipif(not HAS_NVML, reason="needs an NVIDIA GPU host with libnvidia-ml")


def _nvidia_smi_rows() -> list[dict[str, str]]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi is not on PATH: nothing to compare the probe with")
    output = subprocess.run(
        [smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    rows = csv.reader(line for line in output.splitlines() if line.strip())
    return [dict(zip(QUERY.split(","), (v.strip() for v in row), strict=True)) for row in rows]


def test_real_gpu_inventory_matches_nvidia_smi() -> None:
    discovery: ports.GpuDiscovery = nvml.NvmlInventory()
    inventory = discovery.gpu_inventory()
    print(json.dumps(dataclasses.asdict(inventory), indent=1))  # for the record
    assert inventory.gpus
    assert len({gpu.minor for gpu in inventory.gpus}) == len(inventory.gpus)
    for gpu in inventory.gpus:
        assert re.fullmatch(r"GPU-[0-9a-f-]{36}", gpu.uuid)
        assert _facts.is_pci_bus_id(gpu.pci_bus_id)
        assert re.fullmatch(r"\d+\.\d+", gpu.cuda_compute_capability)
        assert re.fullmatch(r"\d+\.\d+", gpu.cuda_driver_version)
        assert gpu.brand != "Unknown" and gpu.architecture != "Unknown"
        if os.path.exists("/dev/nvidiactl"):
            assert os.path.exists(f"/dev/nvidia{gpu.minor}")
    for mig in inventory.migs:
        assert re.fullmatch(r"\d+(c\.\d+)?g\.\d+gb.*", mig.profile)
    by_index = {gpu.index: gpu for gpu in inventory.gpus}
    for row in _nvidia_smi_rows():
        gpu = by_index[int(row["index"])]
        assert gpu.uuid == row["uuid"]
        assert gpu.product_name == row["name"]
        assert gpu.pci_bus_id == _facts.pci_bus_id(row["pci.bus_id"])
        assert gpu.memory_bytes // 2**20 == int(row["memory.total"])
        assert gpu.cuda_compute_capability == row["compute_cap"]
        assert gpu.driver_version == row["driver_version"]
        assert gpu.mig_enabled == (row["mig.mode.current"] == "Enabled")
