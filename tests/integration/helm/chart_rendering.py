"""Render the chart with the real Helm engine (helm-python-sdk) and read back plain objects.

Shared by the chart tests in this directory (pytest puts this directory on sys.path).
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from typing import Any

import helm_python
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
CHART_DIR = REPO_ROOT / "helm" / "nvidia-dra-driver"
RELEASE = "cdd"
NAMESPACE = "nvidia-dra-driver"
KUBE_VERSIONS = ("1.34", "1.35", "1.36", "1.37")

Obj = dict[str, Any]


def load_chart(chart_dir: pathlib.Path = CHART_DIR) -> helm_python.Chart:
    return helm_python.Chart.load(str(chart_dir))


def render(
    values: Mapping[str, Any] | None = None,
    *,
    chart_dir: pathlib.Path = CHART_DIR,
    is_upgrade: bool = False,
) -> list[Obj]:
    """Every object the chart renders for `values` (templates only; CRDs: `crds()`)."""
    manifests = load_chart(chart_dir).render(
        dict(values or {}),
        name=RELEASE,
        namespace=NAMESPACE,
        is_install=not is_upgrade,
        is_upgrade=is_upgrade,
    )
    objects: list[Obj] = []
    for path in sorted(manifests):
        if path.endswith("/NOTES.txt"):
            continue  # shown to the user after install, not applied (as `helm template` does)
        for doc in yaml.safe_load_all(manifests[path]):
            if doc:
                objects.append(doc)
    return objects


def notes(values: Mapping[str, Any] | None = None, *, is_upgrade: bool = False) -> str:
    """The NOTES.txt text Helm prints after an install or upgrade with `values`."""
    manifests = load_chart().render(
        dict(values or {}), name=RELEASE, namespace=NAMESPACE,
        is_install=not is_upgrade, is_upgrade=is_upgrade,
    )
    return next(text for path, text in manifests.items() if path.endswith("/NOTES.txt"))


def render_error(values: Mapping[str, Any], *, chart_dir: pathlib.Path = CHART_DIR) -> str:
    """The message Helm fails with for `values`; AssertionError when it renders."""
    try:
        render(values, chart_dir=chart_dir)
    except helm_python.HelmError as err:
        return str(err)
    raise AssertionError(f"chart rendered although it should fail: {values!r}")


def crds(chart_dir: pathlib.Path = CHART_DIR) -> list[Obj]:
    """The CustomResourceDefinitions in the chart's crds/ directory."""
    paths = sorted((chart_dir / "crds").glob("*.yaml"))
    return [yaml.safe_load(path.read_text()) for path in paths]


def find(objects: list[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        o
        for o in objects
        if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container_env(workload: Obj) -> dict[str, Any]:
    """name -> value (or valueFrom) of the first container's env."""
    container = workload["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def imex(mode: str, isolation: str = "", **extra: Any) -> Obj:
    """Values selecting an IMEX mode/isolation, merged with `extra` top-level values."""
    imex_values = {"mode": mode, "isolation": isolation}
    values: Obj = {"resources": {"computeDomains": {"imex": imex_values}}}
    values.update(extra)
    return values


def host_managed(**extra: Any) -> Obj:
    """The one valid host-managed configuration of this release."""
    gates = {"HostManagedIMEXDaemon": True, **extra.pop("featureGates", {})}
    return imex("hostManaged", "none", featureGates=gates, **extra)
