"""The GPU half's DeviceClasses, as the chart installs them (the demo and tests create them).

`tests/integration/helm/test_helm_gpu_deviceclasses.py` pins these against the chart's rendered
classes, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Final

from core import gates as feature_gates
from core import kinds, models, names
from core.gpu import devices

DRIVER_NAME: Final = names.GPU_DRIVER_NAME
GPU_CLASS: Final = "gpu.nvidia.com"
MIG_CLASS: Final = "mig.nvidia.com"
VFIO_CLASS: Final = "vfio.gpu.nvidia.com"
# A pod asking for nvidia.com/gpu in resources.limits is served through the GPU class where the
# cluster runs the DRAExtendedResource gate (as upstream's class does).
GPU_EXTENDED_RESOURCE: Final = "nvidia.com/gpu"


def selector(device_type: str) -> str:
    """The CEL expression that selects this driver's devices of one `type` attribute."""
    return (
        f"device.driver == '{DRIVER_NAME}' && "
        f"device.attributes['{DRIVER_NAME}'].type == '{device_type}'"
    )


def device_classes(gates: models.FeatureGates) -> tuple[dict[str, Any], ...]:
    """`gpu.nvidia.com` and `mig.nvidia.com`, plus `vfio.gpu.nvidia.com` with PassthroughSupport."""
    classes = [
        _device_class(GPU_CLASS, devices.GPU_TYPE, extended_resource=GPU_EXTENDED_RESOURCE),
        _device_class(MIG_CLASS, devices.MIG_TYPE),
    ]
    if gates.enabled(feature_gates.PASSTHROUGH_SUPPORT):
        classes.append(_device_class(VFIO_CLASS, devices.VFIO_TYPE))
    return tuple(sorted(classes, key=lambda c: str(c["metadata"]["name"])))


def _device_class(
    name: str, device_type: str, *, extended_resource: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": selector(device_type)}}]}
    if extended_resource is not None:
        spec["extendedResourceName"] = extended_resource
    return {
        "apiVersion": kinds.DEVICE_CLASS.api_version,
        "kind": kinds.DEVICE_CLASS.kind,
        "metadata": {"name": name},
        "spec": spec,
    }
