"""Gate settings a binary refuses at start, as a real process (issue 19).

A broken upstream dependency rule stops the GPU plugin before it touches the node: exit 2,
one `error:` line naming both gates. (Every gate's feature is built now; the refusal of an
unbuilt one is pinned in tests/unit/config/test_gates_parsing.py.)
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


def _run(module: str, tmp_path: pathlib.Path, gates: str,
         **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "FEATURE_GATES": gates, **extra_env}
    return subprocess.run(
        [
            sys.executable, "-m", module, "--node-name", "node-a",
            "--kubeconfig", str(tmp_path / "absent-kubeconfig"),
            "--plugin-dir", str(tmp_path / "plugin"),
            "--registry-dir", str(tmp_path / "registry"),
        ],
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path, check=False,
    )


def _error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("error: ")]


def test_gpu_plugin_refuses_a_broken_upstream_gate_rule(tmp_path: pathlib.Path) -> None:
    done = _run("apps.gpuplugin", tmp_path, "DynamicMIG=true,MPSSupport=true")
    assert done.returncode == 2, done.stderr
    assert _error_lines(done) == [
        "error: feature gate DynamicMIG=true cannot be combined with MPSSupport=true "
        "(the two are mutually exclusive, as upstream): set one of them to false"
    ]


@pytest.mark.parametrize(
    ("gates", "value", "expected"),
    [
        ("", "4", "error: --consumable-shares=4 (CONSUMABLE_SHARES, Helm consumableShares) "
         "requires feature gate ConsumableShares=true; enable it "
         "(featureGates.ConsumableShares=true) or set --consumable-shares=disabled"),
        ("ConsumableShares=true", "half", "error: invalid value for --consumable-shares "
         "(CONSUMABLE_SHARES, Helm consumableShares): 'half'; it must be 'disabled', 'memory', "
         "'unlimited' or a positive whole number (the shares each GPU is split into)"),
    ],
)
def test_gpu_plugin_refuses_consumable_shares_it_cannot_serve(
    tmp_path: pathlib.Path, gates: str, value: str, expected: str
) -> None:
    done = _run("apps.gpuplugin", tmp_path, gates, CONSUMABLE_SHARES=value)
    assert done.returncode == 2, done.stderr
    assert _error_lines(done) == [expected]
    assert not (tmp_path / "plugin").exists()


def test_gpu_plugin_with_passthrough_refuses_to_start_without_the_host_root(
    tmp_path: pathlib.Path,
) -> None:
    done = _run("apps.gpuplugin", tmp_path, "PassthroughSupport=true",
                HOST_ROOT=str(tmp_path / "no-host-root"))
    assert done.returncode == 2, done.stderr
    [line] = _error_lines(done)
    assert line.startswith("error: feature gate PassthroughSupport=true needs the host's root "
                           f"file system at --host-root (env HOST_ROOT), but {tmp_path}")
    assert not (tmp_path / "plugin").exists()
