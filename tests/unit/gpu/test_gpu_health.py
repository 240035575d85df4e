"""GPU health (gate NVMLDeviceHealthCheck): NVML health events in, upstream's device taints out.

Covers: which published devices an event reaches (a whole GPU and its MIG devices, one MIG
device, every device for a node-wide event, nothing for an instance nobody publishes); the
taint each event gives (XID policy with upstream's ignored XIDs and
`--additional-xids-to-ignore`); one taint per key (a later XID replaces the value, a repeat
changes nothing); the kubelet's health observations; the slice devices with their taints
(effect `None` only for API servers that know it; schema-valid); the state kept per node boot;
and the saved state's JSON (round trip, and every malformed form refused with a DecodeError).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import gpu_slices_inventories as inv
import hypothesis
import kubernetes_validate
import pytest
from hypothesis import strategies as st
from kubernetes_validate import utils as kv_utils

from core import device_health, errors, gates
from core.gpu import devices, health
from core.gpu import slices as gpu_slices

# The A100 node: GPU 0 in MIG mode (four MIG devices, GI 2/3/9/10, CI 0), GPU 1 a full GPU.
NODE = inv.A100_MIG_NODE
WHERE = health.placements(NODE)
GPU0, GPU1 = inv.A100_UUIDS
GPU0_MIGS = (
    "gpu-0-mig-1g10gb-19-2",
    "gpu-0-mig-1g10gb-19-3",
    "gpu-0-mig-2g20gb-14-0",
    "gpu-0-mig-3g40gb-9-4",
)
EVERY_DEVICE = tuple(sorted(("gpu-0", "gpu-1", *GPU0_MIGS)))
POLICY = health.XidPolicy()
BOOT = "3f1c2a4e-0b7d-4c55-9e1a-6d2f8b9c0a11"

XID_KEY = "gpu.nvidia.com/xid"
GPU_LOST_KEY = "gpu.nvidia.com/gpu-lost"
UNMONITORED_KEY = "gpu.nvidia.com/unmonitored"


def xid(number: int, gpu: str = "", *, gi: int = health.WHOLE_GPU, ci: int = health.WHOLE_GPU
        ) -> health.HealthEvent:
    return health.HealthEvent(kind=health.HealthEventKind.XID, gpu_uuid=gpu, gi_id=gi, ci_id=ci,
                              xid=number)


def event(kind: health.HealthEventKind, gpu: str = "") -> health.HealthEvent:
    return health.HealthEvent(kind=kind, gpu_uuid=gpu)


def after(*events: health.HealthEvent, state: health.HealthState | None = None,
          policy: health.XidPolicy = POLICY) -> health.HealthState:
    current = state or health.HealthState(boot_id=BOOT)
    for each in events:
        current, _ = health.apply_event(current, each, where=WHERE, policy=policy)
    return current


def taint_strings(state: health.HealthState) -> dict[str, list[str]]:
    return {device: [str(t) for t in taints] for device, taints in state.taints.items()}


# ------------------------------------------------------------------- the taint keys

def test_taint_keys_are_upstreams() -> None:
    assert health.TAINT_KEY_XID == XID_KEY
    assert health.TAINT_KEY_GPU_LOST == GPU_LOST_KEY
    assert health.TAINT_KEY_UNMONITORED == UNMONITORED_KEY


def test_a_taint_reads_as_key_value_and_effect() -> None:
    assert str(health.DeviceTaint(key=XID_KEY, value="79")) == f"{XID_KEY}=79:NoSchedule"
    assert str(health.DeviceTaint(key=UNMONITORED_KEY, effect=health.TaintEffect.NONE)) == (
        f"{UNMONITORED_KEY}:None")


# ------------------------------------------------------------------- placements

def test_every_full_gpu_and_mig_device_has_a_placement() -> None:
    assert {p.device: (p.gpu_uuid, p.gi_id, p.ci_id) for p in WHERE} == {
        "gpu-0": (GPU0, health.WHOLE_GPU, health.WHOLE_GPU),
        "gpu-1": (GPU1, health.WHOLE_GPU, health.WHOLE_GPU),
        "gpu-0-mig-3g40gb-9-4": (GPU0, 2, 0),
        "gpu-0-mig-2g20gb-14-0": (GPU0, 3, 0),
        "gpu-0-mig-1g10gb-19-3": (GPU0, 9, 0),
        "gpu-0-mig-1g10gb-19-2": (GPU0, 10, 0),
    }


def test_vfio_functions_and_devices_without_a_uuid_have_no_placement() -> None:
    nameless = devices.GpuInventory(
        gpus=(inv.h100_gpu(0, uuid=""), inv.h100_gpu(1)),
        vfios=inv.HGX_H100_WITH_VFIO.vfios,
    )
    assert [p.device for p in health.placements(nameless)] == ["gpu-1"]


# ------------------------------------------------------------------- which devices an event reaches

def test_a_fatal_xid_on_a_gpu_taints_it_and_every_mig_device_on_it() -> None:
    state, changed = health.apply_event(
        health.HealthState(boot_id=BOOT), xid(79, GPU0), where=WHERE, policy=POLICY)
    assert changed == tuple(sorted(("gpu-0", *GPU0_MIGS)))
    assert taint_strings(state) == {
        device: ["gpu.nvidia.com/xid=79:NoSchedule"] for device in changed}


def test_a_fatal_xid_on_a_full_gpu_leaves_the_other_gpus_alone() -> None:
    state, changed = health.apply_event(
        health.HealthState(boot_id=BOOT), xid(79, GPU1), where=WHERE, policy=POLICY)
    assert changed == ("gpu-1",)
    assert taint_strings(state) == {"gpu-1": ["gpu.nvidia.com/xid=79:NoSchedule"]}


def test_an_xid_on_one_gpu_and_compute_instance_taints_only_that_mig_device() -> None:
    state, changed = health.apply_event(
        health.HealthState(boot_id=BOOT), xid(79, GPU0, gi=9, ci=0), where=WHERE, policy=POLICY)
    assert changed == ("gpu-0-mig-1g10gb-19-3",)
    assert taint_strings(state) == {
        "gpu-0-mig-1g10gb-19-3": ["gpu.nvidia.com/xid=79:NoSchedule"]}


@pytest.mark.parametrize(("gi", "ci"), [(9, 1), (5, 0), (9, 0xFFFFFFFE)])
def test_an_xid_on_an_instance_nothing_published_names_touches_nothing(gi: int, ci: int) -> None:
    state, changed = health.apply_event(
        health.HealthState(boot_id=BOOT), xid(79, GPU0, gi=gi, ci=ci), where=WHERE, policy=POLICY)
    assert changed == ()
    assert state.taints == {}


def test_an_event_on_a_gpu_the_node_does_not_publish_touches_nothing() -> None:
    assert health.affected_devices(xid(79, "GPU-not-on-this-node"), WHERE) == ()


@pytest.mark.parametrize(("gi", "ci"), [(9, health.WHOLE_GPU), (health.WHOLE_GPU, 0)])
def test_an_event_naming_only_one_of_gpu_and_compute_instance_is_on_the_whole_gpu(
    gi: int, ci: int
) -> None:
    """As upstream reads NVML's event: a MIG device only when both instance ids are given."""
    assert health.affected_devices(xid(79, GPU0, gi=gi, ci=ci), WHERE) == tuple(
        sorted(("gpu-0", *GPU0_MIGS)))


def test_gpu_lost_node_wide_taints_every_device() -> None:
    state, changed = health.apply_event(
        health.HealthState(boot_id=BOOT), event(health.HealthEventKind.GPU_LOST),
        where=WHERE, policy=POLICY)
    assert changed == EVERY_DEVICE
    assert taint_strings(state) == {
        device: ["gpu.nvidia.com/gpu-lost:NoSchedule"] for device in EVERY_DEVICE}


def test_a_node_wide_event_ignores_the_instance_ids() -> None:
    assert health.affected_devices(xid(79, gi=9, ci=0), WHERE) == EVERY_DEVICE


def test_gpu_lost_on_one_gpu_taints_that_gpu_and_its_mig_devices() -> None:
    assert after(event(health.HealthEventKind.GPU_LOST, GPU0)).taints.keys() == {
        "gpu-0", *GPU0_MIGS}


def test_unmonitored_is_informational() -> None:
    state = after(event(health.HealthEventKind.UNMONITORED, GPU1))
    assert state.of("gpu-1") == (health.DeviceTaint(
        key=UNMONITORED_KEY, effect=health.TaintEffect.NONE),)


# ------------------------------------------------------------------- the XID policy

@pytest.mark.parametrize("number", [13, 31, 43, 45, 68, 109])
def test_the_default_ignored_xids_only_inform(number: int) -> None:
    assert after(xid(number, GPU1)).of("gpu-1") == (
        health.DeviceTaint(key=XID_KEY, value=str(number), effect=health.TaintEffect.NONE),)


@pytest.mark.parametrize("number", [48, 63, 64, 74, 79, 94, 95, 119, 0])
def test_other_xids_refuse_the_device(number: int) -> None:
    assert POLICY.effect(number) is health.TaintEffect.NO_SCHEDULE


def test_the_default_ignored_xids_are_upstreams() -> None:
    assert health.XidPolicy().ignored == {13, 31, 43, 45, 68, 109}
    assert health.xid_policy("").ignored == health.DEFAULT_IGNORED_XIDS


def test_additional_xids_to_ignore_are_added_to_the_defaults() -> None:
    policy = health.xid_policy("48, 79,")
    assert policy.ignored == {13, 31, 43, 45, 68, 109, 48, 79}
    assert policy.effect(79) is health.TaintEffect.NONE
    assert after(xid(79, GPU1), policy=policy).of("gpu-1") == (
        health.DeviceTaint(key=XID_KEY, value="79", effect=health.TaintEffect.NONE),)


@pytest.mark.parametrize("listed", [" 48 ", ",,48,,", "048", "4294967295"])
def test_blanks_empty_entries_and_leading_zeros_are_accepted(listed: str) -> None:
    assert len(health.xid_policy(listed).ignored - health.DEFAULT_IGNORED_XIDS) == 1


@pytest.mark.parametrize(
    ("listed", "entry"),
    [
        ("abc", "abc"),
        ("48,-1", "-1"),
        ("1e3", "1e3"),
        ("+5", "+5"),
        ("4.8", "4.8"),
        ("0x30", "0x30"),
        ("48 79", "48 79"),
        ("4294967296", "4294967296"),
        (str(2**64), str(2**64)),
        # Unicode digits: not XIDs (and int() refuses some of them).
        ("\u00b2", "\u00b2"),
        ("\u0663", "\u0663"),
    ],
)
def test_a_malformed_entry_is_a_config_error_naming_it_and_the_flag(
    listed: str, entry: str
) -> None:
    with pytest.raises(errors.ConfigError) as raised:
        health.xid_policy(listed)
    message = raised.value.message
    assert repr(entry) in message
    assert "--additional-xids-to-ignore" in message and "ADDITIONAL_XIDS_TO_IGNORE" in message


# ------------------------------------------------------------------- one taint per key

def test_a_later_xid_replaces_the_value_of_the_same_key() -> None:
    state = after(xid(79, GPU1))
    state, changed = health.apply_event(state, xid(48, GPU1), where=WHERE, policy=POLICY)
    assert changed == ("gpu-1",)
    assert taint_strings(state) == {"gpu-1": ["gpu.nvidia.com/xid=48:NoSchedule"]}


def test_a_later_ignored_xid_replaces_the_effect_too() -> None:
    assert taint_strings(after(xid(79, GPU1), xid(13, GPU1))) == {
        "gpu-1": ["gpu.nvidia.com/xid=13:None"]}


def test_a_repeated_event_changes_nothing_to_republish() -> None:
    state = after(xid(79, GPU0))
    again, changed = health.apply_event(state, xid(79, GPU0), where=WHERE, policy=POLICY)
    assert changed == ()
    assert again == state


def test_taints_of_different_keys_accumulate_sorted_by_key() -> None:
    state = after(event(health.HealthEventKind.UNMONITORED, GPU1), xid(79, GPU1),
                  event(health.HealthEventKind.GPU_LOST, GPU1))
    assert taint_strings(state) == {"gpu-1": [
        "gpu.nvidia.com/gpu-lost:NoSchedule",
        "gpu.nvidia.com/unmonitored:None",
        "gpu.nvidia.com/xid=79:NoSchedule",
    ]}


def test_an_event_on_the_gpu_after_one_on_a_mig_device_only_changes_what_differs() -> None:
    state = after(xid(79, GPU0, gi=9, ci=0))
    _, changed = health.apply_event(state, xid(79, GPU0), where=WHERE, policy=POLICY)
    assert "gpu-0-mig-1g10gb-19-3" not in changed
    assert changed == tuple(sorted({"gpu-0", *GPU0_MIGS} - {"gpu-0-mig-1g10gb-19-3"}))


def test_applying_an_event_does_not_mutate_the_state_it_was_given() -> None:
    state = after(xid(79, GPU1))
    before = copy.deepcopy(state)
    health.apply_event(state, xid(48, GPU0), where=WHERE, policy=POLICY)
    assert state == before


# ------------------------------------------------------------------- the node boot

def test_the_same_boot_keeps_the_state() -> None:
    state = after(xid(79, GPU1))
    assert health.for_boot(state, boot_id=BOOT) is state


@pytest.mark.parametrize("saved_boot", ["another-boot", None])
def test_another_boot_or_no_saved_state_starts_empty(saved_boot: str | None) -> None:
    saved = None if saved_boot is None else after(xid(79, GPU1), state=health.HealthState(
        boot_id=saved_boot))
    assert health.for_boot(saved, boot_id=BOOT) == health.HealthState(boot_id=BOOT)


# ------------------------------------------------------------------- the kubelet's health stream

def test_a_blocking_taint_is_unhealthy_and_named_in_the_message() -> None:
    seen = health.observations(after(xid(79, GPU1)), ["gpu-1"])
    assert seen["gpu-1"].status is device_health.HealthStatus.UNHEALTHY
    assert "gpu.nvidia.com/xid=79:NoSchedule" in seen["gpu-1"].message


def test_unmonitored_only_is_unknown() -> None:
    seen = health.observations(after(event(health.HealthEventKind.UNMONITORED, GPU1)), ["gpu-1"])
    assert seen["gpu-1"].status is device_health.HealthStatus.UNKNOWN


def test_unmonitored_with_a_blocking_taint_is_unhealthy() -> None:
    state = after(event(health.HealthEventKind.UNMONITORED, GPU1), xid(79, GPU1))
    assert health.observations(state, ["gpu-1"])["gpu-1"].status is (
        device_health.HealthStatus.UNHEALTHY)


def test_only_informational_taints_are_healthy_with_a_message() -> None:
    seen = health.observations(after(xid(13, GPU1)), ["gpu-1"])
    assert seen["gpu-1"].status is device_health.HealthStatus.HEALTHY
    assert "gpu.nvidia.com/xid=13:None" in seen["gpu-1"].message


def test_no_taint_is_healthy() -> None:
    seen = health.observations(after(xid(79, GPU1)), ["gpu-0-mig-1g10gb-19-2"])
    assert seen == {"gpu-0-mig-1g10gb-19-2": device_health.Observation(
        status=device_health.HealthStatus.HEALTHY, message="no fatal NVML event")}


def test_observations_cover_exactly_the_published_devices() -> None:
    state = after(xid(79, GPU0))
    published = ["gpu-1", *GPU0_MIGS]
    assert sorted(health.observations(state, published)) == sorted(published)


def test_observations_feed_the_health_list_as_the_kubelet_sees_it() -> None:
    published = ["gpu-1", *GPU0_MIGS]
    listed = device_health.plan_device_health(
        pool="node-a", published=published,
        observed=health.observations(after(xid(79, GPU0, gi=2, ci=0)), published), now_s=1)
    assert {entry.device: entry.status.value for entry in listed} == {
        "gpu-1": "Healthy",
        "gpu-0-mig-1g10gb-19-2": "Healthy",
        "gpu-0-mig-1g10gb-19-3": "Healthy",
        "gpu-0-mig-2g20gb-14-0": "Healthy",
        "gpu-0-mig-3g40gb-9-4": "Unhealthy",
    }


# ------------------------------------------------------------------- the slice devices

def _published() -> list[dict[str, Any]]:
    return list(gpu_slices.plan_gpu_devices(NODE, gates=gates.resolve_gates({})))


def test_with_taints_adds_the_taints_to_the_tainted_devices_only() -> None:
    published = _published()
    state = after(xid(79, GPU0, gi=9, ci=0), xid(13, GPU1))
    tainted = {d["name"]: d for d in health.with_taints(published, state, effect_none=True)}
    assert tainted["gpu-0-mig-1g10gb-19-3"]["taints"] == [
        {"key": XID_KEY, "value": "79", "effect": "NoSchedule"}]
    assert tainted["gpu-1"]["taints"] == [{"key": XID_KEY, "value": "13", "effect": "None"}]
    untouched = {d["name"]: d for d in published}
    for name in ("gpu-0-mig-1g10gb-19-2", "gpu-0-mig-2g20gb-14-0", "gpu-0-mig-3g40gb-9-4"):
        assert tainted[name] == untouched[name]
        assert "taints" not in tainted[name]


def test_without_effect_none_informational_taints_are_left_out() -> None:
    """Kubernetes 1.34 API servers refuse effect None; those taints only inform."""
    published = _published()
    state = after(xid(79, GPU0, gi=9, ci=0), xid(13, GPU1),
                  event(health.HealthEventKind.UNMONITORED, GPU0))
    tainted = {d["name"]: d for d in health.with_taints(published, state, effect_none=False)}
    assert tainted["gpu-0-mig-1g10gb-19-3"]["taints"] == [
        {"key": XID_KEY, "value": "79", "effect": "NoSchedule"}]
    assert "taints" not in tainted["gpu-1"]
    assert "taints" not in tainted["gpu-0-mig-1g10gb-19-2"]
    assert all(t["effect"] != "None" for d in tainted.values() for t in d.get("taints", []))


def test_with_effect_none_informational_taints_are_kept() -> None:
    state = after(event(health.HealthEventKind.UNMONITORED, GPU1))
    tainted = {d["name"]: d for d in health.with_taints(_published(), state, effect_none=True)}
    assert tainted["gpu-1"]["taints"] == [{"key": UNMONITORED_KEY, "effect": "None"}]


def test_with_taints_does_not_mutate_the_published_devices() -> None:
    published = _published()
    before = copy.deepcopy(published)
    result = health.with_taints(published, after(xid(79, GPU0)), effect_none=True)
    assert published == before
    assert all(a is not b for a, b in zip(result, published, strict=True))
    assert [d["name"] for d in result] == [d["name"] for d in published]


def _versions() -> list[str]:
    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split("."))

    minors = sorted({kv_utils.major_minor(v) for v in kv_utils.all_versions()}, key=key)
    return [v for v in minors if key(v) >= (1, 34)]


VERSIONS = _versions()
KNOW_EFFECT_NONE = [v for v in VERSIONS if tuple(map(int, v.split("."))) >= (1, 35)]


def _tainted_slices(*, effect_none: bool) -> tuple[dict[str, Any], ...]:
    state = after(xid(79, GPU0, gi=9, ci=0), xid(13, GPU1),
                  event(health.HealthEventKind.UNMONITORED, GPU0),
                  event(health.HealthEventKind.GPU_LOST, GPU0))
    built = gpu_slices.build_gpu_resource_slices(
        NODE, node_name="node-a", gates=gates.resolve_gates({}), generation=1)
    for resource_slice in built:
        resource_slice["spec"]["devices"] = health.with_taints(
            resource_slice["spec"]["devices"], state, effect_none=effect_none)
    return built


@pytest.mark.parametrize("version", VERSIONS)
def test_the_tainted_slice_without_effect_none_validates_strictly(version: str) -> None:
    for resource_slice in _tainted_slices(effect_none=False):
        assert any("taints" in d for d in resource_slice["spec"]["devices"])
        assert kubernetes_validate.validate(resource_slice, version, strict=True) == version


@pytest.mark.parametrize("version", KNOW_EFFECT_NONE)
def test_the_tainted_slice_with_effect_none_validates_strictly(version: str) -> None:
    for resource_slice in _tainted_slices(effect_none=True):
        assert kubernetes_validate.validate(resource_slice, version, strict=True) == version


def test_a_tainted_slice_schema_check_has_teeth() -> None:
    resource_slice = _tainted_slices(effect_none=False)[0]
    device = next(d for d in resource_slice["spec"]["devices"] if "taints" in d)
    device["taints"][0]["reason"] = "not a field of DeviceTaint"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(resource_slice, VERSIONS[0], strict=True)


# ------------------------------------------------------------------- the saved state

def test_the_saved_state_is_upstream_shaped_taints_per_device() -> None:
    state = after(xid(79, GPU1), event(health.HealthEventKind.UNMONITORED, GPU1))
    assert health.state_to_json(state) == {
        "version": 1,
        "bootID": BOOT,
        "devices": {"gpu-1": [
            {"key": UNMONITORED_KEY, "effect": "None"},
            {"key": XID_KEY, "value": "79", "effect": "NoSchedule"},
        ]},
    }


def test_devices_without_taints_are_left_out_of_the_saved_state() -> None:
    state = health.HealthState(boot_id=BOOT, taints={"gpu-0": ()})
    assert health.state_to_json(state)["devices"] == {}


_TAINT_KEYS = st.sampled_from([XID_KEY, GPU_LOST_KEY, UNMONITORED_KEY]) | st.text(min_size=1)
_TAINTS = st.builds(health.DeviceTaint, key=_TAINT_KEYS, value=st.text(),
                    effect=st.sampled_from(health.TaintEffect))


@st.composite
def states(draw: st.DrawFn) -> health.HealthState:
    """Any state the event loop can reach: per device, sorted taints with distinct keys."""
    per_device = draw(st.dictionaries(
        st.text(), st.lists(_TAINTS, min_size=1, max_size=4, unique_by=lambda t: t.key),
        max_size=6))
    return health.HealthState(
        boot_id=draw(st.text()),
        taints={device: tuple(sorted(taints)) for device, taints in per_device.items()})


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(state=states())
def test_the_saved_state_round_trips_through_json(state: health.HealthState) -> None:
    saved = json.loads(json.dumps(health.state_to_json(state)))
    assert health.state_from_json(saved) == state


@hypothesis.settings(max_examples=100, deadline=None)
@hypothesis.given(state=states(), number=st.integers(0, 2**32 - 1))
def test_a_loaded_state_takes_events_like_the_one_saved(
    state: health.HealthState, number: int
) -> None:
    loaded = health.state_from_json(json.loads(json.dumps(health.state_to_json(state))))
    assert health.apply_event(loaded, xid(number, GPU1), where=WHERE, policy=POLICY) == (
        health.apply_event(state, xid(number, GPU1), where=WHERE, policy=POLICY))


_MISSING = object()


def _saved(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "version": 1, "bootID": BOOT,
        "devices": {"gpu-1": [{"key": XID_KEY, "value": "79", "effect": "NoSchedule"}]},
    }
    body.update(changes)
    return {k: v for k, v in body.items() if v is not _MISSING}


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        pytest.param(_saved(version=2), "version 1", id="a newer version"),
        pytest.param(_saved(version=_MISSING), "version 1", id="no version"),
        pytest.param(_saved(version="1"), "version 1", id="version a string"),
        pytest.param(_saved(version=True), "version 1", id="version a boolean"),
        pytest.param(_saved(version=1.5), "version 1", id="version a fraction"),
        pytest.param([], "want an object", id="a list"),
        pytest.param("state", "want an object", id="a string"),
        pytest.param(None, "want an object", id="null"),
        pytest.param(_saved(bootID=_MISSING), "bootID (string)", id="no bootID"),
        pytest.param(_saved(bootID=7), "bootID (string)", id="bootID a number"),
        pytest.param(_saved(devices=_MISSING), "devices (object)", id="no devices"),
        pytest.param(_saved(devices=[]), "devices (object)", id="devices a list"),
        pytest.param(_saved(devices={"gpu-1": {"key": XID_KEY}}), "'gpu-1' needs a list",
                     id="taints an object"),
        pytest.param(_saved(devices={"gpu-1": [{"effect": "NoSchedule"}]}),
                     ("taint of 'gpu-1' is malformed", "KeyError('key')"), id="taint without key"),
        pytest.param(_saved(devices={"gpu-1": [{"key": XID_KEY}]}),
                     ("taint of 'gpu-1' is malformed", "KeyError('effect')"),
                     id="taint without effect"),
        pytest.param(_saved(devices={"gpu-1": [{"key": XID_KEY, "effect": "NoExecute"}]}),
                     ("taint of 'gpu-1' is malformed", "'NoExecute'"), id="an effect never set"),
        pytest.param(_saved(devices={"gpu-1": [{"key": XID_KEY, "effect": "noschedule"}]}),
                     ("taint of 'gpu-1' is malformed", "'noschedule'"), id="an effect misspelt"),
        pytest.param(_saved(devices={"gpu-1": ["gpu.nvidia.com/xid=79:NoSchedule"]}),
                     "taint of 'gpu-1' is malformed", id="taint a string"),
        pytest.param(_saved(devices={"gpu-1": [{"key": None, "effect": "NoSchedule"}]}),
                     "taint of 'gpu-1' is malformed", id="key null"),
        pytest.param(_saved(devices={"gpu-1": [{"key": "", "effect": "NoSchedule"}]}),
                     "taint of 'gpu-1' is malformed", id="key empty"),
        pytest.param(_saved(devices={"gpu-1": [
            {"key": XID_KEY, "value": 79, "effect": "NoSchedule"}]}),
                     "taint of 'gpu-1' is malformed", id="value a number"),
        pytest.param(_saved(devices={"gpu-1": [
            {"key": XID_KEY, "value": "79", "effect": "NoSchedule"},
            {"key": XID_KEY, "value": "79", "effect": "None"}]}),
                     f"'gpu-1' has two taints of {XID_KEY}", id="one key twice"),
    ],
)
def test_a_malformed_saved_state_is_a_decode_error_saying_what_is_wrong(
    raw: Any, says: str | tuple[str, ...]
) -> None:
    with pytest.raises(errors.DecodeError) as raised:
        health.state_from_json(raw)
    for fragment in (says,) if isinstance(says, str) else says:
        assert fragment in raised.value.message


def test_a_saved_taint_without_value_has_an_empty_value() -> None:
    loaded = health.state_from_json(_saved(devices={"gpu-1": [
        {"key": GPU_LOST_KEY, "effect": "NoSchedule"}]}))
    assert loaded.of("gpu-1") == (health.DeviceTaint(key=GPU_LOST_KEY),)


def test_saved_taints_are_loaded_sorted() -> None:
    loaded = health.state_from_json(_saved(devices={"gpu-1": [
        {"key": XID_KEY, "value": "79", "effect": "NoSchedule"},
        {"key": GPU_LOST_KEY, "effect": "NoSchedule"}]}))
    assert [t.key for t in loaded.of("gpu-1")] == [GPU_LOST_KEY, XID_KEY]


@pytest.mark.parametrize(("version", "supported"), [
    ("v1.34.4", False), ("v1.35.0", True), ("1.37.2+k3s1", True), ("v2.0.0", True)])
def test_taint_effect_none_is_known_from_kubernetes_1_35(version: str, supported: bool) -> None:
    assert health.effect_none_supported(version) is supported


def test_a_server_version_without_major_minor_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Kubernetes version"):
        health.effect_none_supported("unknown")
