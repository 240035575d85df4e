"""Channel isolation on the node: which IMEX channel a claim's prepare injects.

The ComputeDomain's `status.channelID` (set by the controller) is the authority; the claim's
opaque config carries the same ID (copied from the ResourceClaimTemplate). Both must agree: a
claim made from another ComputeDomain's template, or edited by hand, never gets a channel.
"""

from __future__ import annotations

from collections.abc import Sequence

from core import errors, models


def assigned_channel(
    domain: models.ComputeDomain, *, configs: Sequence[models.ChannelConfig]
) -> int:
    """The channel to inject for a claim of `domain` with these channel configs.

    Raises RetryableError while the controller has not assigned one yet, PermanentError when
    the claim's config names no channel or another one than the ComputeDomain's status, or when
    the controller marked the ComputeDomain as a later duplicate of its channel whose claims
    already carry it (a new prepare would share the channel with another ComputeDomain;
    claims prepared earlier are answered from the checkpoint before this is asked).
    """
    where = f"ComputeDomain {domain.meta.namespace}/{domain.meta.name}"
    assigned = domain.status.channel_id if domain.status is not None else None
    if assigned is None:
        raise errors.RetryableError(
            f"waiting for the controller to assign an IMEX channel to {where} "
            "(status.channelID); if it stays unset, kubectl describe the ComputeDomain for a "
            "ChannelAssigned condition"
        )
    if domain.status is not None and domain.status.channel_conflict:
        raise errors.PermanentError(
            f"{where} may not use IMEX channel {assigned} for new workloads: "
            f"{domain.status.channel_conflict} (its ChannelUnique=False condition). Claims "
            "prepared before keep running; to run new pods, delete this ComputeDomain's pods "
            "and claims and recreate the ComputeDomain, which then gets a channel of its own"
        )
    if assigned < 1:
        raise errors.PermanentError(
            f"{where} has status.channelID {assigned}, but channel isolation never assigns "
            "channel 0 (the host's shared channel); check the controller's logs"
        )
    named = sorted({c.channel_id for c in configs}, key=lambda c: -1 if c is None else c)
    if named != [assigned]:
        shown = ", ".join("none" if c is None else str(c) for c in named)
        raise errors.PermanentError(
            f"the claim's ComputeDomainChannelConfig names channel {shown}, but {where} has "
            f"channel {assigned} (status.channelID): the claim was not made from this "
            "ComputeDomain's ResourceClaimTemplate; delete the claim and reference the "
            "template the ComputeDomain generates"
        )
    return assigned
