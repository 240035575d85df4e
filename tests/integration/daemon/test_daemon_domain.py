"""N `compute-domain-daemon` processes against the embedded API server form one IMEX domain.

Covers: nodes.cfg converging on every node (DNS names + /etc/hosts, and plain IPs with the
gate off), unique indexes that survive a kill -9 and restart, SIGUSR1 on a peer change and not
on start, readiness following `nvidia-imex-ctl`, entries removed on SIGTERM, a daemon of another
clique kept out, and the CD `status.nodes` store with ComputeDomainCliques off.
"""

from __future__ import annotations

import signal

import daemon_processes as dp
import fake_nvidia_imex as fake

from core import models
from core.computedomain import imexconfig

READY = models.DomainStatus.READY


def _hosts_block(node: dp.Node) -> list[str]:
    lines = node.hosts_file.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if imexconfig.DNS_NAME_PREFIX in line]


def test_three_daemons_form_one_domain_with_dns_names(served, bin_dir, launch, tmp_path):
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    nodes = dp.nodes(tmp_path, 3)
    for node in nodes:
        launch(dp.daemon_args(node, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir))

    peers = dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 3),
                          what="three Ready entries in the clique")
    assert sorted(p.index for p in peers) == [0, 1, 2]
    expected = dp.expected_hosts_lines([(p.index, p.ip_address) for p in peers])
    for node in nodes:
        dp.eventually(lambda n=node: _hosts_block(n) == expected, what=f"hosts of {node.name}")
        slots = node.nodes_cfg.read_text(encoding="utf-8").splitlines()
        assert slots == [imexconfig.dns_name(i) for i in range(18)]
        # the hosts lines we did not write are kept
        assert node.hosts_file.read_text(encoding="utf-8").startswith(dp.HOSTS_SEED)
        assert len(fake.starts(node.config_dir)) == 1
    # NB: whoever started last saw the full set at start; earlier ones were told by SIGUSR1.
    assert any(fake.reloads(n.config_dir) for n in nodes)
    cfg = (nodes[0].config_dir / "imexd.cfg").read_text(encoding="utf-8")
    assert "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.10\n" in cfg
    assert f"IMEX_NODE_CONFIG_FILE={nodes[0].nodes_cfg}\n" in cfg


def test_a_joining_peer_signals_running_daemons_but_a_fresh_start_is_not_signalled(
    served, bin_dir, launch, tmp_path
):
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    first, joiner = dp.nodes(tmp_path, 2)
    launch(dp.daemon_args(first, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir))
    dp.eventually(lambda: [p.status for p in dp.entries(cluster, cd_uid=cd_uid)] == [READY],
                  what="first daemon Ready")
    assert fake.reloads(first.config_dir) == []

    launch(dp.daemon_args(joiner, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir))
    dp.eventually(lambda: bool(fake.reloads(first.config_dir)), what="SIGUSR1 to the first")
    dp.eventually(lambda: bool(fake.starts(joiner.config_dir)), what="the joiner's nvidia-imex")
    assert fake.reloads(joiner.config_dir) == []
    assert len(fake.starts(first.config_dir)) == 1  # signalled, not restarted


def test_readiness_follows_nvidia_imex_ctl(served, bin_dir, launch, tmp_path):
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    (node,) = dp.nodes(tmp_path, 1)
    fake.set_state(node.config_dir, "UNAVAILABLE")
    launch(dp.daemon_args(node, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir))
    dp.eventually(lambda: bool(fake.starts(node.config_dir)), what="nvidia-imex started")
    dp.eventually(lambda: [p.status for p in dp.entries(cluster, cd_uid=cd_uid)] == [
        models.DomainStatus.NOT_READY], what="a NotReady entry")

    fake.set_state(node.config_dir, None)
    dp.eventually(lambda: [p.status for p in dp.entries(cluster, cd_uid=cd_uid)] == [READY],
                  what="Ready once nvidia-imex-ctl says READY")
    fake.set_state(node.config_dir, "UNAVAILABLE")
    dp.eventually(lambda: [p.status for p in dp.entries(cluster, cd_uid=cd_uid)] == [
        models.DomainStatus.NOT_READY], what="NotReady again")


def test_sigterm_removes_the_entry_and_stops_nvidia_imex(served, bin_dir, launch, tmp_path):
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    nodes = dp.nodes(tmp_path, 2)
    procs = [launch(dp.daemon_args(n, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir))
             for n in nodes]
    dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 2), what="two Ready entries")

    procs[1].signal(signal.SIGTERM)
    assert procs[1].wait() == 0
    assert [p.node_name for p in dp.entries(cluster, cd_uid=cd_uid)] == [nodes[0].name]
    assert fake.events(nodes[1].config_dir)[-1] == "TERM"
    # the survivor forgets the leaver's address
    dp.eventually(lambda: len(_hosts_block(nodes[0])) == 1, what="hosts without the leaver")


def test_indexes_stay_unique_and_stable_across_kill_and_restart(served, bin_dir, launch,
                                                                tmp_path):
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    nodes = dp.nodes(tmp_path, 4)
    procs = {n.name: launch(dp.daemon_args(n, cd_uid=cd_uid, kubeconfig=kubeconfig,
                                           bin_dir=bin_dir)) for n in nodes}
    before = dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 4), what="four entries")
    indexes = {p.node_name: p.index for p in before}
    assert sorted(indexes.values()) == [0, 1, 2, 3]

    victim = nodes[2]
    procs[victim.name].kill()  # kill -9: no chance to remove its entry
    dp.eventually(lambda: fake.pid(victim.config_dir) is None,
                  what="the killed daemon's nvidia-imex gone with it")
    launch(dp.daemon_args(victim, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir))
    dp.eventually(lambda: len(fake.starts(victim.config_dir)) == 2, what="restarted nvidia-imex")
    after = {p.node_name: p.index for p in dp.entries(cluster, cd_uid=cd_uid)}
    assert after == indexes


def test_a_daemon_of_another_clique_stays_out(served, bin_dir, launch, tmp_path):
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    rack_a = dp.nodes(tmp_path, 2)
    (other,) = dp.nodes(tmp_path, 1, clique=dp.CLIQUE_B, first=5)
    for node in (*rack_a, other):
        launch(dp.daemon_args(node, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir))
    dp.eventually(lambda: len(dp.entries(cluster, cd_uid=cd_uid)) == 2, what="clique A")
    dp.eventually(lambda: len(dp.entries(cluster, cd_uid=cd_uid, clique=dp.CLIQUE_B)) == 1,
                  what="clique B")
    for node in rack_a:
        dp.eventually(lambda n=node: len(_hosts_block(n)) == 2, what="A's two peers")
        assert other.ip not in node.hosts_file.read_text(encoding="utf-8")
    dp.eventually(lambda: len(_hosts_block(other)) == 1, what="B alone")
    # B's single daemon takes index 0 of its own clique
    assert [p.index for p in dp.entries(cluster, cd_uid=cd_uid, clique=dp.CLIQUE_B)] == [0]


def test_without_cliques_and_dns_names_entries_go_to_cd_status_and_nodes_cfg_lists_ips(
    served, bin_dir, launch, tmp_path
):
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    nodes = dp.nodes(tmp_path, 3)
    gates = "ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false"
    for node in nodes:
        launch(dp.daemon_args(node, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir,
                              feature_gates=gates))
    dp.eventually(
        lambda: len(e := dp.status_entries(cluster)) == 3 and all(p.status is READY for p in e),
        what="three Ready entries in status.nodes",
    )
    assert sorted(p.index for p in dp.status_entries(cluster)) == [0, 1, 2]
    want = "".join(f"{n.ip}\n" for n in nodes)
    for node in nodes:
        dp.eventually(lambda n=node: n.nodes_cfg.read_text(encoding="utf-8") == want,
                      what=f"nodes.cfg of {node.name}")
        assert node.hosts_file.read_text(encoding="utf-8") == dp.HOSTS_SEED
    assert dp.entries(cluster, cd_uid=cd_uid) == []  # no clique object


def test_sigusr1_waits_until_nvidia_imex_can_take_it(served, bin_dir, launch, tmp_path):
    # A child that has not answered READY (and is inside the grace period) may not have its
    # SIGUSR1 handler yet: the change is written, the signal waits for READY.
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    first, joiner = dp.nodes(tmp_path, 2)
    fake.set_state(first.config_dir, "UNAVAILABLE")
    args = dp.daemon_args(first, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir)
    args += ["--reload-grace-seconds", "600"]
    launch(args)
    dp.eventually(lambda: bool(fake.starts(first.config_dir)), what="first nvidia-imex started")
    launch(dp.daemon_args(joiner, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir))
    dp.eventually(lambda: len(_hosts_block(first)) == 2, what="the joiner in first's hosts")
    assert fake.reloads(first.config_dir) == []

    fake.set_state(first.config_dir, None)  # READY
    dp.eventually(lambda: bool(fake.reloads(first.config_dir)), what="SIGUSR1 once READY")
    events = fake.events(first.config_dir)
    assert len(fake.starts(first.config_dir)) == 1, events
