"""The demo scenario: one ComputeDomain's whole life on the embedded deployment.

It drives the system the way a cluster would (API objects in, kubelet calls out) and only
*observes* the driver's answers, so the same function is the demo and an end-to-end test.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from adapters.memory import allocator as memory_allocator
from apps.cli import daemon_fleet
from apps.cli import embedded as embedded_mod
from core import errors, kinds, models, names
from core.computedomain import checkpoint_records as cd_records

Say = Callable[[str], None]
NAMESPACE = "demo"
CD_NAME = "training"
RCT_NAME = "training-channel"


@dataclasses.dataclass(kw_only=True)
class Report:
    """What the scenario observed (asserted by tests, summarised by the demo)."""

    clique_ids: dict[str, str] = dataclasses.field(default_factory=dict)
    slices: int = 0
    cd_status_after_create: str = ""
    rct_created: bool = False
    prepared: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    pod_nodes: dict[str, str] = dataclasses.field(default_factory=dict)
    cdi_device_nodes: list[Mapping[str, Any]] = dataclasses.field(default_factory=list)
    prepare_errors: dict[str, str] = dataclasses.field(default_factory=dict)
    schedule_errors: dict[str, str] = dataclasses.field(default_factory=dict)
    negative_error: str = ""
    negative_events: list[str] = dataclasses.field(default_factory=list)
    cd_deleted: bool = False
    rct_deleted: bool = False
    leftover_cdi_files: int = 0
    leftover_checkpoint_entries: int = 0
    seconds: float = 0.0


def _cd(name: str, rct: str) -> dict[str, Any]:
    return {
        "apiVersion": names.GROUP_VERSION,
        "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": rct}}},
    }


def _pod(name: str, template: str, *, namespace: str = NAMESPACE, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                "resources": {"claims": [{"name": "imex-channel"}]},
            }
        ],
        "resourceClaims": [{"name": "imex-channel", "resourceClaimTemplateName": template}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


def _user_rct_all_channels(cd_uid: str) -> dict[str, Any]:
    """A hand-written template asking for every channel: invalid with host-managed IMEX."""
    return {
        "apiVersion": names.DRA_GROUP_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "all-channels", "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "channel", "exactly": {
                "deviceClassName": names.CHANNEL_DEVICE_CLASS}}],
            "config": [{"requests": ["channel"], "opaque": {
                "driver": names.DRIVER_NAME,
                "parameters": {
                    "apiVersion": names.GROUP_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
                    "domainID": cd_uid, "allocationMode": "All",
                },
            }}],
        }}},
    }


def _user_rct_unknown_domain() -> dict[str, Any]:
    rct = _user_rct_all_channels("00000000-0000-0000-0000-00000000dead")
    rct["metadata"]["name"] = "unknown-domain"
    params = rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    params.pop("allocationMode")
    return rct


def _no_fabric_note(nodes: list[str], *, host_managed: bool) -> str:
    """Why nothing runs on nodes without an NVLink fabric (an H100 node): expected, not a bug."""
    shown = ", ".join(nodes[:3]) + (f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")
    effect = (
        "a host-managed node without a clique publishes no IMEX channel device, so the "
        "ComputeDomain's pods cannot be placed there"
        if host_managed else
        "its IMEX daemon stays idle, so the ComputeDomain's pods get no IMEX domain there"
    )
    return (f"  {shown}: no NVLink fabric (NVML reports the fabric as not supported, as on an "
            f"H100 without NVSwitch/MNNVL), so no NVLink clique; {effect}. This is the expected "
            "outcome: ComputeDomains need a Multi-Node NVLink fabric (try --profile gb200-nvl72)")


def run(env: embedded_mod.Embedded, *, say: Say, workers: int = 4) -> Report:
    """Run the scenario and narrate it; returns what was observed."""
    started = time.monotonic()
    report = Report()
    cluster = env.cluster
    node_names = sorted(env.nodes)
    for node in node_names:
        report.clique_ids[node] = env.nodes[node].plugin.node.clique_id
    cliques = sorted({c for c in report.clique_ids.values()})
    say(f"{len(node_names)} nodes simulated; NVLink clique(s): "
        + (", ".join(c or "<none>" for c in cliques)))
    for note in env.notes:
        say(f"config: {note}")
    registered = sum(1 for n in env.nodes.values() if names.DRIVER_NAME in n.kubelet.plugins)
    say(f"{registered} kubelet plugins registered through "
        f"plugins_registry/{names.REGISTRATION_SOCKET_NAME} (v1.DRAPlugin)")
    slices = cluster.list(kinds.RESOURCE_SLICE.kind).items
    report.slices = len(slices)
    devices = sorted({d["name"] for s in slices for d in s["spec"].get("devices", ())})
    say(f"{len(slices)} ResourceSlices published, devices per node: {', '.join(devices)}")
    fabricless = [node for node in node_names if not report.clique_ids[node]]
    if fabricless:
        say(_no_fabric_note(fabricless, host_managed=env.config.host_managed))

    # -- a ComputeDomain and its template
    cluster.create(kinds.COMPUTE_DOMAIN.kind, _cd(CD_NAME, RCT_NAME))
    say(f"created ComputeDomain {NAMESPACE}/{CD_NAME} (numNodes 0, template {RCT_NAME})")
    applied = env.settle()
    cd = cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name=CD_NAME)
    cd_uid = cd["metadata"]["uid"]
    report.cd_status_after_create = (cd.get("status") or {}).get("status", "")
    rct = cluster.get(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=NAMESPACE, name=RCT_NAME)
    report.rct_created = True
    opaque = rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    say(f"controller applied {applied} action(s): finalizer {cd['metadata'].get('finalizers')}, "
        f"ResourceClaimTemplate {NAMESPACE}/{RCT_NAME} (domainID {opaque['domainID'][:8]}..., "
        f"allocationMode {opaque.get('allocationMode', '')}), "
        f"status {report.cd_status_after_create}")

    # -- workload pods: claims allocated by CEL selectors, prepared over gRPC
    scheduled: list[memory_allocator.ScheduledPod] = []
    # One channel-0 per node: leave a node free for the negative case when there is one.
    for i in range(min(workers, max(1, len(node_names) - 1))):
        try:
            pod = env.allocator.schedule_pod(_pod(f"worker-{i}", RCT_NAME))
        except memory_allocator.AllocationError as exc:
            # E.g. a host-managed node without an NVLink clique publishes no channel device.
            report.schedule_errors[f"worker-{i}"] = str(exc)
            say(f"pod {NAMESPACE}/worker-{i} cannot be scheduled: {exc}")
            continue
        scheduled.append(pod)
        claim = pod.claims[0]
        result = claim["status"]["allocation"]["devices"]["results"][0]
        report.pod_nodes[pod.pod["metadata"]["name"]] = pod.node_name
        say(f"pod {NAMESPACE}/worker-{i}: claim {claim['metadata']['name']} allocated "
            f"{result['device']} on {pod.node_name}")
    for pod in scheduled:
        name = pod.pod["metadata"]["name"]
        try:
            cdi_ids = _prepare(env, pod, say=say)
        except errors.PermanentError as exc:
            report.prepare_errors[name] = exc.message
            say(f"NodePrepareResources on {pod.node_name} for {name} failed: {exc.message}")
            continue
        report.prepared[name] = cdi_ids
        say(f"NodePrepareResources on {pod.node_name} for {name}: {', '.join(cdi_ids)}")
    if report.prepared:
        _show_cdi_edits(env, scheduled[0], say=say, report=report)

    # -- the negative case
    if len(node_names) > len(scheduled) and not report.schedule_errors:
        _negative_case(env, cd_uid=cd_uid, say=say, report=report)

    # -- clean-up: pods go, claims are unprepared, the CD is deleted
    for pod in scheduled:
        kubelet = env.nodes[pod.node_name].kubelet
        results = kubelet.unprepare(names.DRIVER_NAME, embedded_mod.claim_refs(pod.claims))
        failed = [r.error for r in results.values() if r.error]
        if failed:
            raise errors.RetryableError(f"unprepare failed: {failed}")
        env.allocator.release_pod(pod.pod)
        cluster.delete(kinds.POD.kind, namespace=NAMESPACE, name=pod.pod["metadata"]["name"])
    say(f"{len(scheduled)} pods deleted; NodeUnprepareResources removed their CDI specs")
    _stop_daemons(env, cd_uid=cd_uid)
    # The controller's answer to the pods and daemons going (status updates) first, so the
    # count below is its answer to the deletion alone.
    env.settle()
    cluster.delete(kinds.COMPUTE_DOMAIN.kind, namespace=NAMESPACE, name=CD_NAME)
    applied = env.settle()
    report.cd_deleted = _gone(env, kinds.COMPUTE_DOMAIN.kind, NAMESPACE, CD_NAME)
    report.rct_deleted = _gone(env, kinds.RESOURCE_CLAIM_TEMPLATE.kind, NAMESPACE, RCT_NAME)
    say(f"ComputeDomain deleted: controller applied {applied} action(s); template gone: "
        f"{report.rct_deleted}; ComputeDomain gone: {report.cd_deleted}")
    report.leftover_cdi_files, report.leftover_checkpoint_entries = _leftovers(env)
    say(f"left on {len(env.nodes)} nodes: {report.leftover_cdi_files} CDI spec files, "
        f"{report.leftover_checkpoint_entries} checkpoint entries")
    report.seconds = time.monotonic() - started
    return report


def _show_cdi_edits(
    env: embedded_mod.Embedded, pod: memory_allocator.ScheduledPod, *, say: Say, report: Report
) -> None:
    cdi_dir = fs_cdi.CDIDirectory(env.nodes[pod.node_name].settings.cdi_root)
    spec = cdi_dir.read(names.ClaimUID(pod.claims[0]["metadata"]["uid"]))
    if spec is None:
        return
    for device in spec["devices"]:
        report.cdi_device_nodes.extend(device["containerEdits"].get("deviceNodes", ()))
    say(f"CDI edits a container of {pod.pod['metadata']['name']} gets: " + json.dumps(
        {"cdiVersion": spec["cdiVersion"], "kind": spec["kind"],
         "deviceNodes": report.cdi_device_nodes}, sort_keys=True))


def _prepare(
    env: embedded_mod.Embedded, pod: memory_allocator.ScheduledPod, *, say: Say
) -> tuple[str, ...]:
    """Call the node's plugin like the kubelet: retry what it reports as not ready yet."""
    node = env.nodes[pod.node_name]
    refs = embedded_mod.claim_refs(pod.claims)
    for attempt in range(1, 6):
        results = node.kubelet.prepare(names.DRIVER_NAME, refs)
        errors_seen = [r.error for r in results.values() if r.error]
        if not errors_seen and len(results) == len(refs):
            return tuple(i for r in results.values() for d in r.devices for i in d.cdi_device_ids)
        if env.config.host_managed:
            # Nothing in host-managed mode becomes ready by waiting inside the demo.
            raise errors.PermanentError("; ".join(errors_seen))
        say(f"  kubelet retry {attempt} on {pod.node_name}: {'; '.join(errors_seen)}")
        _run_daemons(env, say=say)
    raise errors.RetryableError(f"prepare on {pod.node_name} did not succeed: {errors_seen}")


def _negative_case(env: embedded_mod.Embedded, *, cd_uid: str, say: Say, report: Report) -> None:
    cluster = env.cluster
    if env.config.host_managed:
        template = _user_rct_all_channels(cd_uid)
        what = "allocationMode: All"
    else:
        template = _user_rct_unknown_domain()
        what = "a domainID no ComputeDomain has"
    cluster.create(kinds.RESOURCE_CLAIM_TEMPLATE.kind, template)
    name = template["metadata"]["name"]
    pod = env.allocator.schedule_pod(_pod(f"{name}-pod", name))
    node = env.nodes[pod.node_name]
    results = node.kubelet.prepare(names.DRIVER_NAME, embedded_mod.claim_refs(pod.claims))
    report.negative_error = next((r.error for r in results.values() if r.error), "")
    say(f"negative case ({what}) on {pod.node_name}: prepare failed: {report.negative_error}")
    claim_name = pod.claims[0]["metadata"]["name"]
    for event in cluster.list(kinds.EVENT.kind, namespace=NAMESPACE).items:
        involved = event.get("involvedObject", {})
        if involved.get("name") == claim_name:
            line = f"{event.get('type')} {event.get('reason')} {involved.get('kind')}/{claim_name}"
            report.negative_events.append(line)
            say(f"event: {line}: {event.get('message')}")
    env.allocator.release_pod(pod.pod)
    cluster.delete(kinds.POD.kind, namespace=NAMESPACE, name=pod.pod["metadata"]["name"])
    cluster.delete(kinds.RESOURCE_CLAIM_TEMPLATE.kind, namespace=NAMESPACE, name=name)


# ------------------------------------------------------------------ driver-managed daemons


def _run_daemons(env: embedded_mod.Embedded, *, say: Say) -> None:
    """Play the per-CD IMEX DaemonSet: a daemon pod on every labelled node.

    Each daemon pod gets its daemon claim prepared by the node's plugin (real gRPC), then runs
    as a real `compute-domain-daemon` process (apps/cli/daemon_fleet.py) with the DaemonSet's
    env plus the claim's CDI edits, supervising a simulated nvidia-imex; it claims its index
    and reports Ready in its ComputeDomainClique itself.
    """
    cluster = env.cluster
    env.settle()
    fleet = env.fleet()
    for ds in cluster.list(kinds.DAEMON_SET.kind, namespace=env.config.namespace).items:
        pod_spec = ds["spec"]["template"]["spec"]
        selector = pod_spec.get("nodeSelector") or {}
        cd_uid = selector.get(names.COMPUTE_DOMAIN_LABEL, "")
        template = pod_spec["resourceClaims"][0]["resourceClaimTemplateName"]
        nodes = cluster.list(kinds.NODE.kind, label_selector=selector).items
        started: list[daemon_fleet.DaemonProcess] = []
        for node_obj in sorted(nodes, key=lambda n: n["metadata"]["name"]):
            node = node_obj["metadata"]["name"]
            if (cd_uid, node) in fleet.daemons:
                continue
            pod = _pod(f"imex-daemon-{cd_uid[:8]}-{node}", template,
                       namespace=env.config.namespace, node=node)
            # The DaemonSet's template labels (computeDomain + computeDomainTarget=Daemon).
            pod["metadata"]["labels"] = dict(ds["spec"]["template"]["metadata"]["labels"])
            pod["spec"]["resourceClaims"][0]["name"] = "daemon"
            pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "daemon"}]
            scheduled = env.allocator.schedule_pod(pod)
            kubelet = env.nodes[node].kubelet
            refs = embedded_mod.claim_refs(scheduled.claims)
            results = kubelet.prepare(names.DRIVER_NAME, refs)
            failed = [r.error for r in results.values() if r.error]
            if failed:
                raise errors.RetryableError(f"daemon claim on {node}: {'; '.join(failed)}")
            spec = fs_cdi.CDIDirectory(env.nodes[node].settings.cdi_root).read(refs[0].uid)
            started.append(fleet.start(
                node=node, pod_ip=embedded_mod.fake_ip(node),
                container_env=_container_env(pod_spec["containers"][0], node=node,
                                             pod=scheduled.pod),
                cdi_spec=spec or {},
            ))
        if not started:
            continue
        fleet.wait_ready(started)
        entries = {d.node: fleet.entry(d) for d in started}
        say(f"  IMEX daemons of ComputeDomain {cd_uid[:8]}...: {len(started)} "
            "compute-domain-daemon process(es) Ready, each supervising nvidia-imex (simulated): "
            + ", ".join(f"{node}=index {e.index if e else '?'}"
                        for node, e in sorted(entries.items())))
    env.settle()


def _container_env(
    container: Mapping[str, Any], *, node: str, pod: Mapping[str, Any]
) -> dict[str, str]:
    """The container's env as the kubelet resolves it (field references filled in)."""
    fields = {
        "spec.nodeName": node,
        "status.podIP": embedded_mod.fake_ip(node),
        "metadata.uid": str(pod["metadata"].get("uid", "")),
        "metadata.name": str(pod["metadata"]["name"]),
        "metadata.namespace": str(pod["metadata"].get("namespace", "")),
    }
    env: dict[str, str] = {}
    for item in container.get("env") or ():
        if "value" in item:
            env[item["name"]] = str(item["value"])
        else:
            env[item["name"]] = fields.get(item["valueFrom"]["fieldRef"]["fieldPath"], "")
    return env


def _stop_daemons(env: embedded_mod.Embedded, *, cd_uid: str) -> None:
    """Daemon pods end before their CD's clean-up: unprepare and release their claims."""
    cluster = env.cluster
    daemon_pods = cluster.list(
        kinds.POD.kind, namespace=env.config.namespace,
        label_selector={names.COMPUTE_DOMAIN_LABEL: cd_uid},
    ).items
    for pod in daemon_pods:
        node = env.nodes[pod["spec"]["nodeName"]]
        # SIGTERM first: the daemon removes its clique entry, then its claim is unprepared.
        env.fleet().stop(cd_uid=cd_uid, node=node.name)
        claims = tuple(
            cluster.get(kinds.RESOURCE_CLAIM.kind, namespace=env.config.namespace,
                        name=status["resourceClaimName"])
            for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        )
        node.kubelet.unprepare(names.DRIVER_NAME, embedded_mod.claim_refs(claims))
        env.allocator.release_pod(pod)
        cluster.delete(kinds.POD.kind, namespace=env.config.namespace, name=pod["metadata"]["name"])


def _gone(env: embedded_mod.Embedded, kind: str, namespace: str, name: str) -> bool:
    try:
        env.cluster.get(kind, namespace=namespace, name=name)
    except errors.NotFoundError:
        return True
    return False


def _leftovers(env: embedded_mod.Embedded) -> tuple[int, int]:
    files = entries = 0
    for node in env.nodes.values():
        files += len(fs_cdi.CDIDirectory(node.settings.cdi_root).claim_uids())
        # snapshot + journal
        current = fs_checkpoints.read_checkpoint(node.settings.checkpoint_path, cd_records.CODEC)
        if current is not None:
            entries += sum(
                1 for e in current.entries.values()
                if e.state is not models.ClaimState.PREPARE_ABORTED
            )
    return files, entries
