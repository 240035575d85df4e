"""`make bench`: run every scenario and write bench/results/<utc>.json (+ latest.json)."""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import sys
import tempfile
import time

from bench import (
    binding_conditions,
    channel_assignment,
    controller_latency,
    controller_watch,
    controlplane,
    daemon_domain,
    gpu,
    realkube_controller,
    scenarios,
)

_HEALTH_TITLE = (f"GPU half: health event -> taint published; prepare with "
                 f"{gpu.HEALTH_STREAMS} health streams open vs none (alternating blocks) ...")
_FABRIC_TITLE = ("GPU half: 4-GPU prepare with its Fabric Manager partition activated vs "
                 "without (interleaved) ...")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--backlog", type=int, default=2048, help="claims held, middle level")
    parser.add_argument("--only-plugin", action="store_true",
                        help="plugin figures only (with embedded CD -> RCT and IMEX daemons)")
    parser.add_argument("--only-gpu", action="store_true", help="GPU half's figures only")
    parser.add_argument("--only-mps", action="store_true",
                        help="the MPS prepare vs full-GPU prepare figure only")
    parser.add_argument("--only-mig", action="store_true",
                        help="the dynamic MIG prepare vs full-GPU prepare figure only")
    parser.add_argument("--only-fabric", action="store_true",
                        help="the 4-GPU Fabric Manager partitioned prepare vs unpartitioned "
                             "4-GPU prepare figure only")
    parser.add_argument("--only-health", action="store_true",
                        help="the GPU health figures only: event -> taint published, prepare "
                             "with 64 health streams open vs none")
    parser.add_argument("--only-controlplane", action="store_true",
                        help="the real control plane's figures only")
    parser.add_argument("--only-binding", action="store_true",
                        help="workload pod -> Running with gate ComputeDomainBindingConditions "
                             "on vs off (real control plane, KUBE_LATEST) only")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    samples = 20 if args.quick else args.samples
    levels = (1, 64, 256) if args.quick else (1, args.backlog, 10_000)
    batch = 50 if args.quick else 500
    sizes = (10, 100) if args.quick else (10, 1_000, 10_000)
    started = time.time()
    results: dict[str, object] = {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_average_at_start": os.getloadavg(),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform()},
    }
    # NB: each --only-* runs its own section and nothing before it.
    if args.only_mps:
        print("GPU half: MPS prepare (daemon Ready) vs full-GPU prepare (interleaved) ...",
              flush=True)
        results["gpu_mps_vs_full_gpu"] = gpu.mps_vs_full_gpu(samples=samples)
        return _write(results, started, args.out)
    if args.only_mig:
        print("GPU half: dynamic MIG prepare (device created) vs full-GPU prepare "
              "(interleaved), slice sizes ...", flush=True)
        results["gpu_mig_vs_full_gpu"] = gpu.mig_vs_full_gpu(samples=samples)
        return _write(results, started, args.out)
    if args.only_fabric:
        print(_FABRIC_TITLE, flush=True)
        results["gpu_fabric_partition_vs_four_gpus"] = gpu.fabric_partition_vs_full_gpus(
            samples=samples)
        return _write(results, started, args.out)
    if args.only_health:
        print(_HEALTH_TITLE, flush=True)
        results["gpu_health"] = gpu.health(samples=samples)
        return _write(results, started, args.out)
    if not (args.only_plugin or args.only_gpu or args.only_binding):
        print("real control plane: pod -> Running, CD -> workload Running, node release ...",
              flush=True)
        results["controlplane"] = controlplane.run(gpu_runs=3 if args.quick else 20,
                                                   cd_runs=3 if args.quick else 10)
    if not (args.only_plugin or args.only_gpu or args.only_controlplane):
        print("real control plane: workload pod -> Running, gate ComputeDomainBindingConditions "
              "on vs off (interleaved) ...", flush=True)
        results["binding_conditions"] = binding_conditions.run(runs=3 if args.quick else 10)
    if args.only_binding:
        return _write(results, started, args.out)
    if args.only_controlplane:
        return _write(results, started, args.out)
    if not args.only_plugin:
        with tempfile.TemporaryDirectory(prefix="cd-bench-", dir=os.getcwd()) as tmp:
            print("GPU half: full-GPU prepare vs channel prepare (interleaved) ...", flush=True)
            results["gpu_prepare_vs_channel"] = gpu.prepare_vs_channel(
                os.path.join(tmp, "gpu"), samples=samples)
            print("GPU half: gpu-kubelet-plugin spawn -> ResourceSlice present ...", flush=True)
            results["gpu_start_to_slice"] = gpu.start_to_slice(runs=5 if args.quick else 20)
            print("GPU half: consumable-share prepare vs full-GPU prepare (interleaved) ...",
                  flush=True)
            results["gpu_consumable_share_vs_full_gpu"] = gpu.consumable_share_vs_full_gpu(
                samples=samples)
            print("GPU half: MPS prepare (daemon Ready) vs full-GPU prepare (interleaved) ...",
                  flush=True)
            results["gpu_mps_vs_full_gpu"] = gpu.mps_vs_full_gpu(samples=samples)
            print("GPU half: dynamic MIG prepare (device created) vs full-GPU prepare "
                  "(interleaved), slice sizes ...", flush=True)
            results["gpu_mig_vs_full_gpu"] = gpu.mig_vs_full_gpu(samples=samples)
            print(_FABRIC_TITLE, flush=True)
            results["gpu_fabric_partition_vs_four_gpus"] = gpu.fabric_partition_vs_full_gpus(
                samples=samples)
            print(_HEALTH_TITLE, flush=True)
            results["gpu_health"] = gpu.health(samples=samples)
    if args.only_gpu:
        return _write(results, started, args.out)
    with tempfile.TemporaryDirectory(prefix="cd-bench-", dir=os.getcwd()) as tmp:
        print(f"prepare/unprepare latency with {', '.join(map(str, levels))} claims held ...",
              flush=True)
        results["plugin_latency"] = scenarios.plugin_latency(
            os.path.join(tmp, "latency"), samples=samples, held_levels=levels)
        print("checkpoint store designs, one changed entry ...", flush=True)
        results["checkpoint_store_options"] = scenarios.checkpoint_store_options(
            os.path.join(tmp, "stores"), sizes=levels, samples=20 if args.quick else 100)
        print(f"{batch} claims in one NodePrepareResources call ...", flush=True)
        results["plugin_batch_prepare"] = scenarios.batch_prepare(
            os.path.join(tmp, "batch"), claims=batch)
        print("plugin cold start ...", flush=True)
        results["plugin_cold_start"] = {
            **scenarios.cold_start(os.path.join(tmp, "cold"), runs=10),
            **scenarios.process_cold_start(os.path.join(tmp, "proc"),
                                           runs=5 if args.quick else 20),
        }
        print("ComputeDomain -> ResourceClaimTemplate ...", flush=True)
        results["cd_to_rct_latency"] = scenarios.cd_to_rct(os.path.join(tmp, "cd"), runs=20)
        print("IMEX daemons forming a domain ...", flush=True)
        results["imex_daemons"] = daemon_domain.run_all(
            os.path.join(tmp, "daemons"), quick=args.quick)
    if args.only_plugin:
        return _write(results, started, args.out)
    print("controller: CD -> RCT with 1 / 2,000 live CDs, one failing, list calls ...", flush=True)
    # NB: 1,000 samples: a p99 of 200 is the second-worst sample, mostly GC and scheduling noise.
    results["controller_queue"] = controller_latency.controller_bench(
        runs=50 if args.quick else 1000, live=200 if args.quick else 2000)
    print("channel isolation: assignment and CD -> Ready with 2,000 live CDs ...", flush=True)
    results["channel_isolation"] = channel_assignment.run(
        live=200 if args.quick else 2000, runs=50 if args.quick else 200)
    print("controller RSS and watch bytes with 10,000 foreign objects per kind ...", flush=True)
    results["controller_foreign_objects"] = controller_watch.foreign_objects(
        foreign=1_000 if args.quick else 10_000)
    print("ComputeDomain -> ResourceClaimTemplate on a real kube-apiserver ...", flush=True)
    results["cd_to_rct_real_apiserver"] = realkube_controller.cd_to_rct_on_real_server(
        one_at_a_time=10 if args.quick else 50, burst=20 if args.quick else 200)
    print("controller planning throughput ...", flush=True)
    results["controller_planning"] = scenarios.planning_throughput(sizes)
    return _write(results, started, args.out)


def _write(results: dict[str, object], started: float, out: str) -> int:
    results["load_average_at_end"] = os.getloadavg()
    results["total_seconds"] = round(time.time() - started, 1)
    os.makedirs(out, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    text = json.dumps(results, indent=2, sort_keys=True)
    for name in (f"{stamp}.json", "latest.json"):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
