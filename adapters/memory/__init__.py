"""Adapter: memory."""
