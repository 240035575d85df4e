"""`python -m bench --only-health --quick`: the GPU health figures (issue 22).

Covers: the flag runs that section alone and writes a result file holding the event -> taint
published latency and the prepare latency with 64 health streams open and with none, each
with its p50/p99/n, and the ratio of the two prepares. No timing is asserted.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_only_health_quick_reports_both_figures(tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only-health", "--quick", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=170, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "latest.json").read_text(encoding="utf-8"))
    assert set(results) - {"gpu_health"} == {
        "when", "load_average_at_start", "load_average_at_end", "machine", "total_seconds"}
    figure = results["gpu_health"]
    assert figure["health_streams_open"] == 64
    for name in ("event_to_taint_published", "none_prepare", "streams_64_prepare"):
        assert figure[name]["n"] == 20
        assert figure[name]["p99_ms"] >= figure[name]["p50_ms"] > 0
    assert figure["prepare_streams_64_p50_over_none_p50"] > 0
    assert figure["prepare_streams_64_p99_over_none_p99"] > 0
