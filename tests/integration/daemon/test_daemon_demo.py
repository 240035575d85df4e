"""`computedomain demo --mode driverManaged` runs real compute-domain-daemon processes.

Covers: the daemon pods' claims prepared by the plugin, one daemon process per labelled node
that claims its index and reports Ready itself (which lets workload channels be prepared), and a
clean end: daemons SIGTERMed (entries gone, no process left), per-domain dirs removed.
"""

from __future__ import annotations

import pathlib

from apps.cli import embedded, scenario
from core import kinds


def test_driver_managed_demo_runs_real_daemons_and_ends_clean() -> None:
    lines: list[str] = []
    with embedded.running(workdir="", mode="driverManaged", node_limit=4) as env:
        report = scenario.run(env, say=lines.append, workers=2)
        fleet = env.daemon_fleet
        assert fleet is not None and fleet.daemons == {}  # all stopped by the scenario
        cliques = env.cluster.list(kinds.COMPUTE_DOMAIN_CLIQUE.kind).items
        domain_dirs = [p for n in env.nodes.values()
                       for p in (pathlib.Path(n.settings.plugin_dir) / "domains").glob("*")]
    assert len(report.prepared) == 2
    started = [line for line in lines if "compute-domain-daemon process(es) Ready" in line]
    assert len(started) == 2
    assert "index 0" in started[0] and "index 1" in started[1]
    assert cliques == ()  # retired with the ComputeDomain
    assert domain_dirs == []
    assert (report.leftover_cdi_files, report.leftover_checkpoint_entries) == (0, 0)
