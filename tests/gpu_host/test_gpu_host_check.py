"""The real-GPU check: `gpu-kubelet-plugin` with real NVML on this host, judged by nvidia-smi.

Run it on any GPU host as `hack/gpu-check.sh` (`pytest tests/gpu_host -v`); where `nvidia-smi -L`
fails or NVML cannot be loaded, every test here is skipped with the reason. On a GPU host it
starts the plugin as a process (`--nvml real`, driver root `$NVIDIA_DRIVER_ROOT` or `/`, the
host's `/dev`) against an embedded API server, with its plugin dir and CDI root in a temp dir
(nothing is written to the host's /var/run/cdi), and checks:

- the published slice's first full GPU against `nvidia-smi --query-gpu=...`: uuid,
  productName, pciBusID (normalised to NVML's short domain, lower case), driverVersion (as
  semver: leading zeros dropped) and capacity memory (MiB);
- a claim for that GPU is prepared, and every device node and every mounted host path of its
  CDI spec exists on this host;
- the partitions gate DynamicMIG would publish for each GPU, read through real NVML (MIG mode is
  not changed), written to `dynamic-mig.json`;
- gate NVMLDeviceHealthCheck's event loop starts and watches every GPU (`health.json`).

The slice and the spec are written as JSON to `$GPU_CHECK_OUT` (default `/tmp/gpu-check`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
DRIVER = "gpu.nvidia.com"
NODE = "gpu-check-node"
NAMESPACE = "gpu-check"
SMI_FIELDS = "uuid,name,pci.bus_id,driver_version,memory.total"
START_TIMEOUT_S = 120.0


def _skip_reason() -> str | None:
    """Why this host cannot run the check, or None when it has a GPU and NVML."""
    try:
        listed = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no GPU host: nvidia-smi -L cannot run ({exc})"
    if listed.returncode != 0 or "GPU" not in listed.stdout:
        detail = (listed.stdout + listed.stderr).strip()[:200] or f"exit {listed.returncode}"
        return f"no GPU host: nvidia-smi -L failed ({detail})"
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        return f"NVML unavailable: libnvidia-ml.so.1 cannot be loaded ({exc})"
    return None


_REASON = _skip_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


# ------------------------------------------------------------------ normalisation


def normal_pci_bus_id(text: str) -> str:
    """`00000000:1B:00.0` (nvidia-smi) -> `0000:1b:00.0` (NVML's short form, lower case)."""
    text = text.strip().lower()
    if text.count(":") < 2:  # bus:device.function with no domain
        return f"0000:{text}"
    domain, bus_device_function = text.split(":", 1)
    return f"{int(domain, 16):04x}:{bus_device_function}"


def semver(version: str) -> str:
    """`580.65.06` -> `580.65.6`: each dotted number without leading zeros, three parts."""
    parts = [str(int(p)) for p in version.strip().split(".")]
    return ".".join([*parts, "0", "0"][:3])


_QUANTITY = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti|Pi|k|M|G|T)?$")
_FACTORS = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity_bytes(text: str) -> int:
    """A Kubernetes quantity as the slice writes capacities (`81559Mi`), in bytes."""
    found = _QUANTITY.match(text)
    assert found is not None, f"unexpected memory quantity {text!r}"
    return int(found.group(1)) * _FACTORS[found.group(2)]


# ------------------------------------------------------------------ the plugin on this host


def smi_rows() -> dict[str, dict[str, str]]:
    """nvidia-smi's view of every GPU, by uuid."""
    done = subprocess.run(
        ["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    rows = {}
    for line in done.stdout.splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == 5:
            row = dict(zip(SMI_FIELDS.split(","), values, strict=True))
            rows[row["uuid"]] = row
    return rows


def eventually(probe: Any, *, what: str, timeout_s: float = START_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.2)


class Host:
    """The plugin process and the embedded cluster it publishes to."""

    def __init__(self, root: pathlib.Path) -> None:
        from adapters.grpc import server as grpc_server
        from adapters.memory import apiserver
        from adapters.memory import cluster as memory_cluster

        self.root = root
        self.cluster = memory_cluster.InMemoryCluster()
        self.server = apiserver.EmbeddedAPIServer(self.cluster).start()
        kubeconfig = root / "kubeconfig"
        self.server.write_kubeconfig(str(kubeconfig))
        self.plugin_dir = root / "plugin"
        self.cdi_root = root / "cdi"
        self.registration_socket = root / "registry" / grpc_server.registration_socket_name(DRIVER)
        driver_root = os.environ.get("NVIDIA_DRIVER_ROOT", "/")
        args = [
            "--node-name", NODE, "--nvml", "real",
            "--nvidia-driver-root", driver_root, "--dev-root", "/",
            "--plugin-dir", str(self.plugin_dir), "--registry-dir", str(root / "registry"),
            "--cdi-root", str(self.cdi_root), "--kubeconfig", str(kubeconfig),
            "--health-port", "0", "--metrics-port", "0", "--retry-budget-seconds", "5",
        ]
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODE_NAME")}
        self.log = root / "plugin.log"
        self._log = open(self.log, "ab")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "apps.gpuplugin", *args], cwd=REPO_ROOT,
            env={**env, "PYTHONUNBUFFERED": "1"}, stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def wait_registered(self) -> None:
        from adapters.grpc import client as grpc_client

        def probe() -> object:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"gpu-kubelet-plugin exited with {self.process.returncode}:\n{self.output()}"
                )
            return grpc_client.try_register(str(self.registration_socket))

        eventually(probe, what="the plugin to register")

    def slices(self) -> list[dict[str, Any]]:
        from core import kinds

        return [
            dict(s) for s in self.cluster.list(kinds.RESOURCE_SLICE.kind).items
            if s["spec"].get("driver") == DRIVER and s["spec"].get("nodeName") == NODE
        ]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self._log.close()
        self.server.stop()
        self.cluster.close()


@pytest.fixture(scope="module")
def host() -> Iterator[Host]:
    root = pathlib.Path(tempfile.mkdtemp(prefix="gpuchk-", dir="/tmp"))  # short socket paths
    running = Host(root)
    try:
        running.wait_registered()
        eventually(running.slices, what="the node's gpu.nvidia.com ResourceSlice")
        yield running
    finally:
        running.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def out_dir() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("GPU_CHECK_OUT", "/tmp/gpu-check"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def first_full_gpu(host: Host) -> dict[str, Any]:
    gpus = sorted(
        (d for s in host.slices() for d in s["spec"].get("devices", ())
         if d["attributes"].get("type") == {"string": "gpu"}),
        key=lambda d: int(d["name"].removeprefix("gpu-")),
    )
    if not gpus:
        pytest.skip("every GPU of this host is in MIG mode: no full GPU to check")
    first: dict[str, Any] = gpus[0]
    return first


# ------------------------------------------------------------------ the checks


def test_published_gpu_matches_nvidia_smi(host: Host, out_dir: pathlib.Path) -> None:
    (out_dir / "slice.json").write_text(json.dumps(host.slices(), indent=2), encoding="utf-8")
    device = first_full_gpu(host)
    attributes = device["attributes"]
    rows = smi_rows()
    uuid = attributes["uuid"]["string"]
    assert uuid in rows, f"{device['name']} has uuid {uuid}, nvidia-smi lists {sorted(rows)}"
    row = rows[uuid]

    assert attributes["productName"] == {"string": row["name"]}
    assert attributes["resource.kubernetes.io/pciBusID"] == {
        "string": normal_pci_bus_id(row["pci.bus_id"])
    }
    assert attributes["driverVersion"] == {"version": semver(row["driver_version"])}
    smi_mib = int(row["memory.total"].split()[0])
    assert quantity_bytes(device["capacity"]["memory"]["value"]) // 2**20 == smi_mib


def test_a_claim_for_the_gpu_is_prepared_with_host_paths_that_exist(
    host: Host, out_dir: pathlib.Path
) -> None:
    from adapters.grpc import client as grpc_client
    from core import kinds, models, names

    device = first_full_gpu(host)
    pod = host.cluster.create(kinds.POD.kind, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check", "namespace": NAMESPACE},
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "cuda"}]},
    })
    claim = host.cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": "check", "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
        ]}},
    })
    host.cluster.patch(
        kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name="check", subresource="status",
        patch={"status": {
            "allocation": {"devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device["name"]}
            ]}},
            "reservedFor": [{"resource": "pods", "name": "check", "uid": pod["metadata"]["uid"]}],
        }},
    )
    ref = models.ClaimRef(
        uid=names.ClaimUID(claim["metadata"]["uid"]), namespace=NAMESPACE, name="check"
    )

    with grpc_client.DRAClient(str(host.plugin_dir / names.DRA_SOCKET_NAME)) as dra:
        result = dra.prepare([ref])[ref.uid]

    assert result.error == "", f"{result.error}\nplugin output:\n{host.output()}"
    (spec_file,) = host.cdi_root.glob(f"*{ref.uid}*.json")
    spec = json.loads(spec_file.read_text(encoding="utf-8"))
    (out_dir / "cdi-spec.json").write_text(json.dumps(spec, indent=2), encoding="utf-8")
    edits = [spec.get("containerEdits", {}), *(d["containerEdits"] for d in spec["devices"])]
    nodes = [n.get("hostPath", n["path"]) for e in edits for n in e.get("deviceNodes", ())]
    mounts = [m["hostPath"] for e in edits for m in e.get("mounts", ())]
    assert f"/dev/nvidia{device['name'].removeprefix('gpu-')}" in nodes
    assert [n for n in nodes if not os.path.exists(n)] == []
    assert mounts, "the spec mounts the driver's files"
    assert [m for m in mounts if not os.path.exists(m)] == []

    with grpc_client.DRAClient(str(host.plugin_dir / names.DRA_SOCKET_NAME)) as dra:
        assert dra.unprepare([ref])[ref.uid].error == ""
    assert not spec_file.exists()


def test_dynamic_mig_partitions_this_host_would_publish_are_listed(out_dir: pathlib.Path) -> None:
    """What gate DynamicMIG would publish for this host's GPUs, read through real NVML and
    written to `dynamic-mig.json`; nothing is changed on the GPUs (no MIG mode switch)."""
    from adapters.nvml import real
    from core.gpu import partitions

    inventory = real.NvmlInventory(driver_root=os.environ.get("NVIDIA_DRIVER_ROOT", "/"))
    listed = {}
    for gpu in inventory.gpu_inventory().gpus:
        listed[gpu.name] = {
            "productName": gpu.product_name, "migCapable": gpu.mig_capable,
            "migEnabled": gpu.mig_enabled, "partitionable": partitions.is_partitionable(gpu),
            "partitions": [spec.name for spec in partitions.possible_migs(gpu)],
        }
    (out_dir / "dynamic-mig.json").write_text(json.dumps(listed, indent=2), encoding="utf-8")
    print(json.dumps({name: len(g["partitions"]) for name, g in listed.items()}))
    for name, gpu in listed.items():
        if gpu["partitionable"]:
            assert gpu["partitions"], f"{name} is partitionable but lists no partition"


def test_the_nvml_health_event_loop_starts_and_monitors_every_gpu(out_dir: pathlib.Path) -> None:
    """Gate NVMLDeviceHealthCheck's event loop on this host's real NVML: it registers for XID
    events on every GPU nvidia-smi lists and reports none of them unmonitored. Written to
    `health.json` (monitored UUIDs and any event seen while starting)."""
    from adapters.nvml import health_events
    from core.gpu import health

    seen: list[health.HealthEvent] = []
    watch = health_events.NvmlHealthEvents(driver_root=os.environ.get("NVIDIA_DRIVER_ROOT", "/"))
    watch.start(seen.append)
    try:
        assert watch.wait_ready(START_TIMEOUT_S), "the NVML health watch never said it is ready"
        monitored = set(watch.monitored)
    finally:
        watch.stop()
    record = {"monitored": sorted(monitored),
              "events": [dataclasses.asdict(e) | {"kind": e.kind.value} for e in seen]}
    (out_dir / "health.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    print(json.dumps(record))
    assert monitored == set(smi_rows()), "every GPU nvidia-smi lists is watched"
    assert not [e for e in seen if e.kind is health.HealthEventKind.UNMONITORED]
