"""Adapter: grpc."""
