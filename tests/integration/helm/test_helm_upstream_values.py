"""An upstream user's values render through this chart unchanged (issue 19).

Covers:
- upstream's own values.yaml (read from ../shared/reference/upstream-helm, SHARED_DIR overrides
  ../shared; not copied here) renders, its objects pass strict Kubernetes validation, and the
  keys this chart wires mean what they mean upstream (metrics endpoints, health ports, update
  strategy, leader election);
- every `helm upgrade --install ... --set ...` combination upstream's bats suite
  (kubernetes-sigs/dra-driver-nvidia-gpu, tests/bats) installs, on this chart's defaults and on
  top of upstream's values.yaml as a migrating user would pass it with -f;
- each upstream key this chart wires (per-container env/securityContext/resources, metrics,
  healthcheckPort <= 0, altProcDevices, resourceApiVersion, namespaceOverride,
  serviceAccount.annotations, webhook TLS modes, servicePort), and the ones it refuses when
  they ask for what is not built (networkPolicy);
- a misspelt key still fails with the schema's message.
"""

from __future__ import annotations

import copy
import os
import pathlib
from typing import Any

import chart_rendering as cr
import helm_python
import kubernetes_validate
import pytest

_SHARED = pathlib.Path(os.environ.get("SHARED_DIR", cr.REPO_ROOT / ".." / "shared"))
UPSTREAM_VALUES = _SHARED / "reference" / "upstream-helm" / "values.yaml"

needs_upstream_values = pytest.mark.skipif(
    not UPSTREAM_VALUES.is_file(),
    reason=f"upstream values.yaml not found at {UPSTREAM_VALUES} (set SHARED_DIR)",
)

# tests/bats/helpers.sh `iupgrade_wait` adds these to every install (TEST_NVIDIA_DRIVER_ROOT's
# default in tests/bats/Makefile); altProcDevices only on mock-NVML runs.
IUPGRADE_WAIT = ("gpuResourcesEnabledOverride=true", "nvidiaDriverRoot=/run/nvidia/driver")
MOCK_NVML = ("altProcDevices=/var/lib/nvml-mock/imex/proc-devices",)
# DISABLE_COMPUTE_DOMAINS=true runs of the GPU suites add this.
NO_CD = ("resources.computeDomains.enabled=false",)

CD_PLUGIN = "compute-domain-kubelet-plugin"

# (where in upstream's tests/bats, the --set arguments it adds to iupgrade_wait's)
BATS_SETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("NOARGS: test_basics, test_cd_misc, test_cd_updowngrade, test_gpu_mig", ()),
    ("test_cd_logging", ("logVerbosity=0",)),
    ("test_cd_logging", ("logVerbosity=1",)),
    ("test_cd_logging", ("logVerbosity=2",)),
    ("test_cd_logging", ("logVerbosity=3",)),
    ("test_cd_logging", ("logVerbosity=4",)),
    ("test_cd_logging, test_cd_misc", ("logVerbosity=5",)),
    ("test_cd_*, test_gpu_* (most)", ("logVerbosity=6",)),
    ("test_gpu_basic/cuda_workloads/extres/robustness, DISABLE_COMPUTE_DOMAINS",
     ("logVerbosity=6", *NO_CD)),
    ("test_cd_leader_election", (
        "controller.replicas=2",
        "controller.leaderElection.enabled=true",
        "controller.leaderElection.leaseDuration=15s",
        "controller.leaderElection.renewDeadline=10s",
        "controller.leaderElection.retryPeriod=2s",
        "controller.affinity=null",
    )),
    ("test_cd_misc", ("logVerbosity=6", "featureGates.ComputeDomainCliques=true")),
    ("test_gpu_sharing", (
        "logVerbosity=6", "featureGates.TimeSlicingSettings=true", "featureGates.MPSSupport=true",
    )),
    ("test_gpu_sharing, DISABLE_COMPUTE_DOMAINS", (
        "logVerbosity=6", "featureGates.TimeSlicingSettings=true", "featureGates.MPSSupport=true",
        *NO_CD,
    )),
    ("test_gpu_consumable_shares", (
        "logVerbosity=6", "featureGates.MPSSupport=true", "featureGates.ConsumableShares=true",
        "consumableShares=4",
    )),
    ("test_gpu_consumable_shares, DISABLE_COMPUTE_DOMAINS", (
        "logVerbosity=6", "featureGates.MPSSupport=true", "featureGates.ConsumableShares=true",
        "consumableShares=4", *NO_CD,
    )),
    ("test_gpu_dynmig", ("logVerbosity=6", "featureGates.DynamicMIG=true")),
    ("test_gpu_dynmig, DISABLE_COMPUTE_DOMAINS",
     ("logVerbosity=6", "featureGates.DynamicMIG=true", *NO_CD)),
    ("test_gpu_dynmig", (
        "logVerbosity=6", "featureGates.DynamicMIG=true", "featureGates.TimeSlicingSettings=true",
    )),
    ("test_gpu_dynmig, DISABLE_COMPUTE_DOMAINS", (
        "logVerbosity=6", "featureGates.DynamicMIG=true", "featureGates.TimeSlicingSettings=true",
        *NO_CD,
    )),
    ("test_gpu_updowngrade", ("featureGates.DynamicMIG=true",)),
)


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` over `base`, maps merged key by key; a None in `top` stays (Helm deletes the key)."""
    out = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def with_sets(base: dict[str, Any], sets: tuple[str, ...]) -> dict[str, Any]:
    """`base` (the -f file) with each `--set` applied in order, as `helm install` does."""
    values = base
    for expression in sets:
        values = merge(values, helm_python.parse_set_string(expression))
    return values


def upstream_values() -> dict[str, Any]:
    return helm_python.values_from_yaml(UPSTREAM_VALUES.read_text())


def _bats_params() -> list[Any]:
    params = []
    for base in ("chart-defaults", "upstream-values"):
        for mock in (False, True):
            for where, sets in BATS_SETS:
                all_sets = (*IUPGRADE_WAIT, *(MOCK_NVML if mock else ()), *sets)
                marks = [needs_upstream_values] if base == "upstream-values" else []
                params.append(pytest.param(
                    base, all_sets, marks=marks,
                    id=f"{base}{'-mock' if mock else ''}-{where.split(',')[0]}-{'+'.join(sets)}",
                ))
    return params


def _env(workload: cr.Obj, container: str) -> dict[str, Any]:
    (c,) = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == container]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def _container(workload: cr.Obj, name: str) -> cr.Obj:
    (c,) = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return c


# ------------------------------------------------------------------ upstream's values.yaml


@needs_upstream_values
def test_upstream_values_file_renders_and_passes_strict_validation() -> None:
    objects = cr.render(upstream_values())
    failures = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, cr.KUBE_VERSIONS[-1], strict=True)
        except kubernetes_validate.ValidationError as err:
            failures.append(f"{obj['kind']}/{obj['metadata']['name']}: {err.message}")
    assert failures == []
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "DaemonSet", "DeviceClass"} <= kinds


@needs_upstream_values
def test_upstream_values_mean_what_they_mean_upstream() -> None:
    values = upstream_values()
    objects = cr.render(values)
    plugin = cr.one(objects, "DaemonSet")
    controller = cr.one(objects, "Deployment")
    # Both halves, as upstream's resources.*.enabled say.
    cd_env = _env(plugin, "compute-domain-kubelet-plugin")
    gpu_env = _env(plugin, "gpu-kubelet-plugin")
    # Metrics on upstream's endpoints' ports, health on upstream's healthcheckPorts.
    assert cd_env["METRICS_PORT"] == "8081"
    assert gpu_env["METRICS_PORT"] == "8080"
    assert (cd_env["HEALTH_PORT"], gpu_env["HEALTH_PORT"]) == ("51515", "51516")
    assert cr.container_env(controller)["METRICS_PORT"] == "8080"
    # Upstream's updateStrategy and tolerations; its securityContext (privileged) kept.
    assert plugin["spec"]["updateStrategy"] == values["kubeletPlugin"]["updateStrategy"]
    spec = plugin["spec"]["template"]["spec"]
    assert spec["tolerations"] == values["kubeletPlugin"]["tolerations"]
    assert _container(plugin, "gpu-kubelet-plugin")["securityContext"]["privileged"] is True
    # Upstream's leader election off (one replica) with its timings.
    env = cr.container_env(controller)
    assert env["LEADER_ELECT"] == "false"
    assert (env["LEASE_DURATION_SECONDS"], env["RENEW_DEADLINE_SECONDS"]) == ("15", "10")
    assert controller["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical"


# ------------------------------------------------------------------ upstream's bats installs


@pytest.mark.parametrize(("base", "sets"), _bats_params())
def test_bats_install_renders(base: str, sets: tuple[str, ...]) -> None:
    values = with_sets(upstream_values() if base == "upstream-values" else {}, sets)
    objects = cr.render(values, is_upgrade=True)
    set_values = with_sets({}, sets)
    plugin = cr.one(objects, "DaemonSet")
    env = cr.container_env(plugin)
    if "logVerbosity" in set_values:
        assert env["LOG_VERBOSITY"] == str(set_values["logVerbosity"])
    driver_root = [v for v in plugin["spec"]["template"]["spec"]["volumes"]
                   if v["name"] == "driver-root"]
    assert driver_root[0]["hostPath"]["path"] == "/run/nvidia/driver"
    if "altProcDevices" in set_values:
        assert env["PROC_DEVICES"] == "/alt-proc-devices"
    deployments = cr.find(objects, "Deployment")
    if set_values.get("resources", {}).get("computeDomains", {}).get("enabled") is False:
        assert deployments == []
    else:
        (controller,) = deployments
        if "replicas" in set_values.get("controller", {}):
            assert controller["spec"]["replicas"] == 2
            ctl_env = cr.container_env(controller)
            assert ctl_env["LEADER_ELECT"] == "true"
            assert (ctl_env["LEASE_DURATION_SECONDS"], ctl_env["RENEW_DEADLINE_SECONDS"],
                    ctl_env["RETRY_PERIOD_SECONDS"]) == ("15", "10", "2")
            assert "affinity" not in controller["spec"]["template"]["spec"]


@needs_upstream_values
def test_upstream_values_with_the_webhook_on_get_a_cert_manager_certificate() -> None:
    """Upstream's default webhook.tls.mode is cert-manager with a self-signed issuer."""
    objects = cr.render(with_sets(upstream_values(), ("webhook.enabled=true",)))
    certificate = cr.one(objects, "Certificate")
    assert certificate["spec"]["issuerRef"]["kind"] == "Issuer"
    assert cr.one(objects, "Issuer")["spec"] == {"selfSigned": {}}
    deployment = cr.one(objects, "Deployment", "cdd-compute-domain-dra-driver-webhook")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    assert pod["containers"][0]["securityContext"]["privileged"] is False
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"


# ------------------------------------------------------------------ the keys, one by one


@pytest.mark.parametrize(
    ("values", "gpu_half"),
    [
        ({}, False),
        ({"gpuResourcesEnabledOverride": True}, True),
        ({"gpuResourcesEnabledOverride": True, "resources": {"gpus": {"enabled": False}}}, False),
        ({"resources": {"gpus": {"enabled": True}}}, True),
    ],
    ids=["default-off", "override-turns-it-on", "explicit-false-wins", "enabled-alone"],
)
def test_gpu_resources_enabled_override_turns_the_gpu_half_on_as_upstream(
    values: dict[str, Any], gpu_half: bool,
) -> None:
    objects = cr.render(values)
    pod = cr.one(objects, "DaemonSet")["spec"]["template"]["spec"]
    names = [c["name"] for c in pod["containers"]]
    assert ("gpu-kubelet-plugin" in names) is gpu_half
    assert bool(cr.find(objects, "DeviceClass", "gpu.nvidia.com")) is gpu_half


def test_per_container_env_security_context_and_resources_reach_the_containers() -> None:
    extra = {"name": "EXTRA", "value": "1"}
    res = {"limits": {"memory": "1Gi"}}
    values = {
        "resources": {"gpus": {"enabled": True}},
        "controller": {"containers": {"computeDomain": {
            "env": [extra], "securityContext": {"runAsUser": 1000}, "resources": res}}},
        "kubeletPlugin": {"containers": {
            "computeDomains": {"env": [extra, {"name": "LOG_VERBOSITY", "value": "7"}],
                               "securityContext": {"privileged": False}, "resources": res},
            "gpus": {"env": [extra], "securityContext": {"readOnlyRootFilesystem": True},
                     "resources": res}}},
    }
    objects = cr.render(values)
    controller = _container(cr.one(objects, "Deployment"), "controller")
    assert controller["env"][-1] == extra
    assert controller["securityContext"]["runAsUser"] == 1000
    assert controller["securityContext"]["capabilities"] == {"drop": ["ALL"]}  # ours kept
    assert controller["resources"] == res
    plugin = cr.one(objects, "DaemonSet")
    cd = _container(plugin, "compute-domain-kubelet-plugin")
    # Appended: the user's LOG_VERBOSITY comes last, so it wins.
    assert [e for e in cd["env"] if e["name"] == "LOG_VERBOSITY"][-1]["value"] == "7"
    assert cd["securityContext"] == {"runAsUser": 0, "privileged": False}
    assert cd["resources"] == res
    gpu = _container(plugin, "gpu-kubelet-plugin")
    assert gpu["env"][-1] == extra
    assert gpu["securityContext"] == {"runAsUser": 0, "privileged": True,
                                      "readOnlyRootFilesystem": True}
    assert gpu["resources"] == res
    # This chart's own resources win over upstream's per-container ones.
    own = {"limits": {"cpu": "1"}}
    objects = cr.render(merge(values, {"controller": {"resources": own}}))
    assert _container(cr.one(objects, "Deployment"), "controller")["resources"] == own


def test_metrics_disabled_serves_none_and_opens_no_port() -> None:
    values = {"resources": {"gpus": {"enabled": True}},
              "controller": {"metrics": {"enabled": False}},
              "kubeletPlugin": {"metrics": {"enabled": False}}}
    objects = cr.render(values)
    controller = _container(cr.one(objects, "Deployment"), "controller")
    assert cr.container_env(cr.one(objects, "Deployment"))["METRICS_PORT"] == "0"
    assert [p["name"] for p in controller["ports"]] == ["health"]
    plugin = cr.one(objects, "DaemonSet")
    for name in ("compute-domain-kubelet-plugin", "gpu-kubelet-plugin"):
        assert _env(plugin, name)["METRICS_PORT"] == "0"
        assert all("metrics" not in p["name"] for p in _container(plugin, name)["ports"])


def test_own_metrics_ports_win_over_upstream_endpoints() -> None:
    values = {"controller": {"metricsPort": 9000, "metrics": {"httpEndpoint": ":7000"}},
              "kubeletPlugin": {"metricsPort": 9001,
                                "metrics": {"computeDomainHttpEndpoint": "0.0.0.0:7001"}}}
    objects = cr.render(values)
    assert cr.container_env(cr.one(objects, "Deployment"))["METRICS_PORT"] == "9000"
    assert _env(cr.one(objects, "DaemonSet"), CD_PLUGIN)["METRICS_PORT"] == "9001"
    values["kubeletPlugin"]["metricsPort"] = None
    objects = cr.render(values)
    assert _env(cr.one(objects, "DaemonSet"), CD_PLUGIN)["METRICS_PORT"] == "7001"


def test_negative_healthcheck_port_turns_health_and_probes_off() -> None:
    values = {"kubeletPlugin": {"containers": {"computeDomains": {"healthcheckPort": -1}}}}
    plugin = cr.one(cr.render(values), "DaemonSet")
    cd = _container(plugin, "compute-domain-kubelet-plugin")
    assert _env(plugin, "compute-domain-kubelet-plugin")["HEALTH_PORT"] == "0"
    assert "startupProbe" not in cd and "livenessProbe" not in cd
    assert [p["name"] for p in cd["ports"]] == ["metrics"]


def test_alt_proc_devices_is_mounted_and_read_by_both_plugins() -> None:
    values = {"resources": {"gpus": {"enabled": True}}, "altProcDevices": "/var/lib/mock/devices"}
    plugin = cr.one(cr.render(values), "DaemonSet")
    (volume,) = [v for v in plugin["spec"]["template"]["spec"]["volumes"]
                 if v["name"] == "alt-proc-devices"]
    assert volume["hostPath"] == {"path": "/var/lib/mock/devices", "type": "File"}
    for name in ("compute-domain-kubelet-plugin", "gpu-kubelet-plugin"):
        assert _env(plugin, name)["PROC_DEVICES"] == "/alt-proc-devices"
        mounts = {m["name"]: m["mountPath"] for m in _container(plugin, name)["volumeMounts"]}
        assert mounts["alt-proc-devices"] == "/alt-proc-devices"


def test_resource_api_version_sets_the_device_classes_version() -> None:
    values = {"resources": {"gpus": {"enabled": True}},
              "resourceApiVersion": "resource.k8s.io/v1beta2"}
    classes = cr.find(cr.render(values), "DeviceClass")
    assert classes and {c["apiVersion"] for c in classes} == {"resource.k8s.io/v1beta2"}
    default = cr.find(cr.render({}), "DeviceClass")
    assert {c["apiVersion"] for c in default} == {"resource.k8s.io/v1"}


def test_namespace_override_and_service_account_annotations() -> None:
    values = {"namespaceOverride": "gpu-system",
              "serviceAccount": {"annotations": {"example.com/role": "dra"}}}
    objects = cr.render(values)
    namespaced = [o for o in objects if "namespace" in o["metadata"]]
    assert namespaced and {o["metadata"]["namespace"] for o in namespaced} == {"gpu-system"}
    # The preflight hook's short-lived ServiceAccount keeps only its hook annotations.
    accounts = [a for a in cr.find(objects, "ServiceAccount")
                if "helm.sh/hook" not in a["metadata"].get("annotations", {})]
    assert len(accounts) == 3  # controller, IMEX daemons, kubelet plugin
    assert all(a["metadata"]["annotations"] == {"example.com/role": "dra"} for a in accounts)


def test_upstream_pod_settings_reach_the_workloads() -> None:
    values = {
        "kubeletPlugin": {"updateStrategy": {"type": "OnDelete"},
                          "podSecurityContext": {"fsGroup": 2000}},
        "controller": {"podSecurityContext": {"fsGroup": 2000}},
    }
    objects = cr.render(values)
    plugin = cr.one(objects, "DaemonSet")
    assert plugin["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert plugin["spec"]["template"]["spec"]["securityContext"] == {"fsGroup": 2000}
    pod = cr.one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["fsGroup"] == 2000
    assert pod["securityContext"]["runAsNonRoot"] is True  # ours kept


def _webhook(values: dict[str, Any]) -> list[cr.Obj]:
    return cr.render({"webhook": {"enabled": True, **values}})


def test_webhook_secret_mode_with_upstream_names() -> None:
    objects = _webhook({"servicePort": 8443, "priorityClassName": "system-cluster-critical",
                        "tls": {"mode": "secret", "secret": {"name": "tls", "caBundle": "Y2E="}}})
    deployment = cr.one(objects, "Deployment", "cdd-compute-domain-dra-driver-webhook")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["volumes"][0]["secret"]["secretName"] == "tls"
    assert pod["priorityClassName"] == "system-cluster-critical"
    hook = cr.one(objects, "ValidatingWebhookConfiguration")["webhooks"][0]
    assert hook["clientConfig"]["caBundle"] == "Y2E="
    assert hook["clientConfig"]["service"]["port"] == 8443
    assert cr.one(objects, "Service")["spec"]["ports"][0]["port"] == 8443


@pytest.mark.parametrize(
    ("cert_manager", "issuer"),
    [
        ({}, ("Issuer", "cdd-compute-domain-dra-driver-webhook-issuer")),
        ({"issuerType": "clusterissuer", "issuerName": "ca"}, ("ClusterIssuer", "ca")),
        ({"issuerType": "issuer", "issuerName": "ca", "dnsNames": ["hook.example"]},
         ("Issuer", "ca")),
    ],
)
def test_webhook_cert_manager_mode_creates_the_certificate(
    cert_manager: dict[str, Any], issuer: tuple[str, str],
) -> None:
    objects = _webhook({"tls": {"mode": "cert-manager", "certManager": cert_manager}})
    certificate = cr.one(objects, "Certificate")
    ref = certificate["spec"]["issuerRef"]
    assert (ref["kind"], ref["name"]) == issuer
    assert len(cr.find(objects, "Issuer")) == (0 if cert_manager else 1)
    secret = certificate["spec"]["secretName"]
    deployment = cr.one(objects, "Deployment", "cdd-compute-domain-dra-driver-webhook")
    assert deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == secret
    hook = cr.one(objects, "ValidatingWebhookConfiguration")
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{cr.NAMESPACE}/{certificate['metadata']['name']}")
    service = cr.one(objects, "Service")["metadata"]["name"]
    assert f"{service}.{cr.NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    assert set(cert_manager.get("dnsNames", [])) <= set(certificate["spec"]["dnsNames"])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"webhook": {"enabled": True, "tls": {"mode": "cert-manager",
                                               "certManager": {"issuerType": "issuer"}}}},
         "webhook.tls.certManager.issuerName"),
        ({"webhook": {"enabled": True, "tls": {"mode": "secret"}}}, "webhook.tls.secret.name"),
        ({"controller": {"networkPolicy": {"enabled": True}}}, "controller.networkPolicy.enabled"),
        ({"kubeletPlugin": {"networkPolicy": {"enabled": True}}},
         "kubeletPlugin.networkPolicy.enabled"),
        ({"kubeletPlugin": {"metrics": {"metricsPath": "/custom"}}}, "metricsPath"),
        ({"kubeletPlugin": {"containers": {"computeDomains": {"gpuCliqueLabelEnable": True}}}},
         "gpuCliqueLabelEnable"),
        ({"controller": {"leaderElection": {"leaseDurations": "15s"}}}, "leaseDurations"),
        ({"consumableShares": "some"}, "consumableShares"),
        ({"maskNvidiaDriverParams": True}, "maskNvidiaDriverParams"),
    ],
    ids=["issuer-without-name", "secret-without-name", "controller-netpol", "plugin-netpol",
         "metrics-path", "typo-plugin", "typo-leader-election", "consumable-shares-value",
         "mask-driver-params"],
)
def test_refused_values_name_the_key(values: dict[str, Any], message: str) -> None:
    assert message in cr.render_error(values)



@needs_upstream_values
def test_helm_lint_passes_strict_with_upstream_values() -> None:
    report = helm_python.lint(
        str(cr.CHART_DIR), upstream_values(), strict=True,
        kube_version=f"v{cr.KUBE_VERSIONS[-1]}.0", namespace=cr.NAMESPACE,
    )
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


# ------------------------------------------------------------------ upstream's image


def _images(objects: list[cr.Obj]) -> set[str]:
    found = set()
    for obj in objects:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            found.add(c["image"])
    return found


def _chart_defaults() -> dict[str, Any]:
    return helm_python.values_from_yaml((cr.CHART_DIR / "values.yaml").read_text())


def _own_image() -> str:
    return f"{_chart_defaults()['image']['repository']}:{cr.load_chart().metadata['appVersion']}"


@needs_upstream_values
def test_upstream_image_is_replaced_by_this_drivers_own_with_a_note() -> None:
    values = upstream_values()
    assert values["image"]["repository"].startswith("registry.k8s.io/dra-driver-nvidia/")
    objects = cr.render(values, is_upgrade=True)
    hooks = cr.render(values)  # the preflight Job renders on install
    assert _images(objects) | _images(hooks) == {_own_image()}
    controller = cr.one(objects, "Deployment")
    assert cr.container_env(controller)["DAEMON_IMAGE"] == _own_image()
    note = cr.notes(values)
    assert "names the upstream driver's image (registry.k8s.io/dra-driver-nvidia/" in note
    assert f"run {_own_image()} instead" in note


@pytest.mark.parametrize("repository", [
    "nvcr.io/nvidia/k8s-dra-driver-gpu", "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu/",
])
def test_an_upstream_image_with_its_own_tag_runs_this_drivers_image(repository: str) -> None:
    objects = cr.render({"image": {"repository": repository, "tag": "v25.8.0"},
                         "controller": {"image": {"repository": repository}}})
    assert _images(objects) == {_own_image()}


def test_another_image_is_used_as_given_without_a_note() -> None:
    values = {"image": {"repository": "registry.example/ours/driver", "tag": "1.2.3"}}
    assert _images(cr.render(values)) == {"registry.example/ours/driver:1.2.3"}
    assert "upstream driver's image" not in cr.notes(values)


def test_own_image_constant_matches_the_values_default() -> None:
    rendered = cr.render({})
    assert _images(rendered) == {_own_image()}
    assert 'define "cdd.ownImageRepository" -}}' + _chart_defaults()["image"]["repository"] in (
        cr.CHART_DIR / "templates" / "_helpers.tpl").read_text()


def test_nvidia_cdi_hook_path_reaches_the_gpu_plugin_only_when_set() -> None:
    gpus = {"resources": {"gpus": {"enabled": True}}}
    hooked = {**gpus, "nvidiaCDIHookPath": "/usr/local/nvidia/toolkit/nvidia-cdi-hook"}
    plugin = cr.one(cr.render(hooked), "DaemonSet")
    env = _env(plugin, "gpu-kubelet-plugin")
    assert env["NVIDIA_CDI_HOOK_PATH"] == "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
    # The ComputeDomain plugin's channel specs have no hooks (as upstream's claim specs).
    assert "NVIDIA_CDI_HOOK_PATH" not in _env(plugin, "compute-domain-kubelet-plugin")
    unset = cr.one(cr.render(gpus), "DaemonSet")
    assert "NVIDIA_CDI_HOOK_PATH" not in _env(unset, "gpu-kubelet-plugin")
    # A host path the runtime can exec: absolute, or the schema refuses it.
    refused = cr.render_error({**gpus, "nvidiaCDIHookPath": "nvidia-cdi-hook"})
    assert "/nvidiaCDIHookPath" in refused and "does not match pattern" in refused


@pytest.mark.parametrize("value", ["memory", "unlimited", 4, "4"])
def test_consumable_shares_reach_the_gpu_plugin_as_upstream_passes_them(value: Any) -> None:
    values = {"resources": {"gpus": {"enabled": True}}, "consumableShares": value,
              "featureGates": {"ConsumableShares": True}}
    plugin = cr.one(cr.render(values), "DaemonSet")
    assert _env(plugin, "gpu-kubelet-plugin")["CONSUMABLE_SHARES"] == str(value)
    assert "CONSUMABLE_SHARES" not in _env(plugin, "compute-domain-kubelet-plugin")
    unset = cr.one(cr.render({"resources": {"gpus": {"enabled": True}}}), "DaemonSet")
    assert "CONSUMABLE_SHARES" not in _env(unset, "gpu-kubelet-plugin")


def test_consumable_shares_without_their_gate_fail_with_the_plugins_message() -> None:
    values = {"resources": {"gpus": {"enabled": True}}, "consumableShares": 4}
    assert ("--consumable-shares=4 (CONSUMABLE_SHARES, Helm consumableShares) requires feature "
            "gate ConsumableShares=true; enable it (featureGates.ConsumableShares=true) or set "
            "--consumable-shares=disabled") in cr.render_error(values)
    cr.render({**values, "consumableShares": "disabled"})
