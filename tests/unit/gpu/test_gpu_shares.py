"""Consumable shares: the flag, what is published under it, and prepare of claims holding shares.

Covers: `--consumable-shares` values and their refusals; the device JSON in each mode (upstream's
shape: allowMultipleAllocations, memory rounded down to 1Mi with a request policy, a `shares`
capacity for N) and none of it when disabled or for VFIO; prepare of two claims sharing a device
(equal configs) and the refusal when their configs differ; one claim holding several shares of one
device (one CDI device, one response device per share with its shareID); MPS refused for a share;
checkpoint records of shares round-trip and records without shares encode byte-identically.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import gpu_prep_fixtures as f
import gpu_slices_inventories as inv
import pytest

from core import checkpoint as checkpoints
from core import errors, gates, models, names
from core.gpu import checkpoint_records as records
from core.gpu import configs, overlap, shares
from core.gpu import preparing as p
from core.gpu import slices as gpu_slices

ON = gates.resolve_gates({gates.CONSUMABLE_SHARES: True})
OFF = gates.resolve_gates({})
EMPTY = p.empty_gpu_checkpoint(boot_id="boot-1")
FIRST_UID = "c0ffee00-0000-4000-8000-00000000000a"
SECOND_UID = "c0ffee00-0000-4000-8000-00000000000b"


# ---------------------------------------------------------------- the flag


@pytest.mark.parametrize(("text", "parsed"), [
    ("disabled", shares.DISABLED),
    ("", shares.DISABLED),
    (" memory ", shares.ConsumableShares(mode=shares.ShareMode.MEMORY)),
    ("unlimited", shares.ConsumableShares(mode=shares.ShareMode.UNLIMITED)),
    ("4", shares.ConsumableShares(mode=shares.ShareMode.COUNT, count=4)),
    ("+2", shares.ConsumableShares(mode=shares.ShareMode.COUNT, count=2)),
])
def test_the_values_upstream_accepts_are_accepted(text: str, parsed: object) -> None:
    assert shares.parse_consumable_shares(text, gates=ON) == parsed


@pytest.mark.parametrize("text", ["0", "-1", "half", "4.5", "Memory", "٣"])
def test_any_other_value_is_refused_saying_what_is_allowed(text: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        shares.parse_consumable_shares(text, gates=ON)
    assert caught.value.message == (
        f"invalid value for --consumable-shares (CONSUMABLE_SHARES, Helm consumableShares): "
        f"{text!r}; it must be 'disabled', 'memory', 'unlimited' or a positive whole number "
        "(the shares each GPU is split into)"
    )


def test_shares_without_the_gate_are_refused_naming_the_gate() -> None:
    assert shares.parse_consumable_shares("disabled", gates=OFF) == shares.DISABLED
    with pytest.raises(errors.ConfigError, match=r"requires feature gate ConsumableShares=true"):
        shares.parse_consumable_shares("memory", gates=OFF)


# ---------------------------------------------------------------- what is published

GIB80 = "81559Mi"  # the hgx-h100 profile's 85520809984 bytes, already a multiple of 1Mi


def _gpu0(consumable: shares.ConsumableShares) -> dict[str, Any]:
    return dict(gpu_slices.plan_gpu_devices(inv.HGX_H100, gates=ON, consumable=consumable)[0])


def test_disabled_publishes_exactly_what_upstream_publishes_without_the_feature() -> None:
    assert gpu_slices.plan_gpu_devices(inv.HGX_H100, gates=ON) == gpu_slices.plan_gpu_devices(
        inv.HGX_H100, gates=ON, consumable=shares.DISABLED)
    assert "allowMultipleAllocations" not in _gpu0(shares.DISABLED)


def test_memory_mode_lets_a_claim_without_a_request_take_all_memory() -> None:
    device = _gpu0(shares.ConsumableShares(mode=shares.ShareMode.MEMORY))
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"] == {"memory": {"value": GIB80, "requestPolicy": {
        "default": GIB80, "validRange": {"min": "1Mi", "max": GIB80, "step": "1Mi"}}}}


def test_unlimited_mode_consumes_no_memory_by_default() -> None:
    device = _gpu0(shares.ConsumableShares(mode=shares.ShareMode.UNLIMITED))
    assert device["capacity"] == {"memory": {"value": GIB80, "requestPolicy": {
        "default": "0", "validRange": {"min": "0", "max": GIB80, "step": "1Mi"}}}}


def test_n_shares_adds_a_shares_capacity_of_n_with_one_by_default() -> None:
    device = _gpu0(shares.ConsumableShares(mode=shares.ShareMode.COUNT, count=4))
    assert device["capacity"] == {
        "memory": {"value": GIB80, "requestPolicy": {
            "default": "0", "validRange": {"min": "0", "max": GIB80, "step": "1Mi"}}},
        "shares": {"value": "4", "requestPolicy": {
            "default": "1", "validRange": {"min": "1", "max": "4", "step": "1"}}},
    }


def test_memory_that_is_not_a_whole_mebibyte_is_rounded_down_as_upstream_does() -> None:
    odd = dataclasses.replace(inv.HGX_H100.gpus[0], memory_bytes=80 * 2**30 + 4095)
    device = gpu_slices.gpu_device(odd, consumable=shares.ConsumableShares(
        mode=shares.ShareMode.UNLIMITED))
    assert device["capacity"]["memory"]["value"] == "80Gi"


def test_mig_devices_are_shareable_and_vfio_functions_never() -> None:
    consumable = shares.ConsumableShares(mode=shares.ShareMode.COUNT, count=2)
    node = gpu_slices.plan_gpu_devices(inv.A100_MIG_NODE, gates=ON, consumable=consumable)
    assert all(d["allowMultipleAllocations"] is True for d in node)
    mig = next(d for d in node if "mig" in d["name"])
    assert mig["capacity"]["shares"]["value"] == "2"
    assert "requestPolicy" not in mig["capacity"]["multiprocessors"]  # as upstream
    passthrough = gates.resolve_gates({gates.CONSUMABLE_SHARES: True,
                                       gates.PASSTHROUGH_SUPPORT: True})
    vfios = [d for d in gpu_slices.plan_gpu_devices(
        inv.PROFILES["hgx-h100-vfio"], gates=passthrough, consumable=consumable)
        if d["name"].startswith("gpu-vfio-")]
    assert vfios and all("allowMultipleAllocations" not in d for d in vfios)


# ---------------------------------------------------------------- prepare of shares


def share_claim(*shares_: tuple[str, str, str], uid: str = SECOND_UID, name: str = "second",
                parameters: dict[str, Any] | None = None) -> models.ResourceClaim:
    """A claim allocated (request, device, shareID) results, with one claim-wide config."""
    return models.ResourceClaim(
        uid=names.ClaimUID(uid), namespace="ml", name=name, allocated=True,
        results=tuple(models.DeviceResult(request=r, driver=f.DRIVER, pool=f.NODE, device=d,
                                          share_id=s) for r, d, s in shares_),
        configs=() if parameters is None else (f.config(parameters),),
    )


def prepare(claim: models.ResourceClaim, checkpoint: records.Checkpoint = EMPTY,
            ) -> p.GpuClaimOutcome:
    return p.plan_gpu_prepare(claim, checkpoint=checkpoint, inventory=f.INVENTORY,
                              files=f.FILES, gates=f.ALL_GATES, now=100.0, pool=f.NODE)


def ok(outcome: p.GpuClaimOutcome) -> p.GpuClaimOutcome:
    assert outcome.error is None, outcome.error
    return outcome


def held_by_first(parameters: dict[str, Any] | None = None) -> records.Checkpoint:
    first = share_claim(("gpu", "gpu-0", "share-a"), uid=FIRST_UID, name="first",
                        parameters=parameters)
    return ok(prepare(first)).checkpoint


def test_two_claims_share_a_device_when_their_configs_are_equal() -> None:
    held = held_by_first()
    second = ok(prepare(share_claim(("gpu", "gpu-0", "share-b")), held))
    both = {uid: e.record.held for uid, e in second.checkpoint.entries.items()}
    assert [h.consumable for hs in both.values() for h in hs] == [True, True]
    assert {h.config for hs in both.values() for h in hs} == {
        '{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"}'}
    [device] = second.devices
    assert device.share_id == "share-b"


def test_an_explicit_default_config_equals_no_config() -> None:
    held = held_by_first(f.gpu_config())
    ok(prepare(share_claim(("gpu", "gpu-0", "share-b")), held))


def test_a_share_with_another_config_is_refused_naming_both_configs_and_the_fix() -> None:
    held = held_by_first(f.time_slicing("Long"))
    outcome = prepare(share_claim(("gpu", "gpu-0", "share-b")), held)
    assert isinstance(outcome.error, errors.PermanentError) and outcome.steps == ()
    message = str(outcome.error)
    assert message.startswith("device gpu-0 is already prepared on this node for claim "
                              "ml/first as a consumable share with another config (")
    assert '"interval":"Long"' in message and "give this claim the same opaque config" in message


def test_an_exclusive_holder_still_keeps_a_share_out() -> None:
    exclusive = ok(prepare(f.claim("gpu-0", uid=FIRST_UID, name="first"))).checkpoint
    outcome = prepare(share_claim(("gpu", "gpu-0", "share-b")), exclusive)
    assert "already prepared on this node for claim ml/first" in str(outcome.error)


def test_one_claim_holding_two_shares_of_a_device_gets_one_cdi_device_and_both_shares() -> None:
    claim = share_claim(("a", "gpu-1", "share-1"), ("b", "gpu-1", "share-2"))
    outcome = ok(prepare(claim))
    [spec] = [s.spec for s in outcome.steps if isinstance(s, models.WriteCDISpec)]
    assert [d["name"] for d in f.check_cdi(spec)["devices"]] == [f"{SECOND_UID}-gpu-1"]
    assert [(d.request_names, d.share_id, d.cdi_device_ids) for d in outcome.devices] == [
        (("a",), "share-1", (f"k8s.gpu.nvidia.com/claim={SECOND_UID}-gpu-1",)),
        (("b",), "share-2", (f"k8s.gpu.nvidia.com/claim={SECOND_UID}-gpu-1",)),
    ]
    [entry] = outcome.checkpoint.entries.values()
    assert [h.name for h in entry.record.held] == ["gpu-1"]
    # Prepared again (a kubelet retry), the same answer and nothing to do.
    again = prepare(claim, outcome.checkpoint)
    assert again.steps == () and again.devices == outcome.devices


def test_one_claim_holding_shares_of_a_device_under_two_configs_is_refused() -> None:
    claim = dataclasses.replace(
        share_claim(("a", "gpu-1", "share-1"), ("b", "gpu-1", "share-2")),
        configs=(f.config(f.time_slicing("Short"), requests=("b",)),),
    )
    outcome = prepare(claim)
    assert isinstance(outcome.error, errors.PermanentError)
    assert str(outcome.error).startswith(
        "claim ml/second holds device gpu-1 for requests a and b under different configs (")
    assert "give both requests the same opaque config" in str(outcome.error)


def test_mps_is_refused_for_a_share_saying_what_to_use_instead() -> None:
    mps = configs.GpuConfig(sharing=configs.Sharing(strategy=configs.SharingStrategy.MPS))
    result = models.DeviceResult(request="gpu", driver=f.DRIVER, pool=f.NODE, device="gpu-0",
                                 share_id="share-a")
    with pytest.raises(errors.PermanentError) as caught:
        shares.check_share_config(result, mps, claim="ml/mps")
    assert "MPS sharing is not supported with consumable shares" in str(caught.value)
    assert "--consumable-shares=disabled" in str(caught.value)
    shares.check_share_config(dataclasses.replace(result, share_id=""), mps, claim="ml/mps")
    shares.check_share_config(result, configs.GpuConfig(), claim="ml/mps")


def test_unprepare_of_one_share_leaves_the_other_holder() -> None:
    held = held_by_first()
    both = ok(prepare(share_claim(("gpu", "gpu-0", "share-b")), held)).checkpoint
    ref = models.ClaimRef(uid=names.ClaimUID(FIRST_UID), namespace="ml", name="first")
    after = p.plan_gpu_unprepare(ref, checkpoint=both, inventory=f.INVENTORY, now=200.0)
    assert list(after.checkpoint.entries) == [SECOND_UID]


# ---------------------------------------------------------------- checkpoint records


def test_a_shares_record_round_trips_through_the_checkpoint() -> None:
    outcome = ok(prepare(share_claim(("gpu", "gpu-0", "share-b"),
                                     parameters=f.time_slicing("Long"))))
    decoded = records.decode(checkpoints.encode(outcome.checkpoint))
    assert decoded.entries == outcome.checkpoint.entries
    raw = json.loads(checkpoints.encode(outcome.checkpoint))
    [entry] = raw["entries"].values() if isinstance(raw["entries"], dict) else raw["entries"]
    assert entry["devices"][0]["shareID"] == "share-b"
    [held] = entry[records.KEY]["devices"]
    assert held["consumableShare"] is True
    assert held["config"]["sharing"]["timeSlicingConfig"] == {"interval": "Long"}


def test_records_without_shares_encode_without_the_new_keys() -> None:
    outcome = ok(prepare(f.claim("gpu-0")))
    text = checkpoints.encode(outcome.checkpoint).decode()
    for key in ("shareID", "consumableShare", '"config"'):
        assert key not in text


def test_a_hand_edited_share_config_reads_as_equal_to_no_config() -> None:
    raw = {"name": "gpu-0", "type": "gpu", "shared": False, "consumableShare": True,
           "config": "not an object"}
    [held] = records.CODEC.decode({"devices": [raw], "timeSliced": [],
                                   "vfioAPIDevice": ""}).held
    assert held.consumable and held.config == ""
    mine = dataclasses.replace(held, config=shares.normalized_config(configs.GpuConfig()))
    assert overlap.conflict(mine, held) is overlap.Conflict.CONFIG_DIFFERS
