"""The kubelet plugin's daemon claim, prepared over real gRPC on an embedded driver-managed node.

Covers: the CDI spec (validated against the reference CDI schema) carries the daemon's env
(COMPUTE_DOMAIN_UUID/NAME/NAMESPACE, CLIQUE_ID), the /imexd bind mount of the per-domain host
directory and the IMEX management capability device; the directory exists with the imexd.cfg
template before the spec that mounts it, survives while another daemon claim of the domain
holds it, and is removed with the last one; a chart template replaces the built-in one.
"""

from __future__ import annotations

import json
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "cdi"))

import test_cdi_schema as cdi_schema

from adapters.fs import cdi as fs_cdi
from apps.cli import embedded
from apps.kubeletplugin import daemon_claims
from core import errors, kinds, models, names
from core.computedomain import daemon_claim, imexconfig, node_facts

CD_NAMESPACE = "team"


@pytest.fixture
def env(tmp_path: pathlib.Path) -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="driverManaged", node_limit=1) as deployment:
        yield deployment


def _domain(env: embedded.Embedded) -> str:
    env.cluster.create(kinds.COMPUTE_DOMAIN.kind, {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "cd", "namespace": CD_NAMESPACE},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "cd-channel"}}},
    })
    env.settle()
    obj = env.cluster.get(kinds.COMPUTE_DOMAIN.kind, namespace=CD_NAMESPACE, name="cd")
    return str(obj["metadata"]["uid"])


def _daemon_claim(env: embedded.Embedded, name: str, *, domain_id: str) -> models.ClaimRef:
    node = next(iter(env.nodes))
    ns = env.config.namespace
    created = env.cluster.create(kinds.RESOURCE_CLAIM.kind, {
        "apiVersion": names.DRA_GROUP_VERSION, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [{"name": "daemon", "exactly": {
            "deviceClassName": names.DAEMON_DEVICE_CLASS}}]}},
    })
    pod = env.cluster.create(kinds.POD.kind, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-pod", "namespace": ns},
        "spec": {"nodeName": node, "containers": [{"name": "d", "image": "daemon"}]},
    })
    params = {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_DAEMON_CONFIG,
              "domainID": domain_id}
    env.cluster.patch(
        kinds.RESOURCE_CLAIM.kind, namespace=ns, name=name, subresource="status",
        patch={"status": {"allocation": {"devices": {
            "results": [{"request": "daemon", "driver": names.DRIVER_NAME, "pool": node,
                         "device": names.daemon_device_name()}],
            "config": [{"source": "FromClaim", "requests": ["daemon"],
                        "opaque": {"driver": names.DRIVER_NAME, "parameters": params}}],
        }}, "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"],
                             "uid": pod["metadata"]["uid"]}]}},
    )
    return models.ClaimRef(uid=names.ClaimUID(created["metadata"]["uid"]), namespace=ns,
                           name=name)


def _node(env: embedded.Embedded) -> embedded.SimulatedNode:
    return next(iter(env.nodes.values()))


def _prepare(env: embedded.Embedded, ref: models.ClaimRef) -> models.ClaimResult:
    return _node(env).kubelet.prepare(names.DRIVER_NAME, (ref,))[ref.uid]


def _spec(env: embedded.Embedded, ref: models.ClaimRef) -> dict[str, Any]:
    path = pathlib.Path(_node(env).settings.cdi_root) / names.cdi_spec_file_name(ref.uid)
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def test_daemon_claim_spec_carries_env_mount_and_mgmt_device(env: embedded.Embedded) -> None:
    domain_id = _domain(env)
    ref = _daemon_claim(env, "daemon-a", domain_id=domain_id)
    result = _prepare(env, ref)
    assert result.error == ""
    spec = _spec(env, ref)
    cdi_schema._check(spec)
    (device,) = spec["devices"]
    edits = device["containerEdits"]
    node = _node(env)
    assert edits["env"] == [
        f"COMPUTE_DOMAIN_UUID={domain_id}",
        "COMPUTE_DOMAIN_NAME=cd",
        f"COMPUTE_DOMAIN_NAMESPACE={CD_NAMESPACE}",
        f"CLIQUE_ID={node.plugin.node.clique_id}",
    ]
    assert node.plugin.node.clique_id  # a GB200 node is in a clique
    host_dir = pathlib.Path(node.settings.plugin_dir) / "domains" / domain_id
    assert edits["mounts"] == [{"hostPath": str(host_dir), "containerPath": "/imexd",
                                "options": ["rw", "nosuid", "nodev", "bind"]}]
    assert edits["deviceNodes"] == [{"path": "/dev/nvidia-caps/nvidia-cap1", "type": "c",
                                     "major": 511, "minor": 1, "fileMode": 256}]
    template = (host_dir / daemon_claim.TEMPLATE_FILE_NAME).read_text(encoding="utf-8")
    assert template == imexconfig.DEFAULT_IMEXD_TEMPLATE


def test_domain_dir_lives_until_the_last_daemon_claim_of_the_domain_is_unprepared(
    env: embedded.Embedded,
) -> None:
    domain_id = _domain(env)
    old = _daemon_claim(env, "daemon-old", domain_id=domain_id)
    new = _daemon_claim(env, "daemon-new", domain_id=domain_id)
    assert _prepare(env, old).error == ""
    assert _prepare(env, new).error == ""
    host_dir = pathlib.Path(_node(env).settings.plugin_dir) / "domains" / domain_id
    kubelet = _node(env).kubelet

    assert kubelet.unprepare(names.DRIVER_NAME, (old,))[old.uid].error == ""
    assert host_dir.is_dir()  # the replacement pod still mounts it
    assert kubelet.unprepare(names.DRIVER_NAME, (new,))[new.uid].error == ""
    assert not host_dir.exists()


def test_chart_template_replaces_the_built_in_one(tmp_path: pathlib.Path) -> None:
    template = tmp_path / "imexd.cfg.tmpl"
    template.write_text("SERVER_PORT=50001\n", encoding="utf-8")
    node = node_facts.ImexNodeFacts(node_name=names.NodeName("n"), clique_id="c.1", channel_major=1,
                            boot_id="b", daemon_config_root=str(tmp_path / "domains"))
    config = models.DriverConfig(mode=models.IMEXMode.DRIVER_MANAGED,
                                 isolation=models.Isolation.DOMAIN,
                                 gates=models.FeatureGates(values={}))
    store = daemon_claims.cdi_store(
        fs_cdi.CDIDirectory(str(tmp_path / "cdi")), node=node, config=config,
        template_path=str(template),
    )
    spec = {"devices": [{"name": "u-daemon", "containerEdits": {"mounts": [
        {"hostPath": str(tmp_path / "domains" / "cd1"), "containerPath": "/imexd"}]}}]}
    store.write(names.ClaimUID("u"), spec)
    written = tmp_path / "domains" / "cd1" / daemon_claim.TEMPLATE_FILE_NAME
    assert written.read_text(encoding="utf-8") == "SERVER_PORT=50001\n"


def test_a_missing_chart_template_is_a_startup_error(tmp_path: pathlib.Path) -> None:
    node = node_facts.ImexNodeFacts(node_name=names.NodeName("n"), clique_id="", channel_major=1,
                            boot_id="b", daemon_config_root=str(tmp_path))
    config = models.DriverConfig(mode=models.IMEXMode.DRIVER_MANAGED,
                                 isolation=models.Isolation.DOMAIN,
                                 gates=models.FeatureGates(values={}))
    with pytest.raises(errors.ConfigError, match=r"IMEX_DAEMON_CONFIG_TEMPLATE=.*does not exist"):
        daemon_claims.cdi_store(
            fs_cdi.CDIDirectory(str(tmp_path / "cdi")), node=node, config=config,
            template_path=str(tmp_path / "nope"),
        )



def test_a_spec_mounting_a_dir_outside_the_domains_root_never_gets_it_deleted(
    tmp_path: pathlib.Path,
) -> None:
    outside = tmp_path / "precious"
    outside.mkdir()
    node = node_facts.ImexNodeFacts(node_name=names.NodeName("n"), clique_id="", channel_major=1,
                            boot_id="b", daemon_config_root=str(tmp_path / "domains"))
    config = models.DriverConfig(mode=models.IMEXMode.DRIVER_MANAGED,
                                 isolation=models.Isolation.DOMAIN,
                                 gates=models.FeatureGates(values={}))
    store = daemon_claims.cdi_store(fs_cdi.CDIDirectory(str(tmp_path / "cdi")), node=node,
                                    config=config, template_path="")
    spec = {"devices": [{"name": "u-daemon", "containerEdits": {"mounts": [
        {"hostPath": str(outside), "containerPath": "/imexd"}]}}]}
    store.write(names.ClaimUID("u"), spec)
    store.delete(names.ClaimUID("u"))
    assert outside.is_dir()
    assert not (outside / daemon_claim.TEMPLATE_FILE_NAME).exists()
