"""The fault-injection hook and the `make faults` harness, on a few injection points.

Covers: the hook SIGKILLs the process exactly at the n-th hit of its point and traces every
hit; a malformed `CD_DRA_FAULT` stops the process with what to write; the harness kills the
real plugin process, restarts it and judges the node (one point per mode, so CI runs the
whole loop); the summary line and the exit status; mode mps's, mig's and fm's checks, and a
plugin killed between MPS steps, around a MIG device's create or destroy, or around a Fabric
Manager partition's activation or deactivation.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

import pytest

from adapters import fabricmanager
from adapters.fs import _atomic
from adapters.nvml import gpu_simulation
from bench import faults
from core.gpu import devices

pytestmark = pytest.mark.slow

_WRITE_TWICE = (
    "import sys; from adapters.fs import _atomic\n"
    "for i in (1, 2):\n"
    "    _atomic.write_atomically(sys.argv[1], b'v%d' % i, mode=0o600)\n"
)


def _run_writer(target: pathlib.Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in (_atomic.FAULT_ENV, _atomic.FAULT_TRACE_ENV)}
    return subprocess.run(
        [sys.executable, "-c", _WRITE_TWICE, str(target)], env={**clean, **env},
        capture_output=True, text=True, timeout=60, check=False,
    )


def test_the_hook_kills_the_process_right_before_the_nth_hit_of_its_point(
    tmp_path: pathlib.Path,
) -> None:
    target = tmp_path / "checkpoint.json"
    trace = tmp_path / "trace"

    done = _run_writer(target, CD_DRA_FAULT="checkpoint.rename:2", CD_DRA_FAULT_TRACE=str(trace))

    assert done.returncode == -signal.SIGKILL
    assert target.read_bytes() == b"v1", "the first write completed, the second never renamed"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(_atomic.TEMP_SUFFIX)]
    assert len(leftovers) == 1 and leftovers[0].startswith(".checkpoint.json.")
    assert trace.read_text().split() == [
        "checkpoint.tmp-write", "checkpoint.fsync", "checkpoint.rename", "checkpoint.dir-fsync",
        "checkpoint.tmp-write", "checkpoint.fsync", "checkpoint.rename",
    ]


def test_writes_are_untouched_when_no_fault_is_set(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "checkpoint.json"

    done = _run_writer(target)

    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == b"v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.json"]


@pytest.mark.parametrize("setting", ["bogus", "cdi.rename", "cdi.rename:0", "nowhere:1"])
def test_a_malformed_fault_setting_stops_the_process_saying_what_to_write(
    tmp_path: pathlib.Path, setting: str
) -> None:
    done = _run_writer(tmp_path / "checkpoint.json", CD_DRA_FAULT=setting)

    assert done.returncode == 1
    assert f"CD_DRA_FAULT={setting!r} is not <point>:<n> with n >= 1" in done.stderr
    assert "checkpoint.tmp-write" in done.stderr, "the message lists the valid points"


def test_every_fault_point_name_is_accepted() -> None:
    assert [_atomic.parse_fault(f"{p}:3") for p in _atomic.FAULT_POINTS] == [
        (p, 3) for p in _atomic.FAULT_POINTS
    ]


@pytest.mark.parametrize("mode", faults.MODES)
def test_harness_kills_the_plugin_mid_prepare_restarts_it_and_finds_the_node_consistent(
    mode: str,
) -> None:
    lines: list[str] = []

    summary = faults.run_matrix(
        modes=(mode,), operations=(faults.Operation.PREPARE,),
        points=frozenset({"cdi.rename"}), report=lines.append,
    )

    (verdict,) = summary.verdicts
    assert verdict.killed, "the plugin died of the injected SIGKILL"
    assert verdict.consistent, verdict.line()
    assert lines == [f"mode={mode} op=prepare point=cdi.rename hit=1: consistent"]
    assert summary.line() == "faults: 1 injection points x 1 modes, 1 consistent, 0 inconsistent"


def test_the_trace_of_a_prepare_counts_start_up_writes_but_makes_no_case_of_them() -> None:
    hits = ["-checkpoint.rename", "checkpoint.rename", "cdi.rename"]

    cases = list(faults.cases_of("hostManaged", faults.Operation.PREPARE, hits))

    assert [(c.point, c.hit) for c in cases] == [("checkpoint.rename", 2), ("cdi.rename", 1)]
    assert cases[0].fault == "checkpoint.rename:2"


def _verdict(point: str, problems: tuple[str, ...]) -> faults.Verdict:
    case = faults.Case(mode="hostManaged", operation=faults.Operation.UNPREPARE, point=point,
                       hit=1)
    return faults.Verdict(case=case, killed=True, problems=problems)


def test_the_summary_counts_inconsistent_cases_and_main_fails_on_any(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = faults.Summary(
        verdicts=(_verdict("cdi.rename", ()), _verdict("unlinked.dir-fsync", ("lost file",))),
        points=("cdi.rename", "unlinked.dir-fsync"), modes=("hostManaged",),
    )
    monkeypatch.setattr(faults, "run_matrix", lambda **_: summary)

    status = faults.main([])

    assert status == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "faults: 2 injection points x 1 modes, 1 consistent, 1 inconsistent"
    assert _verdict("x", ("a", "b")).line() == (
        "mode=hostManaged op=unprepare point=x hit=1: INCONSISTENT: a; b")


# Two defects of issue 8 (item 4) this harness found, fixed in the plugin (615e9fc): kept as
# regression tests at the exact kill points that showed them.


def test_a_kill_at_the_cdi_delete_of_an_unprepare_leaves_no_answer_without_its_file() -> None:
    case = faults.Case(mode="hostManaged", operation=faults.Operation.UNPREPARE,
                       point=_atomic.CDI_UNLINK, hit=1)

    verdict = faults.run_case(case)

    assert verdict.killed
    assert verdict.consistent, verdict.line()


def test_a_kill_mid_write_leaves_no_temp_file_once_the_plugin_restarted() -> None:
    case = faults.Case(mode="hostManaged", operation=faults.Operation.PREPARE,
                       point="cdi.rename", hit=1)

    verdict = faults.run_case(case)

    assert verdict.killed
    assert verdict.consistent, verdict.line()


def test_a_kill_while_cleaning_a_deleted_claim_at_start_up_still_cleans_it_for_good() -> None:
    case = faults.Case(mode="hostManaged", operation=faults.Operation.CLEANUP,
                       point=_atomic.CDI_UNLINK, hit=1)

    verdict = faults.run_case(case)

    assert verdict.killed
    assert verdict.consistent, verdict.line()


@pytest.mark.parametrize("point", [_atomic.JOURNAL_TRUNCATE, "checkpoint.rename"])
def test_a_kill_while_a_graceful_stop_compacts_the_journal_keeps_every_acked_claim(
    point: str,
) -> None:
    # The stop writes the new snapshot, then empties the journal; a kill at either step
    # leaves records the snapshot already holds, or the old snapshot with its journal.
    hits = faults.trace_operation("hostManaged", faults.Operation.STOP)
    (case, *_) = [c for c in faults.cases_of("hostManaged", faults.Operation.STOP, hits)
                  if c.point == point]

    verdict = faults.run_case(case)

    assert verdict.killed
    assert verdict.consistent, verdict.line()


def test_an_armed_process_refuses_an_unknown_fault_point_name(tmp_path: pathlib.Path) -> None:
    code = ("from adapters.fs import _atomic\n"
            "_atomic.fault_point(_atomic.CDI_UNLINK)\n"
            "_atomic.fault_point('cdi.unlnik')\n")
    clean = {k: v for k, v in os.environ.items() if k != _atomic.FAULT_ENV}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
        env={**clean, _atomic.FAULT_TRACE_ENV: str(tmp_path / "trace")},
    )

    assert done.returncode == 1
    assert "unknown fault point 'cdi.unlnik'" in done.stderr
    assert (tmp_path / "trace").read_text().split() == [_atomic.CDI_UNLINK]


# ---------------------------------------------------------------- mode mps (the GPU plugin)


def test_the_mps_checks_name_a_stray_daemon_a_left_directory_and_an_exclusive_gpu(
    tmp_path: pathlib.Path,
) -> None:
    node = faults.MpsNode(tmp_path, mode=faults.MPS_MODE)
    try:
        assert node.device_problems((), when="fresh") == []
        node.cluster.create("Deployment", {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "mps-control-daemon-u1-abcde",
                         "namespace": faults.DRIVER_NAMESPACE,
                         "labels": {"resource.nvidia.com/claimUID": "u1"}},
            "spec": {"replicas": 0, "template": {"spec": {"containers": [], "volumes": []}}},
        })
        (node.plugin_dir / "mps" / "u1-abcde").mkdir(parents=True)
        smi = pathlib.Path(node.files.nvidia_smi)
        subprocess.run([str(smi), "-i", node.gpu_uuids["gpu-3"], "-c", "EXCLUSIVE_PROCESS"],
                       check=True, capture_output=True)

        problems = node.device_problems((), when="now")
    finally:
        node.close()

    assert problems == [
        "now: daemon Deployment mps-control-daemon-u1-abcde runs for claim u1, not prepared",
        "now: daemon directory u1-abcde of no prepared claim is left",
        "now: gpu-3 is in compute mode EXCLUSIVE_PROCESS, not DEFAULT",
    ]


@pytest.mark.parametrize(("operation", "point", "hit"), [
    # Killed after EXCLUSIVE_PROCESS was set / after the daemon's Deployment was created.
    (faults.Operation.PREPARE, _atomic.MPS_START, 1),
    (faults.Operation.PREPARE, _atomic.MPS_AWAIT, 1),
    # Killed after the daemon was stopped, before DEFAULT was restored.
    (faults.Operation.UNPREPARE, _atomic.COMPUTE_MODE, 2),
])
def test_a_plugin_killed_between_mps_steps_leaves_nothing_once_restarted_and_unprepared(
    operation: faults.Operation, point: str, hit: int,
) -> None:
    case = faults.Case(mode=faults.MPS_MODE, operation=operation, point=point, hit=hit)

    verdict = faults.run_case(case)

    assert verdict.killed
    assert verdict.consistent, verdict.line()


# ---------------------------------------------------------------- mode mig (dynamic MIG)


def test_the_mig_checks_name_a_stray_and_a_missing_mig_device(tmp_path: pathlib.Path) -> None:
    node = faults.MigNode(tmp_path, mode=faults.MIG_MODE)
    try:
        assert "DynamicMIG=true" in node.plugin_args()
        assert "MPSSupport=true" not in node.plugin_args()
        held = node.claim("held")
        assert node.device_problems((), when="fresh") == []
        gpus = gpu_simulation.simulated_gpus(
            faults.GPU_PROFILE, node_name=node.node,
            state_path=gpu_simulation.state_path_in(node.files.driver_root))
        gpus.create_mig_device(devices.MigPlacement(
            parent_minor=5, gi_profile_id=19, placement_start=0))

        problems = node.device_problems((held,), when="now")
    finally:
        node.close()

    assert problems == [
        "now: MIG device gpu-5-mig-1g10gb-19-0 of no prepared claim is left",
        "now: prepared claim's MIG device gpu-0-mig-1g10gb-19-0 is missing",
    ]


@pytest.mark.parametrize(("operation", "point", "hit"), [
    # Killed before the create; after it, before the CDI write; before PrepareCompleted
    # (the third journal append: the start-up's, PrepareStarted's, then this).
    (faults.Operation.PREPARE, _atomic.MIG_CREATE, 1),
    (faults.Operation.PREPARE, "cdi.tmp-write", 1),
    (faults.Operation.PREPARE, "journal.append", 3),
    # Killed before the destroy (the setup's prepare made the first hit); after it, before
    # the checkpoint drops the claim.
    (faults.Operation.UNPREPARE, _atomic.MIG_DESTROY, 2),
    (faults.Operation.UNPREPARE, "journal.append", 4),
    # Killed after a graceful stop's snapshot (version 1), before the journal was emptied:
    # the snapshot alone must still say which MIG devices the claim created.
    (faults.Operation.STOP, "journal.truncate", 1),
])
def test_a_plugin_killed_around_a_mig_create_or_destroy_leaves_exactly_the_prepared_devices(
    operation: faults.Operation, point: str, hit: int,
) -> None:
    case = faults.Case(mode=faults.MIG_MODE, operation=operation, point=point, hit=hit)

    verdict = faults.run_case(case)

    assert verdict.killed
    assert verdict.consistent, verdict.line()


def test_the_fabric_checks_name_a_stray_and_a_missing_partition(tmp_path: pathlib.Path) -> None:
    node = faults.FabricNode(tmp_path, mode=faults.FM_MODE)
    try:
        assert "FabricManagerPartitioning=true" in node.plugin_args()
        held = node.claim("held")  # gpu-0 + gpu-2: partition 4
        assert node.device_problems((), when="fresh") == []
        fabric = fabricmanager.SimulatedFabricManager(
            state_path=fabricmanager.state_path_in(node.files.driver_root))
        fabric.activate(7)

        problems = node.device_problems((held,), when="now")
    finally:
        node.close()

    assert problems == [
        "now: partition 7 of no prepared claim is active",
        "now: prepared claim's partition 4 is not active",
    ]


@pytest.mark.parametrize(("operation", "point", "hit"), [
    # Killed before the activation; after it, before the CDI write and PrepareCompleted.
    (faults.Operation.PREPARE, _atomic.FM_ACTIVATE, 1),
    (faults.Operation.PREPARE, _atomic.FM_ACTIVATED, 1),
    # Killed before the deactivation; after it, before the checkpoint drops the claim.
    (faults.Operation.UNPREPARE, _atomic.FM_DEACTIVATE, 1),
    (faults.Operation.UNPREPARE, "journal.append", 4),
])
def test_a_plugin_killed_around_a_partition_activation_leaves_exactly_the_prepared_partitions(
    operation: faults.Operation, point: str, hit: int,
) -> None:
    case = faults.Case(mode=faults.FM_MODE, operation=operation, point=point, hit=hit)

    verdict = faults.run_case(case)

    assert verdict.killed
    assert verdict.consistent, verdict.line()
