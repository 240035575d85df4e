"""`computedomain demo`: the embedded default, narrated for a person."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence

from adapters.nvml import simulated
from apps.cli import channel_scenario, embedded, gpu_demo, scenario
from apps.shell import flags, logs
from core import errors

COMMAND = flags.command(
    "computedomain demo",
    help="Run a ComputeDomain end to end on an in-memory cluster (no cluster, no GPU). Its "
    "options are the demo's own: no environment variable changes it.",
    params=[
        flags.option("--profile", default="gb200-nvl72",
                     help="simulated nodes: " + " | ".join(simulated.PROFILES)
                     + " (ComputeDomains); " + " | ".join(gpu_demo.gpu_profiles())
                     + " (the GPU half, gpu.nvidia.com)"),
        flags.option("--imex-mode", "--mode", default="hostManaged",
                     help="IMEX mode: hostManaged or driverManaged"),
        flags.option("--imex-isolation", "--isolation", default="",
                     help="none | channel (hostManaged; empty: none, the demo's story) | "
                     "domain (driverManaged)"),
        flags.option("--imex-channels-max", "--channels-max", type=flags.WHOLE, default="2048",
                     help="isolation channel: channel IDs 1..max-1 (3 shows exhaustion)"),
        flags.option("--workers", type=flags.WHOLE_ABOVE_0, default="4",
                     help="workload pods to run (at most one per node is placed)"),
        flags.option("--workdir", default="",
                     help="keep node files in this directory (at most "
                     f"{embedded.MAX_WORKDIR_LEN} characters; default: a temporary one)"),
    ],
)


def main(argv: Sequence[str], *, env: Mapping[str, str], verbosity: int | None = None) -> int:
    args = flags.parse_namespace(COMMAND, argv, env)
    logs.configure(verbosity)
    return run(args, env=env)


def run(args: argparse.Namespace, *, env: Mapping[str, str]) -> int:
    # NB: everything is checked before the banner: a refused demo prints no step.
    try:
        embedded.check_workdir(args.workdir)
        if args.profile in gpu_demo.gpu_profiles():
            return gpu_demo.run(args.profile, workdir=args.workdir)
        if args.profile not in simulated.PROFILES:
            raise errors.ConfigError(
                f"unknown demo profile {args.profile!r}; ComputeDomain profiles: "
                f"{', '.join(simulated.PROFILES)}; GPU profiles: "
                f"{', '.join(gpu_demo.gpu_profiles())}")
        embedded.resolve_config(mode=args.imex_mode, isolation=args.imex_isolation,
                                max_channels=args.imex_channels_max)
    except errors.ConfigError as exc:
        flags.fail(exc.message)
    started = time.monotonic()
    step = 0

    def say(line: str) -> None:
        nonlocal step
        if line.startswith("  "):
            print(f"        {line.strip()}", flush=True)
            return
        step += 1
        print(f"[{step:2d}] {time.monotonic() - started:5.2f}s  {line}", flush=True)

    # NB: the demo's own default story is host channel 0 shared (isolation none);
    # `--isolation channel` shows one IMEX channel per ComputeDomain.
    shown = args.imex_isolation or (
        "none (the demo's default)" if args.imex_mode == "hostManaged" else "domain")
    print(f"ComputeDomain DRA driver demo: profile={args.profile} mode={args.imex_mode} "
          f"isolation={shown}", flush=True)
    try:
        with embedded.running(
            workdir=args.workdir, profile=args.profile, mode=args.imex_mode,
            isolation=args.imex_isolation, max_channels=args.imex_channels_max,
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
