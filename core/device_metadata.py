"""Device metadata files (KEP-5304, gate DeviceMetadata): what a prepared claim's containers
read about their devices, and the CDI spec that mounts it.

The layout and format are Kubernetes' (`k8s.io/dynamic-resource-allocation`, package
`api/metadata` and the kubelet plugin helper's metadata writer, v0.37), so a workload that
reads them with `devicemetadata` works unchanged:
- per claim and request, a file on the host at
  `<plugin dir>/dra-device-metadata/<namespace>_<claim>/<request>/metadata.json`;
- mounted read-only (`ro`, `bind`) into the container at
  `/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/<driver>-metadata.json`,
  or `.../resourceclaimtemplates/<pod claim name>/<request>/...` for a claim made from a
  template (the pod's name for it, as the pod spec knows it);
- by a CDI spec `<cdi root>/<driver>_metadata_<claimUID>_<request>.json`, kind
  `<driver>/metadata`, device `<claimUID>_<request>`, whose fully qualified id is added to
  the first device of the request in the kubelet's answer;
- the file is a JSON stream of one `DeviceMetadata` object per API version, newest first:
  `metadata.resource.k8s.io/v1beta1` (which the v0.37 helper requires) then `v1alpha1`
  (the one upstream's driver, on helper v0.36, writes), so readers of either find theirs.

Subrequest names ("gpu/large") are kept in the file and dropped from paths, as the helper
does. Pure: the adapter (`adapters.fs.device_metadata`) writes what this plans.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Final

from core import cdi, models

GROUP: Final = "metadata.resource.k8s.io"
# Newest first, as the helper writes the stream.
API_VERSIONS: Final = (f"{GROUP}/v1beta1", f"{GROUP}/v1alpha1")
KIND: Final = "DeviceMetadata"
CONTAINER_DIR: Final = "/var/run/kubernetes.io/dra-device-attributes"
RESOURCE_CLAIMS_SUBDIR: Final = "resourceclaims"
RESOURCE_CLAIM_TEMPLATES_SUBDIR: Final = "resourceclaimtemplates"
HOST_SUBDIR: Final = "dra-device-metadata"
HOST_FILE_NAME: Final = "metadata.json"
MOUNT_OPTIONS: Final = ("ro", "bind")
# A metadata device holds at most this many attributes (the API's validation).
MAX_ATTRIBUTES: Final = 32


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequestMetadata:
    """What is written for one request of a claim: the metadata file and its CDI spec."""

    request: str
    # Host path of the metadata file and its content (a JSON stream).
    file_path: str
    content: str
    # File name of the CDI spec in the CDI root, and the spec.
    spec_file_name: str
    spec: models.JSONObject
    # The id the kubelet hands the runtime (`<driver>/metadata=<claimUID>_<request>`).
    cdi_device_id: str


def base_request(request: str) -> str:
    """The request a (sub)request reference belongs to: "gpu/large" -> "gpu"."""
    return request.split("/", 1)[0]


def claim_dir(plugin_dir: str, *, namespace: str, name: str) -> str:
    """Host directory of one claim's metadata files."""
    return posixpath.join(plugin_dir, HOST_SUBDIR, f"{namespace}_{name}")


def host_file_path(plugin_dir: str, *, namespace: str, name: str, request: str) -> str:
    """Host path of the metadata file of one request."""
    return posixpath.join(
        claim_dir(plugin_dir, namespace=namespace, name=name), request, HOST_FILE_NAME
    )


def container_file_path(
    driver: str, *, claim_name: str, pod_claim_name: str, request: str
) -> str:
    """Where a container sees the file: by pod claim name for a template's claim, else by
    the claim's own name."""
    file_name = f"{driver}-metadata.json"
    if pod_claim_name:
        return posixpath.join(
            CONTAINER_DIR, RESOURCE_CLAIM_TEMPLATES_SUBDIR, pod_claim_name, request, file_name
        )
    return posixpath.join(CONTAINER_DIR, RESOURCE_CLAIMS_SUBDIR, claim_name, request, file_name)


def spec_file_name(driver: str, *, claim_uid: str, request: str) -> str:
    """`<driver>_metadata_<claimUID>_<request>.json`, the helper's name for the spec."""
    return f"{driver}_metadata_{claim_uid}_{request}.json"


def spec_file_prefix(driver: str, *, claim_uid: str) -> str:
    """What the names of every metadata spec of one claim start with."""
    return f"{driver}_metadata_{claim_uid}_"


def plan_claim_metadata(
    claim: models.ResourceClaim,
    devices: Sequence[models.PreparedDevice],
    *,
    driver: str,
    plugin_dir: str,
    attributes: Mapping[str, Mapping[str, models.JSONObject]],
) -> tuple[RequestMetadata, ...]:
    """One metadata file and spec per request of the prepared `devices` (sorted by request).

    `attributes` are, by device name, the attributes a device's entry carries (as in a
    ResourceSlice; the first `MAX_ATTRIBUTES` keys in sorted order); other devices carry
    only driver, pool and name. Deterministic: the same claim and devices give the same
    bytes, so writing them again on a repeated prepare changes nothing.
    """
    by_request: dict[str, list[models.PreparedDevice]] = {}
    for device in devices:
        for request in device.request_names:
            by_request.setdefault(request, []).append(device)
    planned = []
    for request, listed in sorted(by_request.items()):
        base = base_request(request)
        host_path = host_file_path(
            plugin_dir, namespace=claim.namespace, name=claim.name, request=base
        )
        content = metadata_stream(
            claim, request=request, driver=driver, devices=listed, attributes=attributes
        )
        device_name = f"{claim.uid}_{base}"
        spec: models.JSONObject = {
            "kind": f"{driver}/metadata",
            "devices": [{
                "name": device_name,
                "containerEdits": {"mounts": [{
                    "hostPath": host_path,
                    "containerPath": container_file_path(
                        driver, claim_name=claim.name, pod_claim_name=claim.pod_claim_name,
                        request=base,
                    ),
                    "options": list(MOUNT_OPTIONS),
                }]},
            }],
        }
        spec = {"cdiVersion": cdi.minimum_cdi_version(spec), **spec}
        planned.append(RequestMetadata(
            request=base, file_path=host_path, content=content,
            spec_file_name=spec_file_name(driver, claim_uid=claim.uid, request=base),
            spec=spec, cdi_device_id=f"{driver}/metadata={device_name}",
        ))
    return tuple(planned)


def metadata_stream(
    claim: models.ResourceClaim,
    *,
    request: str,
    driver: str,
    devices: Sequence[models.PreparedDevice],
    attributes: Mapping[str, Mapping[str, models.JSONObject]],
) -> str:
    """The file's content: the request's DeviceMetadata once per API version, each pretty
    JSON (two-space indent, as the helper's serializer) followed by a newline."""
    listed = []
    for device in devices:
        entry: models.JSONObject = {
            "driver": driver, "pool": device.pool_name, "name": device.device_name,
        }
        own = attributes.get(device.device_name)
        if own:
            keys = sorted(own)[:MAX_ATTRIBUTES]
            entry["attributes"] = {key: own[key] for key in keys}
        listed.append(entry)
    meta: models.JSONObject = {
        "name": claim.name, "namespace": claim.namespace, "uid": claim.uid, "generation": 1,
    }
    body: models.JSONObject = {"metadata": meta}
    if claim.pod_claim_name:
        body["podClaimName"] = claim.pod_claim_name
    body["requests"] = [{"name": request, "devices": listed}]
    return "".join(
        json.dumps(
            {"kind": KIND, "apiVersion": version, **body}, indent=2, ensure_ascii=False
        ) + "\n"
        for version in API_VERSIONS
    )


def with_metadata_ids(
    devices: Sequence[models.PreparedDevice], planned: Sequence[RequestMetadata]
) -> tuple[models.PreparedDevice, ...]:
    """The kubelet's answer with each request's metadata CDI id added to the first device of
    that request (as the helper injects it), so the runtime mounts the file once."""
    ids = {item.request: item.cdi_device_id for item in planned}
    injected: set[str] = set()
    answered = []
    for device in devices:
        extra = []
        for request in device.request_names:
            base = base_request(request)
            if base in ids and base not in injected:
                extra.append(ids[base])
                injected.add(base)
        answered.append(
            dataclasses.replace(device, cdi_device_ids=(*device.cdi_device_ids, *extra))
            if extra else device
        )
    return tuple(answered)
