"""`computedomain demo`: the embedded default, narrated for a person."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from typing import Any

from adapters.nvml import simulated
from apps.cli import channel_scenario, embedded, gpu_demo, scenario
from core import errors


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "demo", help="run a ComputeDomain end to end on an in-memory cluster (no cluster, no GPU)"
    )
    parser.add_argument("--profile", default="gb200-nvl72",
                        help="gb200-nvl72 | gb200-2racks | h100 (ComputeDomains); "
                        "hgx-h100 | a100-mig | gb200 (the GPU half, gpu.nvidia.com)")
    parser.add_argument("--mode", default="hostManaged", help="hostManaged | driverManaged")
    parser.add_argument(
        "--isolation", default="",
        help="none | channel (hostManaged) | domain (driverManaged)",
    )
    parser.add_argument("--channels-max", type=int, default=2048,
                        help="isolation channel: channel IDs 1..max-1 (3 shows exhaustion)")
    parser.add_argument("--workers", type=int, default=4, help="workload pods to run")
    parser.add_argument("--workdir", default="", help="keep node files here (default: temp dir)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, *, env: Mapping[str, str]) -> int:
    if args.profile in gpu_demo.gpu_profiles():
        return gpu_demo.run(args.profile, workdir=args.workdir)
    if args.profile not in simulated.PROFILES:
        print(f"error: unknown demo profile {args.profile!r}; ComputeDomain profiles: "
              f"{', '.join(simulated.PROFILES)}; GPU profiles: "
              f"{', '.join(gpu_demo.gpu_profiles())}", file=sys.stderr)
        return 2
    started = time.monotonic()
    step = 0

    def say(line: str) -> None:
        nonlocal step
        if line.startswith("  "):
            print(f"        {line.strip()}", flush=True)
            return
        step += 1
        print(f"[{step:2d}] {time.monotonic() - started:5.2f}s  {line}", flush=True)

    # NB: the demo's own default story is host channel 0 shared (isolation none); the driver's
    # default under hostManaged is channel isolation (`--isolation channel` shows it).
    shown = args.isolation or ("none (the demo's default)" if args.mode == "hostManaged"
                               else "domain")
    print(f"ComputeDomain DRA driver demo: profile={args.profile} mode={args.mode} "
          f"isolation={shown}", flush=True)
    try:
        with embedded.running(
            workdir=args.workdir, profile=args.profile, mode=args.mode, isolation=args.isolation,
            max_channels=args.channels_max,
        ) as deployment:
            say(f"started in-memory cluster, controller and {len(deployment.nodes)} kubelet "
                f"plugins (real gRPC over unix sockets; node files under {deployment.workdir})")
            report: scenario.Report
            if deployment.config.channel_isolation:
                report = channel_scenario.run(deployment, say=say)
            else:
                report = scenario.run(deployment, say=say, workers=args.workers)
    except (errors.DriverError, ValueError) as exc:
        message = getattr(exc, "message", str(exc))
        print(f"error: {message}", file=sys.stderr)
        return 1
    ok = report.leftover_cdi_files == 0 and report.leftover_checkpoint_entries == 0
    print(f"done in {time.monotonic() - started:.1f}s: "
          f"{len(report.prepared)} workload(s) prepared, {len(report.prepare_errors)} refused, "
          f"{'clean' if ok else 'NOT clean'}", flush=True)
    return 0 if ok else 1
