"""`computedomain plan` is trustworthy (issue 17).

Covers: missing, malformed and directory inputs (one `error:` line, exit 2); input without a
ComputeDomain (said so, non-zero); planning to a fixpoint (channel isolation prints the
template with its channel); refusals (`Admitted=False`: stderr, exit 1) and overrides
(stderr, exit 0); `--daemon-image` defaulting to the chart's; a missing namespace defaulting
like kubectl; `| head` ending quietly.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
HOST_CHANNEL = ("--imex-mode", "hostManaged", "--imex-isolation", "channel",
                "--feature-gates", "HostManagedIMEXDaemon=true")


def _cd(name: str = "training", *, namespace: str | None = "ml", rct: str | None = None,
        mode: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    channel: dict[str, Any] = {"resourceClaimTemplate": {"name": rct or f"{name}-channel"}}
    if mode:
        channel["allocationMode"] = mode
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
            "metadata": meta, "spec": {"numNodes": 0, "channel": channel}}


def _plan(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "apps.cli", "plan", *args], capture_output=True, text=True,
        cwd=ROOT, input=stdin, timeout=60, check=False,
    )


def _write(tmp_path: pathlib.Path, *docs: dict[str, Any]) -> str:
    path = tmp_path / "cds.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def _one_error(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_missing_file_is_one_line(tmp_path: pathlib.Path) -> None:
    _one_error(_plan(str(tmp_path / "nope.yaml")), 2, "nope.yaml", "no such file")


def test_a_directory_is_one_line(tmp_path: pathlib.Path) -> None:
    _one_error(_plan(str(tmp_path)), 2, str(tmp_path), "directory")


def test_malformed_yaml_is_one_line_with_its_place(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kind: ComputeDomain\nmetadata: {name: [\n")
    _one_error(_plan(str(path)), 2, "bad.yaml", "line")


def test_input_without_a_compute_domain_says_so(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    done = _plan(str(path))
    assert done.returncode != 0
    assert "no ComputeDomain" in done.stderr
    assert done.stdout == ""


def test_under_channel_isolation_it_plans_to_a_fixpoint(tmp_path: pathlib.Path) -> None:
    done = _plan(*HOST_CHANNEL, _write(tmp_path, _cd("a"), _cd("b")))
    assert done.returncode == 0, done.stderr
    objects = list(yaml.safe_load_all(done.stdout))
    assert [o["kind"] for o in objects] == ["ResourceClaimTemplate", "ResourceClaimTemplate"]
    channels = [o["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
                for o in objects]
    assert len({str(c) for c in channels}) == 2  # each ComputeDomain its own channel


def test_a_refusal_goes_to_stderr_with_exit_1(tmp_path: pathlib.Path) -> None:
    done = _plan(_write(tmp_path, _cd("good"), _cd("bad", rct="Not_A_Name")))
    assert done.returncode == 1, done.stderr
    assert "Admitted=False" in done.stderr and "ml/bad" in done.stderr
    made = list(yaml.safe_load_all(done.stdout))
    assert all("bad" not in o["metadata"]["name"] for o in made if o)
    assert any(o["metadata"]["name"] == "good-channel" for o in made)


def test_an_override_goes_to_stderr_and_is_not_a_failure(tmp_path: pathlib.Path) -> None:
    done = _plan("--imex-mode", "hostManaged", "--imex-isolation", "none",
                 "--feature-gates", "HostManagedIMEXDaemon=true", _write(tmp_path, _cd(mode="All")))
    assert done.returncode == 0, done.stderr
    assert "allocationMode" in done.stderr and "Single" in done.stderr
    assert "allocationMode" not in done.stdout.split("parameters:")[0]


def test_the_daemon_image_defaults_to_the_charts(tmp_path: pathlib.Path) -> None:
    chart = yaml.safe_load((ROOT / "helm/nvidia-dra-driver/Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "helm/nvidia-dra-driver/values.yaml").read_text())
    expected = f"{values['image']['repository']}:{values['image']['tag'] or chart['appVersion']}"
    done = _plan("--imex-mode", "driverManaged", _write(tmp_path, _cd()))
    assert done.returncode == 0, done.stderr
    (ds,) = [o for o in yaml.safe_load_all(done.stdout) if o["kind"] == "DaemonSet"]
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == expected
    done = _plan("--daemon-image", "example/imex:1", _write(tmp_path, _cd()))
    (ds,) = [o for o in yaml.safe_load_all(done.stdout) if o["kind"] == "DaemonSet"]
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == "example/imex:1"


def test_a_missing_namespace_defaults_like_kubectl(tmp_path: pathlib.Path) -> None:
    done = _plan("--imex-mode", "driverManaged", _write(tmp_path, _cd(namespace=None)))
    assert done.returncode == 0, done.stderr
    rcts = [o for o in yaml.safe_load_all(done.stdout)
            if o["kind"] == "ResourceClaimTemplate" and o["metadata"]["name"] == "training-channel"]
    assert [o["metadata"]["namespace"] for o in rcts] == ["default"]


def test_piping_into_head_ends_quietly(tmp_path: pathlib.Path) -> None:
    path = _write(tmp_path, *(_cd(f"cd-{i}") for i in range(300)))
    with subprocess.Popen(
        [sys.executable, "-m", "apps.cli", "plan", "--imex-mode", "driverManaged", path],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=60)
    assert err == "" and code == 0, (code, err)
