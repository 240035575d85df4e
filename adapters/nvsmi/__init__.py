"""Adapter for the driver's own command-line tool, `nvidia-smi` (compute policy, compute mode).

Only this package runs nvidia-smi; its stand-in for tests and the demo is in `simulated`.
"""

from adapters.nvsmi.timeslice import NvidiaSmiTimeSlicer

__all__ = ["NvidiaSmiTimeSlicer"]
