"""Object builders: the wire facts of DESIGN §3 that do not need a schema to check."""

from __future__ import annotations

import dataclasses

import controller_harness as harness

from core import models, names
from core.computedomain import objects


def test_host_managed_has_only_the_channel_device_class() -> None:
    assert [c["metadata"]["name"] for c in objects.device_classes(harness.host_config())] == [
        names.CHANNEL_DEVICE_CLASS
    ]
    daemon, channel = objects.device_classes(harness.driver_config())
    assert channel["metadata"]["name"] == names.CHANNEL_DEVICE_CLASS
    assert daemon["metadata"]["name"] == names.DAEMON_DEVICE_CLASS
    assert channel["spec"]["selectors"] == [{"cel": {"expression": (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
        "device.attributes['compute-domain.nvidia.com'].id == 0"
    )}}]
    assert daemon["spec"]["selectors"] == [{"cel": {"expression": (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'daemon'"
    )}}]


def test_daemonset_runs_the_imex_daemon_with_its_compute_domain_in_env() -> None:
    config = harness.driver_config()
    cd = models.ComputeDomain(
        meta=models.ObjectMeta(name="train", namespace="team", uid="u-9"),
        spec=models.ComputeDomainSpec(
            channel=models.ChannelSpec(resource_claim_template_name="rct"), num_nodes=2
        ),
    )
    ds = objects.daemonset(cd, config=config)
    assert ds["metadata"]["name"] == "computedomain-daemon-u-9"
    assert ds["metadata"]["namespace"] == config.namespace
    assert ds["metadata"]["finalizers"] == [names.COMPUTE_DOMAIN_FINALIZER]
    assert ds["spec"]["selector"]["matchLabels"] == ds["spec"]["template"]["metadata"]["labels"]
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "compute-domain-daemon"
    assert container["image"] == config.daemon_image
    assert container["command"] == ["compute-domain-daemon", "run"]
    assert container["resources"] == {"claims": [{"name": "daemon"}]}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["COMPUTE_DOMAIN_UUID"] == "u-9"
    assert env["COMPUTE_DOMAIN_NAME"] == "train"
    assert env["COMPUTE_DOMAIN_NAMESPACE"] == "team"
    assert env["MAX_NODES_PER_IMEX_DOMAIN"] == "18"
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_daemonset_tolerates_every_taint_of_the_nodes_it_must_run_on() -> None:
    cd = models.ComputeDomain(
        meta=models.ObjectMeta(name="train", namespace="team", uid="u-9"),
        spec=models.ComputeDomainSpec(channel=models.ChannelSpec(resource_claim_template_name="r")),
    )
    pod_spec = objects.daemonset(cd, config=harness.driver_config())["spec"]["template"]["spec"]
    assert pod_spec["tolerations"] == [{"operator": "Exists"}]


def test_daemonset_runs_as_the_configured_daemon_service_account() -> None:
    cd = models.ComputeDomain(
        meta=models.ObjectMeta(name="train", namespace="team", uid="u-9"),
        spec=models.ComputeDomainSpec(channel=models.ChannelSpec(resource_claim_template_name="r")),
    )
    unset = objects.daemonset(cd, config=harness.driver_config())
    assert "serviceAccountName" not in unset["spec"]["template"]["spec"]
    config = dataclasses.replace(harness.driver_config(), daemon_service_account="imex-daemon")
    ds = objects.daemonset(cd, config=config)
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == "imex-daemon"


def test_builders_are_deterministic() -> None:
    config = harness.driver_config()
    cd = models.ComputeDomain(
        meta=models.ObjectMeta(name="train", namespace="team", uid="u-9"),
        spec=models.ComputeDomainSpec(
            channel=models.ChannelSpec(resource_claim_template_name="rct")
        ),
    )
    for build in (objects.workload_rct, objects.daemon_rct, objects.daemonset):
        assert build(cd, config=config) == build(cd, config=config)
