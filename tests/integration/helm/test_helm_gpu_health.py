"""The chart's GPU health setting: XIDs that only inform reach the GPU plugin as its env."""

from __future__ import annotations

from typing import Any

import chart_rendering as cr

GPUS = {"resources": {"gpus": {"enabled": True}}}


def _env(values: dict[str, Any], container: str) -> dict[str, str]:
    plugin = cr.one(cr.render(values), "DaemonSet")
    found = next(c for c in plugin["spec"]["template"]["spec"]["containers"]
                 if c["name"] == container)
    return {e["name"]: e.get("value", "") for e in found.get("env", [])}


def test_additional_xids_to_ignore_reach_the_gpu_plugin_only_when_set() -> None:
    values = {**GPUS, "kubeletPlugin": {"gpus": {"additionalXidsToIgnore": "48, 79"}}}
    assert _env(values, "gpu-kubelet-plugin")["ADDITIONAL_XIDS_TO_IGNORE"] == "48, 79"
    assert "ADDITIONAL_XIDS_TO_IGNORE" not in _env(values, "compute-domain-kubelet-plugin")
    assert "ADDITIONAL_XIDS_TO_IGNORE" not in _env(GPUS, "gpu-kubelet-plugin")


def test_additional_xids_that_are_not_numbers_are_refused_by_the_schema() -> None:
    refused = cr.render_error(
        {**GPUS, "kubeletPlugin": {"gpus": {"additionalXidsToIgnore": "48,abc"}}})
    assert "additionalXidsToIgnore" in refused and "does not match pattern" in refused
