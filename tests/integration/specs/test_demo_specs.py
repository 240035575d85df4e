"""Every demo spec under demo/specs/host-managed/ parses and is valid for what it is.

ComputeDomains against our CRD schema, core objects with kubernetes-validate (strict, every
supported Kubernetes version), and Helm values overlays against values.schema.json and by
rendering the chart with them through the real Helm engine.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml

from core.computedomain import modes

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC_DIR = REPO_ROOT / "demo" / "specs" / "host-managed"
CHART_DIR = REPO_ROOT / "helm" / "nvidia-dra-driver"
KUBE_VERSIONS = ("1.34", "1.35", "1.36", "1.37")

MANIFESTS = sorted(p for p in SPEC_DIR.glob("*.yaml") if not p.name.startswith("values-"))
OVERLAYS = sorted(SPEC_DIR.glob("values-*.yaml"))


def _objects(path: pathlib.Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _crd_schema(plural: str) -> dict[str, Any]:
    crd = yaml.safe_load((CHART_DIR / "crds" / f"{plural}.resource.nvidia.com.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_the_demo_has_the_three_host_managed_specs() -> None:
    assert {p.name for p in MANIFESTS + OVERLAYS} >= {
        "smoke.yaml", "negative-allocation-mode-all.yaml", "values-gb200.yaml",
    }


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_manifest_objects_are_valid(path: pathlib.Path) -> None:
    objects = _objects(path)
    assert objects
    for obj in objects:
        if obj["kind"] == "ComputeDomain":
            assert obj["apiVersion"] == "resource.nvidia.com/v1beta1"
            jsonschema.Draft7Validator(_crd_schema("computedomains")).validate(obj)
            continue
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_pods_claim_the_template_their_compute_domain_generates(path: pathlib.Path) -> None:
    objects = _objects(path)
    templates = {
        (o["metadata"]["namespace"], o["spec"]["channel"]["resourceClaimTemplate"]["name"])
        for o in objects if o["kind"] == "ComputeDomain"
    }
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert pods
    for pod in pods:
        for claim in pod["spec"]["resourceClaims"]:
            assert (pod["metadata"]["namespace"], claim["resourceClaimTemplateName"]) in templates


def test_negative_spec_asks_for_all_channels_and_smoke_for_one() -> None:
    def modes_in(name: str) -> set[str]:
        return {
            o["spec"]["channel"].get("allocationMode", "Single")
            for o in _objects(SPEC_DIR / name) if o["kind"] == "ComputeDomain"
        }

    assert modes_in("negative-allocation-mode-all.yaml") == {"All"}
    assert modes_in("smoke.yaml") == {"Single"}


@pytest.mark.parametrize("path", OVERLAYS, ids=[p.name for p in OVERLAYS])
def test_values_overlay_matches_the_schema_and_renders(path: pathlib.Path) -> None:
    values = yaml.safe_load(path.read_text())
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(values)
    chart = helm_python.Chart.load(str(CHART_DIR))
    chart.validate_schema(values)
    manifests = chart.render(values, name="cdd", namespace="nvidia-dra-driver", is_install=True)
    objects = [
        d for path, text in manifests.items() if not path.endswith("NOTES.txt")
        for d in yaml.safe_load_all(text) if d
    ]
    for obj in objects:
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
    imex = values["resources"]["computeDomains"]["imex"]
    # The apps accept the same configuration.
    modes.resolve_driver_config(
        mode=imex["mode"], isolation=imex["isolation"], feature_gates=values["featureGates"],
        namespace="nvidia-dra-driver",
    )
    plugin = next(o for o in objects if o["kind"] == "DaemonSet")
    container = plugin["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["IMEX_MODE"] == "hostManaged"
    # The host driver root is mounted at /driver-root, where the plugin loads NVML from.
    assert env["NVIDIA_DRIVER_ROOT"] == "/driver-root"
    volumes = {v["name"]: v for v in plugin["spec"]["template"]["spec"]["volumes"]}
    assert volumes["driver-root"]["hostPath"]["path"] == values["nvidiaDriverRoot"]
