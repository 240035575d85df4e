"""The `compute-domain.nvidia.com` devices a node publishes in its ResourceSlices."""

from __future__ import annotations

from core import models, names
from core.computedomain import binding, node_facts


def plan_slice_devices(
    config: models.DriverConfig, *, node: node_facts.ImexNodeFacts | None = None
) -> tuple[models.JSONObject, ...]:
    """Devices this node publishes: `channel-0`, plus `daemon-0` when the driver runs IMEX daemons;
    under channel isolation `slot-0..slot-(N-1)` instead (N = `config.channel_slots`).

    In v1 an attribute key without a domain is qualified by the driver name, so the DeviceClass
    selector `device.attributes['compute-domain.nvidia.com'].type` sees the plain `type` below.
    A host-managed `node` without an NVLink clique publishes nothing: every prepare there
    would fail, so offering the channel would only make the scheduler keep placing pods on it.
    With gate ComputeDomainBindingConditions (driver-managed), the channel carries binding
    conditions (`core.computedomain.binding`).
    """
    if config.host_managed and node is not None and not node.clique_id:
        return ()
    if config.channel_isolation:
        # Slots, not channels: the channel comes from the claim's config (one per
        # ComputeDomain), a slot only lets one more pod of some ComputeDomain onto the node.
        return tuple(
            _device(names.DEVICE_TYPE_SLOT, names.slot_device_name(index), device_id=index)
            for index in range(config.channel_slots)
        )
    channel = _device(names.DEVICE_TYPE_CHANNEL, names.channel_device_name(0))
    if binding.uses_binding_conditions(config):
        channel = binding.with_binding_conditions(channel)
    devices = [channel]
    if not config.host_managed:
        devices.append(_device(names.DEVICE_TYPE_DAEMON, names.daemon_device_name(0)))
    return tuple(devices)


def _device(device_type: str, name: str, *, device_id: int = 0) -> models.JSONObject:
    return {
        "name": name, "attributes": {"type": {"string": device_type}, "id": {"int": device_id}}
    }
