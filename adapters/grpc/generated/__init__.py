"""Stubs generated from `proto/` by `python -m adapters.grpc.generate`; never edit by hand.

Only `adapters.grpc` imports these modules.
"""
