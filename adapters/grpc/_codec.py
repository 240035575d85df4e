"""Translation between the kubelet's protobuf messages and core values.

Pure: no sockets, no logging. The servicers, the client and the kubelet emulator all go through
these functions, so that the wire shape of a claim, a device and an error is decided once.

The DRA API exists as v1 and v1beta1 with identical messages and field numbers; only the proto
package differs. Core translation is written against v1, and v1beta1 messages are converted by
re-reading their bytes as the v1 type (`convert`), which is exact because the wire format is the
same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from google.protobuf import message

from adapters.grpc.generated import dra_health_v1_pb2, dra_v1_pb2, pluginregistration_v1_pb2
from core import device_health, models, names

MessageT = TypeVar("MessageT", bound=message.Message)

PLUGIN_TYPE_DRA = "DRAPlugin"
VERSION_V1 = "v1.DRAPlugin"
VERSION_V1BETA1 = "v1beta1.DRAPlugin"
# The order the plugin advertises them in; the kubelet prefers the first it speaks.
SUPPORTED_VERSIONS = (VERSION_V1, VERSION_V1BETA1)
# The health service in every version a supported kubelet asks for (1.36+ kubelets pick
# the newest they speak from this list; 1.34/1.35 call v1alpha1 without looking).
HEALTH_VERSIONS = (
    "v1.DRAResourceHealth",
    "v1beta1.DRAResourceHealth",
    "v1alpha1.DRAResourceHealth",
)


def convert(msg: message.Message, target: type[MessageT]) -> MessageT:
    """Re-read `msg` as `target` (a wire-compatible message type of another API version)."""
    return target.FromString(msg.SerializeToString(deterministic=True))


# ---------------------------------------------------------------- claims


def claim_refs_from_pb(claims: Iterable[dra_v1_pb2.Claim]) -> tuple[models.ClaimRef, ...]:
    """Claims of a request, in request order."""
    return tuple(
        models.ClaimRef(uid=names.ClaimUID(c.uid), namespace=c.namespace, name=c.name)
        for c in claims
    )


def claim_refs_to_pb(refs: Iterable[models.ClaimRef]) -> list[dra_v1_pb2.Claim]:
    return [dra_v1_pb2.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in refs]


def prepare_request_to_pb(
    refs: Iterable[models.ClaimRef],
) -> dra_v1_pb2.NodePrepareResourcesRequest:
    return dra_v1_pb2.NodePrepareResourcesRequest(claims=claim_refs_to_pb(refs))


def unprepare_request_to_pb(
    refs: Iterable[models.ClaimRef],
) -> dra_v1_pb2.NodeUnprepareResourcesRequest:
    return dra_v1_pb2.NodeUnprepareResourcesRequest(claims=claim_refs_to_pb(refs))


# ---------------------------------------------------------------- devices and results


def device_to_pb(device: models.PreparedDevice) -> dra_v1_pb2.Device:
    pb = dra_v1_pb2.Device(
        request_names=list(device.request_names),
        pool_name=device.pool_name,
        device_name=device.device_name,
        cdi_device_ids=list(device.cdi_device_ids),
    )
    if device.share_id:  # NB: optional: absent, not "", for a device that is no share
        pb.share_id = device.share_id
    return pb


def device_from_pb(device: dra_v1_pb2.Device) -> models.PreparedDevice:
    return models.PreparedDevice(
        request_names=tuple(device.request_names),
        pool_name=device.pool_name,
        device_name=device.device_name,
        cdi_device_ids=tuple(device.cdi_device_ids),
        share_id=device.share_id if device.HasField("share_id") else "",
    )


def prepare_response_to_pb(
    results: Mapping[names.ClaimUID, models.ClaimResult],
) -> dra_v1_pb2.NodePrepareResourcesResponse:
    """One map entry per result; an errored claim carries only its error (devices dropped)."""
    response = dra_v1_pb2.NodePrepareResourcesResponse()
    for uid in sorted(results):
        result = results[uid]
        entry = response.claims[uid]
        if result.error:
            entry.error = result.error
        else:
            entry.devices.extend(device_to_pb(d) for d in result.devices)
    return response


def prepare_response_from_pb(
    response: dra_v1_pb2.NodePrepareResourcesResponse,
) -> dict[names.ClaimUID, models.ClaimResult]:
    return {
        names.ClaimUID(uid): (
            models.ClaimResult(error=entry.error)
            if entry.error
            else models.ClaimResult(devices=tuple(device_from_pb(d) for d in entry.devices))
        )
        for uid, entry in sorted(response.claims.items())
    }


def unprepare_response_to_pb(
    results: Mapping[names.ClaimUID, models.ClaimResult],
) -> dra_v1_pb2.NodeUnprepareResourcesResponse:
    response = dra_v1_pb2.NodeUnprepareResourcesResponse()
    for uid in sorted(results):
        response.claims[uid].error = results[uid].error
    return response


def unprepare_response_from_pb(
    response: dra_v1_pb2.NodeUnprepareResourcesResponse,
) -> dict[names.ClaimUID, models.ClaimResult]:
    return {
        names.ClaimUID(uid): models.ClaimResult(error=entry.error)
        for uid, entry in sorted(response.claims.items())
    }


def failed_results(
    refs: Iterable[models.ClaimRef], *, error: str
) -> dict[names.ClaimUID, models.ClaimResult]:
    """The same error for every claim of a batch (the service raised instead of answering)."""
    return {r.uid: models.ClaimResult(error=error) for r in refs}


# ---------------------------------------------------------------- device health

_HEALTH_TO_PB = {
    device_health.HealthStatus.UNKNOWN: dra_health_v1_pb2.UNKNOWN,
    device_health.HealthStatus.HEALTHY: dra_health_v1_pb2.HEALTHY,
    device_health.HealthStatus.UNHEALTHY: dra_health_v1_pb2.UNHEALTHY,
}


def health_response_to_pb(
    entries: Iterable[device_health.DeviceHealth],
) -> dra_health_v1_pb2.NodeWatchResourcesResponse:
    """One message of the health stream (v1; `convert` it for v1beta1 and v1alpha1, whose
    messages have the same fields and numbers)."""
    return dra_health_v1_pb2.NodeWatchResourcesResponse(
        devices=[
            dra_health_v1_pb2.DeviceHealth(
                device=dra_health_v1_pb2.DeviceIdentifier(pool_name=e.pool, device_name=e.device),
                health=_HEALTH_TO_PB[e.status],
                last_updated_time=e.updated_at_s,
                health_check_timeout_seconds=e.timeout_s,
                message=e.message,
            )
            for e in entries
        ]
    )


_HEALTH_FROM_PB = {pb: status for status, pb in _HEALTH_TO_PB.items()}


def health_response_from_pb(
    response: dra_health_v1_pb2.NodeWatchResourcesResponse,
) -> tuple[device_health.DeviceHealth, ...]:
    """The entries of one health message (for the kubelet emulator and tests)."""
    return tuple(
        device_health.DeviceHealth(
            pool=d.device.pool_name,
            device=d.device.device_name,
            status=_HEALTH_FROM_PB.get(d.health, device_health.HealthStatus.UNKNOWN),
            updated_at_s=d.last_updated_time,
            timeout_s=d.health_check_timeout_seconds,
            message=d.message,
        )
        for d in response.devices
    )


# ---------------------------------------------------------------- registration


def plugin_info_to_pb(
    *, driver_name: str, endpoint: str, supported_versions: Iterable[str] = SUPPORTED_VERSIONS
) -> pluginregistration_v1_pb2.PluginInfo:
    return pluginregistration_v1_pb2.PluginInfo(
        type=PLUGIN_TYPE_DRA,
        name=driver_name,
        endpoint=endpoint,
        supported_versions=list(supported_versions),
    )


def choose_version(supported: Iterable[str], *, spoken: Iterable[str]) -> str | None:
    """The first of `spoken` (in our preference order) that the plugin advertises, or None.

    Accepts the bare forms "v1"/"v1beta1" too, as older kubelets did.
    """
    advertised = set(supported)
    for version in spoken:
        if version in advertised or version.split(".", 1)[0] in advertised:
            return version
    return None
