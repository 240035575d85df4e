"""The process shell every binary shares (issue 17): flags, env fallbacks, errors, help, logs.

Covers, through the real entry points (`python -m apps.<binary>`):
- bad configuration ends in one `error: ...` line on stderr and exit code 2, never a traceback
  (no kubeconfig, `--workers abc`, `--metrics-port x`, `--retry-budget-seconds abc`,
  `--leader-elect maybe`);
- every binary's `--help` explains every flag and names its environment variable;
- the old flag names still work beside the consistent ones (`--mode` / `--imex-mode`).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]

BINARIES = {
    "compute-domain-controller": ["apps.controller"],
    "compute-domain-kubelet-plugin": ["apps.kubeletplugin"],
    "compute-domain-daemon": ["apps.daemon", "run"],
    "gpu-kubelet-plugin": ["apps.gpuplugin"],
    "computedomain webhook": ["apps.cli", "webhook"],
    "computedomain preflight": ["apps.cli", "preflight"],
    "computedomain plan": ["apps.cli", "plan"],
    "computedomain demo": ["apps.cli", "demo"],
}


def _run(
    module: list[str], *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    return subprocess.run(
        [sys.executable, "-m", *module, *args], capture_output=True, text=True, cwd=ROOT,
        env={**base, "HOME": "/nonexistent", **(env or {})}, timeout=timeout, check=False,
    )


def _one_line_config_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_the_controller_without_a_kubeconfig_says_so_in_one_line() -> None:
    done = _run(["apps.controller"], timeout=60)
    _one_line_config_error(done, "cannot load Kubernetes credentials", "--kubeconfig")


@pytest.mark.parametrize(("module", "args", "needles"), [
    (["apps.controller"], ["--workers", "abc"], ["--workers", "WORKERS", "'abc'"]),
    (["apps.controller"], ["--workers", "0"], ["--workers"]),
    (["apps.controller"], ["--metrics-port", "x"], ["--metrics-port", "'x'"]),
    (["apps.controller"], ["--leader-elect", "maybe"], ["--leader-elect", "'maybe'"]),
    (["apps.controller"], ["--resync-seconds", "soon"], ["--resync-seconds"]),
    (["apps.controller"], ["--log-verbosity", "loud"], ["--log-verbosity"]),
    (["apps.kubeletplugin"], ["--node-name", "n", "--retry-budget-seconds", "abc"],
     ["--retry-budget-seconds", "RETRY_BUDGET_SECONDS"]),
    (["apps.kubeletplugin"], ["--node-name", "n", "--metrics-port", "x"], ["--metrics-port"]),
    (["apps.kubeletplugin"], ["--node-name", "n", "--host-imex-check", "maybe"],
     ["--host-imex-check"]),
    (["apps.kubeletplugin"], [], ["--node-name", "NODE_NAME"]),
    (["apps.gpuplugin"], ["--node-name", "n", "--retry-budget-seconds", "abc"],
     ["--retry-budget-seconds"]),
    (["apps.daemon"], ["run", "--max-nodes-per-imex-domain", "many"],
     ["--max-nodes-per-imex-domain"]),
    (["apps.daemon"], ["run", "--ready-poll-seconds", "x"], ["--ready-poll-seconds"]),
    (["apps.cli", "webhook"], ["--port", "x"], ["--port"]),
    (["apps.cli", "demo"], ["--workers", "abc"], ["--workers"]),
    (["apps.cli", "demo"], ["--workers", "0"], ["--workers"]),
    (["apps.cli", "demo"], ["--workers", "-3"], ["--workers"]),
])
def test_bad_configuration_is_one_line_and_exit_code_2(
    module: list[str], args: list[str], needles: list[str]
) -> None:
    _one_line_config_error(_run(module, *args), *needles)


def test_a_bad_value_from_the_environment_names_the_variable() -> None:
    done = _run(["apps.controller"], env={"WORKERS": "abc"})
    _one_line_config_error(done, "WORKERS", "'abc'")
    done = _run(["apps.controller"], env={"LEADER_ELECT": "maybe"})
    _one_line_config_error(done, "LEADER_ELECT", "'maybe'")


def _options_in_help(text: str) -> list[str]:
    """Each option's help entry (the lines from its `--flag` to the next option)."""
    entries: list[str] = []
    for line in text.splitlines():
        if re.match(r"^\s{1,4}(-\w, )?--[\w-]+", line):
            entries.append(line)
        elif entries and line.startswith(" " * 6):
            entries[-1] += " " + line.strip()
    return entries


@pytest.mark.parametrize("binary", sorted(BINARIES))
def test_every_flag_is_explained_and_names_its_env_var(binary: str) -> None:
    module = BINARIES[binary]
    done = _run(module, "--help")
    assert done.returncode == 0, done.stderr
    entries = [e for e in _options_in_help(done.stdout)
               if not e.strip().startswith(("--help", "-h, --help"))]
    assert entries, done.stdout
    for entry in entries:
        words = entry.split()
        flag = next(w for w in words if w.startswith("--")).rstrip(",")
        rest = entry.split(flag, 1)[1]
        assert len(rest.strip()) > 20, f"{binary} {flag} has no explanation: {entry!r}"
    # NB: the demo's options are its own story, deliberately not read from the environment.
    if binary != "computedomain demo":
        for entry in entries:
            assert "env var:" in entry, f"{binary}: {entry!r} names no env var"


def test_the_controller_help_names_every_env_var_the_chart_sets() -> None:
    done = _run(["apps.controller"], "--help")
    for var in ("NAMESPACE", "FEATURE_GATES", "IMEX_MODE", "IMEX_ISOLATION", "IMEX_CHANNELS_MAX",
                "LOG_VERBOSITY", "POD_NAME", "LEADER_ELECT", "METRICS_PORT", "HEALTH_PORT",
                "DAEMON_IMAGE", "DAEMON_SERVICE_ACCOUNT", "KUBECONFIG", "WORKERS",
                "RESYNC_SECONDS"):
        assert var in done.stdout, var
