"""Adapter: nvml."""
