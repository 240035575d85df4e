"""Loads files of the Cluster contract suite so this directory can run them over HTTP."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import types

_CONTRACT_DIR = pathlib.Path(__file__).resolve().parent.parent / "cluster_contract"


def load_contract_module(filename: str, *, as_name: str) -> types.ModuleType:
    """Import a file of the contract suite under a name of our own (no sys.path changes)."""
    if as_name in sys.modules:
        return sys.modules[as_name]
    spec = importlib.util.spec_from_file_location(as_name, _CONTRACT_DIR / filename)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[as_name] = module  # NB: dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module
