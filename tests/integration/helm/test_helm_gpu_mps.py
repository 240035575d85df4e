"""The chart with MPSSupport on the GPU half, rendered by the real Helm engine.

Covers: the plugin's Role on Deployments and Pods of its namespace (for the MPS control
daemons), only with the gate and the GPU half; the MPS_* env the plugin reads (its own image,
pull policy and secrets, its ServiceAccount); the plugin dir mounted Bidirectional so the
daemons' shm tmpfs reaches the host; strict validation of every object.
"""

from __future__ import annotations

from typing import Any

import chart_rendering as cr
import kubernetes_validate
import pytest

from apps.gpuplugin import settings as gpu_settings

MPS_ON: cr.Obj = {"resources": {"gpus": {"enabled": True}},
                  "featureGates": {"MPSSupport": True},
                  "imagePullSecrets": [{"name": "ngc"}, {"name": "mirror"}]}


def _gpu_container(objects: list[cr.Obj]) -> cr.Obj:
    plugin = cr.one(objects, "DaemonSet")
    (found,) = [c for c in plugin["spec"]["template"]["spec"]["containers"]
                if c["name"] == "gpu-kubelet-plugin"]
    return found


def _env(container: cr.Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container["env"]}


def test_mps_gives_the_plugin_a_role_on_deployments_and_pods_of_its_namespace() -> None:
    objects = cr.render(MPS_ON)
    plugin = cr.one(objects, "DaemonSet")
    (role,) = [r for r in cr.find(objects, "Role") if r["metadata"]["name"].endswith("-mps")]
    assert role["metadata"]["namespace"] == plugin["metadata"]["namespace"]
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"])
             for r in role["rules"]}
    assert rules[(("apps",), ("deployments",))] >= {"get", "create", "delete"}
    assert rules[(("",), ("pods",))] >= {"get", "list"}
    (binding,) = [b for b in cr.find(objects, "RoleBinding")
                  if b["roleRef"]["name"] == role["metadata"]["name"]]
    account = plugin["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"][0]["name"] == account


@pytest.mark.parametrize("values", [
    {"resources": {"gpus": {"enabled": True}}},
    {"featureGates": {"MPSSupport": True}},
], ids=["gpus-without-mps", "mps-without-gpus"])
def test_no_mps_role_or_env_without_both_the_gate_and_the_gpu_half(values: cr.Obj) -> None:
    objects = cr.render(values)
    assert not [r for r in cr.find(objects, "Role") if r["metadata"]["name"].endswith("-mps")]
    if values.get("resources"):
        assert "MPS_IMAGE" not in _env(_gpu_container(objects))


def test_the_plugin_is_told_its_image_and_mounts_its_dir_bidirectional() -> None:
    objects = cr.render(MPS_ON)
    container = _gpu_container(objects)
    env = _env(container)
    assert env["MPS_IMAGE"] == container["image"]
    assert env["MPS_IMAGE_PULL_POLICY"] == container["imagePullPolicy"]
    assert env["MPS_IMAGE_PULL_SECRETS"] == "ngc,mirror"
    plugin = cr.one(objects, "DaemonSet")
    assert env["MPS_SERVICE_ACCOUNT"] == plugin["spec"]["template"]["spec"]["serviceAccountName"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "gpu-plugin-dir"]
    assert mount["mountPropagation"] == "Bidirectional"
    assert container["securityContext"]["privileged"] is True
    parsed = gpu_settings.parse([], {**env, "NODE_NAME": "n1"})
    assert parsed.mps_image == container["image"]
    assert parsed.mps_image_pull_secrets == ("ngc", "mirror")


def test_every_object_validates_strictly_with_mps_on() -> None:
    for obj in cr.render(MPS_ON):
        kubernetes_validate.validate(obj, "1.34", strict=True)
