"""What blocks an IMEX mode/isolation change (DESIGN §6), decided by the pure core."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from core import models, names
from core.computedomain import modeswitch

HOST = models.IMEXMode.HOST_MANAGED
DRIVER = models.IMEXMode.DRIVER_MANAGED
NONE = models.Isolation.NONE


def _cd(name: str, *, admitted: str = "", finalizer: bool = True,
        uid: str = "") -> models.ComputeDomain:
    annotations = {}
    if admitted:
        mode, isolation = admitted.split("/")
        annotations = {names.ADMITTED_MODE_ANNOTATION: mode,
                       names.ADMITTED_ISOLATION_ANNOTATION: isolation}
    return models.ComputeDomain(
        meta=models.ObjectMeta(
            name=name, namespace="ml", annotations=annotations, uid=uid or f"uid-{name}",
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
    adoption_docs, adoption_section = modeswitch.ADOPTION_DOCS_SECTION
    assert message.endswith(f"see {docs}, '{section}' (the upstream driver's: "
                            f"{adoption_docs}, '{adoption_section}')")


# ---------------------------------------------------------------- adopting upstream's CDs

DOMAIN = models.Isolation.DOMAIN
CHANNEL = models.Isolation.CHANNEL
UPSTREAM_DRIVER = [_slice("channel", "daemon")]  # upstream's driverManaged plugins
UPSTREAM_HOST = [_slice("channel")]  # upstream's hostManaged plugins: channel-0 only


def _blockers(slices: list[modeswitch.PublishedSlice], *, mode: models.IMEXMode,
              isolation: models.Isolation, **kw: object) -> tuple[modeswitch.Blocker, ...]:
    return modeswitch.find_blockers(
        [_cd("up")], mode=mode, isolation=isolation, claims=[_claim("job")],
        installed=modeswitch.installed_modes(slices),
        installed_isolation=modeswitch.installed_isolations(slices), **kw)  # type: ignore[arg-type]


def test_upstream_compute_domains_are_adopted_when_the_plugins_run_the_requested_mode() -> None:
    # Neither the CD nor its workload's claim blocks: same mode, adopted in place.
    assert _blockers(UPSTREAM_DRIVER, mode=DRIVER, isolation=DOMAIN) == ()
    assert _blockers(UPSTREAM_HOST, mode=HOST, isolation=NONE) == ()
    assert _blockers(UPSTREAM_DRIVER, mode=DRIVER, isolation=DOMAIN, namespace="nv",
                     daemonsets=[modeswitch.DaemonSetSeen(namespace="nv", cd_uid="uid-up")]) == ()


def test_upstream_compute_domains_block_when_the_plugins_run_another_mode() -> None:
    for slices, mode, isolation in ((UPSTREAM_DRIVER, HOST, NONE), (UPSTREAM_HOST, DRIVER, DOMAIN)):
        blockers = _blockers(slices, mode=mode, isolation=isolation)
        assert [(b.name, b.reason) for b in blockers] == [
            ("up", modeswitch.Reason.UNSTAMPED), ("job", modeswitch.Reason.CLAIM_IN_USE)]
        message = modeswitch.refusal_message(blockers, wanted=f"{mode.value}/{isolation.value}")
        installed = "driverManaged/domain" if slices is UPSTREAM_DRIVER else "hostManaged/none"
        assert f"the node plugins run {installed}: ml/up" in message
        assert "Install with the IMEX mode the node plugins run" in message
        assert "or delete them" in message


def test_upstream_compute_domains_block_when_the_installed_mode_cannot_be_told() -> None:
    (blocker, _claim_blocker) = _blockers([], mode=DRIVER, isolation=DOMAIN)
    assert blocker.reason is modeswitch.Reason.UNSTAMPED and blocker.admitted == ""

    message = modeswitch.refusal_message((blocker,), wanted="driverManaged/domain")

    assert "no node plugin publishes a ResourceSlice" in message


def test_upstream_compute_domains_block_when_the_plugins_run_a_mix_of_modes() -> None:
    blockers = _blockers([*UPSTREAM_DRIVER, *UPSTREAM_HOST], mode=DRIVER, isolation=DOMAIN)

    assert blockers[0].reason is modeswitch.Reason.UNSTAMPED
    message = modeswitch.refusal_message(blockers[:1], wanted="driverManaged/domain")
    assert "a mix of driverManaged and hostManaged" in message


def test_upstream_compute_domains_are_never_adopted_under_channel_isolation() -> None:
    # Even where the plugins already run channel isolation (ours): upstream's RCTs hand out
    # channel 0 and an RCT's spec cannot change.
    for slices in (UPSTREAM_HOST, [_slice("slot")]):
        blockers = _blockers(slices, mode=HOST, isolation=CHANNEL)
        assert blockers[0].reason is modeswitch.Reason.UNSTAMPED_CHANNEL
        message = modeswitch.refusal_message(blockers[:1], wanted="hostManaged/channel")
        assert "cannot be adopted under channel isolation" in message
        assert "Install with isolation domain" in message


def test_upstream_daemons_in_another_namespace_block_a_driver_managed_adoption() -> None:
    seen = [modeswitch.DaemonSetSeen(namespace="upstream-ns", cd_uid="uid-up"),
            modeswitch.DaemonSetSeen(namespace="upstream-ns", cd_uid="uid-other")]

    blockers = _blockers(UPSTREAM_DRIVER, mode=DRIVER, isolation=DOMAIN, namespace="ours",
                         daemonsets=seen)

    assert blockers == (modeswitch.Blocker(namespace="ml", name="up", admitted="upstream-ns",
                                           reason=modeswitch.Reason.DAEMONS_ELSEWHERE),)
    message = modeswitch.refusal_message(blockers, wanted="driverManaged/domain")
    assert "ml/up (DaemonSet in upstream-ns)" in message
    assert "Install into the namespace their DaemonSets run in" in message
    # Without the namespace being installed, where they run cannot be judged: not a blocker.
    assert _blockers(UPSTREAM_DRIVER, mode=DRIVER, isolation=DOMAIN, daemonsets=seen) == ()


def test_only_compute_domains_another_driver_made_are_judged_for_adoption() -> None:
    ours = _cd("ours", admitted="driverManaged/domain")
    fresh = _cd("fresh", finalizer=False)
    assert not modeswitch.made_by_another_driver(ours)
    assert not modeswitch.made_by_another_driver(fresh)
    assert modeswitch.made_by_another_driver(_cd("up"))
    assert modeswitch.find_blockers([ours, fresh], mode=DRIVER, isolation=DOMAIN) == ()
