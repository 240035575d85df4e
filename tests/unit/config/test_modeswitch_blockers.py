"""What blocks an IMEX mode/isolation change (DESIGN §6), decided by the pure core."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from core import models, names
from core.computedomain import modeswitch

HOST = models.IMEXMode.HOST_MANAGED
DRIVER = models.IMEXMode.DRIVER_MANAGED
NONE = models.Isolation.NONE


def _cd(name: str, *, admitted: str = "", finalizer: bool = True) -> models.ComputeDomain:
    annotations = {}
    if admitted:
        mode, isolation = admitted.split("/")
        annotations = {names.ADMITTED_MODE_ANNOTATION: mode,
                       names.ADMITTED_ISOLATION_ANNOTATION: isolation}
    return models.ComputeDomain(
        meta=models.ObjectMeta(
            name=name, namespace="ml", annotations=annotations,
            finalizers=(names.COMPUTE_DOMAIN_FINALIZER,) if finalizer else ()),
        spec=models.ComputeDomainSpec(
            channel=models.ChannelSpec(resource_claim_template_name=f"{name}-ch")),
    )


def _claim(name: str, *, driver: str = names.DRIVER_NAME, reserved: bool = True,
           allocated: bool = True) -> models.ResourceClaim:
    return models.ResourceClaim(
        uid=names.ClaimUID(f"uid-{name}"), namespace="ml", name=name, allocated=allocated,
        results=(models.DeviceResult(request="channel", driver=driver, pool="n",
                                     device="channel-0"),) if allocated else (),
        reserved_for=(models.ClaimConsumer(resource="pods", name="p", uid="u"),)
        if reserved else (),
    )


def _slice(*types: str) -> modeswitch.PublishedSlice:
    return modeswitch.PublishedSlice(device_types=frozenset(types))


def test_the_installed_mode_is_read_from_the_devices_the_plugins_publish() -> None:
    assert modeswitch.installed_modes([_slice("channel", "daemon")]) == {DRIVER}
    assert modeswitch.installed_modes([_slice("channel")]) == {HOST}
    assert modeswitch.installed_modes([_slice("channel"), _slice("channel", "daemon")]) == {
        HOST, DRIVER}
    assert modeswitch.installed_modes([]) == frozenset()


def test_a_claim_is_in_use_when_this_driver_allocated_it_and_a_pod_reserved_it() -> None:
    assert modeswitch.claim_in_use(_claim("a"))
    assert not modeswitch.claim_in_use(_claim("b", reserved=False))
    assert not modeswitch.claim_in_use(_claim("c", allocated=False))
    assert not modeswitch.claim_in_use(_claim("d", driver="gpu.nvidia.com"))


def test_blockers_come_by_reason_then_namespace_and_name() -> None:
    blockers = modeswitch.find_blockers(
        [_cd("z-up"), _cd("b-old", admitted="driverManaged/domain"), _cd("a-new", finalizer=False),
         _cd("same", admitted="hostManaged/none")],
        mode=HOST, isolation=NONE, claims=[_claim("job")], installed=frozenset({DRIVER}),
    )

    assert [(b.name, b.reason) for b in blockers] == [
        ("b-old", modeswitch.Reason.OTHER_MODE),
        ("z-up", modeswitch.Reason.UNSTAMPED),
        ("job", modeswitch.Reason.CLAIM_IN_USE),
    ]


def test_claims_in_use_block_unless_every_plugin_runs_the_requested_mode() -> None:
    claims = [_claim("job")]
    for installed in (frozenset(), frozenset({DRIVER}), frozenset({HOST, DRIVER})):
        assert modeswitch.find_blockers([], mode=HOST, isolation=NONE, claims=claims,
                                        installed=installed)
    assert modeswitch.find_blockers([], mode=HOST, isolation=NONE, claims=claims,
                                    installed=frozenset({HOST})) == ()


@given(st.integers(min_value=1, max_value=60))
def test_the_refusal_lists_twenty_and_counts_the_rest(count: int) -> None:
    blockers = tuple(
        modeswitch.Blocker(namespace="ml", name=f"cd{i:02d}", reason=modeswitch.Reason.UNSTAMPED)
        for i in range(count)
    )

    message = modeswitch.refusal_message(blockers, wanted="hostManaged/none")

    assert f"{count} ComputeDomain(s) carry no admitted-mode stamp" in message
    assert message.count("ml/cd") == min(count, 20)
    assert (f"and {count - 20} more" in message) == (count > 20)
    docs, section = modeswitch.DOCS_SECTION
    assert message.endswith(f"see {docs}, '{section}'")
