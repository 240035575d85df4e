"""Adapter: kube."""
