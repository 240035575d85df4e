"""Fixtures of the real kube-apiserver tier.

The binaries are built by `make kube-components` (`hack/kube-components.sh`, cached outside the
repo). Without them the tier is skipped on a developer checkout and fails under CI=true, where
`.ci/run` builds them first. KEEP_CONTROLPLANE_DIRS=1 keeps each server's directory (etcd and
kube-apiserver logs, the apps' logs) after its module, to read after a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
import realkube_driver
import realkube_server

from adapters.kube import KubeCluster

pytestmark = pytest.mark.slow


def _remove(kube: realkube_server.RealKube) -> None:
    if os.environ.get("KEEP_CONTROLPLANE_DIRS") == "1":
        print(f"\nkept {kube.workdir} (KEEP_CONTROLPLANE_DIRS=1)")
        return
    shutil.rmtree(kube.workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def real_kube() -> Iterator[realkube_server.RealKube]:
    """A fresh etcd + kube-apiserver for one test module, nothing installed."""
    kube = realkube_driver.fresh_kube()
    try:
        yield kube
    finally:
        kube.stop()
        _remove(kube)


@pytest.fixture(scope="module", params=sorted(realkube_driver.MODES))
def installed(request: pytest.FixtureRequest) -> Iterator[realkube_driver.Driver]:
    """The chart installed in one IMEX mode, on its own API server (per module and mode).

    NB: one server holds one mode: DeviceClasses and RBAC differ between the modes.
    """
    kube = realkube_driver.fresh_kube()
    mode = str(request.param)
    driver = realkube_driver.Driver(kube, mode=mode, workdir=kube.workdir)
    try:
        yield driver.install()
    finally:
        driver.stop()
        kube.stop()
        _remove(kube)


@pytest.fixture(scope="module")
def admin(installed: realkube_driver.Driver) -> Iterator[KubeCluster]:
    """Our own adapter with the admin token, for arranging and inspecting the cluster."""
    cluster = installed.admin()
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def controller(installed: realkube_driver.Driver) -> Iterator[realkube_driver.AppProcess]:
    """The controller as the chart runs it, for the whole module."""
    process = installed.start_controller()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def node(installed: realkube_driver.Driver) -> realkube_driver.PluginNode:
    """The first simulated node's plugin directories."""
    return installed.plugin_node(realkube_driver.nodes()[0])


@pytest.fixture(scope="module")
def plugin(
    installed: realkube_driver.Driver, node: realkube_driver.PluginNode
) -> Iterator[realkube_driver.AppProcess]:
    """The kubelet plugin on `node`, registered, for the whole module."""
    process = installed.start_plugin(node)
    realkube_driver.wait_registered(process, node)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def real_apiserver(real_kube: realkube_server.RealKube) -> realkube_server.RealKube:
    """Alias of `real_kube`: `.url`, `.admin_token`, `.admin_kubeconfig()`, `.cluster(kubeconfig)`
    (a `KubeCluster`), `.apply(objects)`, `.stop_apiserver()` / `.start_apiserver()`."""
    return real_kube
