"""The ComputeDomain half's data in `ResourceClaim.status.devices` (see `core.device_status`).

A channel device says which ComputeDomain it belongs to, the IMEX channels the claim holds
(the `/dev/nvidia-caps-imex-channels/channel<N>` a container sees), the node's NVLink clique
and the IMEX mode it was prepared under; a daemon device says its ComputeDomain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core import device_status, models, names
from core.computedomain import checkpoint_records


def device_data(
    record: checkpoint_records.ComputeDomainClaimRecord,
    *,
    devices: Sequence[models.PreparedDevice],
    clique_id: str,
) -> Mapping[str, device_status.DeviceData]:
    """Device name -> its status data, for every prepared device of the claim."""
    out: dict[str, device_status.DeviceData] = {}
    for device in devices:
        if device.device_name.startswith(names.DEVICE_TYPE_DAEMON):
            out[device.device_name] = {
                "type": names.DEVICE_TYPE_DAEMON, "domainID": record.domain_id,
            }
            continue
        out[device.device_name] = {
            "type": names.DEVICE_TYPE_CHANNEL,
            "domainID": record.domain_id,
            "channelIDs": list(record.channel_ids),
            "cliqueID": clique_id,
            "imexMode": record.mode.value,
            "isolation": record.isolation.value,
        }
    return out
