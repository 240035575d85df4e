"""Property: on any JSON whatsoever, decoders return a model or raise DecodeError, nothing else.

Covers fully arbitrary values (non-objects, nested junk, non-string keys) and near-valid
objects where one field anywhere in the tree is replaced by junk, which reaches the deep
branches that random JSON never gets to.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import decoding, errors, models, names

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8)
)
json_keys = st.one_of(
    st.text(max_size=16),
    st.sampled_from(
        ["apiVersion", "kind", "domainID", "allocationMode", "metadata", "name", "spec",
         "status", "allocation", "devices", "results", "config", "opaque", "parameters"]
    ),
    st.integers(),
    st.none(),
    st.booleans(),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(json_keys, children, max_size=4),
    ),
    max_leaves=20,
)


def decode_claim_configs(obj: Any) -> object:
    claim = decoding.resource_claim_from_k8s(obj)
    return decoding.config_for_request(claim, request=names.CHANNEL_REQUEST_NAME)


DECODERS: dict[str, Callable[[Any], object]] = {
    "opaque-strict": lambda v: decoding.decode_opaque_config(v, strict=True),
    "opaque-lenient": lambda v: decoding.decode_opaque_config(v, strict=False),
    "object-meta": decoding.object_meta_from_k8s,
    "compute-domain": decoding.compute_domain_from_k8s,
    "clique": decoding.compute_domain_clique_from_k8s,
    "claim": decode_claim_configs,
}

VALID_OPAQUE = {
    "apiVersion": names.GROUP_VERSION,
    "kind": names.KIND_CHANNEL_CONFIG,
    "domainID": "uid",
    "allocationMode": "Single",
}
VALID: dict[str, Any] = {
    "opaque-strict": VALID_OPAQUE,
    "opaque-lenient": VALID_OPAQUE,
    "object-meta": {
        "metadata": {
            "name": "n", "namespace": "ns", "uid": "u", "resourceVersion": "1",
            "deletionTimestamp": "2025-01-01T00:00:00Z", "finalizers": ["f"],
            "labels": {"a": "b"}, "annotations": {"c": "d"},
        },
    },
    "compute-domain": {
        "kind": "ComputeDomain",
        "metadata": {"name": "cd", "uid": "u"},
        "spec": {
            "numNodes": 2,
            "channel": {"allocationMode": "All", "resourceClaimTemplate": {"name": "rct"}},
        },
        "status": {
            "status": "Ready",
            "nodes": [{"name": "n", "ipAddress": "1.2.3.4", "cliqueID": "c", "index": 0,
                       "status": "Ready"}],
        },
    },
    "clique": {
        "kind": "ComputeDomainClique",
        "metadata": {"name": "u.c"},
        "daemons": [{"nodeName": "n", "ipAddress": "1.2.3.4", "cliqueID": "c", "index": 1,
                     "status": "NotReady"}],
    },
    "claim": {
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "channel", "driver": names.DRIVER_NAME,
                                 "pool": "p", "device": "channel-0"}],
                    "config": [
                        {"source": "FromClass", "requests": ["channel"],
                         "opaque": {"driver": names.DRIVER_NAME, "parameters": VALID_OPAQUE}},
                    ],
                },
            },
        },
    },
}


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a JSON tree (the root included) that can be replaced."""
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found.extend(paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found.extend(paths(child, (*prefix, index)))
    return found


def replaced(value: Any, path: tuple[Any, ...], junk: Any) -> Any:
    if not path:
        return junk
    out = copy.deepcopy(value)
    node = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = junk
    return out


def assert_decodes_or_raises_decode_error(decoder: Callable[[Any], object], value: Any) -> None:
    try:
        decoder(value)
    except errors.DecodeError as err:
        assert isinstance(err.message, str)
        assert err.message


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_valid_fixtures_decode(name: str) -> None:
    assert DECODERS[name](VALID[name]) is not None


@pytest.mark.parametrize("name", sorted(DECODERS))
@settings(max_examples=200)
@given(value=json_values)
def test_decoders_raise_only_decode_error_on_arbitrary_json(name: str, value: Any) -> None:
    assert_decodes_or_raises_decode_error(DECODERS[name], value)


@pytest.mark.parametrize("name", sorted(DECODERS))
@settings(max_examples=200)
@given(data=st.data(), junk=json_values)
def test_decoders_raise_only_decode_error_on_near_valid_json(
    name: str, data: st.DataObject, junk: Any
) -> None:
    valid = VALID[name]
    path = data.draw(st.sampled_from(paths(valid)))
    assert_decodes_or_raises_decode_error(DECODERS[name], replaced(valid, path, junk))


@settings(max_examples=200)
@given(extra=st.dictionaries(json_keys, json_values, max_size=4))
def test_extra_fields_never_break_lenient_decoding(extra: dict[Any, Any]) -> None:
    # NB: Hypothesis also draws string constants from the code under test, so it does find
    # the optional fields by name (junk in a known field is an error, not an extra field).
    params = {k: v for k, v in extra.items() if k not in {*VALID_OPAQUE, "channelID"}}
    params.update(VALID_OPAQUE)
    assert decoding.decode_opaque_config(params, strict=False) == models.ChannelConfig(
        domain_id="uid", allocation_mode="Single"
    )


@settings(max_examples=200)
@given(value=json_values)
def test_tolerant_object_meta_never_raises_on_arbitrary_json(value: Any) -> None:
    assert isinstance(decoding.object_meta_from_k8s(value, strict=False), models.ObjectMeta)
