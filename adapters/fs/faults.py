"""The fault-injection hook of `make faults`, for steps outside this package.

`adapters.fs._atomic` owns the mechanism (`CD_DRA_FAULT=<point>:<n>` SIGKILLs the process at
the n-th hit of a point, `CD_DRA_FAULT_TRACE=<file>` records every hit); this is its public
face for the GPU plugin, which marks its device actions with it. Unarmed, a mark costs one
test of a module-level bool.
"""

from adapters.fs._atomic import (
    COMPUTE_MODE,
    FM_ACTIVATE,
    FM_ACTIVATED,
    FM_DEACTIVATE,
    GPU_ACTION_POINTS,
    MIG_CREATE,
    MIG_DESTROY,
    MPS_AWAIT,
    MPS_START,
    MPS_STOP,
    fault_point,
)

__all__ = [
    "COMPUTE_MODE", "FM_ACTIVATE", "FM_ACTIVATED", "FM_DEACTIVATE", "GPU_ACTION_POINTS",
    "MIG_CREATE", "MIG_DESTROY", "MPS_AWAIT", "MPS_START", "MPS_STOP", "fault_point",
]
