"""Pure core of the ComputeDomain DRA driver: models, decoding, planners, errors, ports.

Nothing here does I/O or reads a clock; see docs/library.md for the public API. The names
below are the supported surface for tools that import the driver's decisions; everything
else is reachable as `core.<module>` but may change between releases.
"""

from core import (
    cdi,
    checkpoint,
    cliques,
    controlling,
    decoding,
    errors,
    gates,
    kinds,
    models,
    modes,
    modeswitch,
    names,
    objects,
    ports,
    preparing,
    procdevices,
    slices,
)
from core.cliques import clique_id_from_fabric
from core.controlling import observe, plan_compute_domain
from core.decoding import compute_domain_from_k8s, decode_opaque_config, resource_claim_from_k8s
from core.errors import ConfigError, DecodeError, DriverError, PermanentError, RetryableError
from core.modes import resolve_driver_config
from core.preparing import plan_prepare, plan_unprepare
from core.slices import plan_slice_devices

__all__ = [
    "ConfigError",
    "DecodeError",
    "DriverError",
    "PermanentError",
    "RetryableError",
    "cdi",
    "checkpoint",
    "clique_id_from_fabric",
    "cliques",
    "compute_domain_from_k8s",
    "controlling",
    "decode_opaque_config",
    "decoding",
    "errors",
    "gates",
    "kinds",
    "models",
    "modes",
    "modeswitch",
    "names",
    "objects",
    "observe",
    "plan_compute_domain",
    "plan_prepare",
    "plan_slice_devices",
    "plan_unprepare",
    "ports",
    "preparing",
    "procdevices",
    "resolve_driver_config",
    "resource_claim_from_k8s",
    "slices",
]
