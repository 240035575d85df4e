"""The Helm chart, rendered by the real Helm engine, for every IMEX mode x isolation x gate set.

Whether a combination is valid, and the message an invalid one fails with, come from
`computedomain.modes.resolve_driver_config`: the chart and the apps can never disagree silently.
"""

from __future__ import annotations

import itertools
import json
import pathlib
import shutil
from typing import Any

import chart_rendering as cr
import helm_python
import kubernetes_validate
import pytest

from adapters.memory import cluster as memory_cluster
from apps.cli import preflight
from apps.cli import webhook as cli_webhook
from core import errors, names
from core.computedomain import modes

MODES = ("driverManaged", "hostManaged")
ISOLATIONS = ("", "domain", "none", "channel")
GATE_SETS: tuple[dict[str, Any], ...] = (
    {},
    {"HostManagedIMEXDaemon": True},
    {"HostManagedIMEXDaemon": "true"},
    {"HostManagedIMEX": True},
    {"HostManagedIMEXDaemon": False},
    {"HostManagedIMEXDaemon": "false"},
    {"HostManagedIMEXDaemon": True, "ComputeDomainCliques": True,
     "IMEXDaemonsWithDNSNames": True},
    {"HostManagedIMEXDaemon": True, "IMEXDaemonsWithDNSNames": False},
    {"IMEXDaemonsWithDNSNames": False},
    {"IMEXDaemonsWithDNSNames": False, "ComputeDomainCliques": False},
    {"ComputeDomainCliques": False},
    {"CrashOnNVLinkFabricErrors": False},
    {"NoSuchGate": True},
)
COMBINATIONS = tuple(itertools.product(MODES, ISOLATIONS, GATE_SETS))


def _is_on(value: Any) -> bool:
    """What the chart's `eq (toString $v) "true"` means for a value."""
    return value is True or value == "true"


def _core_outcome(mode: str, isolation: str, gates: dict[str, Any]) -> str | None:
    """None when the apps accept this configuration, else their ConfigError message."""
    try:
        modes.resolve_driver_config(
            mode=mode,
            isolation=isolation,
            feature_gates={name: _is_on(value) for name, value in gates.items()},
            namespace=cr.NAMESPACE,
        )
    except errors.ConfigError as err:
        return err.message
    return None


def _values(mode: str, isolation: str, gates: dict[str, Any]) -> dict[str, Any]:
    return cr.imex(mode, isolation, featureGates=gates)


def _combo_id(combo: tuple[str, str, dict[str, Any]]) -> str:
    mode, isolation, gates = combo
    return f"{mode}-{isolation or 'empty'}-" + (
        ",".join(f"{k}={v!r}" for k, v in gates.items()) or "nogates"
    )


VALID = tuple(c for c in COMBINATIONS if _core_outcome(*c) is None)
INVALID = tuple(c for c in COMBINATIONS if _core_outcome(*c) is not None)


def test_matrix_has_valid_combinations_of_both_modes() -> None:
    assert {mode for mode, _, _ in VALID} == set(MODES)
    assert len(INVALID) > len(VALID) > 0


@pytest.mark.parametrize("combo", VALID, ids=[_combo_id(c) for c in VALID])
def test_valid_combination_renders_and_passes_env_to_both_apps(
    combo: tuple[str, str, dict[str, Any]],
) -> None:
    mode, isolation, gates = combo
    objects = cr.render(_values(mode, isolation, gates))
    expected = modes.resolve_driver_config(
        mode=mode, isolation=isolation,
        feature_gates={k: _is_on(v) for k, v in gates.items()}, namespace=cr.NAMESPACE,
    ).config
    for kind in ("Deployment", "DaemonSet"):
        workload = next(
            o for o in cr.find(objects, kind)
            if o["spec"]["template"]["spec"]["containers"][0]["command"][0].startswith(
                "compute-domain-"
            )
        )
        env = cr.container_env(workload)
        assert env["IMEX_MODE"] == expected.mode.value
        # The chart passes the value as written (empty: domain, in both modes, as upstream);
        # under hostManaged the apps read domain as host channel 0 (Isolation.NONE).
        assert env["IMEX_ISOLATION"] == (isolation or "domain")
        # The apps, parsing FEATURE_GATES, reach the same configuration the chart validated.
        reparsed = modes.resolve_driver_config(
            mode=env["IMEX_MODE"], isolation=env["IMEX_ISOLATION"],
            feature_gates=env["FEATURE_GATES"], namespace=cr.NAMESPACE,
        ).config
        assert reparsed == expected


@pytest.mark.parametrize("combo", INVALID, ids=[_combo_id(c) for c in INVALID])
def test_invalid_combination_fails_with_the_apps_message(
    combo: tuple[str, str, dict[str, Any]],
) -> None:
    message = _core_outcome(*combo)
    assert message is not None
    assert message in cr.render_error(_values(*combo))


def _distinct_objects() -> list[cr.Obj]:
    """Every distinct object of every valid combination (plus options that add objects)."""
    extra_values: list[dict[str, Any]] = [
        {"webhook": {"enabled": True, "tls": {"secretName": "webhook-tls", "caBundle": "Y2E="}}},
        {"controller": {"replicas": 3}, "nvidiaDriverRoot": "/run/nvidia/driver"},
        cr.host_managed(resources={"computeDomains": {"imex": {
            "mode": "hostManaged", "isolation": "none", "hostCheck": True,
            "hostSocketPath": "/run/nvidia-imex/imex.sock"}}}),
    ]
    seen: dict[str, cr.Obj] = {}
    for values in [_values(*c) for c in VALID] + extra_values:
        for obj in cr.render(values) + cr.crds():
            seen.setdefault(json.dumps(obj, sort_keys=True), obj)
    return list(seen.values())


@pytest.mark.parametrize("kube_version", cr.KUBE_VERSIONS)
def test_every_rendered_object_passes_strict_kubernetes_validation(kube_version: str) -> None:
    failures = []
    for obj in _distinct_objects():
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except kubernetes_validate.ValidationError as err:
            failures.append(f"{obj['kind']}/{obj['metadata']['name']}: {err.message}")
    assert failures == []


@pytest.mark.parametrize(
    "values",
    [{}, cr.host_managed(), {"webhook": {"enabled": True, "tls": {"secretName": "tls"}}}],
    ids=["driverManaged", "hostManaged", "webhook"],
)
def test_helm_lint_reports_no_warnings_or_errors(values: dict[str, Any]) -> None:
    for kube_version in cr.KUBE_VERSIONS:
        report = helm_python.lint(
            str(cr.CHART_DIR), values, strict=True, kube_version=f"v{kube_version}.0",
            namespace=cr.NAMESPACE,
        )
        assert report["errors"] == []
        # Severity 1 is informational ("icon is recommended"); 2 and 3 are warnings and errors.
        assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_host_managed_renders_no_daemon_class_rbac_or_service_account() -> None:
    objects = cr.render(cr.host_managed())
    assert cr.find(objects, "DeviceClass", names.DAEMON_DEVICE_CLASS) == []
    assert cr.one(objects, "DeviceClass", names.CHANNEL_DEVICE_CLASS)
    daemon_named = [o for o in objects if o["metadata"]["name"].endswith("-daemon")]
    assert daemon_named == []
    rules = [
        (o["metadata"]["name"], rule)
        for o in objects if o["kind"] in ("ClusterRole", "Role")
        for rule in o["rules"]
    ]
    # The controller keeps read + clean-up rights on daemon-side kinds (a CD admitted under
    # driverManaged is cleaned up on deletion after a switch) but creates none of them.
    assert not any(
        {"daemonsets", "computedomaincliques"} & set(rule["resources"])
        and "create" in rule["verbs"]
        for _, rule in rules
    )
    plugin = f"{cr.RELEASE}-compute-domain-dra-driver-kubelet-plugin"
    assert not any(
        name == plugin and "nodes" in rule["resources"] and "patch" in rule["verbs"]
        for name, rule in rules
    )


def test_driver_managed_renders_daemon_class_rbac_and_service_account() -> None:
    objects = cr.render({})
    assert cr.one(objects, "DeviceClass", names.DAEMON_DEVICE_CLASS)
    assert cr.one(objects, "DeviceClass", names.CHANNEL_DEVICE_CLASS)
    daemon_sa = cr.one(objects, "ServiceAccount", f"{cr.RELEASE}-compute-domain-dra-driver-daemon")
    cr.one(objects, "ClusterRole", daemon_sa["metadata"]["name"])
    controller = cr.one(objects, "Deployment")
    assert cr.container_env(controller)["DAEMON_SERVICE_ACCOUNT"] == daemon_sa["metadata"]["name"]


def test_host_managed_controller_and_plugin_receive_gates_and_mode() -> None:
    objects = cr.render(cr.host_managed(featureGates={"CrashOnNVLinkFabricErrors": False}))
    for workload in (cr.one(objects, "Deployment"), cr.one(objects, "DaemonSet")):
        env = cr.container_env(workload)
        assert env["FEATURE_GATES"] == (
            "CrashOnNVLinkFabricErrors=false,HostManagedIMEXDaemon=true")
        assert env["IMEX_MODE"] == "hostManaged"
        assert env["IMEX_ISOLATION"] == "none"
    assert "DAEMON_IMAGE" not in cr.container_env(cr.one(objects, "Deployment"))


def test_our_older_gate_name_counts_as_host_managed_imex_daemon() -> None:
    values = cr.imex("hostManaged", "none", featureGates={"HostManagedIMEX": True})
    env = cr.container_env(cr.one(cr.render(values), "DaemonSet"))
    assert env["FEATURE_GATES"] == "HostManagedIMEXDaemon=true"


def test_with_both_spellings_set_the_gates_own_name_wins() -> None:
    values = {"featureGates": {"HostManagedIMEXDaemon": False, "HostManagedIMEX": True}}
    env = cr.container_env(cr.one(cr.render(values), "DaemonSet"))
    assert env["FEATURE_GATES"] == "HostManagedIMEXDaemon=false"


def test_set_string_false_keeps_host_managed_gate_off() -> None:
    gates = helm_python.parse_set_string_values("featureGates.HostManagedIMEXDaemon=false")
    assert gates == {"featureGates": {"HostManagedIMEXDaemon": "false"}}
    message = cr.render_error(cr.imex("hostManaged", "none", **gates))
    assert modes.HOST_MANAGED_NEEDS_GATE in message
    # In driverManaged the string "false" renders as an explicit false, daemon class kept.
    objects = cr.render(gates)
    assert cr.container_env(cr.one(objects, "DaemonSet"))["FEATURE_GATES"] == (
        "HostManagedIMEXDaemon=false"
    )
    assert cr.one(objects, "DeviceClass", names.DAEMON_DEVICE_CLASS)


@pytest.mark.parametrize("value", ["True", "yes", "1", "on"])
def test_only_the_exact_string_true_turns_a_gate_on(value: str) -> None:
    values = cr.imex("hostManaged", "none", featureGates={"HostManagedIMEXDaemon": value})
    message = cr.render_error(values)
    assert modes.HOST_MANAGED_NEEDS_GATE in message


@pytest.fixture(scope="module")
def schemaless_chart(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The chart without values.schema.json, as `helm install --skip-schema-validation` sees it."""
    target = tmp_path_factory.mktemp("chart") / "nvidia-dra-driver"
    shutil.copytree(cr.CHART_DIR, target)
    (target / "values.schema.json").unlink()
    return target


@pytest.mark.parametrize(
    ("mode", "isolation"), [("perJob", ""), ("hostmanaged", "none"), ("driverManaged", "Domain")]
)
def test_unknown_mode_or_isolation_fails_with_the_apps_message_without_schema(
    schemaless_chart: pathlib.Path, mode: str, isolation: str
) -> None:
    message = _core_outcome(mode, isolation, {})
    assert message is not None
    assert message in cr.render_error(cr.imex(mode, isolation), chart_dir=schemaless_chart)


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"bogus": 1}, "additional properties 'bogus' not allowed"),
        ({"controller": {"replica": 2}}, "additional properties 'replica' not allowed"),
        (cr.imex("perJob"), "value must be one of 'driverManaged', 'hostManaged'"),
        (
            cr.imex("driverManaged", "daemon"),
            "value must be one of '', 'domain', 'channel', 'none'",
        ),
        ({"kubeletPlugin": {"cdiRoot": "var/run/cdi"}}, "/kubeletPlugin/cdiRoot"),
        ({"resources": {"gpus": {"enabled": "yes"}}}, "/resources/gpus/enabled"),
    ],
    ids=["top-level", "nested", "mode-enum", "isolation-enum", "relative-path", "gpus"],
)
def test_schema_rejects_unknown_keys_and_invalid_values_readably(
    values: dict[str, Any], fragment: str
) -> None:
    assert fragment in cr.render_error(values)


@pytest.mark.parametrize(("replicas", "forced", "expected"), [
    (1, False, "false"), (2, False, "true"), (1, True, "true"), (2, True, "true"),
])
def test_controller_leader_election_follows_replicas(
    replicas: int, forced: bool, expected: str
) -> None:
    values = {"controller": {"replicas": replicas, "leaderElection": {"enabled": forced}}}
    controller = cr.one(cr.render(values), "Deployment")
    assert controller["spec"]["replicas"] == replicas
    assert cr.container_env(controller)["LEADER_ELECT"] == expected


def test_controller_elects_a_leader_by_default_with_client_go_timings() -> None:
    controller = cr.one(cr.render({}), "Deployment")
    env = cr.container_env(controller)
    assert env["LEADER_ELECT"] == "true"
    assert (env["LEASE_DURATION_SECONDS"], env["RENEW_DEADLINE_SECONDS"],
            env["RETRY_PERIOD_SECONDS"]) == ("15", "10", "2")


@pytest.mark.parametrize("values", [{}, {"controller": {"replicas": 3}},
                                    {"controller": {"leaderElection": {"enabled": False}}}])
def test_a_controller_rollout_stops_the_old_replicas_before_starting_new_ones(
    values: dict[str, Any],
) -> None:
    # NB: the default RollingUpdate starts the new pod beside the old one: two controllers
    # handing out IMEX channels at once (and, with readiness meaning "leading", a rollout
    # that could never finish).
    controller = cr.one(cr.render(values), "Deployment")
    # rollingUpdate: null removes, on `helm upgrade`, what the older RollingUpdate left.
    assert controller["spec"]["strategy"] == {"type": "Recreate", "rollingUpdate": None}


@pytest.mark.parametrize(("given", "seconds"), [
    ({"leaseDuration": "30s", "renewDeadline": "20s", "retryPeriod": "500ms"},
     ("30", "20", "0.5")),
    ({"leaseDuration": "1m", "renewDeadline": 40, "retryPeriod": "4s"}, ("60", "40", "4")),
])
def test_upstream_leader_election_timings_are_accepted(
    given: dict[str, Any], seconds: tuple[str, str, str],
) -> None:
    values = {"controller": {"leaderElection": given}}
    env = cr.container_env(cr.one(cr.render(values), "Deployment"))
    assert (env["LEASE_DURATION_SECONDS"], env["RENEW_DEADLINE_SECONDS"],
            env["RETRY_PERIOD_SECONDS"]) == seconds


def test_a_leader_election_timing_that_is_no_duration_is_refused() -> None:
    assert "leaseDuration" in cr.render_error(
        {"controller": {"leaderElection": {"leaseDuration": "soon"}}})


def test_controller_env_and_least_privilege_security_context() -> None:
    controller = cr.one(cr.render({"logVerbosity": 6}), "Deployment")
    env = cr.container_env(controller)
    assert env["NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert (env["METRICS_PORT"], env["HEALTH_PORT"], env["LOG_VERBOSITY"]) == ("8080", "8081", "6")
    # Our own image runs compute-domain-daemon.
    assert env["DAEMON_IMAGE"] == controller["spec"]["template"]["spec"]["containers"][0]["image"]
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    container = controller["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["compute-domain-controller"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert "privileged" not in container["securityContext"]


def test_kubelet_plugin_mounts_host_paths_at_identical_paths() -> None:
    values = {
        "nvidiaDriverRoot": "/run/nvidia/driver",
        "kubeletPlugin": {"cdiRoot": "/etc/cdi", "pluginDir": "/data/kubelet/plugins/cd"},
    }
    plugin = cr.one(cr.render(values), "DaemonSet")
    spec = plugin["spec"]["template"]["spec"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert {k: v for k, v in mounts.items() if k != "driver-root"} == {
        k: v for k, v in host_paths.items() if k != "driver-root"
    }
    assert set(host_paths.values()) == {
        "/run/nvidia/driver", "/etc/cdi", "/data/kubelet/plugins/cd",
        "/var/lib/kubelet/plugins_registry", "/dev",
        # The container runtime CDI check's socket directories (test_helm_runtime_socket.py).
        "/run/containerd", "/var/run/crio",
    }
    env = cr.container_env(plugin)
    assert (env["CDI_ROOT"], env["PLUGIN_DIR"]) == ("/etc/cdi", "/data/kubelet/plugins/cd")


@pytest.mark.parametrize("driver_root", ["/", "/run/nvidia/driver"])
def test_kubelet_plugin_always_mounts_the_driver_root_read_only_at_driver_root(
    driver_root: str,
) -> None:
    # The image ships no libnvidia-ml: even a host-installed driver ("/") must be mounted.
    plugin = cr.one(cr.render({"nvidiaDriverRoot": driver_root}), "DaemonSet")
    spec = plugin["spec"]["template"]["spec"]
    [volume] = [v for v in spec["volumes"] if v["name"] == "driver-root"]
    assert volume["hostPath"]["path"] == driver_root
    [mount] = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "driver-root"]
    assert (mount["mountPath"], mount["readOnly"]) == ("/driver-root", True)
    env = cr.container_env(plugin)
    assert (env["NVIDIA_DRIVER_ROOT"], env["NVIDIA_VISIBLE_DEVICES"]) == ("/driver-root", "void")
    # The host's view of the same root: daemon pods mount nvidia-imex from there.
    assert env["HOST_DRIVER_ROOT"] == driver_root


def test_kubelet_plugin_probes_grpc_health_and_reads_downward_api() -> None:
    plugin = cr.one(cr.render({"kubeletPlugin": {"healthPort": 6000}}), "DaemonSet")
    container = plugin["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["compute-domain-kubelet-plugin"]
    assert container["startupProbe"]["grpc"] == {"port": 6000}
    assert container["livenessProbe"]["grpc"] == {"port": 6000}
    assert container["securityContext"] == {"privileged": True, "runAsUser": 0}
    env = cr.container_env(plugin)
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert env["HEALTH_PORT"] == "6000"
    # The readiness query is a host-managed concern: off in the default driverManaged mode.
    assert (env["NVML"], env["HOST_IMEX_CHECK"]) == ("real", "false")
    assert env["IMEX_HOST_SOCKET_PATH"] == "/etc/nvidia-imex/imex_ctrl.sock"


def test_kubelet_plugin_stale_claim_cleanup_interval_is_a_chart_setting() -> None:
    default = cr.container_env(cr.one(cr.render({}), "DaemonSet"))
    assert default["STALE_CLAIM_CLEANUP_INTERVAL_SECONDS"] == "30"
    chosen = cr.render({"kubeletPlugin": {"staleClaimCleanupIntervalSeconds": 10}})
    env = cr.container_env(cr.one(chosen, "DaemonSet"))
    assert env["STALE_CLAIM_CLEANUP_INTERVAL_SECONDS"] == "10"


def test_host_imex_check_is_on_in_host_managed_mode_with_upstreams_socket() -> None:
    plugin = cr.one(cr.render(cr.host_managed()), "DaemonSet")
    env = cr.container_env(plugin)
    assert (env["HOST_IMEX_CHECK"], env["IMEX_HOST_SOCKET_PATH"]) == (
        "true", "/etc/nvidia-imex/imex_ctrl.sock",
    )
    # The query runs chrooted into the driver root, so the socket needs no mount of its own.
    volumes = plugin["spec"]["template"]["spec"]["volumes"]
    assert not [v for v in volumes if v["name"] == "host-imex-socket"]


def test_host_imex_socket_and_check_are_chart_settings() -> None:
    values = cr.host_managed()
    values["resources"]["computeDomains"]["imex"].update(
        hostCheck=False, hostSocketPath="/run/nvidia-imex/imex.sock"
    )
    env = cr.container_env(cr.one(cr.render(values), "DaemonSet"))
    assert (env["HOST_IMEX_CHECK"], env["IMEX_HOST_SOCKET_PATH"]) == (
        "false", "/run/nvidia-imex/imex.sock",
    )


def test_only_the_kubelet_plugin_runs_privileged() -> None:
    values = {"webhook": {"enabled": True, "tls": {"secretName": "tls"}}}
    objects = cr.render(values)
    privileged = []
    for obj in objects:
        template = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in template.get("containers", []):
            if container.get("securityContext", {}).get("privileged"):
                privileged.append(obj["kind"])
    assert privileged == ["DaemonSet"]


def test_admission_policy_binds_resourceslice_writes_to_the_plugin_service_account() -> None:
    objects = cr.render({})
    name = f"{cr.RELEASE}-compute-domain-dra-driver-kubelet-plugin-resourceslices"
    policy = cr.one(objects, "ValidatingAdmissionPolicy", name)
    binding = cr.one(objects, "ValidatingAdmissionPolicyBinding", name)
    plugin_sa = cr.one(cr.find(objects, "DaemonSet"), "DaemonSet")["spec"]["template"]["spec"][
        "serviceAccountName"
    ]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["resourceslices"]
    assert f"system:serviceaccount:{cr.NAMESPACE}:{plugin_sa}" in (
        policy["spec"]["matchConditions"][0]["expression"]
    )


def test_webhook_objects_render_only_when_enabled() -> None:
    assert [o for o in cr.render({}) if "webhook" in o["metadata"]["name"]] == []
    objects = cr.render({"webhook": {"enabled": True, "tls": {"secretName": "webhook-tls"}}})
    webhook = cr.one(objects, "ValidatingWebhookConfiguration")
    service = cr.one(objects, "Service")
    assert webhook["webhooks"][0]["clientConfig"]["service"]["name"] == service["metadata"]["name"]
    deployments = {d["metadata"]["name"] for d in cr.find(objects, "Deployment")}
    assert f"{cr.RELEASE}-compute-domain-dra-driver-webhook" in deployments


def test_webhook_in_secret_mode_without_a_secret_fails_rendering() -> None:
    # Without webhook.tls the certificate comes from cert-manager (test_helm_webhook_tls.py).
    values = {"webhook": {"enabled": True, "tls": {"mode": "secret"}}}
    assert "webhook.tls.secret.name" in cr.render_error(values)


@pytest.mark.parametrize(
    ("values", "mode", "isolation", "gates"),
    [({}, "driverManaged", "domain", ""),
     (cr.host_managed(), "hostManaged", "none", "HostManagedIMEXDaemon=true")],
)
def test_preflight_hook_checks_mode_and_isolation_before_upgrade(
    values: dict[str, Any], mode: str, isolation: str, gates: str
) -> None:
    objects = cr.render(values, is_upgrade=True)
    job = cr.one(objects, "Job")
    assert "pre-upgrade" in job["metadata"]["annotations"]["helm.sh/hook"].split(",")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == [
        "computedomain", "preflight", "--mode", mode, "--isolation", isolation,
        "--feature-gates", gates,
    ]
    account = job["spec"]["template"]["spec"]["serviceAccountName"]
    binding = cr.one(objects, "ClusterRoleBinding", account)
    role = cr.one(objects, "ClusterRole", binding["roleRef"]["name"])
    assert role["rules"] == [
        {"apiGroups": ["resource.nvidia.com"], "resources": ["computedomains"],
         "verbs": ["get", "list"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims", "resourceslices"],
         "verbs": ["list"]},
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["list"]},
        # Nodes whose runtime ignores CDI specs are reported (condition of the plugins').
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
    ]
    # The hook's RBAC exists before the Job runs.
    for obj in (binding, role, cr.one(objects, "ServiceAccount", account)):
        assert int(obj["metadata"]["annotations"]["helm.sh/hook-weight"]) < 0


def test_namespaced_objects_land_in_the_release_namespace() -> None:
    cluster_scoped = {
        "ClusterRole", "ClusterRoleBinding", "DeviceClass", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration",
    }
    values = {"webhook": {"enabled": True, "tls": {"secretName": "tls"}}}
    for obj in cr.render(values):
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"]
        else:
            assert obj["metadata"]["namespace"] == cr.NAMESPACE, obj["kind"]


def _preflight_verdict(values: dict[str, Any], *, admitted: tuple[str, str] | None) -> str:
    """Run the rendered hook's argv through the real CLI parser and preflight check."""
    job = cr.one(cr.render(values, is_upgrade=True), "Job")
    argv = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert argv[:2] == ["computedomain", "preflight"]
    args = preflight.parse(argv[2:], {})
    cluster = memory_cluster.InMemoryCluster()
    if admitted is not None:
        cluster.create("ComputeDomain", {
            "apiVersion": names.GROUP_VERSION, "kind": "ComputeDomain",
            "metadata": {"name": "cd", "namespace": "default", "annotations": {
                names.ADMITTED_MODE_ANNOTATION: admitted[0],
                names.ADMITTED_ISOLATION_ANNOTATION: admitted[1],
            }},
            "spec": {"channel": {"resourceClaimTemplate": {"name": "cd-channel"}}},
        })
    return preflight.check(
        cluster, mode=args.imex_mode, isolation=args.imex_isolation,
        feature_gates=args.feature_gates,
    )


def test_preflight_hook_passes_when_nothing_blocks_the_mode() -> None:
    assert _preflight_verdict(cr.host_managed(), admitted=None) == ""
    assert _preflight_verdict(cr.host_managed(), admitted=("hostManaged", "none")) == ""


def test_preflight_hook_refuses_switch_while_compute_domains_of_other_mode_exist() -> None:
    assert _preflight_verdict(cr.host_managed(), admitted=("driverManaged", "domain")) != ""
    assert _preflight_verdict({}, admitted=("hostManaged", "none")) != ""


def test_webhook_deployment_runs_the_webhook_command_with_settings_it_reads() -> None:
    objects = cr.render({"webhook": {"enabled": True, "tls": {"secretName": "webhook-tls"}},
                         **cr.host_managed()})
    deployment = cr.one(objects, "Deployment", f"{cr.RELEASE}-compute-domain-dra-driver-webhook")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    argv = [*container.get("command", []), *container.get("args", [])]
    assert argv[:2] == ["computedomain", "webhook"]
    env = {k: v for k, v in cr.container_env(deployment).items() if isinstance(v, str)}
    settings = cli_webhook.settings_from(cli_webhook.parse(argv[2:], env), env=env)
    assert settings.imex_mode == "hostManaged" and settings.imex_isolation == "none"
    assert settings.tls_cert_file and settings.tls_key_file  # served over TLS in a cluster
    resolved = modes.resolve_driver_config(
        mode=settings.imex_mode, isolation=settings.imex_isolation,
        feature_gates=settings.feature_gates, namespace=settings.namespace,
    )
    assert resolved.config.host_managed
    ports = [p["containerPort"] for p in container.get("ports", [])]
    assert settings.port in ports


def _plugin_settings(values: dict[str, Any]) -> tuple[str, str, str, int]:
    plugin = cr.one(cr.render(values), "DaemonSet")
    env = cr.container_env(plugin)
    container = plugin["spec"]["template"]["spec"]["containers"][0]
    probe_port = container["livenessProbe"]["grpc"]["port"]
    return env["PLUGIN_DIR"], env["REGISTRY_DIR"], env["HEALTH_PORT"], probe_port


def test_kubelet_plugin_accepts_upstream_value_names_and_prefers_ours() -> None:
    assert _plugin_settings({}) == (
        "/var/lib/kubelet/plugins/compute-domain.nvidia.com",
        "/var/lib/kubelet/plugins_registry", "51515", 51515,
    )
    upstream = {"kubeletPlugin": {
        "kubeletPluginsDirectoryPath": "/data/kubelet/plugins",
        "kubeletRegistrarDirectoryPath": "/data/kubelet/plugins_registry",
        "containers": {"computeDomains": {"healthcheckPort": 51516}},
    }}
    assert _plugin_settings(upstream) == (
        "/data/kubelet/plugins/compute-domain.nvidia.com",
        "/data/kubelet/plugins_registry", "51516", 51516,
    )
    both = {"kubeletPlugin": {
        **upstream["kubeletPlugin"],
        "pluginDir": "/ours/cd", "registryDir": "/ours/reg", "healthPort": 6000,
    }}
    assert _plugin_settings(both) == ("/ours/cd", "/ours/reg", "6000", 6000)


# ---------------------------------------------------------------- the gate without the mode


@pytest.mark.parametrize("gate", ["HostManagedIMEXDaemon", "HostManagedIMEX"])
def test_host_managed_gate_alone_only_unlocks_the_mode(gate: str) -> None:
    # As upstream: the gate changes nothing by itself; the default mode stays driverManaged.
    objects = cr.render({"featureGates": {gate: True}})
    env = cr.container_env(cr.one(objects, "DaemonSet"))
    assert (env["IMEX_MODE"], env["IMEX_ISOLATION"]) == ("driverManaged", "domain")
    assert "HostManagedIMEXDaemon=true" in env["FEATURE_GATES"]


def test_host_managed_gate_with_host_managed_mode_still_renders() -> None:
    assert cr.one(cr.render(cr.host_managed()), "DaemonSet")


# ---------------------------------------------------------------- NOTES.txt


def _doc_headings(path: str) -> list[str]:
    text = (cr.REPO_ROOT / path).read_text()
    return [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]


@pytest.mark.parametrize("values", [{}, cr.host_managed()], ids=["driverManaged", "hostManaged"])
def test_notes_name_the_mode_and_point_to_docs_sections_that_exist(values: dict[str, Any]) -> None:
    notes = cr.notes(values)
    mode = values.get("resources", {}).get("computeDomains", {}).get("imex", {}).get(
        "mode", "driverManaged")

    assert f"IMEX mode: {mode}," in notes
    assert '"Switching modes"' in notes
    assert "Switching modes" in _doc_headings("docs/operations.md")
    if mode == "hostManaged":
        assert "the driver starts no IMEX daemons" in notes
        assert "Host-managed IMEX" in _doc_headings("docs/prerequisites.md")
    else:
        assert "hosts must not run nvidia-imex" in notes
