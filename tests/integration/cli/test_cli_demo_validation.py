"""`computedomain demo` checks what it is given before it starts (issue 17).

Covers: invalid mode/isolation refused before the banner; a `--workdir` it cannot use (a
file, a path too long for unix sockets) refused instead of silently replaced; an H100 node's
"no fabric" outcome explained.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "apps.cli", "demo", *args], capture_output=True, text=True,
        cwd=ROOT, timeout=120, check=False,
    )


def _refused_before_the_banner(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == "", done.stdout  # no banner, no steps
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(("args", "needles"), [
    (["--mode", "sideways"], ["sideways"]),
    (["--mode", "driverManaged", "--isolation", "none"], ["isolation 'none'"]),
    (["--mode", "driverManaged", "--isolation", "channel"], ["channel"]),
    (["--profile", "nope"], ["nope"]),
    (["--channels-max", "1", "--isolation", "channel"], ["2.."]),
])
def test_bad_options_are_refused_before_the_banner(args: list[str], needles: list[str]) -> None:
    _refused_before_the_banner(_demo(*args), *needles)


def test_a_workdir_that_is_a_file_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "f"
    path.write_text("")
    _refused_before_the_banner(_demo("--workdir", str(path)), "--workdir", str(path))


def test_a_workdir_too_long_for_sockets_is_refused_not_replaced(tmp_path: pathlib.Path) -> None:
    long_dir = tmp_path / ("x" * 80)
    _refused_before_the_banner(_demo("--workdir", str(long_dir)), "--workdir", "characters")
    assert not long_dir.exists()


def test_a_short_workdir_is_used_and_kept(tmp_path: pathlib.Path) -> None:
    import tempfile

    short = tempfile.mkdtemp(prefix="cdw-", dir="/tmp")
    done = _demo("--workdir", short, "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert f"node files under {short}" in done.stdout
    assert pathlib.Path(short).is_dir()


def test_an_h100_nodes_no_fabric_outcome_is_explained() -> None:
    done = _demo("--profile", "h100")
    assert done.returncode == 0, done.stderr
    assert "no NVLink fabric" in done.stdout
    assert "expected" in done.stdout
