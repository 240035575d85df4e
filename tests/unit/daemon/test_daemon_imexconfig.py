"""nodes.cfg, /etc/hosts and imexd.cfg rendering of `core.computedomain.imexconfig` (pure)."""

from __future__ import annotations

from core import models
from core.computedomain import imexconfig, membership


def _peer(node: str, ip: str, index: int, clique: str = "c.1") -> membership.Peer:
    return membership.Peer(node_name=node, ip_address=ip, clique_id=clique, index=index,
                           status=models.DomainStatus.READY)


PEERS = (
    _peer("b", "10.0.0.20", 1),
    _peer("a", "10.0.0.3", 0),
    _peer("x", "10.9.9.9", 0, clique="c.2"),
    _peer("new", "", 2),  # no IP yet: not reachable, not listed
)


def test_dns_names_are_zero_padded_slots() -> None:
    assert imexconfig.dns_name(7) == "compute-domain-daemon-0007"


def test_with_dns_names_nodes_cfg_lists_every_slot_and_hosts_map_live_peers() -> None:
    files = imexconfig.peer_files(PEERS, clique_id="c.1", dns_names=True, max_nodes=3)
    assert files.nodes_cfg == (
        "compute-domain-daemon-0000\ncompute-domain-daemon-0001\ncompute-domain-daemon-0002\n"
    )
    assert files.hosts == (("10.0.0.3", "compute-domain-daemon-0000"),
                           ("10.0.0.20", "compute-domain-daemon-0001"))


def test_with_ips_nodes_cfg_lists_same_clique_ips_in_numeric_order() -> None:
    files = imexconfig.peer_files(PEERS, clique_id="c.1", dns_names=False, max_nodes=18)
    assert files == imexconfig.PeerFiles(nodes_cfg="10.0.0.3\n10.0.0.20\n")


def test_peer_files_equal_exactly_when_nothing_imex_reads_changed() -> None:
    one = imexconfig.peer_files(PEERS, clique_id="c.1", dns_names=True, max_nodes=18)
    status_only = tuple(
        membership.Peer(node_name=p.node_name, ip_address=p.ip_address, clique_id=p.clique_id,
                        index=p.index, status=models.DomainStatus.NOT_READY) for p in PEERS
    )
    assert imexconfig.peer_files(status_only, clique_id="c.1", dns_names=True,
                                 max_nodes=18) == one
    moved = (*PEERS[:1], _peer("a", "10.0.0.4", 0))
    assert imexconfig.peer_files(moved, clique_id="c.1", dns_names=True, max_nodes=18) != one


def test_hosts_file_replaces_only_our_block() -> None:
    existing = (
        "127.0.0.1\tlocalhost\n"
        f"{imexconfig.HOSTS_MARKER}\n10.0.0.1\tcompute-domain-daemon-0000\n"
        "10.1.1.1\tother-host\n"
    )
    text = imexconfig.hosts_file(existing, [("10.0.0.2", "compute-domain-daemon-0000")])
    assert text == (
        "127.0.0.1\tlocalhost\n10.1.1.1\tother-host\n"
        f"{imexconfig.HOSTS_MARKER}\n10.0.0.2\tcompute-domain-daemon-0000\n"
    )
    assert imexconfig.hosts_file(text, []) == "127.0.0.1\tlocalhost\n10.1.1.1\tother-host\n"


def test_imexd_cfg_fills_upstream_placeholders_in_either_spacing() -> None:
    template = (
        "IMEX_CMD_BIND_INTERFACE_IP={{ .IMEXCmdBindInterfaceIP }}\n"
        "IMEX_NODE_CONFIG_FILE={{.IMEXDaemonNodesConfigPath}}\n"
    )
    assert imexconfig.render_imexd_cfg(
        template, bind_ip="10.0.0.7", nodes_cfg_path="/imexd/nodes.cfg"
    ) == "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.7\nIMEX_NODE_CONFIG_FILE=/imexd/nodes.cfg\n"


def test_default_template_runs_nvidia_imex_in_the_foreground_with_its_cmd_service() -> None:
    text = imexconfig.render_imexd_cfg(imexconfig.DEFAULT_IMEXD_TEMPLATE, bind_ip="1.2.3.4",
                                       nodes_cfg_path="/imexd/nodes.cfg")
    lines = set(text.splitlines())
    assert {"DAEMONIZE=0", "IMEX_CMD_ENABLED=1", "IMEX_CMD_BIND_INTERFACE_IP=1.2.3.4",
            "IMEX_NODE_CONFIG_FILE=/imexd/nodes.cfg"} <= lines
    assert "{{" not in text
