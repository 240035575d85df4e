"""Every object the controller builders make validates, strictly, against the Kubernetes OpenAPI
schemas shipped by kubernetes-validate, for each Kubernetes version from 1.34 on."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from kubernetes_validate import utils as kv_utils

from core import gates, models, names
from core.computedomain import controlling, objects


def _versions() -> list[str]:
    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split("."))

    minors = sorted({kv_utils.major_minor(v) for v in kv_utils.all_versions()}, key=key)
    return [v for v in minors if key(v) >= (1, 34)]


VERSIONS = _versions()

DRIVER = models.DriverConfig(
    mode=models.IMEXMode.DRIVER_MANAGED,
    isolation=models.Isolation.DOMAIN,
    gates=gates.resolve_gates({}),
)
HOST = models.DriverConfig(
    mode=models.IMEXMode.HOST_MANAGED,
    isolation=models.Isolation.NONE,
    gates=models.FeatureGates(values={"HostManagedIMEXDaemon": True}),
)


def _cd(allocation_mode: models.AllocationMode) -> models.ComputeDomain:
    return models.ComputeDomain(
        meta=models.ObjectMeta(
            name="training", namespace="team-a", uid="3f2b8c1e-5d4a-4b8e-9c1d-2a7e6f0b9d31"
        ),
        spec=models.ComputeDomainSpec(
            channel=models.ChannelSpec(
                resource_claim_template_name="training-channel", allocation_mode=allocation_mode
            ),
            num_nodes=4,
        ),
    )


def _all_objects() -> list[tuple[str, dict[str, Any]]]:
    built: list[tuple[str, dict[str, Any]]] = []
    for mode in models.AllocationMode:
        cd = _cd(mode)
        built.append((f"host-workload-rct-{mode}", objects.workload_rct(cd, config=HOST)))
        built.append((f"driver-workload-rct-{mode}", objects.workload_rct(cd, config=DRIVER)))
    cd = _cd(models.AllocationMode.SINGLE)
    built.append(("daemon-rct", objects.daemon_rct(cd, config=DRIVER)))
    built.append(("daemonset", objects.daemonset(cd, config=DRIVER)))
    for cfg_name, cfg in (("host", HOST), ("driver", DRIVER)):
        for dc in objects.device_classes(cfg):
            built.append((f"{cfg_name}-deviceclass-{dc['metadata']['name']}", dc))
    return built


def _planned_creates() -> list[tuple[str, dict[str, Any]]]:
    """What the planner itself asks to create, so a builder bypass cannot slip through."""
    cd = _cd(models.AllocationMode.ALL)
    out: list[tuple[str, dict[str, Any]]] = []
    for cfg_name, cfg in (("host", HOST), ("driver", DRIVER)):
        actions = controlling.plan_compute_domain(cd, observed=controlling.Observed(), config=cfg)
        out.extend(
            (f"{cfg_name}-planned-{a.kind}-{i}", dict(a.obj))
            for i, a in enumerate(actions)
            if isinstance(a, models.CreateObject)
        )
    return out


def test_kubernetes_1_34_or_newer_schemas_are_available() -> None:
    assert VERSIONS, f"kubernetes-validate ships no schema >= 1.34: {kv_utils.all_versions()}"
    assert "1.34" in VERSIONS


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "obj", [pytest.param(obj, id=label) for label, obj in _all_objects() + _planned_creates()]
)
def test_built_object_validates_strictly(version: str, obj: dict[str, Any]) -> None:
    assert kubernetes_validate.validate(obj, version, strict=True) == version


def test_strict_validation_rejects_an_unknown_field() -> None:
    """The check above has teeth: a misplaced v1beta1-style field is refused."""
    rct = objects.workload_rct(_cd(models.AllocationMode.SINGLE), config=HOST)
    request = rct["spec"]["spec"]["devices"]["requests"][0]
    request["deviceClassName"] = names.CHANNEL_DEVICE_CLASS
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(rct, VERSIONS[0], strict=True)
