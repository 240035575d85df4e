"""The Kubernetes resource kinds the driver reads or writes, as values adapters can route on."""

from __future__ import annotations

import dataclasses
from typing import Final

from core import names


@dataclasses.dataclass(frozen=True, kw_only=True)
class ResourceKind:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


COMPUTE_DOMAIN: Final = ResourceKind(
    kind=names.KIND_COMPUTE_DOMAIN, group=names.API_GROUP, version=names.API_VERSION,
    plural="computedomains", namespaced=True,
)
COMPUTE_DOMAIN_CLIQUE: Final = ResourceKind(
    kind=names.KIND_COMPUTE_DOMAIN_CLIQUE, group=names.API_GROUP, version=names.API_VERSION,
    plural="computedomaincliques", namespaced=True,
)
RESOURCE_CLAIM_TEMPLATE: Final = ResourceKind(
    kind="ResourceClaimTemplate", group=names.DRA_GROUP, version=names.DRA_VERSION,
    plural="resourceclaimtemplates", namespaced=True,
)
RESOURCE_CLAIM: Final = ResourceKind(
    kind="ResourceClaim", group=names.DRA_GROUP, version=names.DRA_VERSION,
    plural="resourceclaims", namespaced=True,
)
RESOURCE_SLICE: Final = ResourceKind(
    kind="ResourceSlice", group=names.DRA_GROUP, version=names.DRA_VERSION,
    plural="resourceslices", namespaced=False,
)
DEVICE_CLASS: Final = ResourceKind(
    kind="DeviceClass", group=names.DRA_GROUP, version=names.DRA_VERSION,
    plural="deviceclasses", namespaced=False,
)
DAEMON_SET: Final = ResourceKind(
    kind="DaemonSet", group="apps", version="v1", plural="daemonsets", namespaced=True,
)
DEPLOYMENT: Final = ResourceKind(
    kind="Deployment", group="apps", version="v1", plural="deployments", namespaced=True,
)
NODE: Final = ResourceKind(kind="Node", group="", version="v1", plural="nodes", namespaced=False)
POD: Final = ResourceKind(kind="Pod", group="", version="v1", plural="pods", namespaced=True)
EVENT: Final = ResourceKind(kind="Event", group="", version="v1", plural="events", namespaced=True)
LEASE: Final = ResourceKind(
    kind="Lease", group="coordination.k8s.io", version="v1", plural="leases", namespaced=True,
)

ALL: Final = (
    COMPUTE_DOMAIN, COMPUTE_DOMAIN_CLIQUE, RESOURCE_CLAIM_TEMPLATE, RESOURCE_CLAIM,
    RESOURCE_SLICE, DEVICE_CLASS, DAEMON_SET, NODE, POD, EVENT, LEASE, DEPLOYMENT,
)
BY_KIND: Final = {k.kind: k for k in ALL}


def by_kind(kind: str) -> ResourceKind:
    """Look up a kind by its `kind` string (raises KeyError for kinds the driver never uses)."""
    return BY_KIND[kind]
