"""The API reads a prepare makes before planning: the claim, and where its pods run.

Both happen outside the node-wide lock. An API failure becomes a RetryableError that says
what was being read (`api_unavailable`), so the kubelet retries and the operator knows where
to look.
"""

from __future__ import annotations

from core import decoding, errors, kinds, models, ports


def api_unavailable(doing: str, exc: errors.ClusterError) -> errors.RetryableError:
    """The retryable error a prepare reports when an API call it needs failed."""
    return errors.RetryableError(
        f"the API server failed while {doing} ({exc}); retrying: check the API server and "
        "this node's network if it persists"
    )


class ClaimReads:
    """Reads a claim and its reserving pods from the API server."""

    def __init__(self, cluster: ports.Cluster) -> None:
        self._cluster = cluster

    def claim(self, ref: models.ClaimRef) -> models.ResourceClaim:
        """The claim the kubelet names; a RetryableError while it is not there yet, a
        PermanentError when a claim of that name now has another UID."""
        try:
            raw = self._cluster.get(
                kinds.RESOURCE_CLAIM.kind, namespace=ref.namespace, name=ref.name
            )
        except errors.NotFoundError:
            raise errors.RetryableError(
                f"ResourceClaim {ref.namespace}/{ref.name} not found in the API server yet"
            ) from None
        except errors.ClusterError as exc:
            doing = f"reading ResourceClaim {ref.namespace}/{ref.name}"
            raise api_unavailable(doing, exc) from exc
        claim = decoding.resource_claim_from_k8s(raw)
        if claim.uid != ref.uid:
            raise errors.PermanentError(
                f"ResourceClaim {ref.namespace}/{ref.name} has uid {claim.uid}, but the kubelet "
                f"asked for uid {ref.uid}: the claim was deleted and recreated; delete the pod"
            )
        return claim

    def reserved_placements(
        self, claim: models.ResourceClaim, *, node_name: str
    ) -> tuple[models.PodPlacement, ...]:
        """Where the pods of the claim's `reservedFor` run now (stops at one on `node_name`)."""
        found: list[models.PodPlacement] = []
        for consumer in claim.reserved_for:
            if not consumer.is_pod:
                continue
            try:
                pod = self._cluster.get(
                    kinds.POD.kind, namespace=claim.namespace, name=consumer.name
                )
            except errors.NotFoundError:
                continue
            except errors.ClusterError as exc:
                doing = f"reading Pod {claim.namespace}/{consumer.name}"
                raise api_unavailable(doing, exc) from exc
            meta = pod.get("metadata") or {}
            spec = pod.get("spec") or {}
            if meta.get("uid") != consumer.uid:
                continue  # same name, another pod: the reserved one is gone
            placed_on = str(spec.get("nodeName") or "")
            found.append(models.PodPlacement(uid=consumer.uid, node_name=placed_on))
            if placed_on == node_name:
                break
        return tuple(found)
