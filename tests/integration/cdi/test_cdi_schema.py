"""Every CDI spec the core builds validates against the reference CDI JSON schema.

The reference schema (../shared/reference/cdi, SHARED_DIR overrides ../shared) has two known
quirks: `deviceNodes[].fileMode` is missing although the spec allows it, and `env` items use
`ref` (ignored by validators) instead of `$ref`. We validate against a copy with both fixed:
fileMode declared as a permission-bits integer, env items as strings; each fix is pinned by a
test showing the corrected schema rejects what it should. Device and kind names are checked
against CDI's naming rules, which the schema does not express.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing
import referencing.jsonschema

from core import cdi, models, names
from core.computedomain import recovery

_SHARED = Path(os.environ.get("SHARED_DIR", Path(__file__).parents[3] / ".." / "shared"))
_CDI_DIR = _SHARED / "reference" / "cdi"

# NB: CI always has shared/ beside the clone; there a missing reference must fail, not skip.
pytestmark = pytest.mark.skipif(
    not (_CDI_DIR / "schema.json").is_file() and os.environ.get("CI") != "true",
    reason=f"reference CDI schema not found in {_CDI_DIR} (set SHARED_DIR)",
)

# CDI naming rules (pkg/parser): vendor and class, and device names.
_VENDOR = re.compile(r"^[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_CLASS = re.compile(r"^[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_DEVICE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")

UIDS = (
    "0a1b2c3d-1111-4222-8333-444455556666",  # starts with a digit: needs 0.5.0
    "f3e2d1c0-aaaa-4bbb-8ccc-ddddeeeeffff",
)


def _validator() -> jsonschema.Draft7Validator:
    schema = json.loads((_CDI_DIR / "schema.json").read_text())
    defs = copy.deepcopy(json.loads((_CDI_DIR / "defs.json").read_text()))
    definitions = defs["definitions"]
    definitions["DeviceNode"]["properties"]["fileMode"] = {
        "type": "integer", "minimum": 0, "maximum": 0o7777,
    }
    definitions["containerEdits"]["properties"]["env"]["items"] = {"type": "string"}
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(
        "defs.json", referencing.jsonschema.DRAFT7.create_resource(defs)
    )
    return jsonschema.Draft7Validator(schema, registry=registry)


def _specs() -> list[dict[str, Any]]:
    specs: list[dict[str, Any]] = []
    for uid in UIDS:
        specs.append(cdi.claim_spec(claim_uid=uid, channel_ids=[0], major=242, domain_id="cd"))
        specs.append(
            cdi.claim_spec(claim_uid=uid, channel_ids=range(2048), major=510, domain_id="cd")
        )
        specs.append(cdi.daemon_claim_spec(claim_uid=uid, domain_id="cd-uid"))
    return specs


def _check(spec: dict[str, Any]) -> None:
    # Through the file format: what a runtime reads back is what we validate.
    loaded = json.loads(json.dumps(spec))
    _validator().validate(loaded)
    assert loaded["cdiVersion"] in _VERSIONS
    vendor, _, klass = loaded["kind"].partition("/")
    assert _VENDOR.match(vendor) and _CLASS.match(klass)
    for device in loaded["devices"]:
        assert _DEVICE.match(device["name"]), device["name"]
        for env in device["containerEdits"].get("env", []):
            assert re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", env)


@pytest.mark.parametrize("index", range(len(UIDS) * 3))
def test_cdi_specs_validate_against_the_reference_schema(index: int) -> None:
    _check(_specs()[index])


def test_cdi_spec_from_a_prepare_validates() -> None:
    spec = cdi.claim_spec(claim_uid=UIDS[0], channel_ids=[0], major=242, domain_id="cd")
    assert spec["cdiVersion"] == "0.5.0"
    assert spec["kind"] == names.CDI_KIND_CLAIM
    _check(spec)
    rebuilt = recovery.rebuild_from_cdi(
        boot_id="b",
        config=models.DriverConfig(
            mode=models.IMEXMode.HOST_MANAGED, isolation=models.Isolation.NONE,
            gates=models.FeatureGates(values={}),
        ),
        claim_specs={names.ClaimUID(UIDS[0]): json.loads(json.dumps(spec))},
        now=0.0,
    )
    assert rebuilt.entries[names.ClaimUID(UIDS[0])].record.channel_ids == (0,)


def test_corrected_schema_rejects_a_bad_file_mode() -> None:
    spec = cdi.claim_spec(claim_uid=UIDS[1], channel_ids=[0], major=242, domain_id="cd")
    spec["devices"][0]["containerEdits"]["deviceNodes"][0]["fileMode"] = "0666"
    with pytest.raises(jsonschema.ValidationError):
        _validator().validate(spec)


def test_corrected_schema_rejects_non_string_env_items() -> None:
    spec = cdi.daemon_claim_spec(claim_uid=UIDS[1], domain_id="cd")
    spec["devices"][0]["containerEdits"]["env"] = [["COMPUTE_DOMAIN_UUID=cd"]]
    with pytest.raises(jsonschema.ValidationError):
        _validator().validate(spec)
