"""Pure core of the ComputeDomain DRA driver: models, decoding, planners, errors, ports.

Nothing here does I/O or reads a clock; see docs/library.md for the public API.
"""
