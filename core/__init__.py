"""Pure core of the NVIDIA DRA driver: models, decoding, planners, errors, ports.

Nothing here does I/O or reads a clock; see docs/library.md for the public API. The top level
holds what both halves share; `core.computedomain` is the ComputeDomain half's planning and
`core.gpu` the GPU half's. The names below are the supported surface for tools that import the
driver's decisions; everything else is reachable as `core.<module>` but may change between
releases.
"""

from core import (
    cdi,
    checkpoint,
    claims,
    computedomain,
    decoding,
    errors,
    gates,
    gpu,
    kinds,
    models,
    names,
    ports,
    procdevices,
    slices,
)
from core.computedomain.cliques import clique_id_from_fabric
from core.computedomain.controlling import observe, plan_compute_domain
from core.computedomain.modes import resolve_driver_config
from core.computedomain.preparing import plan_prepare, plan_unprepare
from core.computedomain.slice_devices import plan_slice_devices
from core.decoding import compute_domain_from_k8s, decode_opaque_config, resource_claim_from_k8s
from core.errors import ConfigError, DecodeError, DriverError, PermanentError, RetryableError

__all__ = [
    "ConfigError",
    "DecodeError",
    "DriverError",
    "PermanentError",
    "RetryableError",
    "cdi",
    "checkpoint",
    "claims",
    "clique_id_from_fabric",
    "compute_domain_from_k8s",
    "computedomain",
    "decode_opaque_config",
    "decoding",
    "errors",
    "gates",
    "gpu",
    "kinds",
    "models",
    "names",
    "observe",
    "plan_compute_domain",
    "plan_prepare",
    "plan_slice_devices",
    "plan_unprepare",
    "ports",
    "procdevices",
    "resolve_driver_config",
    "resource_claim_from_k8s",
    "slices",
]
