"""What the GPU plugin publishes: the `devices` of the node's `gpu.nvidia.com` ResourceSlices.

The scheduler sees GPUs only through these entries and the DeviceClass CEL selectors match on
their attributes, so every name, attribute key and value shape here is wire contract with the
upstream driver (`cmd/gpu-kubelet-plugin`): a claim written for upstream selects the same
devices here. Shapes are those of `resource.k8s.io/v1`: attributes as `{"string": ..}`,
`{"int": ..}`, `{"bool": ..}` or `{"version": ..}`, capacities as `{"value": "<quantity>"}`.

What is published (upstream without DynamicMIG):
- every GPU not in MIG mode as `gpu-<minor>`;
- a GPU in MIG mode as its existing MIG devices instead (static MIG);
- under gate PassthroughSupport, the VFIO functions (`gpu-vfio-<index>`) too;
- with consumable shares on, full GPUs and MIG devices allow several allocations, with the
  capacities and request policies of `gpu.shares`;
- under gate FabricManagerPartitioning on an NVSwitch node, each device of a GPU with a module
  id also carries `gpuModuleID` and `partition<size>` (`core.gpu.fm_partitions`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Final

from core import errors, models, names, slices
from core import gates as feature_gates
from core.gpu import devices, fm_partitions, shares

DRIVER_NAME: Final = names.GPU_DRIVER_NAME

# Standard attributes of k8s.io/dynamic-resource-allocation/deviceattribute (and upstream's
# NUMA constant), published with their domain; every other key is qualified by the driver.
PCI_BUS_ID_ATTRIBUTE: Final = "resource.kubernetes.io/pciBusID"
PCIE_ROOT_ATTRIBUTE: Final = "resource.kubernetes.io/pcieRoot"
NUMA_NODE_ATTRIBUTE: Final = "resource.kubernetes.io/numaNode"

# resource.k8s.io/v1 limits: string and version attribute values are at most 64 characters,
# device names are DNS labels.
_MAX_VALUE_LENGTH: Final = 64
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

# Masterminds semver's loose grammar, which upstream's semver.MustParse accepts (coercing
# "9.0" to 9.0.0 and "580.65.06" to 580.65.6): numeric segments may carry leading zeros.
_LOOSE_SEMVER: Final = re.compile(
    r"v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?"
    r"(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
    r"(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
)
_UINT64_MAX: Final = 2**64 - 1
_MAX_VERSION_LENGTH: Final = 256

# deviceattribute accepts only the extended BDF form, lower-case: 0000:1b:00.0.
_PCI_BDF: Final = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")
# NVML spells the domain with 8 digits (00000000:1B:00.0); go-nvlib drops the leading four.
_NVML_DOMAIN: Final = re.compile(r"0{4}[0-9a-f]{4}:")

_BINARY_SUFFIXES: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def plan_gpu_devices(
    inventory: devices.GpuInventory,
    *,
    gates: models.FeatureGates,
    consumable: shares.ConsumableShares = shares.DISABLED,
    fabric_partitions: tuple[fm_partitions.Partition, ...] | None = None,
    hidden: frozenset[str] = frozenset(),
) -> tuple[models.JSONObject, ...]:
    """The node's `gpu.nvidia.com` devices as `resource.k8s.io/v1` Device objects.

    Deterministic: devices are grouped by the PCI bus ID of their GPU (sorted) and sorted by
    name within a GPU, as upstream orders its per-GPU slices. The scheduler takes the first
    match, so a GPU's MIG devices come smallest profile first (the profile leads the name).
    Raises `errors.PermanentError` when discovery reported something the API would refuse or
    that contradicts itself (a malformed version or PCI address, a MIG device without its
    parent GPU, two devices with one name). `consumable` (`--consumable-shares`) makes full
    GPUs and MIG devices shareable; VFIO functions never are. `fabric_partitions` (what
    Fabric Manager supports, None where the node has no NVSwitch fabric) adds, under gate
    FabricManagerPartitioning, the partition attributes to the devices of each GPU with a
    module id (PermanentError where Fabric Manager's table contradicts itself). `hidden`
    names devices not to publish (the siblings of prepared passthrough functions and GPUs,
    `gpu.passthrough`). Under gate DRAListTypeAttributes `numaNode` is a one-element list.
    """
    fabric = fabric_attributes(inventory, gates=gates, fabric_partitions=fabric_partitions)
    # (GPU address, device name, how to build it): names are checked before anything is built,
    # so a bad name is reported as such rather than as whatever else is wrong with the device.
    keyed: list[tuple[str, str, Callable[[], models.JSONObject]]] = []
    for gpu in inventory.gpus:
        if not gpu.mig_enabled:
            build = partial(
                gpu_device, gpu, consumable=consumable, fabric=fabric.get(gpu.minor)
            )
            keyed.append((bus_id(gpu.pci_bus_id, gpu.name), gpu.name, build))
    for mig in inventory.migs:
        parent = _mig_parent(inventory, mig)
        build = partial(
            mig_device, mig, parent=parent, consumable=consumable,
            fabric=fabric.get(parent.minor),
        )
        keyed.append((bus_id(parent.pci_bus_id, parent.name), mig.name, build))
    if gates.enabled(feature_gates.PASSTHROUGH_SUPPORT):
        for vfio in _published_vfios(inventory):
            parent_fabric = None if vfio.parent_minor is None else fabric.get(vfio.parent_minor)
            build = partial(vfio_device, vfio, fabric=parent_fabric)
            keyed.append((bus_id(vfio.pci_bus_id, vfio.name), vfio.name, build))
    check_names(name for _, name, _ in keyed)
    built = tuple(
        build() for _, name, build in sorted(keyed, key=lambda item: item[:2])
        if name not in hidden
    )
    if gates.enabled(feature_gates.DRA_LIST_TYPE_ATTRIBUTES):
        return tuple(with_list_numa_node(device) for device in built)
    return built


def build_gpu_resource_slices(
    inventory: devices.GpuInventory,
    *,
    node_name: str,
    gates: models.FeatureGates,
    generation: int,
    node_uid: str = "",
    consumable: shares.ConsumableShares = shares.DISABLED,
    fabric_partitions: tuple[fm_partitions.Partition, ...] | None = None,
    hidden: frozenset[str] = frozenset(),
) -> tuple[models.JSONObject, ...]:
    """The node's `gpu.nvidia.com` pool (pool name = node name) as ResourceSlice objects,
    owned by the Node when its `node_uid` is known.

    One slice unless the node has more devices than one slice may hold; shares the slice
    shape, naming and owner of the ComputeDomain half (`core.slices.build_resource_slices`).
    """
    return slices.build_resource_slices(
        node_name=node_name,
        driver=DRIVER_NAME,
        devices=plan_gpu_devices(
            inventory, gates=gates, consumable=consumable, fabric_partitions=fabric_partitions,
            hidden=hidden,
        ),
        generation=generation,
        node_uid=node_uid,
    )


def with_list_numa_node(device: models.JSONObject) -> models.JSONObject:
    """`device` with its `numaNode` in the list form (`{"ints": [n]}`), as upstream publishes
    it under DRAListTypeAttributes (KEP-6072's preferred form; one element until the driver
    computes the same-socket nodes). Other attributes are unchanged.

    NB: only an API server with its own DRAListTypeAttributes gate on (alpha from Kubernetes
    1.36) keeps list values; any other drops them and refuses the slice.
    """
    attributes = device.get("attributes") or {}
    scalar = attributes.get(NUMA_NODE_ATTRIBUTE)
    if not isinstance(scalar, dict) or "int" not in scalar:
        return device
    listed = {**attributes, NUMA_NODE_ATTRIBUTE: {"ints": [scalar["int"]]}}
    return {**device, "attributes": listed}


def fabric_attributes(
    inventory: devices.GpuInventory,
    *,
    gates: models.FeatureGates,
    fabric_partitions: tuple[fm_partitions.Partition, ...] | None,
) -> dict[int, dict[str, models.JSONObject]]:
    """By GPU minor: the Fabric Manager attributes its devices publish (int attributes
    `gpuModuleID`, `partition<size>`); empty without the gate or an NVSwitch fabric.

    A GPU without a module id publishes none, as upstream (a GPU bound to vfio-pci at
    discovery, which NVML cannot see; NVML's 0, which upstream also reads as unknown).
    """
    if fabric_partitions is None or not gates.enabled(feature_gates.FABRIC_MANAGER_PARTITIONING):
        return {}
    return {
        gpu.minor: {
            key: {"int": value}
            for key, value in fm_partitions.published_attributes(
                gpu.module_id, fabric_partitions
            ).items()
        }
        for gpu in inventory.gpus
        if gpu.module_id
    }


def gpu_device(
    gpu: devices.GpuInfo,
    *,
    consumable: shares.ConsumableShares = shares.DISABLED,
    fabric: Mapping[str, models.JSONObject] | None = None,
) -> models.JSONObject:
    """One full GPU as upstream's GpuInfo.GetDevice publishes it (`fabric`: its Fabric
    Manager attributes, `fabric_attributes`)."""
    attributes = {
        "type": string_attribute(devices.GPU_TYPE, device=gpu.name, field="type"),
        "uuid": string_attribute(gpu.uuid, device=gpu.name, field="uuid"),
        **common_gpu_attributes(gpu),
        **(fabric or {}),
    }
    capacity = {"memory": capacity_quantity(gpu.memory_bytes, device=gpu.name, field="memory")}
    return shares.shareable(
        device_object(gpu.name, attributes, capacity), consumable, memory_bytes=gpu.memory_bytes,
        quantity=partial(_quantity_text, device=gpu.name),
    )


def mig_device(
    mig: devices.MigDeviceInfo,
    *,
    parent: devices.GpuInfo,
    consumable: shares.ConsumableShares = shares.DISABLED,
    fabric: Mapping[str, models.JSONObject] | None = None,
) -> models.JSONObject:
    """One existing MIG device as upstream's MigDeviceInfo.GetDevice publishes it.

    Attributes are the parent's (less its `uuid`, with its Fabric Manager ones, `fabric`)
    plus `parentUUID`, `profile` and the MIG device's own `uuid`; capacities are the GPU
    instance profile's engines and memory, and `memorySlice<i>` = 1 for each memory slice of
    its placement.
    """
    attributes = {
        "type": string_attribute(devices.MIG_TYPE, device=mig.name, field="type"),
        "uuid": string_attribute(mig.uuid, device=mig.name, field="uuid"),
        "parentUUID": string_attribute(parent.uuid, device=mig.name, field="parentUUID"),
        "profile": string_attribute(mig.profile, device=mig.name, field="profile"),
        **common_gpu_attributes(parent, device=mig.name),
        **(fabric or {}),
    }
    amounts = {
        "multiprocessors": mig.multiprocessors,
        "copyEngines": mig.copy_engines,
        "decoders": mig.decoders,
        "encoders": mig.encoders,
        "jpegEngines": mig.jpeg_engines,
        "ofaEngines": mig.ofa_engines,
        "memory": mig.memory_bytes,
    }
    for index in range(mig.placement_start, mig.placement_start + mig.placement_size):
        amounts[f"memorySlice{index}"] = 1
    capacity = {
        name: capacity_quantity(amount, device=mig.name, field=name)
        for name, amount in amounts.items()
    }
    return shares.shareable(
        device_object(mig.name, attributes, capacity), consumable, memory_bytes=mig.memory_bytes,
        quantity=partial(_quantity_text, device=mig.name),
    )


def vfio_device(
    vfio: devices.VfioDeviceInfo, *, fabric: Mapping[str, models.JSONObject] | None = None
) -> models.JSONObject:
    """One passthrough function as upstream's VfioDeviceInfo.GetDevice publishes it, with its
    GPU's Fabric Manager attributes (`fabric`) where that GPU was discovered with them."""
    attributes: dict[str, models.JSONObject] = {
        "type": string_attribute(devices.VFIO_TYPE, device=vfio.name, field="type"),
        "uuid": string_attribute(vfio.uuid, device=vfio.name, field="uuid"),
        "deviceID": string_attribute(vfio.device_id, device=vfio.name, field="deviceID"),
        "vendorID": string_attribute(vfio.vendor_id, device=vfio.name, field="vendorID"),
        "productName": string_attribute(vfio.product_name, device=vfio.name, field="productName"),
        "iommuFDEnabled": {"bool": vfio.iommu_fd_enabled},
        **_pci_attributes(vfio.pci_bus_id, vfio.pcie_root, vfio.numa_node, device=vfio.name),
        **(fabric or {}),
    }
    capacity = {
        "addressableMemory": capacity_quantity(
            vfio.addressable_memory_bytes, device=vfio.name, field="addressableMemory"
        )
    }
    return device_object(vfio.name, attributes, capacity)


def coerce_semver(text: str) -> str:
    """`text` as Masterminds semver's `MustParse(text).String()` renders it.

    Missing minor/patch become 0 and leading zeros go ("9.0" -> "9.0.0", "580.65.06" ->
    "580.65.6"); a pre-release or build suffix is kept. Raises ValueError where upstream's
    MustParse would panic.
    """
    if len(text) > _MAX_VERSION_LENGTH:
        raise ValueError(f"{text[:20]!r}... is longer than {_MAX_VERSION_LENGTH} characters")
    found = _LOOSE_SEMVER.fullmatch(text)
    if found is None:
        raise ValueError(f"{text!r} is not a version (want e.g. 580.65.06 or 9.0)")
    major, minor, patch = (
        int(segment.lstrip(".")) if segment else 0 for segment in found.group(1, 2, 3)
    )
    if max(major, minor, patch) > _UINT64_MAX:
        raise ValueError(f"{text!r} has a version segment above 2^64-1")
    pre, build = found.group(5), found.group(8)
    rendered = f"{major}.{minor}.{patch}"
    if pre:
        if any(part.isdigit() and len(part) > 1 and part[0] == "0" for part in pre.split(".")):
            raise ValueError(f"{text!r} has a numeric pre-release part with a leading zero")
        rendered += f"-{pre}"
    if build:
        rendered += f"+{build}"
    return rendered


def format_binary_si_quantity(value: int) -> str:
    """`value` as Kubernetes marshals `resource.NewQuantity(value, resource.BinarySI)`.

    A multiple of 1024 takes the largest binary suffix that divides it exactly (85899345920 ->
    "80Gi", 2048000 -> "2000Ki"); any other value is a plain integer, except that below 1024
    Kubernetes falls back to canonical DecimalSI (1000 -> "1k"). Negative values are refused:
    no capacity here can be one.
    """
    if not 0 <= value < 2**63:
        raise ValueError(f"{value} is not a size or count a capacity can hold (0 to 2^63-1)")
    if value < 1024:
        # Canonical DecimalSI: the exponent a multiple of 3, so only 1000 takes a suffix.
        return "1k" if value == 1000 else str(value)
    magnitude = value
    exponent = 0
    while magnitude % 1024 == 0:
        magnitude //= 1024
        exponent += 1
    return f"{magnitude}{_BINARY_SUFFIXES[exponent]}"


def normalize_pci_bus_id(text: str) -> str:
    """The PCI address in the form deviceattribute accepts (`0000:1b:00.0`).

    NVML's `00000000:1B:00.0` is lower-cased and loses the four leading zeros of its domain,
    as go-nvlib's GetPCIBusID does. Raises ValueError for anything that is then not in
    extended BDF form.
    """
    lowered = text.lower()
    if _NVML_DOMAIN.match(lowered):
        lowered = lowered[4:]
    if _PCI_BDF.fullmatch(lowered) is None:
        raise ValueError(f"{text!r} is not a PCI address in domain:bus:device.function form")
    return lowered


def is_valid_device_name(name: str) -> bool:
    """Whether `name` may name a device in a ResourceSlice (a DNS label, at most 63 chars)."""
    return _DNS_LABEL.fullmatch(name) is not None


def common_gpu_attributes(
    gpu: devices.GpuInfo, *, device: str | None = None
) -> dict[str, models.JSONObject]:
    """What a full GPU and its MIG devices both publish about the physical GPU (`device`:
    the name errors report, the GPU's own by default)."""
    name = device or gpu.name
    attributes = {
        "productName": string_attribute(gpu.product_name, device=name, field="productName"),
        "brand": string_attribute(gpu.brand, device=name, field="brand"),
        "architecture": string_attribute(gpu.architecture, device=name, field="architecture"),
        "cudaComputeCapability": _version(
            gpu.cuda_compute_capability, device=name, field="cudaComputeCapability"
        ),
        "driverVersion": _version(gpu.driver_version, device=name, field="driverVersion"),
        "cudaDriverVersion": _version(
            gpu.cuda_driver_version, device=name, field="cudaDriverVersion"
        ),
        **_pci_attributes(gpu.pci_bus_id, gpu.pcie_root, gpu.numa_node, device=name),
    }
    # Upstream publishes the addressing mode only where the platform has one (HMM/ATS/None).
    if gpu.addressing_mode:
        attributes["addressingMode"] = string_attribute(
            gpu.addressing_mode, device=name, field="addressingMode"
        )
    return attributes


def _pci_attributes(
    pci_bus_id: str, pcie_root: str | None, numa_node: int | None, *, device: str
) -> dict[str, models.JSONObject]:
    attributes = {
        PCI_BUS_ID_ATTRIBUTE: string_attribute(
            bus_id(pci_bus_id, device), device=device, field="pciBusID"
        )
    }
    if pcie_root:
        attributes[PCIE_ROOT_ATTRIBUTE] = string_attribute(
            pcie_root, device=device, field="pcieRoot"
        )
    # The scalar form: upstream publishes the list form only under DRAListTypeAttributes.
    if numa_node is not None and numa_node >= 0:
        attributes[NUMA_NODE_ATTRIBUTE] = {"int": numa_node}
    return attributes


def _published_vfios(inventory: devices.GpuInventory) -> tuple[devices.VfioDeviceInfo, ...]:
    """VFIO functions offered for passthrough: all but those of a GPU showing MIG devices.

    NB: upstream means to offer passthrough "only if no MIG devices are found" on the GPU;
    its lookup misses GPUs in MIG mode, so it offers them anyway. We keep to the intent:
    passing through a GPU whose MIG devices other claims may hold cannot be right.
    """
    sliced = {
        gpu.minor: bus_id(gpu.pci_bus_id, gpu.name)
        for gpu in inventory.gpus
        if gpu.mig_enabled and any(mig.parent_minor == gpu.minor for mig in inventory.migs)
    }
    return tuple(
        vfio
        for vfio in inventory.vfios
        if vfio.parent_minor not in sliced
        and bus_id(vfio.pci_bus_id, vfio.name) not in sliced.values()
    )


def _mig_parent(inventory: devices.GpuInventory, mig: devices.MigDeviceInfo) -> devices.GpuInfo:
    parent = inventory.gpu_by_minor(mig.parent_minor)
    if parent is None:
        raise errors.PermanentError(
            f"MIG device {mig.name} ({mig.uuid}) names parent GPU minor {mig.parent_minor}, "
            "which discovery did not report; restart the plugin so that discovery sees the "
            "node's GPUs and MIG devices together"
        )
    if parent.uuid != mig.parent_uuid:
        raise errors.PermanentError(
            f"MIG device {mig.name} ({mig.uuid}) names parent {mig.parent_uuid}, but GPU "
            f"{parent.name} is {parent.uuid}; restart the plugin so that discovery sees the "
            "node's GPUs and MIG devices together"
        )
    if not parent.mig_enabled:
        raise errors.PermanentError(
            f"MIG device {mig.name} ({mig.uuid}) sits on GPU {parent.name}, which discovery "
            "reported as not in MIG mode; restart the plugin after changing MIG mode"
        )
    return parent


def check_names(names: Iterable[str]) -> None:
    """PermanentError for a name the API refuses or one that appears twice."""
    seen: set[str] = set()
    for name in names:
        if not is_valid_device_name(name):
            raise errors.PermanentError(
                f"device name {name!r} is not a DNS label of at most 63 characters, so the "
                "API server would refuse the node's ResourceSlice; check the MIG profile "
                "name and the minor numbers discovery reported"
            )
        if name in seen:
            raise errors.PermanentError(
                f"two devices are both named {name!r}; discovery reported the same GPU minor, "
                "MIG placement or VFIO index twice"
            )
        seen.add(name)


def bus_id(text: str, device: str) -> str:
    """`text` normalized (`normalize_pci_bus_id`); PermanentError naming `device` if bad."""
    try:
        return normalize_pci_bus_id(text)
    except ValueError as error:
        raise errors.PermanentError(
            f"device {device}: pciBusID: {error}; discovery must report the address as "
            "NVML or sysfs gives it (e.g. 0000:1b:00.0)"
        ) from error


def string_attribute(value: str, *, device: str, field: str) -> models.JSONObject:
    """A `{"string": ..}` attribute; PermanentError when longer than the API allows."""
    if len(value) > _MAX_VALUE_LENGTH:
        raise errors.PermanentError(
            f"device {device}: {field}: {value!r} is longer than the {_MAX_VALUE_LENGTH} "
            "characters a ResourceSlice attribute may hold"
        )
    return {"string": value}


def _version(text: str, *, device: str, field: str) -> models.JSONObject:
    try:
        version = coerce_semver(text)
    except ValueError as error:
        raise errors.PermanentError(
            f"device {device}: {field}: {error}; discovery must report the version NVML gives"
        ) from error
    if len(version) > _MAX_VALUE_LENGTH:
        raise errors.PermanentError(
            f"device {device}: {field}: {version!r} is longer than the {_MAX_VALUE_LENGTH} "
            "characters a ResourceSlice version attribute may hold"
        )
    return {"version": version}


def capacity_quantity(value: int, *, device: str, field: str) -> models.JSONObject:
    """A `{"value": <quantity>}` capacity or counter; PermanentError when out of range."""
    try:
        return {"value": format_binary_si_quantity(value)}
    except ValueError as error:
        raise errors.PermanentError(f"device {device}: capacity {field}: {error}") from error


def _quantity_text(value: int, *, device: str) -> str:
    return str(capacity_quantity(value, device=device, field="memory")["value"])


def device_object(
    name: str,
    attributes: Mapping[str, models.JSONObject],
    capacity: Mapping[str, models.JSONObject],
) -> models.JSONObject:
    """A Device object with attribute and capacity keys sorted."""
    # Keys sorted, as Go marshals maps, so the published JSON is byte-for-byte reproducible.
    return {
        "name": name,
        "attributes": {key: attributes[key] for key in sorted(attributes)},
        "capacity": {key: capacity[key] for key in sorted(capacity)},
    }
