"""Adapter: fs."""
