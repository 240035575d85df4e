"""A SIGTERM ends the daemon promptly even while it sleeps between readiness re-checks."""

from __future__ import annotations

import signal

import daemon_processes as dp


def test_sigterm_during_a_long_recheck_period_exits_within_seconds(
    served, bin_dir, launch, tmp_path
) -> None:
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    (node,) = dp.nodes(tmp_path, 1)
    args = dp.daemon_args(node, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir)
    args[args.index("--ready-recheck-seconds") + 1] = "600"
    process = launch(args)
    dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 1), what="Ready")
    process.signal(signal.SIGTERM)
    # NB: not a timing assertion on the happy path: without the fix it sleeps 600 s.
    assert process.wait(timeout_s=30) == 0
    assert dp.entries(cluster, cd_uid=cd_uid) == []
