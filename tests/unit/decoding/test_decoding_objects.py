"""ComputeDomain, ComputeDomainClique and ObjectMeta from Kubernetes JSON (DESIGN §3)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from core import decoding, errors, models


def cd_json() -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {
            "name": "cd1",
            "namespace": "team-a",
            "uid": "uid-1",
            "resourceVersion": "42",
            "finalizers": ["resource.nvidia.com/computeDomain"],
            "labels": {"b": "2", "a": "1"},
            "annotations": {"note": "x"},
        },
        "spec": {"channel": {"resourceClaimTemplate": {"name": "cd1-channel"}}},
    }


def decode_error(obj: Any) -> errors.DecodeError:
    with pytest.raises(errors.DecodeError) as caught:
        decoding.compute_domain_from_k8s(obj)
    return caught.value


def test_compute_domain_decodes_with_crd_defaults() -> None:
    cd = decoding.compute_domain_from_k8s(cd_json())
    assert cd.meta == models.ObjectMeta(
        name="cd1",
        namespace="team-a",
        uid="uid-1",
        resource_version="42",
        finalizers=("resource.nvidia.com/computeDomain",),
        labels={"a": "1", "b": "2"},
        annotations={"note": "x"},
    )
    assert cd.spec == models.ComputeDomainSpec(
        channel=models.ChannelSpec(
            resource_claim_template_name="cd1-channel",
            allocation_mode=models.AllocationMode.SINGLE,
        ),
        num_nodes=0,
    )
    assert cd.status is None
    assert cd.uid == "uid-1"


def test_compute_domain_reads_num_nodes_and_allocation_mode_all() -> None:
    obj = cd_json()
    obj["spec"]["numNodes"] = 4
    obj["spec"]["channel"]["allocationMode"] = "All"
    cd = decoding.compute_domain_from_k8s(obj)
    assert cd.spec.num_nodes == 4
    assert cd.spec.channel.allocation_mode is models.AllocationMode.ALL


def test_compute_domain_deletion_timestamp_marks_deleting() -> None:
    obj = cd_json()
    obj["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert decoding.compute_domain_from_k8s(obj).meta.deleting


def test_compute_domain_status_nodes_are_decoded_sorted_by_name() -> None:
    obj = cd_json()
    obj["status"] = {
        "status": "Ready",
        "nodes": [
            {"name": "n2", "ipAddress": "10.0.0.2", "cliqueID": "c.1", "index": 1,
             "status": "Ready"},
            {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": ""},
        ],
    }
    status = decoding.compute_domain_from_k8s(obj).status
    assert status == models.ComputeDomainStatus(
        status=models.DomainStatus.READY,
        nodes=(
            models.ComputeDomainNode(name="n1", ip_address="10.0.0.1", clique_id=""),
            models.ComputeDomainNode(
                name="n2", ip_address="10.0.0.2", clique_id="c.1", index=1,
                status=models.DomainStatus.READY,
            ),
        ),
    )


def test_missing_rct_name_names_the_field_path() -> None:
    obj = cd_json()
    del obj["spec"]["channel"]["resourceClaimTemplate"]["name"]
    err = decode_error(obj)
    assert err.message == "spec.channel.resourceClaimTemplate.name is required"
    assert err.field == "spec.channel.resourceClaimTemplate.name"


def test_missing_spec_is_rejected() -> None:
    obj = cd_json()
    del obj["spec"]
    assert decode_error(obj).message == "spec is required"


def test_invalid_allocation_mode_names_accepted_values() -> None:
    obj = cd_json()
    obj["spec"]["channel"]["allocationMode"] = "Many"
    err = decode_error(obj)
    assert err.field == "spec.channel.allocationMode"
    assert "use Single or All" in err.message


@pytest.mark.parametrize("value", [-1, "3", 2.0, True])
def test_num_nodes_must_be_a_non_negative_integer(value: Any) -> None:
    obj = cd_json()
    obj["spec"]["numNodes"] = value
    assert decode_error(obj).field == "spec.numNodes"


def test_status_node_with_wrong_type_names_its_index() -> None:
    obj = cd_json()
    obj["status"] = {"status": "Ready", "nodes": [{"name": "n1", "ipAddress": 1, "cliqueID": ""}]}
    err = decode_error(obj)
    assert err.field == "status.nodes[0].ipAddress"
    assert err.message == "status.nodes[0].ipAddress must be a string, got number"


def test_wrong_kind_is_rejected() -> None:
    obj = cd_json()
    obj["kind"] = "Pod"
    assert decode_error(obj).field == "kind"


def test_missing_metadata_name_is_rejected() -> None:
    obj = cd_json()
    del obj["metadata"]["name"]
    assert decode_error(obj).message == "metadata.name is required"


def test_non_string_label_value_is_rejected_naming_it() -> None:
    obj = cd_json()
    obj["metadata"]["labels"] = {"a": 1}
    assert decode_error(obj).field == "metadata.labels.a"


def test_object_meta_from_k8s_reads_any_object() -> None:
    meta = decoding.object_meta_from_k8s({"metadata": {"name": "x"}})
    assert meta == models.ObjectMeta(name="x")


def test_tolerant_object_meta_reads_what_strict_reads_from_a_well_formed_object() -> None:
    obj = cd_json()
    obj["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"

    assert decoding.object_meta_from_k8s(obj, strict=False) == decoding.object_meta_from_k8s(obj)


def test_tolerant_object_meta_reads_missing_or_mistyped_fields_as_empty() -> None:
    obj = {
        "metadata": {
            "namespace": 7,
            "uid": None,
            "finalizers": ["kept", 3],
            "labels": {"a": "1", "b": 2},
            "annotations": ["not", "a", "map"],
            "deletionTimestamp": "",
        }
    }

    assert decoding.object_meta_from_k8s(obj, strict=False) == models.ObjectMeta(
        name="", finalizers=("kept",), labels={"a": "1"}
    )


def test_tolerant_object_meta_of_an_object_without_metadata_is_empty() -> None:
    assert decoding.object_meta_from_k8s({"metadata": "junk"}, strict=False) == (
        models.ObjectMeta(name="")
    )


def test_strict_object_meta_rejects_what_tolerant_reads_as_empty() -> None:
    with pytest.raises(errors.DecodeError) as caught:
        decoding.object_meta_from_k8s({"metadata": {"name": "x", "finalizers": ["f", 3]}})
    assert caught.value.field == "metadata.finalizers[1]"


def test_decoding_does_not_mutate_input() -> None:
    obj = cd_json()
    before = copy.deepcopy(obj)
    decoding.compute_domain_from_k8s(obj)
    assert obj == before


def test_status_encodes_sorted_and_decodes_back() -> None:
    status = models.ComputeDomainStatus(
        status=models.DomainStatus.READY,
        nodes=(
            models.ComputeDomainNode(name="n2", ip_address="10.0.0.2", clique_id="c.1", index=1),
            models.ComputeDomainNode(
                name="n1", ip_address="10.0.0.1", clique_id="c.1",
                status=models.DomainStatus.READY,
            ),
        ),
    )
    encoded = decoding.compute_domain_status_to_k8s(status)
    assert encoded == {
        "status": "Ready",
        "nodes": [
            {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0,
             "status": "Ready"},
            {"name": "n2", "ipAddress": "10.0.0.2", "cliqueID": "c.1", "index": 1,
             "status": "NotReady"},
        ],
    }
    obj = cd_json()
    obj["status"] = encoded
    decoded = decoding.compute_domain_from_k8s(obj).status
    assert decoded is not None
    assert decoded.nodes == tuple(sorted(status.nodes, key=lambda n: n.name))


def test_empty_status_encodes_an_empty_node_list() -> None:
    # A merge patch with `nodes: []` clears stale nodes; omitting it would keep them.
    assert decoding.compute_domain_status_to_k8s(models.ComputeDomainStatus()) == {
        "status": "NotReady",
        "nodes": [],
    }


def test_clique_decodes_top_level_daemons_sorted_by_node() -> None:
    obj = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainClique",
        "metadata": {"name": "uid-1.c1", "namespace": "dra"},
        "daemons": [
            {"nodeName": "n2", "ipAddress": "10.0.0.2", "cliqueID": "c1", "index": 1,
             "status": "Ready"},
            {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c1"},
        ],
    }
    clique = decoding.compute_domain_clique_from_k8s(obj)
    assert clique.meta.name == "uid-1.c1"
    assert clique.daemons == (
        models.CliqueDaemon(node_name="n1", ip_address="10.0.0.1", clique_id="c1"),
        models.CliqueDaemon(
            node_name="n2", ip_address="10.0.0.2", clique_id="c1", index=1,
            status=models.DomainStatus.READY,
        ),
    )


def test_clique_daemon_without_node_name_is_rejected() -> None:
    obj = {
        "metadata": {"name": "x"},
        "daemons": [{"ipAddress": "10.0.0.1", "cliqueID": "c1"}],
    }
    with pytest.raises(errors.DecodeError) as caught:
        decoding.compute_domain_clique_from_k8s(obj)
    assert caught.value.message == "daemons[0].nodeName is required"
