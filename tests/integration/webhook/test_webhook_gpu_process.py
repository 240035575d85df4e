"""`computedomain webhook` as a real process, judging gpu.nvidia.com configs by its gates.

The gates come from FEATURE_GATES as the chart sets them; the same claim is admitted by a
webhook running with TimeSlicingSettings and refused by one running without it. The mutating
path gives a claim whose GpuConfig carries a fabricTopologyConfig its partition constraint.
"""

from __future__ import annotations

import base64
import collections.abc
import http.client
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
PATH = "/validate-resource-claim-parameters"
MUTATE_PATH = "/mutate-resource-claim-parameters"
_OWN_ENV = ("WEBHOOK_PORT", "WEBHOOK_ADDRESS", "TLS_CERT_FILE", "TLS_KEY_FILE", "IMEX_MODE",
            "IMEX_ISOLATION", "FEATURE_GATES", "NAMESPACE")


class GpuWebhook:
    """A running plain-HTTP webhook subprocess and the port it listens on."""

    def __init__(self, *, feature_gates: str) -> None:
        base = {k: v for k, v in os.environ.items() if k not in _OWN_ENV}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "apps.cli", "webhook", "--address", "127.0.0.1",
             "--port", "0"],
            cwd=REPO_ROOT, env={**base, "FEATURE_GATES": feature_gates},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        assert self.proc.stderr is not None
        self.lines: list[str] = []
        # NB: readline blocks until the line is there or the process exits (EOF): no polling.
        for line in self.proc.stderr:
            self.lines.append(line)
            found = re.search(r"event=listening .*port=(\d+)", line)
            if found:
                self.port = int(found.group(1))
                # Keep reading, so the process never blocks on a full stderr pipe.
                threading.Thread(target=self._drain, daemon=True).start()
                return
        raise AssertionError(f"webhook exited before listening:\n{''.join(self.lines)}")

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def review(self, uid: str, parameters: dict[str, Any], *, path: str = PATH) -> dict[str, Any]:
        claim = {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "infer", "namespace": "ml"},
            "spec": {"devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
                "config": [{"requests": ["gpu"],
                            "opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}],
            }},
        }
        document = {
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": uid, "kind": {"group": "resource.k8s.io", "version": "v1",
                                     "kind": "ResourceClaim"},
                "namespace": "ml", "name": "infer", "operation": "CREATE", "object": claim,
            },
        }
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("POST", path, body=json.dumps(document).encode(),
                         headers={"Content-Type": "application/json"})
            reply = conn.getresponse()
            assert reply.status == 200
            response: dict[str, Any] = json.loads(reply.read())["response"]
            return response
        finally:
            conn.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


@pytest.fixture
def start() -> collections.abc.Iterator[collections.abc.Callable[..., GpuWebhook]]:
    started: list[GpuWebhook] = []

    def _start(*, feature_gates: str) -> GpuWebhook:
        hook = GpuWebhook(feature_gates=feature_gates)
        started.append(hook)
        return hook

    yield _start
    for hook in started:
        hook.stop()


def time_slicing(interval: str = "Long") -> dict[str, Any]:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}}}


def test_webhook_with_time_slicing_gate_admits_time_slicing_and_refuses_mps_without_its_gate(
    start: Any,
) -> None:
    hook = start(feature_gates="TimeSlicingSettings=true")
    assert hook.review("uid-ts", time_slicing()) == {"uid": "uid-ts", "allowed": True}
    mps = time_slicing()
    mps["sharing"] = {"strategy": "MPS"}
    denied = hook.review("uid-mps", mps)
    assert denied["allowed"] is False
    assert denied["status"]["code"] == 422
    assert denied["status"]["message"] == (
        "ResourceClaim ml/infer has an invalid gpu.nvidia.com device config: "
        "spec.devices.config[0].opaque.parameters.sharing.strategy: GpuConfig.sharing.strategy "
        "'MPS' needs feature gate MPSSupport, which is off: enable it "
        "(Helm featureGates.MPSSupport=true) or use strategy TimeSlicing"
    )
    assert hook.stop() == 0


def test_webhook_with_the_mps_gate_admits_mps_and_refuses_a_bad_limit(start: Any) -> None:
    hook = start(feature_gates="MPSSupport=true")
    mps = time_slicing()
    mps["sharing"] = {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "4Gi"}}
    assert hook.review("uid-mps", mps) == {"uid": "uid-mps", "allowed": True}
    mps["sharing"]["mpsConfig"] = {"defaultPinnedDeviceMemoryLimit": "1Ki"}
    denied = hook.review("uid-low", mps)
    assert denied["allowed"] is False
    assert "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: " in denied["status"]["message"]
    assert "below 1Mi" in denied["status"]["message"]
    assert hook.stop() == 0


def test_webhook_without_the_gate_refuses_time_slicing_naming_the_gate(start: Any) -> None:
    hook = start(feature_gates="")
    denied = hook.review("uid-off", time_slicing("Default"))
    assert denied["allowed"] is False
    assert "needs feature gate TimeSlicingSettings, which is off" in denied["status"]["message"]
    assert hook.review("uid-plain", {"apiVersion": "resource.nvidia.com/v1beta1",
                                     "kind": "GpuConfig"})["allowed"] is True


def test_the_mutating_path_adds_the_partition_constraint_a_fabric_topology_config_implies(
    start: Any,
) -> None:
    hook = start(feature_gates="FabricTopologySupport=true,FabricManagerPartitioning=true")
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                  "fabricTopologyConfig": {"strategy": "Auto", "partitionSize": 4}}
    mutated = hook.review("uid-fm", parameters, path=MUTATE_PATH)
    assert (mutated["uid"], mutated["allowed"], mutated["patchType"]) == (
        "uid-fm", True, "JSONPatch")
    assert json.loads(base64.b64decode(mutated["patch"])) == [
        {"op": "add", "path": "/spec/devices/constraints",
         "value": [{"matchAttribute": "gpu.nvidia.com/partition4", "requests": ["gpu"]}]}]
    assert any("event=admission_mutated uid=uid-fm kind=ResourceClaim" in line
               for line in hook.lines)
    # The validating path admits the same config; a plain GpuConfig is not patched.
    assert hook.review("uid-ok", parameters) == {"uid": "uid-ok", "allowed": True}
    plain = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
    assert hook.review("uid-plain", plain, path=MUTATE_PATH) == {
        "uid": "uid-plain", "allowed": True}
    assert hook.stop() == 0


def test_without_the_gate_the_config_is_refused_and_not_patched(start: Any) -> None:
    hook = start(feature_gates="FabricManagerPartitioning=true")
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                  "fabricTopologyConfig": {"partitionSize": 4}}
    assert hook.review("uid-m", parameters, path=MUTATE_PATH) == {"uid": "uid-m", "allowed": True}
    denied = hook.review("uid-v", parameters)
    assert denied["allowed"] is False
    assert "needs feature gate FabricTopologySupport, which is off" in denied["status"]["message"]
    assert hook.stop() == 0
