"""Device metadata (KEP-5304, gate DeviceMetadata): the files a prepared claim's containers
read, in Kubernetes' layout and format.

Covers: one file per request at the helper's host path, a JSON stream of the same object in
`metadata.resource.k8s.io/v1beta1` then `v1alpha1` (the shape of the helper's v0.37 test
fixture); device entries with their attributes where given, else driver, pool and name; the
CDI spec (kind `<driver>/metadata`, device `<uid>_<request>`, an `ro,bind` mount at the
container path, which depends on whether the claim came from a template); subrequests
sharing their request's file; the answer's CDI ids added once per request, to its first
device; deterministic bytes.
"""

from __future__ import annotations

import json

import gpu_prep_fixtures as f

from core import device_metadata as dm
from core import models, names

DRIVER = "gpu.nvidia.com"
PLUGIN_DIR = "/var/lib/kubelet/plugins/gpu.nvidia.com"
UID = "c0ffee00-0000-4000-8000-000000000001"
VFIO_ATTRIBUTES: dict[str, models.JSONObject] = {
    "type": {"string": "vfio"},
    "resource.kubernetes.io/pciBusID": {"string": "0000:40:00.0"},
    "iommuFDEnabled": {"bool": False},
}


def device(name: str, *requests: str) -> models.PreparedDevice:
    return models.PreparedDevice(
        request_names=requests, pool_name=f.NODE, device_name=name,
        cdi_device_ids=(f"k8s.gpu.nvidia.com/claim={UID}-{name}",),
    )


def claim(*, pod_claim_name: str = "") -> models.ResourceClaim:
    return models.ResourceClaim(
        uid=names.ClaimUID(UID), namespace="ml", name="vm-gpu", allocated=True,
        pod_claim_name=pod_claim_name,
    )


def decode_stream(text: str) -> list[dict[str, object]]:
    decoder = json.JSONDecoder()
    found, at = [], 0
    while at < len(text.rstrip()):
        obj, at = decoder.raw_decode(text, at)
        found.append(obj)
        at += 1  # the newline after each object
    return found


def test_one_file_per_request_holds_the_object_once_per_version_newest_first() -> None:
    [planned] = dm.plan_claim_metadata(
        claim(), [device("gpu-vfio-0", "vm")], driver=DRIVER, plugin_dir=PLUGIN_DIR,
        attributes={"gpu-vfio-0": VFIO_ATTRIBUTES},
    )
    assert planned.file_path == f"{PLUGIN_DIR}/dra-device-metadata/ml_vm-gpu/vm/metadata.json"
    objects = decode_stream(planned.content)
    assert [o["apiVersion"] for o in objects] == [
        "metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1",
    ]
    assert objects[0] == {
        "kind": "DeviceMetadata",
        "apiVersion": "metadata.resource.k8s.io/v1beta1",
        "metadata": {"name": "vm-gpu", "namespace": "ml", "uid": UID, "generation": 1},
        "requests": [{"name": "vm", "devices": [{
            "driver": DRIVER, "pool": f.NODE, "name": "gpu-vfio-0",
            "attributes": {
                "iommuFDEnabled": {"bool": False},
                "resource.kubernetes.io/pciBusID": {"string": "0000:40:00.0"},
                "type": {"string": "vfio"},
            },
        }]}],
    }
    assert {**objects[1], "apiVersion": ""} == {**objects[0], "apiVersion": ""}
    # The helper's serializer: two-space indent, one newline after each object.
    assert planned.content.startswith('{\n  "kind": "DeviceMetadata",\n')
    assert planned.content.endswith("}\n")


def test_the_spec_mounts_the_file_read_only_where_the_pod_spec_names_the_claim() -> None:
    [planned] = dm.plan_claim_metadata(
        claim(), [device("gpu-vfio-0", "vm")], driver=DRIVER, plugin_dir=PLUGIN_DIR,
        attributes={},
    )
    assert planned.spec_file_name == f"gpu.nvidia.com_metadata_{UID}_vm.json"
    assert planned.cdi_device_id == f"gpu.nvidia.com/metadata={UID}_vm"
    assert f.check_cdi(planned.spec) == {
        "cdiVersion": "0.3.0",  # as the helper: the least the spec needs
        "kind": "gpu.nvidia.com/metadata",
        "devices": [{"name": f"{UID}_vm", "containerEdits": {"mounts": [{
            "hostPath": planned.file_path,
            "containerPath": "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/"
                             "vm-gpu/vm/gpu.nvidia.com-metadata.json",
            "options": ["ro", "bind"],
        }]}}],
    }


def test_a_template_claim_is_found_under_its_pod_claim_name_and_says_so() -> None:
    [planned] = dm.plan_claim_metadata(
        claim(pod_claim_name="gpu"), [device("gpu-vfio-0", "vm")], driver=DRIVER,
        plugin_dir=PLUGIN_DIR, attributes={},
    )
    [mount] = planned.spec["devices"][0]["containerEdits"]["mounts"]
    assert mount["containerPath"] == (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/vm/"
        "gpu.nvidia.com-metadata.json"
    )
    assert decode_stream(planned.content)[0]["podClaimName"] == "gpu"


def test_devices_without_attributes_name_driver_pool_and_device_only() -> None:
    [planned] = dm.plan_claim_metadata(
        claim(), [device("gpu-0", "train")], driver=DRIVER, plugin_dir=PLUGIN_DIR,
        attributes={"gpu-vfio-0": VFIO_ATTRIBUTES},
    )
    [request] = decode_stream(planned.content)[0]["requests"]  # type: ignore[misc]
    assert request["devices"] == [{"driver": DRIVER, "pool": f.NODE, "name": "gpu-0"}]


def test_a_subrequest_shares_its_requests_file_and_keeps_its_name_inside() -> None:
    [planned] = dm.plan_claim_metadata(
        claim(), [device("gpu-vfio-0", "vm/big")], driver=DRIVER, plugin_dir=PLUGIN_DIR,
        attributes={},
    )
    assert planned.request == "vm"
    assert planned.file_path.endswith("/ml_vm-gpu/vm/metadata.json")
    assert decode_stream(planned.content)[0]["requests"][0]["name"] == "vm/big"  # type: ignore[index]


def test_each_requests_id_goes_to_its_first_device_only() -> None:
    prepared = [device("gpu-vfio-0", "a"), device("gpu-vfio-1", "a"), device("gpu-0", "b")]
    planned = dm.plan_claim_metadata(
        claim(), prepared, driver=DRIVER, plugin_dir=PLUGIN_DIR, attributes={},
    )
    assert [p.request for p in planned] == ["a", "b"]
    answered = dm.with_metadata_ids(prepared, planned)
    assert [d.cdi_device_ids[1:] for d in answered] == [
        (f"gpu.nvidia.com/metadata={UID}_a",), (), (f"gpu.nvidia.com/metadata={UID}_b",),
    ]


def test_the_same_claim_gives_the_same_bytes() -> None:
    def plan() -> tuple[dm.RequestMetadata, ...]:
        return dm.plan_claim_metadata(
            claim(), [device("gpu-vfio-0", "vm")], driver=DRIVER, plugin_dir=PLUGIN_DIR,
            attributes={"gpu-vfio-0": VFIO_ATTRIBUTES},
        )

    assert plan() == plan()
