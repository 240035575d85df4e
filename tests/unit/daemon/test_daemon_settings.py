"""`compute-domain-daemon` reads what the controller's DaemonSet and the CDI edits give it."""

from __future__ import annotations

from apps.daemon import settings as daemon_settings
from core import gates, models
from core.computedomain import objects

CONFIG = models.DriverConfig(
    mode=models.IMEXMode.DRIVER_MANAGED, isolation=models.Isolation.DOMAIN,
    gates=gates.resolve_gates({}), namespace="drv",
)
CD = models.ComputeDomain(
    meta=models.ObjectMeta(name="train", namespace="team", uid="u-9"),
    spec=models.ComputeDomainSpec(channel=models.ChannelSpec(resource_claim_template_name="r")),
)


def _daemonset_env() -> dict[str, str]:
    """The DaemonSet's env as the kubelet resolves it (fieldRefs filled in)."""
    (container,) = objects.daemonset(CD, config=CONFIG)["spec"]["template"]["spec"]["containers"]
    fields = {"spec.nodeName": "node-1", "status.podIP": "10.0.0.5", "metadata.uid": "pod-uid",
              "metadata.name": "pod", "metadata.namespace": "drv"}
    return {
        e["name"]: e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        for e in container["env"]
    }


def test_the_daemonset_env_is_what_the_daemon_reads() -> None:
    settings = daemon_settings.parse(["run"], _daemonset_env())
    assert (settings.domain_uid, settings.domain_name, settings.domain_namespace) == (
        "u-9", "train", "team")
    assert (settings.node_name, settings.pod_ip, settings.namespace) == (
        "node-1", "10.0.0.5", "drv")
    # The pod that becomes an owner of the daemon's ComputeDomainClique.
    assert (settings.pod_name, settings.pod_uid) == ("pod", "pod-uid")
    assert settings.max_nodes == 18
    assert gates.resolve_gates(gates.parse_feature_gates(settings.feature_gates)) == CONFIG.gates


def test_clique_unset_differs_from_clique_empty() -> None:
    assert daemon_settings.parse(["check"], {}).clique_id is None
    assert daemon_settings.parse(["check"], {"CLIQUE_ID": ""}).clique_id == ""


def test_paths_default_to_the_imexd_mount_and_are_overridable() -> None:
    default = daemon_settings.parse(["run"], {})
    assert (default.imexd_cfg, default.nodes_cfg, default.hosts_file) == (
        "/imexd/imexd.cfg", "/imexd/nodes.cfg", "/etc/hosts")
    moved = daemon_settings.parse(["run", "--config-dir", "/tmp/x/", "--hosts-file", "/tmp/h"],
                                  {})
    assert (moved.imexd_template, moved.hosts_file) == ("/tmp/x/imexd.cfg.tmpl", "/tmp/h")


def test_the_daemon_container_runs_as_root_without_privilege() -> None:
    # It writes /etc/hosts and the root-owned /imexd host directory; devices come by claim.
    (container,) = objects.daemonset(CD, config=CONFIG)["spec"]["template"]["spec"]["containers"]
    assert container["securityContext"] == {
        "runAsUser": 0, "runAsGroup": 0, "allowPrivilegeEscalation": False}
    assert container["readinessProbe"]["exec"]["command"] == ["compute-domain-daemon", "check"]


def test_the_fabric_is_read_every_minute_through_real_nvml_unless_told_otherwise() -> None:
    default = daemon_settings.parse(["run"], {})
    assert (default.fabric_check_s, default.nvml, default.nvidia_driver_root) == (
        60.0, "real", "/")
    told = daemon_settings.parse(
        ["run", "--nvml", "simulated:gb200-nvl72"],
        {"FABRIC_CHECK_SECONDS": "0.5", "NVIDIA_DRIVER_ROOT": "/driver-root"})
    assert (told.fabric_check_s, told.nvml, told.nvidia_driver_root) == (
        0.5, "simulated:gb200-nvl72", "/driver-root")
