"""A `compute-domain-daemon` whose node's NVLink fabric degrades reports NotReady (issue 22).

The daemon reads its node's fabric through `--nvml` (here the simulated GB200 node, degraded
through the fabric state file under `--nvidia-driver-root`) every `--fabric-check-seconds`:
while a GPU's registration is incomplete or failed its entry says NotReady, in the
ComputeDomainClique and (gate ComputeDomainCliques off) in the ComputeDomain's
`status.nodes`, though nvidia-imex answers READY; recovery makes it Ready again. Without NVML
(this host) the check says so once and the entry follows nvidia-imex alone, unless the kubelet
plugin leaves its judgment in `/imexd/fabric-health.json` (as in a real daemon pod, which has
no NVML): then the entry follows that file; a `--nvml` that cannot name this node stops the
daemon at start with exit 2.
"""

from __future__ import annotations

import pathlib

import daemon_processes as dp

from adapters.fs import fabric_health_file
from adapters.nvml import simulated
from core import models
from core.computedomain import fabric_health

READY, NOT_READY = models.DomainStatus.READY, models.DomainStatus.NOT_READY
PROFILE = "gb200-nvl72"


def _gb200_node(tmp_path: pathlib.Path) -> dp.Node:
    node = dp.Node(name=simulated.profile_nodes(PROFILE)[0], ip="10.0.0.10",
                   clique=dp.CLIQUE_A, root=tmp_path / "gb200")
    node.prepare()
    return node


def _args(node: dp.Node, driver_root: pathlib.Path, *, cd_uid: str, kubeconfig: pathlib.Path,
          bin_dir: pathlib.Path, feature_gates: str = "") -> list[str]:
    return [*dp.daemon_args(node, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir,
                            feature_gates=feature_gates),
            "--nvml", f"simulated:{PROFILE}", "--nvidia-driver-root", str(driver_root),
            "--fabric-check-seconds", "0.2"]


def _fabric_file(driver_root: pathlib.Path) -> str:
    path = simulated.fabric_state_path(str(driver_root))
    assert path is not None
    return path


def test_the_entry_is_not_ready_while_the_fabric_is_degraded(
    served, bin_dir, launch, tmp_path
) -> None:
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    node, driver_root = _gb200_node(tmp_path), tmp_path / "driver-root"
    process = launch(_args(node, driver_root, cd_uid=cd_uid, kubeconfig=kubeconfig,
                           bin_dir=bin_dir))
    dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 1), what="a Ready entry")

    simulated.degrade_simulated_fabric(_fabric_file(driver_root))

    dp.eventually(lambda: [p.status for p in dp.entries(cluster, cd_uid=cd_uid)] == [NOT_READY],
                  what="the entry NotReady")
    output = process.output()
    assert f"event=fabric_degraded node={node.name} reason=Failed" in output
    assert "event=entry_not_ready cause=fabric_degraded reason=Failed imex=Ready" in output

    simulated.restore_simulated_fabric(_fabric_file(driver_root))

    dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 1), what="Ready again")
    assert f"event=fabric_recovered node={node.name}" in process.output()


def test_the_computedomain_status_store_reports_not_ready_too(
    served, bin_dir, launch, tmp_path
) -> None:
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    node, driver_root = _gb200_node(tmp_path), tmp_path / "driver-root"
    simulated.degrade_simulated_fabric(_fabric_file(driver_root),
                                       state=models.FabricState.IN_PROGRESS)
    process = launch(_args(node, driver_root, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir,
                 feature_gates="ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false"))

    dp.eventually(lambda: [p.status for p in dp.status_entries(cluster)] == [NOT_READY],
                  what="a NotReady entry in the ComputeDomain's status.nodes")
    dp.eventually(lambda: "event=imex_readiness status=Ready" in process.output(),
                  what="nvidia-imex READY all the same")
    assert [p.status for p in dp.status_entries(cluster)] == [NOT_READY]

    simulated.restore_simulated_fabric(_fabric_file(driver_root))

    dp.eventually(lambda: [p.status for p in dp.status_entries(cluster)] == [READY],
                  what="Ready once the fabric recovered")


def test_without_nvml_the_entry_follows_nvidia_imex_alone(
    served, bin_dir, launch, tmp_path
) -> None:
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    (node,) = dp.nodes(tmp_path, 1)
    # NB: real NVML, absent on this host (as in a daemon pod that is given no driver library).
    process = launch([*dp.daemon_args(node, cd_uid=cd_uid, kubeconfig=kubeconfig,
                                      bin_dir=bin_dir), "--nvml", "real"])
    dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 1), what="a Ready entry")
    dp.eventually(lambda: "event=fabric_check_unavailable" in process.output(),
                  what="the fabric check giving up")
    assert process.output().count("event=fabric_check") == 1, "said once; NVML is not read again"


def test_without_nvml_the_entry_follows_the_plugins_judgment_in_imexd(
    served, bin_dir, launch, tmp_path
) -> None:
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    (node,) = dp.nodes(tmp_path, 1)
    judgment = node.config_dir / fabric_health.FILE_NAME
    # NB: real NVML, absent on this host: the plugin's file is the daemon's only view.
    process = launch([*dp.daemon_args(node, cd_uid=cd_uid, kubeconfig=kubeconfig,
                                      bin_dir=bin_dir),
                      "--nvml", "real", "--fabric-check-seconds", "0.2"])
    dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 1), what="a Ready entry")
    sick = [models.FabricRecord(gpu_uuid="GPU-7", state=models.FabricState.COMPLETED,
                                cluster_uuid=b"\x01" * 16, status_ok=False)]

    fabric_health_file.write(str(node.config_dir), fabric_health.judge(sick))

    dp.eventually(lambda: [p.status for p in dp.entries(cluster, cd_uid=cd_uid)] == [NOT_READY],
                  what="the entry NotReady, as the plugin's file says")
    output = process.output()
    assert f"event=fabric_degraded node={node.name} reason=Failed" in output
    assert "source=plugin" in output
    assert output.count("event=fabric_check_unavailable") == 1

    judgment.write_text("{not json", encoding="utf-8")  # kept: still NotReady
    dp.eventually(lambda: "event=fabric_file_unreadable" in process.output(),
                  what="the malformed file logged")
    assert [p.status for p in dp.entries(cluster, cd_uid=cd_uid)] == [NOT_READY]

    fabric_health_file.write(str(node.config_dir), fabric_health.judge([]))

    dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 1), what="Ready again")
    assert f"event=fabric_recovered node={node.name}" in process.output()
    assert process.output().count("event=fabric_file_unreadable") == 1

    fabric_health_file.write(str(node.config_dir), fabric_health.judge(sick))
    dp.eventually(lambda: [p.status for p in dp.entries(cluster, cd_uid=cd_uid)] == [NOT_READY],
                  what="NotReady again")
    judgment.unlink()  # the plugin has no judgment: never NotReady for that

    dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 1), what="Ready without a file")


def test_an_nvml_that_cannot_name_this_node_exits_2(served, bin_dir, launch, tmp_path) -> None:
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    (node,) = dp.nodes(tmp_path, 1)  # node-00: not a node of the simulated rack
    process = launch(_args(node, tmp_path / "driver-root", cd_uid=cd_uid,
                           kubeconfig=kubeconfig, bin_dir=bin_dir))
    assert process.wait() == 2
    assert "is not part of simulated profile 'gb200-nvl72'" in process.output()
    assert dp.entries(cluster, cd_uid=cd_uid) == []
