"""Adapter: memory — the embedded cluster and its minimal DRA scheduler (DESIGN §7)."""

from adapters.memory.allocator import AllocationError, Allocator, ScheduledPod
from adapters.memory.cluster import InMemoryCluster

__all__ = ["AllocationError", "Allocator", "InMemoryCluster", "ScheduledPod"]
