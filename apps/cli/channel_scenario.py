"""The demo scenario under channel isolation (hostManaged + isolation: channel).

Two ComputeDomains on one rack: each gets its own IMEX channel from the controller, their pods
share one node through slot devices, and each pod's CDI edits name its own
`/dev/nvidia-caps-imex-channels/channel<N>`. With `imex.channels.max` 3 (two assignable IDs) a
third ComputeDomain reports exhaustion, and gets a channel once one is truly free: its
ComputeDomain gone and its claims too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from adapters.fs import cdi as fs_cdi
from adapters.memory import allocator as memory_allocator
from apps.cli import embedded as embedded_mod
from apps.cli import scenario
from core import errors, kinds, names
from core.computedomain import controlling

NAMESPACE = scenario.NAMESPACE
DOMAINS = ("training-a", "training-b")
THIRD = "training-c"


@dataclasses.dataclass(kw_only=True)
class ChannelReport(scenario.Report):
    """What the channel scenario observed, beside the common report fields."""

    # ComputeDomain name -> status.channelID (None: not assigned).
    channels: dict[str, int | None] = dataclasses.field(default_factory=dict)
    # Pod name -> the device node paths its CDI edits carry.
    device_paths: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    exhausted_condition: str = ""
    exhausted_events: list[str] = dataclasses.field(default_factory=list)
    third_channel_after_free: int | None = None


def run(env: embedded_mod.Embedded, *, say: scenario.Say) -> ChannelReport:
    """Run the two-ComputeDomain scenario and narrate it; returns what was observed."""
    report = ChannelReport()
    cluster = env.cluster
    node_names = sorted(env.nodes)
    slices = cluster.list(kinds.RESOURCE_SLICE.kind).items
    report.slices = len(slices)
    devices = sorted({d["name"] for s in slices for d in s["spec"].get("devices", ())},
                     key=lambda n: (len(n), n))
    say(f"{len(slices)} ResourceSlices published, devices per node: {', '.join(devices)} "
        f"(slots: any ComputeDomain's pod takes one; the channel comes from its claim)")

    # NB: one at a time: the controller's workers run in parallel, and which of two new
    # ComputeDomains takes the lowest free channel would be a race.
    applied = 0
    for name in DOMAINS:
        cluster.create(kinds.COMPUTE_DOMAIN.kind, scenario._cd(name, f"{name}-channel"))
        applied += env.settle()
    for name in DOMAINS:
        report.channels[name] = _channel(env, name)
        rct = cluster.get(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=NAMESPACE,
                          name=f"{name}-channel")
        params = rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
        status = _get(env, name).get("status") or {}
        say(f"ComputeDomain {NAMESPACE}/{name}: status {status.get('status')}, "
            f"status.channelID {report.channels[name]}; its ResourceClaimTemplate asks for one "
            f"{names.SLOT_DEVICE_CLASS} device with channelID {params.get('channelID')}")
    say(f"controller applied {applied} action(s)")

    node = node_names[0]
    scheduled: list[memory_allocator.ScheduledPod] = []
    for cd_name, index in ((DOMAINS[0], 0), (DOMAINS[1], 0), (DOMAINS[0], 1)):
        pod_name = f"{cd_name}-worker-{index}"
        pod = env.allocator.schedule_pod(scenario._pod(pod_name, f"{cd_name}-channel", node=node))
        scheduled.append(pod)
        result = pod.claims[0]["status"]["allocation"]["devices"]["results"][0]
        report.pod_nodes[pod_name] = pod.node_name
        try:
            cdi_ids = scenario._prepare(env, pod, say=say)
        except errors.PermanentError as exc:
            report.prepare_errors[pod_name] = exc.message
            say(f"NodePrepareResources on {node} for {pod_name} failed: {exc.message}")
            continue
        report.prepared[pod_name] = cdi_ids
        report.device_paths[pod_name] = _device_paths(env, pod)
        say(f"pod {pod_name} on {node} (device {result['device']}): CDI device node "
            f"{', '.join(report.device_paths[pod_name])}")

    if env.config.max_channels - 1 <= len(DOMAINS):
        _exhaustion(env, say=say, report=report)

    for pod in scheduled:
        kubelet = env.nodes[pod.node_name].kubelet
        kubelet.unprepare(names.DRIVER_NAME, embedded_mod.claim_refs(pod.claims))
        env.allocator.release_pod(pod.pod)
        cluster.delete(kinds.POD.kind, namespace=NAMESPACE, name=pod.pod["metadata"]["name"])
    say(f"{len(scheduled)} pods deleted, their claims unprepared and deleted")
    # One at a time too: the third ComputeDomain takes the first channel to come free.
    for name in DOMAINS:
        cluster.delete(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name=name)
        env.settle()
    if report.exhausted_condition:
        report.third_channel_after_free = _channel(env, THIRD)
        say(f"ComputeDomain {THIRD} after {', '.join(DOMAINS)} and their claims are gone: "
            f"status.channelID {report.third_channel_after_free}, "
            f"status {(_get(env, THIRD).get('status') or {}).get('status')}")
        cluster.delete(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name=THIRD)
        env.settle()
    report.cd_deleted = all(
        scenario._gone(env, kinds.COMPUTE_DOMAIN.kind, NAMESPACE, n) for n in (*DOMAINS, THIRD)
    )
    report.rct_deleted = all(
        scenario._gone(env, kinds.RESOURCE_CLAIM_TEMPLATE.kind, NAMESPACE, f"{n}-channel")
        for n in (*DOMAINS, THIRD)
    )
    report.leftover_cdi_files, report.leftover_checkpoint_entries = scenario._leftovers(env)
    say(f"ComputeDomains deleted (gone: {report.cd_deleted}); left on {len(env.nodes)} nodes: "
        f"{report.leftover_cdi_files} CDI spec files, "
        f"{report.leftover_checkpoint_entries} checkpoint entries")
    return report


def _exhaustion(env: embedded_mod.Embedded, *, say: scenario.Say, report: ChannelReport) -> None:
    env.cluster.create(kinds.COMPUTE_DOMAIN.kind, scenario._cd(THIRD, f"{THIRD}-channel"))
    env.settle()
    raw = _get(env, THIRD)
    condition = next(
        (c for c in controlling.conditions_from_k8s(raw)
         if c.type == controlling.CHANNEL_ASSIGNED_CONDITION), None
    )
    report.channels[THIRD] = _channel(env, THIRD)
    report.exhausted_condition = (
        f"{condition.type}={condition.status} {condition.reason}" if condition else ""
    )
    rct_exists = not scenario._gone(env, kinds.RESOURCE_CLAIM_TEMPLATE.kind, NAMESPACE,
                                    f"{THIRD}-channel")
    say(f"ComputeDomain {NAMESPACE}/{THIRD} on a full cluster (imex.channels.max "
        f"{env.config.max_channels}): status {(raw.get('status') or {}).get('status')}, "
        f"{report.exhausted_condition}, ResourceClaimTemplate created: {rct_exists}")
    for event in env.cluster.list(kinds.EVENT.kind, namespace=NAMESPACE).items:
        involved = event.get("involvedObject", {})
        if involved.get("name") == THIRD:
            line = f"{event.get('type')} {event.get('reason')}: {event.get('message')}"
            report.exhausted_events.append(line)
            say(f"event: {line}")


def _get(env: embedded_mod.Embedded, name: str) -> dict[str, Any]:
    return dict(env.cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name=name))


def _channel(env: embedded_mod.Embedded, name: str) -> int | None:
    value = (_get(env, name).get("status") or {}).get("channelID")
    return value if isinstance(value, int) else None


def _device_paths(
    env: embedded_mod.Embedded, pod: memory_allocator.ScheduledPod
) -> tuple[str, ...]:
    cdi_dir = fs_cdi.CDIDirectory(env.nodes[pod.node_name].settings.cdi_root)
    spec = cdi_dir.read(names.ClaimUID(pod.claims[0]["metadata"]["uid"]))
    if spec is None:
        return ()
    return tuple(
        f"{n['path']} (major {n.get('major')}, minor {n.get('minor')})"
        for d in spec["devices"] for n in d["containerEdits"].get("deviceNodes", ())
    )
