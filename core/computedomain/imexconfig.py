"""The files `nvidia-imex` reads, rendered from the daemon's peers (pure text in, text out).

- `imexd.cfg`: the kubelet plugin drops a template (`imexd.cfg.tmpl`, chart-overridable) into
  the per-domain directory mounted at `/imexd`; the daemon fills in its pod IP and the path of
  `nodes.cfg`. The placeholders are upstream's Go-template ones, so an upstream template works.
- `nodes.cfg`: one peer per line. With gate IMEXDaemonsWithDNSNames it lists the stable names
  `compute-domain-daemon-0000` … for every slot of the clique, and `/etc/hosts` maps the names
  of live peers to their IPs (unused slots resolve nowhere); otherwise it lists peer IPs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from core.computedomain import membership

DNS_NAME_PREFIX = "compute-domain-daemon-"
HOSTS_MARKER = "# compute-domain-daemon peers (managed; rewritten on every peer change)"
BIND_IP_PLACEHOLDER = "{{ .IMEXCmdBindInterfaceIP }}"
NODES_CONFIG_PLACEHOLDER = "{{ .IMEXDaemonNodesConfigPath }}"

# What the plugin writes when the chart gives no template of its own. Keys and defaults are
# nvidia-imex's documented settings; the daemon runs in the foreground under our supervision.
DEFAULT_IMEXD_TEMPLATE = f"""\
# nvidia-imex settings of one ComputeDomain daemon (rendered by compute-domain-daemon)
LOG_LEVEL=4
LOG_FILE_NAME=
LOG_APPEND_TO_LOG=0
LOG_USE_SYSLOG=0
DAEMONIZE=0
BIND_INTERFACE_IP=
SERVER_PORT=50000
IMEX_NODE_CONFIG_FILE={NODES_CONFIG_PLACEHOLDER}
IMEX_WAIT_FOR_QUORUM=RECOVERY
IMEX_ENABLE_AUTH_ENCRYPTION=0
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP={BIND_IP_PLACEHOLDER}
IMEX_CMD_PORT=50005
IMEX_NODE_DISCONNECTED_GRACE_TIME=-1
"""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PeerFiles:
    """What the peers of one clique look like to `nvidia-imex`.

    Equal values mean nothing `nvidia-imex` reads has changed (no SIGUSR1 needed).
    """

    nodes_cfg: str
    # (ip, dns name) pairs for /etc/hosts; empty without DNS names.
    hosts: tuple[tuple[str, str], ...] = ()


def dns_name(index: int) -> str:
    """The stable name of clique slot `index`: `compute-domain-daemon-0007`."""
    return f"{DNS_NAME_PREFIX}{index:04d}"


def peer_files(
    peers: Sequence[membership.Peer], *, clique_id: str, dns_names: bool, max_nodes: int
) -> PeerFiles:
    """nodes.cfg (and hosts entries) for the daemons of `clique_id` among `peers`."""
    mine = [p for p in membership.same_clique(peers, clique_id) if p.ip_address]
    if not dns_names:
        ips = sorted({p.ip_address for p in mine}, key=_ip_sort_key)
        return PeerFiles(nodes_cfg="".join(f"{ip}\n" for ip in ips))
    slots = "".join(f"{dns_name(i)}\n" for i in range(max_nodes))
    hosts = tuple(
        (p.ip_address, dns_name(p.index))
        for p in sorted(mine, key=lambda p: p.index)
        if 0 <= p.index < max_nodes
    )
    return PeerFiles(nodes_cfg=slots, hosts=hosts)


def hosts_file(existing: str, entries: Sequence[tuple[str, str]]) -> str:
    """`/etc/hosts` with our block replaced by `entries`; every other line is kept as it was."""
    kept = [
        line
        for line in existing.splitlines()
        if line.strip() != HOSTS_MARKER and DNS_NAME_PREFIX not in line
    ]
    while kept and not kept[-1].strip():
        kept.pop()
    block = [HOSTS_MARKER, *(f"{ip}\t{name}" for ip, name in entries)] if entries else []
    lines = [*kept, *block]
    return "".join(f"{line}\n" for line in lines)


def render_imexd_cfg(template: str, *, bind_ip: str, nodes_cfg_path: str) -> str:
    """Fill the template's placeholders (tolerating Go-template spacing variants)."""
    text = template
    for placeholder, value in (
        (BIND_IP_PLACEHOLDER, bind_ip),
        (NODES_CONFIG_PLACEHOLDER, nodes_cfg_path),
    ):
        text = text.replace(placeholder, value).replace(placeholder.replace(" ", ""), value)
    return text


def _ip_sort_key(ip: str) -> tuple[int, tuple[int, ...], str]:
    # IPv4 numerically first, then anything else (IPv6) as text.
    parts = ip.split(".")
    if len(parts) == 4 and all(p.isdigit() for p in parts):
        return (0, tuple(int(p) for p in parts), "")
    return (1, (), ip)
