"""The chart's GPU DeviceClasses are exactly the ones core builds (the demo uses core's)."""

from __future__ import annotations

from typing import Any

import chart_rendering as cr
import pytest

from core import gates
from core.gpu import deviceclasses


def _rendered(values: cr.Obj) -> dict[str, dict[str, Any]]:
    found = {}
    for obj in cr.find(cr.render(values), "DeviceClass"):
        if obj["metadata"]["name"] in {
            deviceclasses.GPU_CLASS, deviceclasses.MIG_CLASS, deviceclasses.VFIO_CLASS,
        }:
            found[obj["metadata"]["name"]] = obj
    return found


def _normalised(spec: dict[str, Any]) -> dict[str, Any]:
    # The chart folds each expression over two lines (YAML ">-"): compare word by word.
    selectors = [{"cel": {"expression": " ".join(s["cel"]["expression"].split())}}
                 for s in spec["selectors"]]
    return {**spec, "selectors": selectors}


@pytest.mark.parametrize("passthrough", [False, True])
def test_the_chart_installs_the_gpu_device_classes_core_builds(passthrough: bool) -> None:
    values: cr.Obj = {"resources": {"gpus": {"enabled": True}},
                      "featureGates": {"PassthroughSupport": passthrough}}
    resolved = gates.resolve_gates({gates.PASSTHROUGH_SUPPORT: passthrough})

    built = {c["metadata"]["name"]: c for c in deviceclasses.device_classes(resolved)}
    rendered = _rendered(values)

    assert sorted(rendered) == sorted(built)
    for name, obj in built.items():
        assert _normalised(rendered[name]["spec"]) == _normalised(obj["spec"]), name
