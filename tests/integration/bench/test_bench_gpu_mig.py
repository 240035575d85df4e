"""`python -m bench --only-mig`'s figure: dynamic MIG prepare vs full-GPU prepare, slice sizes.

Covers: a short run reports both sides' p50/p99/n and their ratio, leaves no MIG device in
the simulated NVML, and the 8-GPU node's slices with the gate hold the counter sets and the
partitions beside the 8 full GPUs.
"""

from __future__ import annotations

from bench import gpu


def test_a_short_mig_run_reports_both_sides_and_the_slice_sizes() -> None:
    figure = gpu.mig_vs_full_gpu(samples=3)
    for side in ("mig_prepare", "full_gpu_prepare", "mig_unprepare", "full_gpu_unprepare"):
        assert figure[side]["n"] == 3 and figure[side]["p99_ms"] >= figure[side]["p50_ms"] > 0
    assert figure["mig_prepare_p50_over_full_gpu_prepare_p50"] > 0
    without, with_gate = figure["slice_size_without_gate"], figure["slice_size_with_dynamic_mig"]
    assert (without["devices"], without["counter_sets"]) == (8, 0)
    assert with_gate["counter_sets"] == 8 and with_gate["devices"] > without["devices"]
    assert with_gate["bytes_compact_json"] > without["bytes_compact_json"]
