"""`python -m bench --only-fabric`'s figure: a 4-GPU prepare that activates its Fabric Manager
partition vs the same 4-GPU prepare without the gate.

Covers: a short run reports both sides' p50/p99/n and their ratios, and leaves no partition
active in the simulated Fabric Manager.
"""

from __future__ import annotations

from bench import gpu


def test_a_short_fabric_run_reports_both_sides_and_their_ratio() -> None:
    figure = gpu.fabric_partition_vs_full_gpus(samples=3)
    for side in ("partitioned_prepare", "four_gpus_prepare", "partitioned_unprepare",
                 "four_gpus_unprepare"):
        assert figure[side]["n"] == 3 and figure[side]["p99_ms"] >= figure[side]["p50_ms"] > 0
    assert figure["partitioned_prepare_p50_over_four_gpus_prepare_p50"] > 0
    assert figure["devices"] == ["gpu-0", "gpu-1", "gpu-4", "gpu-5"]
