"""`compute-domain-daemon check` as the kubelet runs it, and the daemon's error paths.

Covers: check's exit statuses (0 READY, 1 not ready, 3 no fabric) with their messages,
including a host with no CLIQUE_ID whose GPUs have no fabric (the H100 case, via the simulated
H100 profile); `run` on a node without a clique idles and exits 0 on SIGTERM; missing CDI
inputs fail with status 2/1 and the fix; a crashed nvidia-imex is restarted with backoff.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

import daemon_processes as dp
import fake_nvidia_imex as fake

REPO = pathlib.Path(__file__).resolve().parents[3]


def _check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("CLIQUE_ID", "NODE_NAME")}
    return subprocess.run(
        [sys.executable, "-m", "apps.daemon", "check", *args], cwd=REPO, capture_output=True,
        text=True, timeout=60, env={**clean, **(env or {})}, check=False,
    )


def test_check_on_a_node_without_fabric_says_so_with_status_3() -> None:
    done = _check("--node-name", "gpu-1", env={"CLIQUE_ID": ""})
    assert done.returncode == 3
    assert "no NVLink fabric on node gpu-1" in done.stdout


def test_check_on_an_h100_host_asks_nvml_and_reports_no_fabric() -> None:
    done = _check("--nvml", "simulated:h100", "--node-name", "h100-node01")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "no NVLink fabric" in done.stdout


def test_check_follows_nvidia_imex_ctl(bin_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    config_dir = tmp_path / "imexd"
    config_dir.mkdir()
    args = ("--clique-id", dp.CLIQUE_A, "--config-dir", str(config_dir),
            "--imex-ctl-command", str(bin_dir / "nvidia-imex-ctl"))
    fake.set_state(config_dir, "READY")
    done = _check(*args)
    assert (done.returncode, done.stdout.startswith("ready:")) == (0, True)
    fake.set_state(config_dir, "UNAVAILABLE")
    done = _check(*args)
    assert done.returncode == 1
    assert "not ready" in done.stdout and "UNAVAILABLE" in done.stdout


def test_check_without_the_ctl_tool_is_not_ready(tmp_path: pathlib.Path) -> None:
    done = _check("--clique-id", dp.CLIQUE_A, "--imex-ctl-command", str(tmp_path / "missing"))
    assert done.returncode == 1
    assert "not found" in done.stdout


def test_run_on_a_node_without_a_clique_idles_until_sigterm(served, launch, tmp_path) -> None:
    _cluster, kubeconfig = served
    (node,) = dp.nodes(tmp_path, 1)
    args = dp.daemon_args(dp.Node(name=node.name, ip=node.ip, clique="", root=node.root),
                          cd_uid="u", kubeconfig=kubeconfig, bin_dir=tmp_path)
    process = launch(args)
    dp.eventually(lambda: "event=no_clique" in process.output(), what="the no-clique notice")
    process.signal(signal.SIGTERM)
    assert process.wait() == 0
    assert fake.starts(node.config_dir) == []


def test_run_without_cdi_edits_exits_2_naming_cdi(served, bin_dir, launch, tmp_path) -> None:
    _cluster, kubeconfig = served
    (node,) = dp.nodes(tmp_path, 1)
    process = launch(dp.daemon_args(node, cd_uid="", kubeconfig=kubeconfig, bin_dir=bin_dir))
    assert process.wait() == 2
    assert "COMPUTE_DOMAIN_UUID is not set" in process.output()
    assert "CDI" in process.output()


def test_run_without_the_imexd_mount_exits_1_naming_cdi(served, bin_dir, launch, tmp_path):
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    (node,) = dp.nodes(tmp_path, 1)
    (node.config_dir / "imexd.cfg.tmpl").unlink()
    process = launch(dp.daemon_args(node, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir))
    assert process.wait() == 1
    assert "imexd.cfg.tmpl is missing" in process.output()
    assert dp.entries(cluster, cd_uid=cd_uid) == []


def test_a_crashed_nvidia_imex_is_restarted(served, bin_dir, launch, tmp_path) -> None:
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    (node,) = dp.nodes(tmp_path, 1)
    process = launch(dp.daemon_args(node, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir))
    dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 1), what="Ready")
    first = fake.pid(node.config_dir)
    assert first is not None
    os.kill(first, signal.SIGKILL)
    dp.eventually(lambda: len(fake.starts(node.config_dir)) == 2, what="a second start")
    dp.eventually(lambda: fake.pid(node.config_dir) not in (None, first), what="a new child")
    assert "event=imex_exited" in process.output()
    dp.eventually(lambda: dp.ready_entries(cluster, cd_uid, 1), what="Ready again")


def test_an_unrunnable_nvidia_imex_fails_the_daemon_and_leaves_no_entry(
    served, bin_dir, launch, tmp_path
) -> None:
    cluster, kubeconfig = served
    cd_uid = dp.compute_domain(cluster)
    (node,) = dp.nodes(tmp_path, 1)
    args = dp.daemon_args(node, cd_uid=cd_uid, kubeconfig=kubeconfig, bin_dir=bin_dir)
    args[args.index("--imex-command") + 1] = str(tmp_path / "no-such-nvidia-imex")
    process = launch(args)
    assert process.wait() == 1
    assert "event=daemon_failed" in process.output()
    assert "no-such-nvidia-imex: not found" in process.output()
    assert "IMEX_COMMAND" in process.output()  # says how to fix it
    assert dp.entries(cluster, cd_uid=cd_uid) == []


def test_check_does_not_load_the_kubernetes_client() -> None:
    # The kubelet runs it every few seconds on every daemon pod: it must stay light.
    code = ("import sys\nfrom apps.daemon import __main__ as m\n"
            "m.main(['check', '--clique-id', ''])\nprint('kubernetes' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.stdout.strip().endswith("False"), done.stdout + done.stderr
