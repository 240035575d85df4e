"""Upstream's `kubeletPlugin.containers.computeDomains.gpuCliqueLabelEnabled` reaches the plugin.

The value becomes env GPU_CLIQUE_LABEL_ENABLED of the ComputeDomain plugin container (off by
default, as upstream), and only when it is on does a host-managed plugin get `patch` on nodes
(driver-managed plugins have it anyway, for the ComputeDomain label). Rendered from a copy of
the chart without values.schema.json, so this holds whatever the schema says of the key.
"""

from __future__ import annotations

import pathlib
import shutil
from typing import Any

import chart_rendering as cr
import pytest

LABEL_ON = {"kubeletPlugin": {"containers": {"computeDomains": {"gpuCliqueLabelEnabled": True}}}}


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    target = tmp_path_factory.mktemp("chart") / "nvidia-dra-driver"
    shutil.copytree(cr.CHART_DIR, target)
    (target / "values.schema.json").unlink()
    return target


def _merged(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = _merged(out[key], value)
            else:
                out[key] = value
    return out


def _env(objects: list[cr.Obj]) -> dict[str, str]:
    (daemonset,) = [o for o in objects if o["kind"] == "DaemonSet"
                    and o["metadata"]["name"].endswith("kubelet-plugin")]
    (container,) = [c for c in daemonset["spec"]["template"]["spec"]["containers"]
                    if c["name"] == "compute-domain-kubelet-plugin"]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def _may_patch_nodes(objects: list[cr.Obj]) -> bool:
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"
               and o["metadata"]["name"].endswith("kubelet-plugin")]
    return any("nodes" in r.get("resources", []) and "patch" in r.get("verbs", [])
               for r in role["rules"])


@pytest.mark.parametrize("mode", ["driverManaged", "hostManaged"])
def test_the_label_is_off_by_default(chart: pathlib.Path, mode: str) -> None:
    values = cr.host_managed() if mode == "hostManaged" else {}
    objects = cr.render(values, chart_dir=chart)
    assert _env(objects)["GPU_CLIQUE_LABEL_ENABLED"] == "false"
    assert _may_patch_nodes(objects) is (mode == "driverManaged")


@pytest.mark.parametrize("mode", ["driverManaged", "hostManaged"])
def test_the_upstream_value_turns_the_label_on_and_grants_patch_on_nodes(
    chart: pathlib.Path, mode: str
) -> None:
    values = _merged(cr.host_managed() if mode == "hostManaged" else {}, LABEL_ON)
    objects = cr.render(values, chart_dir=chart)
    assert _env(objects)["GPU_CLIQUE_LABEL_ENABLED"] == "true"
    assert _may_patch_nodes(objects)
