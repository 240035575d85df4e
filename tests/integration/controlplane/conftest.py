"""Fixtures of the control-plane tier: a real control plane and kubelet with the chart installed.

The binaries are built by `make kube-components` (`hack/kube-components.sh`, cached outside the
repo, per $KUBE_VERSION). Without them the tier is skipped on a developer checkout and fails
under CI=true, where `.ci/run` builds them first.
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "realkube"))

from collections.abc import Iterator
from typing import Any

import cluster_driver
import pytest

# The GPU half on (a100-mig: MIG devices and a whole GPU), time-slicing allowed.
DRIVER_MANAGED_VALUES: dict[str, Any] = {
    "resources": {"gpus": {"enabled": True}},
    "featureGates": {"TimeSlicingSettings": True},
}


@pytest.fixture(scope="module")
def driver_managed() -> Iterator[cluster_driver.Cluster]:
    """One node, the chart in its default (driverManaged) mode with the GPU half on, for one
    module (a session-wide one would keep a whole cluster busy through the rest of the suite)."""
    yield from cluster_driver.started(
        "driverManaged", values=DRIVER_MANAGED_VALUES, gpu_profile="a100-mig")
