"""IMEX daemons on a real kube-apiserver, with the chart's daemon ServiceAccount.

The real tier (etcd + kube-apiserver built by `make kube-apiserver`; skipped on a developer
checkout without them, as the other real-tier tests): the chart is installed in driverManaged
mode, and three `compute-domain-daemon` processes run with bound tokens of the chart's daemon
ServiceAccount. They create their ComputeDomainClique, claim unique indexes through real 409
conflicts, make their pods owners of the clique, report Ready from the fake `nvidia-imex-ctl`,
converge /etc/hosts, and remove their entries on SIGTERM: the real API server's semantics and
the chart's RBAC, together.
"""

from __future__ import annotations

import pathlib
import shutil
import signal
import sys
from collections.abc import Iterator
from typing import Any

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "realkube"))

import daemon_processes as dp
import fake_nvidia_imex as fake
import realkube_driver

from core import errors, kinds, models, names
from core.computedomain import imexconfig, membership

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def driver() -> Iterator[realkube_driver.Driver]:
    kube = realkube_driver.fresh_kube(prefix="realkube-daemon-")
    workdir = kube.workdir
    installed = realkube_driver.Driver(kube, mode="driverManaged", workdir=workdir).install()
    yield installed
    installed.stop()
    kube.stop()
    shutil.rmtree(workdir, ignore_errors=True)


def _clique(admin: Any, cd_uid: str) -> list[membership.Peer]:
    try:
        obj = admin.get(kinds.COMPUTE_DOMAIN_CLIQUE.kind, namespace=realkube_driver.NAMESPACE,
                        name=membership.clique_object_name(cd_uid, dp.CLIQUE_A))
    except errors.NotFoundError:
        return []  # not created yet
    store = membership.Store.CLIQUE
    return list(membership.peers_of(membership.entries_of(obj, store=store), store=store))


def test_daemons_form_a_domain_on_a_real_apiserver_with_the_charts_rbac(
    driver: realkube_driver.Driver, tmp_path: pathlib.Path
) -> None:
    admin = driver.admin()
    cd = admin.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "cd-real", "namespace": realkube_driver.WORKLOAD_NAMESPACE},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "cd-real-channel"}}},
    })
    cd_uid = cd["metadata"]["uid"]
    bin_dir = tmp_path / "bin"
    fake.install(bin_dir)
    account = driver.service_account("daemon")
    processes = []
    pods: list[dict[str, Any]] = []
    for node in dp.nodes(tmp_path, 3):
        pod = driver.kube.create_pod_on_node(
            namespace=realkube_driver.NAMESPACE, name=f"daemon-{node.name}", node=node.name,
            service_account=account,
        )
        credentials = driver.kube.credentials_for(
            namespace=realkube_driver.NAMESPACE, service_account=account, bound_pod=pod
        )
        args = dp.daemon_args(node, cd_uid=cd_uid, kubeconfig=credentials.kubeconfig,
                              bin_dir=bin_dir)
        args[args.index("--compute-domain-namespace") + 1] = realkube_driver.WORKLOAD_NAMESPACE
        args[args.index("--compute-domain-name") + 1] = "cd-real"
        args[args.index("--namespace") + 1] = realkube_driver.NAMESPACE
        # What the DaemonSet gives the daemon from its pod's metadata.name/uid.
        args += ["--pod-name", pod["metadata"]["name"], "--pod-uid", pod["metadata"]["uid"]]
        pods.append(pod)
        processes.append((node, driver.launch("apps.daemon", args, env={})))

    def three_ready() -> list[membership.Peer] | None:
        found = _clique(admin, cd_uid)
        ready = all(p.status is models.DomainStatus.READY for p in found)
        return found if len(found) == 3 and ready else None

    peers = dp.eventually(three_ready, what="three Ready entries on the real API server",
                          timeout_s=90)
    assert sorted(p.index for p in peers) == [0, 1, 2]
    for node, _process in processes:
        dp.eventually(
            lambda n=node: sum(imexconfig.DNS_NAME_PREFIX in line for line in
                               n.hosts_file.read_text(encoding="utf-8").splitlines()) == 3,
            what=f"/etc/hosts of {node.name}",
        )
    # Every daemon pod owns the clique (the garbage collector removes it with the last pod):
    # the real API server accepts the references under the chart's daemon RBAC.
    clique = admin.get(kinds.COMPUTE_DOMAIN_CLIQUE.kind, namespace=realkube_driver.NAMESPACE,
                       name=membership.clique_object_name(cd_uid, dp.CLIQUE_A))
    owners = sorted(clique["metadata"]["ownerReferences"], key=lambda ref: ref["name"])
    assert owners == sorted(
        ({"apiVersion": "v1", "kind": "Pod", "name": p["metadata"]["name"],
          "uid": p["metadata"]["uid"]} for p in pods),
        key=lambda ref: ref["name"],
    )
    node, leaver = processes[0]
    leaver.signal(signal.SIGTERM)
    assert leaver.wait() == 0, leaver.output()
    assert node.name not in {p.node_name for p in _clique(admin, cd_uid)}
    assert "Forbidden" not in "".join(p.output() for _n, p in processes)
