"""The chart's GPU half (resources.gpus.enabled), rendered by the real Helm engine.

Covers: off by default; the gpu-kubelet-plugin container beside the ComputeDomain one (env,
mounts, ports, privilege); /sys read-write and the VFIO class only under PassthroughSupport;
the GPU half alone (resources.computeDomains.enabled=false); port clashes and "nothing to
install" refused with messages naming the value to change; upstream value names; strict
Kubernetes validation and helm lint of every GPU rendering; NOTES.
"""

from __future__ import annotations

from typing import Any

import chart_rendering as cr
import helm_python
import kubernetes_validate
import pytest

from apps.gpuplugin import settings as gpu_settings
from core import gates

GPUS_ON: cr.Obj = {"resources": {"gpus": {"enabled": True}}}
GPUS_ONLY: cr.Obj = {"resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}}}
PASSTHROUGH: cr.Obj = {**GPUS_ON, "featureGates": {"PassthroughSupport": True}}
GPU_CLASSES = ("gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com")
CD_CLASSES = ("compute-domain-default-channel.nvidia.com", "compute-domain-daemon.nvidia.com")


def _containers(objects: list[cr.Obj]) -> dict[str, cr.Obj]:
    plugin = cr.one(objects, "DaemonSet")
    return {c["name"]: c for c in plugin["spec"]["template"]["spec"]["containers"]}


def _gpu_container(values: cr.Obj) -> cr.Obj:
    return _containers(cr.render(values))["gpu-kubelet-plugin"]


def _env(container: cr.Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _mounts(container: cr.Obj) -> dict[str, cr.Obj]:
    return {m["name"]: m for m in container["volumeMounts"]}


def _host_paths(values: cr.Obj) -> dict[str, str]:
    spec = cr.one(cr.render(values), "DaemonSet")["spec"]["template"]["spec"]
    return {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}


def _device_classes(values: cr.Obj) -> list[str]:
    return sorted(o["metadata"]["name"] for o in cr.find(cr.render(values), "DeviceClass"))


def test_gpu_half_is_off_by_default() -> None:
    objects = cr.render({})
    assert list(_containers(objects)) == ["compute-domain-kubelet-plugin"]
    assert not set(GPU_CLASSES) & set(_device_classes({}))


def test_enabled_gpu_half_adds_a_second_container_after_the_compute_domain_one() -> None:
    assert list(_containers(cr.render(GPUS_ON))) == [
        "compute-domain-kubelet-plugin", "gpu-kubelet-plugin",
    ]
    assert _device_classes(GPUS_ON) == sorted(
        ("gpu.nvidia.com", "mig.nvidia.com", *CD_CLASSES)
    )


def test_gpu_container_runs_the_gpu_plugin_with_its_own_dir_and_ports() -> None:
    container = _gpu_container({**GPUS_ON, "featureGates": {"TimeSlicingSettings": True}})
    env = _env(container)
    assert container["command"] == ["gpu-kubelet-plugin"]
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["FEATURE_GATES"] == "TimeSlicingSettings=true"
    assert env["CDI_ROOT"] == "/var/run/cdi"
    assert env["PLUGIN_DIR"] == "/var/lib/kubelet/plugins/gpu.nvidia.com"
    assert env["REGISTRY_DIR"] == "/var/lib/kubelet/plugins_registry"
    assert (env["HEALTH_PORT"], env["METRICS_PORT"]) == ("51516", "8083")
    assert (env["NVML"], env["NVIDIA_VISIBLE_DEVICES"]) == ("real", "void")
    assert env["STALE_CLAIM_CLEANUP_INTERVAL_SECONDS"] == "30"
    assert container["startupProbe"]["grpc"] == {"port": 51516}
    assert container["livenessProbe"]["grpc"] == {"port": 51516}
    assert container["securityContext"] == {"privileged": True, "runAsUser": 0}


def test_the_gpu_app_reads_the_chart_env_as_the_chart_means_it() -> None:
    values = {
        **GPUS_ON, "nvidiaDriverRoot": "/run/nvidia/driver", "logVerbosity": 6,
        "featureGates": {"PassthroughSupport": True, "TimeSlicingSettings": True},
    }
    env = _env(_gpu_container(values))
    fields = {"NODE_NAME": "node-a", "NAMESPACE": cr.NAMESPACE, "ROLLING_UPDATE_POD_UID": "u-1"}
    plain = {name: fields.get(name, value) for name, value in env.items()}
    assert all(isinstance(value, str) for value in plain.values())

    parsed = gpu_settings.parse([], plain)

    assert (parsed.node_name, parsed.namespace) == ("node-a", cr.NAMESPACE)
    assert parsed.rolling_update_pod_uid == "u-1"
    assert parsed.plugin_dir == "/var/lib/kubelet/plugins/gpu.nvidia.com"
    assert parsed.registry_dir == "/var/lib/kubelet/plugins_registry"
    assert (parsed.health_port, parsed.metrics_port) == (51516, 8083)
    assert (parsed.nvidia_driver_root, parsed.container_driver_root) == (
        "/run/nvidia/driver", "/driver-root",
    )
    assert (parsed.cdi_root, parsed.nvml, parsed.log_verbosity) == ("/var/run/cdi", "real", 6)
    resolved = gates.resolve_gates(gates.parse_feature_gates(parsed.feature_gates))
    assert resolved.enabled(gates.PASSTHROUGH_SUPPORT)
    assert resolved.enabled(gates.TIME_SLICING_SETTINGS)


@pytest.mark.parametrize("driver_root", ["/", "/run/nvidia/driver"])
def test_gpu_container_sees_the_host_driver_root_read_only_at_driver_root(
    driver_root: str,
) -> None:
    values = {**GPUS_ON, "nvidiaDriverRoot": driver_root}
    container = _gpu_container(values)
    env = _env(container)
    # The host's path goes into CDI specs; the container reads the same files at /driver-root.
    assert env["NVIDIA_DRIVER_ROOT"] == driver_root
    assert env["CONTAINER_DRIVER_ROOT"] == "/driver-root"
    mount = _mounts(container)["driver-root"]
    assert (mount["mountPath"], mount["readOnly"]) == ("/driver-root", True)
    assert _host_paths(values)["driver-root"] == driver_root


def test_gpu_container_mounts_host_paths_at_identical_paths_but_the_driver_root() -> None:
    values = {**GPUS_ON, "kubeletPlugin": {"cdiRoot": "/etc/cdi"}}
    mounts = _mounts(_gpu_container(values))
    host_paths = _host_paths(values)
    assert set(mounts) == {
        "plugins-registry", "gpu-plugin-dir", "cdi-root", "host-dev", "driver-root", "host-sys",
        "containerd-socket-dir", "crio-socket-dir",  # the runtime CDI check's
    }
    for name, mount in mounts.items():
        if name != "driver-root":
            assert mount["mountPath"] == host_paths[name]
    assert host_paths["gpu-plugin-dir"] == "/var/lib/kubelet/plugins/gpu.nvidia.com"
    assert (host_paths["host-sys"], host_paths["host-dev"]) == ("/sys", "/dev")


@pytest.mark.parametrize(
    ("gates", "read_only"),
    [({}, True), ({"PassthroughSupport": False}, True), ({"PassthroughSupport": True}, False),
     ({"PassthroughSupport": "true"}, False)],
    ids=["default", "off", "on", "on-string"],
)
def test_sys_is_writable_and_the_vfio_class_exists_only_under_passthrough_support(
    gates: dict[str, Any], read_only: bool,
) -> None:
    values = {**GPUS_ON, "featureGates": gates}
    mounts = _mounts(_gpu_container(values))
    assert mounts["host-sys"]["readOnly"] is read_only
    assert ("vfio.gpu.nvidia.com" in _device_classes(values)) is not read_only
    # The host's / for `chroot /host-root modprobe vfio-pci` (--host-root's default), as upstream.
    if read_only:
        assert "host-root" not in mounts
    else:
        assert mounts["host-root"] == {"name": "host-root", "mountPath": "/host-root",
                                       "mountPropagation": "HostToContainer", "readOnly": True}
        assert _host_paths(values)["host-root"] == "/"


def test_gpu_half_alone_renders_only_the_plugin_its_rbac_and_the_gpu_classes() -> None:
    objects = cr.render({**GPUS_ONLY, "featureGates": {"PassthroughSupport": True}})
    assert list(_containers(objects)) == ["gpu-kubelet-plugin"]
    assert _device_classes({**GPUS_ONLY, "featureGates": {"PassthroughSupport": True}}) == sorted(
        GPU_CLASSES
    )
    plugin = f"{cr.RELEASE}-compute-domain-dra-driver-kubelet-plugin"
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == sorted([
        ("ClusterRole", plugin), ("ClusterRoleBinding", plugin), ("DaemonSet", plugin),
        ("ServiceAccount", plugin),
        ("ValidatingAdmissionPolicy", f"{plugin}-resourceslices"),
        ("ValidatingAdmissionPolicyBinding", f"{plugin}-resourceslices"),
        *(("DeviceClass", name) for name in GPU_CLASSES),
    ])
    spec = cr.one(objects, "DaemonSet")["spec"]["template"]["spec"]
    volumes = {v["name"] for v in spec["volumes"]}
    assert "plugin-dir" not in volumes  # the ComputeDomain plugin's directory


def test_gpu_half_alone_gives_the_plugin_no_compute_domain_or_node_write_rights() -> None:
    role = cr.one(cr.render(GPUS_ONLY), "ClusterRole")
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert "computedomains" not in resources
    [nodes] = [rule for rule in role["rules"] if rule["resources"] == ["nodes"]]
    assert nodes["verbs"] == ["get"]
    for needed in ("resourceclaims", "resourceslices", "pods", "events"):
        assert needed in resources


def test_gpu_half_alone_ignores_the_imex_settings_it_does_not_use() -> None:
    # The host-managed gate without the host-managed mode is refused only for ComputeDomains.
    values = {**GPUS_ONLY, "featureGates": {"HostManagedIMEXDaemon": True}}
    assert list(_containers(cr.render(values))) == ["gpu-kubelet-plugin"]


def test_both_halves_off_fails_naming_both_values() -> None:
    message = cr.render_error({"resources": {"computeDomains": {"enabled": False}}})
    assert "resources.computeDomains.enabled=false and resources.gpus.enabled=false" in message


def test_gpu_half_alone_still_checks_gate_names_and_dependencies() -> None:
    unknown = cr.render_error({**GPUS_ONLY, "featureGates": {"MIGSupport": True}})
    assert "unknown feature gate 'MIGSupport'" in unknown and "PassthroughSupport" in unknown
    values = {**GPUS_ONLY, "featureGates": {"IMEXDaemonsWithDNSNames": False}}
    assert "ComputeDomainCliques=true requires IMEXDaemonsWithDNSNames=true" in cr.render_error(
        values
    )


@pytest.mark.parametrize(
    ("plugin_values", "fragment"),
    [
        ({"healthPort": 7000, "gpus": {"healthPort": 7000}}, "kubeletPlugin.gpus.healthPort"),
        ({"containers": {"gpus": {"healthcheckPort": 51515}}}, "kubeletPlugin.gpus.healthPort"),
        ({"gpus": {"metricsPort": 8082}}, "kubeletPlugin.gpus.metricsPort"),
    ],
    ids=["health", "upstream-health", "metrics"],
)
def test_a_port_shared_with_the_compute_domain_container_fails_naming_the_value(
    plugin_values: cr.Obj, fragment: str,
) -> None:
    message = cr.render_error({**GPUS_ON, "kubeletPlugin": plugin_values})
    assert fragment in message and "share the pod's network" in message


def test_gpu_half_alone_may_use_the_compute_domain_ports() -> None:
    values = {**GPUS_ONLY, "kubeletPlugin": {"gpus": {"healthPort": 51515, "metricsPort": 8082}}}
    assert _env(_containers(cr.render(values))["gpu-kubelet-plugin"])["HEALTH_PORT"] == "51515"


def test_gpu_container_accepts_upstream_value_names_and_prefers_ours() -> None:
    upstream = {"kubeletPlugin": {
        "kubeletPluginsDirectoryPath": "/data/kubelet/plugins",
        "kubeletRegistrarDirectoryPath": "/data/kubelet/plugins_registry",
        "containers": {"gpus": {"healthcheckPort": 52000}},
    }, "gpuResourcesEnabledOverride": True, **GPUS_ON}
    env = _env(_gpu_container(upstream))
    assert (env["PLUGIN_DIR"], env["REGISTRY_DIR"], env["HEALTH_PORT"]) == (
        "/data/kubelet/plugins/gpu.nvidia.com", "/data/kubelet/plugins_registry", "52000",
    )
    ours = {**upstream, "kubeletPlugin": {
        **upstream["kubeletPlugin"], "gpus": {"pluginDir": "/ours/gpu", "healthPort": 6001},
    }}
    env = _env(_gpu_container(ours))
    assert (env["PLUGIN_DIR"], env["HEALTH_PORT"]) == ("/ours/gpu", "6001")


def test_schema_rejects_unknown_gpu_container_keys() -> None:
    message = cr.render_error({**GPUS_ON, "kubeletPlugin": {"gpus": {"image": "x"}}})
    assert "additional properties 'image' not allowed" in message


RENDERINGS: tuple[cr.Obj, ...] = (
    GPUS_ON,
    PASSTHROUGH,
    {**GPUS_ONLY, "featureGates": {"PassthroughSupport": True, "TimeSlicingSettings": True}},
    {**GPUS_ONLY, "webhook": {"enabled": True, "tls": {"secretName": "webhook-tls"}}},
    cr.host_managed(resources={**cr.host_managed()["resources"], "gpus": {"enabled": True}}),
)


@pytest.mark.parametrize("kube_version", cr.KUBE_VERSIONS)
def test_every_gpu_rendering_passes_strict_kubernetes_validation(kube_version: str) -> None:
    failures = []
    for values in RENDERINGS:
        for obj in cr.render(values):
            try:
                kubernetes_validate.validate(obj, kube_version, strict=True)
            except kubernetes_validate.ValidationError as err:
                failures.append(f"{obj['kind']}/{obj['metadata']['name']}: {err.message}")
    assert failures == []


@pytest.mark.parametrize("values", [PASSTHROUGH, GPUS_ONLY], ids=["both-halves", "gpus-only"])
def test_helm_lint_reports_no_warnings_for_the_gpu_half(values: cr.Obj) -> None:
    report = helm_python.lint(
        str(cr.CHART_DIR), values, strict=True, kube_version="v1.34.0", namespace=cr.NAMESPACE,
    )
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_notes_say_whether_each_half_is_on() -> None:
    default = cr.notes({})
    assert "ComputeDomains (compute-domain.nvidia.com): on." in default
    assert "GPUs (gpu.nvidia.com): off" in default
    gpus_only = cr.notes({**GPUS_ONLY, "featureGates": {"PassthroughSupport": True}})
    assert "ComputeDomains (compute-domain.nvidia.com): off" in gpus_only
    assert "IMEX mode" not in gpus_only
    assert "GPUs (gpu.nvidia.com): on." in gpus_only
    assert "vfio.gpu.nvidia.com" in gpus_only
    assert "docs/gpus.md" in gpus_only
    assert (cr.REPO_ROOT / "docs" / "gpus.md").is_file()
