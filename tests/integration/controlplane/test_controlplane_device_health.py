"""The kubelet's device-health stream, with the real kubelet: both plugins serve it and the
kubelet opens it in the newest version it speaks.

NB: not yet asserted here: the pod's `allocatedResourcesStatus`. With the stream open and the
list sent, the 1.34 kubelet left that field empty on a Running GPU pod; why is open work.

The chart with the GPU half on one simulated A100 node; gate ResourceHealthStatus on in every
component (alpha in 1.34; the pod field `allocatedResourcesStatus` needs it in the API server
too). Run with KUBE_VERSION=v1.34.4 (default: the kubelet asks for v1alpha1 unprompted) and
v1.37.2 (it picks v1 from the versions the registration lists).
"""

from __future__ import annotations

import re
from typing import Any

import cluster_driver
import control_plane
import pytest
from cluster_driver import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

def expected_version() -> str:
    found = re.match(r"v1\.(\d+)\.", control_plane.kube_version())
    minor = int(found.group(1)) if found else 0
    return "v1alpha1" if minor < 36 else ("v1beta1" if minor == 36 else "v1")


@pytest.fixture(scope="module")
def cluster() -> Any:
    values = {"resources": {"gpus": {"enabled": True}}}
    yield from cluster_driver.started("driverManaged", values=values, gpu_profile="a100-mig",
                                      kube_gates={"ResourceHealthStatus": True})


def plugin_logs(cluster: Cluster) -> str:
    assert cluster.runtime is not None
    return "\n".join(log.read_text(errors="replace")
                     for log in sorted(cluster.runtime.state_dir.glob("**/*.log")))


def test_the_kubelet_opens_the_health_stream_of_both_plugins(cluster: Cluster) -> None:
    version = expected_version()

    def opened() -> list[str] | None:
        lines = [line for line in plugin_logs(cluster).splitlines()
                 if f"event=health_stream_opened version={version} " in line]
        # One per plugin process: the CD and the GPU kubelet plugins log the same event.
        return lines if len(lines) >= 2 else None

    cluster.eventually(opened, what=f"the kubelet's {version} health stream to both plugins",
                       timeout_s=180)
