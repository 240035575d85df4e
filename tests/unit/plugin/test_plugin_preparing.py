"""Prepare/unprepare planners: validation before any write, step order, idempotence, undo.

Covers host-managed (isolation none and channel) and driver-managed claims, mode-switch
safety, node-local channel conflicts and aborted-prepare tombstones.
"""

from __future__ import annotations

import dataclasses

import plugin_factories as f
import pytest

from core import cdi, errors, models, names
from core.computedomain import checkpoint_records as cd_records
from core.computedomain import daemon_claim, node_facts, preparing, recovery


def _permanent(outcome: models.ClaimOutcome) -> str:
    assert isinstance(outcome.error, errors.PermanentError), outcome.error
    assert f.writes(outcome) == [], "nothing may be written before validation passes"
    return outcome.error.message


def _retryable(outcome: models.ClaimOutcome) -> str:
    assert isinstance(outcome.error, errors.RetryableError), outcome.error
    assert f.writes(outcome) == []
    return outcome.error.message


# ---------------------------------------------------------------- host-managed


@pytest.mark.parametrize("mode", [None, "", "Single"])
def test_host_managed_prepare_accepts_single_and_empty_allocation_mode(mode: str | None) -> None:
    outcome = f.prepare(f.claim(params=f.channel_params(allocation_mode=mode)))
    assert outcome.error is None
    assert outcome.devices == (
        models.PreparedDevice(
            request_names=("channel",),
            pool_name=f.NODE_NAME,
            device_name="channel-0",
            cdi_device_ids=(cdi.qualified_device_id(f.CLAIM_UID, 0),),
        ),
    )


def test_host_managed_prepare_writes_started_then_cdi_then_completed() -> None:
    outcome = f.prepare(f.claim())
    started, spec, completed = outcome.steps
    assert isinstance(started, models.WriteCheckpoint)
    assert isinstance(spec, models.WriteCDISpec)
    assert isinstance(completed, models.WriteCheckpoint)
    entry = started.checkpoint.entries[f.CLAIM_UID]
    assert entry.state is models.ClaimState.PREPARE_STARTED
    assert entry.record == cd_records.ComputeDomainClaimRecord(
        mode=models.IMEXMode.HOST_MANAGED, isolation=models.Isolation.NONE,
        domain_id=f.CD_UID, channel_ids=(0,),
    )
    assert entry.updated_at == f.NOW
    assert spec.spec == cdi.claim_spec(
        claim_uid=f.CLAIM_UID, channel_ids=[0], major=242, domain_id=f.CD_UID
    )
    done = completed.checkpoint.entries[f.CLAIM_UID]
    assert done.state is models.ClaimState.PREPARE_COMPLETED
    assert done.devices == outcome.devices
    assert outcome.checkpoint == completed.checkpoint


def test_prepare_rejects_allocation_mode_all_in_host_managed_mode() -> None:
    message = _permanent(f.prepare(f.claim(params=f.channel_params(allocation_mode="All"))))
    assert "channel 0 only" in message
    assert "allocationMode: Single" in message


def test_prepare_rejects_unknown_allocation_mode_in_host_managed_mode() -> None:
    message = _permanent(f.prepare(f.claim(params=f.channel_params(allocation_mode="foo"))))
    assert "'foo'" in message
    assert "Single" in message


def test_prepare_rejects_daemon_claims_in_host_managed_mode() -> None:
    message = _permanent(f.prepare(f.daemon_claim()))
    assert "host-managed" in message
    assert "no daemons" in message


def test_prepare_rejects_a_node_without_nvlink_clique_in_host_managed_mode() -> None:
    node = dataclasses.replace(f.NODE, clique_id="")
    message = _permanent(f.prepare(f.claim(), node=node))
    assert "NVLink clique" in message
    assert f.NODE_NAME in message


def test_prepare_rejects_a_missing_compute_domain() -> None:
    message = _permanent(f.prepare(f.claim(), domains={}))
    assert f.CD_UID in message
    assert f.NAMESPACE in message


def test_prepare_rejects_a_compute_domain_of_another_namespace() -> None:
    domains = {f.CD_UID: f.domain(namespace="team-b")}
    message = _permanent(f.prepare(f.claim(), domains=domains))
    assert f.CD_UID in message
    assert "team-b" in message
    assert "own namespace" in message


def test_prepare_rejects_a_deleting_compute_domain() -> None:
    message = _permanent(f.prepare(f.claim(), domains={f.CD_UID: f.domain(deleting=True)}))
    assert "being deleted" in message


def test_prepare_rejects_an_unallocated_claim() -> None:
    message = _permanent(f.prepare(f.claim(allocated=False)))
    assert "has no allocation for compute-domain.nvidia.com" in message


def test_prepare_rejects_a_claim_without_results_for_our_driver() -> None:
    other = models.DeviceResult(request="channel", driver="gpu.nvidia.com", pool="p", device="g")
    message = _permanent(f.prepare(f.claim(results=(other,))))
    assert "has no allocation for compute-domain.nvidia.com" in message


def test_prepare_rejects_two_devices_for_one_request() -> None:
    result = models.DeviceResult(
        request="channel", driver=names.DRIVER_NAME, pool=f.NODE_NAME, device="channel-0"
    )
    message = _permanent(f.prepare(f.claim(results=(result, result))))
    assert "exactly one device" in message


def test_prepare_rejects_a_claim_without_opaque_config() -> None:
    the_claim = dataclasses.replace(f.claim(), configs=())
    message = _permanent(f.prepare(the_claim))
    assert names.KIND_CHANNEL_CONFIG in message


def test_prepare_reports_strict_decode_errors_as_permanent() -> None:
    params = {**f.channel_params(), "allocationMod": "Single"}
    outcome = f.prepare(f.claim(params=params))
    assert isinstance(outcome.error, errors.DecodeError)
    assert "allocationMod" in _permanent(outcome)


def test_prepare_rejects_a_daemon_config_on_a_channel_request() -> None:
    message = _permanent(f.prepare(f.claim(params=f.daemon_params())))
    assert names.KIND_CHANNEL_CONFIG in message


def test_prepare_of_another_domain_waits_while_channel_zero_is_held() -> None:
    first = f.prepare(f.claim())
    domains = {f.CD_UID: f.domain(), f.OTHER_CD_UID: f.domain(f.OTHER_CD_UID, name="cd-2")}
    second = f.prepare(
        f.claim(f.OTHER_CLAIM_UID, params=f.channel_params(f.OTHER_CD_UID)),
        checkpoint=first.checkpoint,
        domains=domains,
    )
    message = _retryable(second)
    assert "channel 0" in message
    assert f"{f.NAMESPACE}/job-0-channel" in message


def test_prepare_of_the_same_domain_shares_channel_zero() -> None:
    first = f.prepare(f.claim())
    second = f.prepare(f.claim(f.OTHER_CLAIM_UID), checkpoint=first.checkpoint)
    assert second.error is None
    assert set(second.checkpoint.entries) == {f.CLAIM_UID, f.OTHER_CLAIM_UID}


def test_prepare_of_a_completed_claim_returns_the_same_result_without_steps() -> None:
    first = f.prepare(f.claim())
    again = f.prepare(f.claim(), checkpoint=first.checkpoint, now=f.NOW + 60)
    assert again.steps == ()
    assert again.devices == first.devices
    assert again.checkpoint is first.checkpoint


def test_prepare_replans_an_entry_left_started_by_a_crash() -> None:
    first = f.prepare(f.claim())
    started = first.steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    again = f.prepare(f.claim(), checkpoint=started.checkpoint)
    assert again.error is None
    assert again.checkpoint == first.checkpoint


def test_prepare_refuses_while_claims_of_another_mode_remain() -> None:
    driver_made = f.prepare(
        f.claim(f.OTHER_CLAIM_UID), config=f.DRIVER,
        labels={names.COMPUTE_DOMAIN_LABEL: f.CD_UID},
    )
    assert driver_made.error is None
    message = _permanent(f.prepare(f.claim(), checkpoint=driver_made.checkpoint))
    assert "cordon" in message
    assert "drain" in message
    assert "driverManaged/domain" in message


# Channel isolation (hostManaged/channel): tests/unit/channels/test_channel_prepare.py


# ---------------------------------------------------------------- driver-managed


def test_driver_managed_prepare_labels_the_node_and_waits_for_the_daemon() -> None:
    outcome = f.prepare(f.claim(), config=f.DRIVER, domains={f.CD_UID: f.domain()})
    assert "waiting for the IMEX daemon" in _retryable(outcome)
    assert outcome.steps == (
        models.PatchObject(
            kind="Node", namespace="", name=f.NODE_NAME,
            patch={"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: f.CD_UID}}},
        ),
    )


def test_driver_managed_prepare_waits_while_the_node_serves_another_domain() -> None:
    outcome = f.prepare(
        f.claim(), config=f.DRIVER, labels={names.COMPUTE_DOMAIN_LABEL: f.OTHER_CD_UID}
    )
    assert f.OTHER_CD_UID in _retryable(outcome)
    assert outcome.steps == ()


def test_driver_managed_prepare_succeeds_once_the_daemon_is_ready() -> None:
    outcome = f.prepare(f.claim(), config=f.DRIVER, labels={names.COMPUTE_DOMAIN_LABEL: f.CD_UID})
    assert outcome.error is None
    assert [type(s) for s in outcome.steps] == [
        models.WriteCheckpoint, models.WriteCDISpec, models.WriteCheckpoint,
    ]


def test_driver_managed_allocation_mode_all_injects_every_channel() -> None:
    outcome = f.prepare(
        f.claim(params=f.channel_params(allocation_mode="All")),
        config=f.DRIVER, labels={names.COMPUTE_DOMAIN_LABEL: f.CD_UID},
    )
    assert outcome.error is None
    ids = outcome.devices[0].cdi_device_ids
    assert len(ids) == names.MAX_CHANNEL_ID + 1
    assert outcome.checkpoint.entries[f.CLAIM_UID].record.channel_ids == tuple(range(2048))


def test_driver_managed_daemon_claim_gets_the_daemon_device() -> None:
    node = dataclasses.replace(
        f.NODE,
        imex_mgmt=node_facts.ImexMgmtDevice(path="/dev/nvidia-caps/nvidia-cap1", major=511, minor=1,
                                        file_mode=256),
        daemon_config_root="/var/lib/kubelet/plugins/compute-domain.nvidia.com/domains",
    )
    cd = f.domain()
    outcome = f.prepare(f.daemon_claim(), config=f.DRIVER, node=node, domains={f.CD_UID: cd})
    assert outcome.error is None
    assert outcome.devices[0].cdi_device_ids == (cdi.qualified_daemon_id(f.CLAIM_UID),)
    spec = outcome.steps[1]
    assert spec == models.WriteCDISpec(
        claim_uid=f.CLAIM_UID,
        spec=cdi.spec_with_devices(
            daemon_claim.daemon_devices(claim_uid=f.CLAIM_UID, domain=cd, node=node)
        ),
    )


def test_driver_managed_daemon_claim_must_live_in_the_driver_namespace() -> None:
    outcome = f.prepare(f.daemon_claim(namespace="team-a"), config=f.DRIVER)
    assert "driver namespace" in _permanent(outcome)


# ---------------------------------------------------------------- unprepare and tombstones


def test_unprepare_of_an_unknown_claim_succeeds_deleting_only_its_cdi_spec() -> None:
    cp = f.empty_checkpoint()
    outcome = preparing.plan_unprepare(f.ref(f.claim()), checkpoint=cp, now=f.NOW)
    assert outcome == models.ClaimOutcome(
        steps=(models.DeleteCDISpec(claim_uid=f.CLAIM_UID),), checkpoint=cp
    )


def test_unprepare_undoes_a_driver_managed_entry_as_recorded_under_host_managed_mode() -> None:
    # NB: unprepare takes no mode: it undoes what the entry records, whatever the plugin
    # runs now.
    prepared = f.prepare(
        f.claim(), config=f.DRIVER, labels={names.COMPUTE_DOMAIN_LABEL: f.CD_UID}
    ).checkpoint
    assert prepared.entries[f.CLAIM_UID].record.mode is models.IMEXMode.DRIVER_MANAGED
    outcome = preparing.plan_unprepare(f.ref(f.claim()), checkpoint=prepared, now=f.NOW)
    after = dataclasses.replace(prepared, entries={})
    assert outcome.error is None
    assert outcome.steps == (
        models.WriteCheckpoint(checkpoint=after),
        models.DeleteCDISpec(claim_uid=f.CLAIM_UID),
    )
    assert outcome.checkpoint == after


def test_unprepare_of_a_started_claim_leaves_an_aborted_tombstone() -> None:
    started = f.prepare(f.claim()).steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    outcome = preparing.plan_unprepare(
        f.ref(f.claim()), checkpoint=started.checkpoint, now=f.NOW + 5
    )
    tomb = outcome.checkpoint.entries[f.CLAIM_UID]
    assert tomb.state is models.ClaimState.PREPARE_ABORTED
    assert tomb.updated_at == f.NOW + 5
    assert outcome.steps[-1] == models.DeleteCDISpec(claim_uid=f.CLAIM_UID)


def test_unprepare_writes_the_checkpoint_before_it_deletes_the_cdi_file() -> None:
    prepared = f.prepare(f.claim()).checkpoint
    outcome = preparing.plan_unprepare(f.ref(f.claim()), checkpoint=prepared, now=f.NOW)
    kinds_in_order = [type(step) for step in outcome.steps]
    assert kinds_in_order == [models.WriteCheckpoint, models.DeleteCDISpec]


def test_a_lost_channel_spec_is_restored_byte_for_byte_from_its_entry() -> None:
    outcome = f.prepare(f.claim())
    written = next(s for s in outcome.steps if isinstance(s, models.WriteCDISpec))
    entry = outcome.checkpoint.entries[f.CLAIM_UID]
    assert preparing.plan_restore_spec(entry, node=f.NODE) == written


def test_a_started_entry_has_no_spec_to_restore() -> None:
    started = f.prepare(f.claim()).steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    entry = started.checkpoint.entries[f.CLAIM_UID]
    assert preparing.plan_restore_spec(entry, node=f.NODE) is None


def test_prepare_after_abort_tells_the_user_to_recreate_the_claim() -> None:
    started = f.prepare(f.claim()).steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    aborted = preparing.plan_unprepare(
        f.ref(f.claim()), checkpoint=started.checkpoint, now=f.NOW
    ).checkpoint
    message = _permanent(f.prepare(f.claim(), checkpoint=aborted, now=f.NOW + 1))
    assert "recreate the claim" in message
    late = f.prepare(f.claim(), checkpoint=aborted, now=f.NOW + 301)
    assert late.error is None


def test_unprepare_of_a_tombstone_is_a_no_op() -> None:
    started = f.prepare(f.claim()).steps[0]
    assert isinstance(started, models.WriteCheckpoint)
    aborted = preparing.plan_unprepare(
        f.ref(f.claim()), checkpoint=started.checkpoint, now=f.NOW
    ).checkpoint
    again = preparing.plan_unprepare(f.ref(f.claim()), checkpoint=aborted, now=f.NOW + 1)
    assert again.steps == ()


# ---------------------------------------------------------------- after a lost checkpoint


def _rebuilt(domain_id: str = f.CD_UID) -> models.Checkpoint:
    spec = cdi.claim_spec(claim_uid=f.CLAIM_UID, channel_ids=[0], major=242, domain_id=domain_id)
    return recovery.rebuild_from_cdi(
        boot_id=f.NODE.boot_id, config=f.HOST, claim_specs={f.CLAIM_UID: spec}, now=f.NOW
    )


def test_prepare_replans_a_claim_rebuilt_from_its_cdi_spec() -> None:
    outcome = f.prepare(f.claim(), checkpoint=_rebuilt())
    assert outcome.error is None
    assert outcome.checkpoint.entries[f.CLAIM_UID].devices == outcome.devices
    assert outcome.devices[0].pool_name == f.NODE_NAME


def test_a_claim_rebuilt_from_cdi_holds_its_channel_against_other_domains() -> None:
    outcome = f.prepare(f.claim(f.OTHER_CLAIM_UID), checkpoint=_rebuilt(f.OTHER_CD_UID))
    assert "channel 0" in _retryable(outcome)


def test_a_claim_rebuilt_from_cdi_shares_channel_zero_with_its_own_domain() -> None:
    outcome = f.prepare(f.claim(f.OTHER_CLAIM_UID), checkpoint=_rebuilt(f.CD_UID))
    assert outcome.error is None
    assert outcome.devices[0].cdi_device_ids == (cdi.qualified_device_id(f.OTHER_CLAIM_UID, 0),)


def test_prepare_rejects_a_workload_claim_that_also_holds_the_daemon_device() -> None:
    channel = models.DeviceResult(
        request=names.CHANNEL_REQUEST_NAME, driver=names.DRIVER_NAME, pool=f.NODE_NAME,
        device="channel-0",
    )
    daemon = models.DeviceResult(
        request=names.DAEMON_REQUEST_NAME, driver=names.DRIVER_NAME, pool=f.NODE_NAME,
        device="daemon-0",
    )
    mixed = dataclasses.replace(
        f.claim(results=(channel, daemon)),
        configs=(
            *f.claim().configs,
            dataclasses.replace(
                f.claim().configs[0], requests=(names.DAEMON_REQUEST_NAME,),
                parameters=f.daemon_params(),
            ),
        ),
    )
    message = _permanent(f.prepare(mixed, config=f.DRIVER,
                                   labels={names.COMPUTE_DOMAIN_LABEL: f.CD_UID}))
    assert "exactly one" in message and "daemon-0" in message


def test_prepare_rejects_two_channel_results_in_one_claim() -> None:
    results = tuple(
        models.DeviceResult(
            request=request, driver=names.DRIVER_NAME, pool=f.NODE_NAME, device="channel-0"
        )
        for request in ("a", "b")
    )
    claim = dataclasses.replace(
        f.claim(results=results),
        configs=(dataclasses.replace(f.claim().configs[0], requests=("a", "b")),),
    )
    assert "exactly one" in _permanent(f.prepare(claim))


def test_unpreparing_the_last_claim_of_a_domain_releases_the_node_label() -> None:
    labels = {names.COMPUTE_DOMAIN_LABEL: f.CD_UID}
    prepared = f.prepare(f.claim(), config=f.DRIVER, labels=labels).checkpoint
    entry = prepared.entries[f.CLAIM_UID]
    after = preparing.plan_unprepare(f.ref(f.claim()), checkpoint=prepared, now=f.NOW).checkpoint
    release = preparing.plan_label_release(
        entry, after=after, node=f.NODE, node_labels=labels, resource_version="7"
    )
    assert release == models.PatchObject(
        kind="Node", namespace="", name=f.NODE_NAME,
        patch={"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None}}},
        resource_version="7",
    )


def test_the_node_label_stays_while_another_claim_of_the_domain_is_prepared() -> None:
    labels = {names.COMPUTE_DOMAIN_LABEL: f.CD_UID}
    first = f.prepare(f.claim(), config=f.DRIVER, labels=labels).checkpoint
    both = f.prepare(
        f.claim(f.OTHER_CLAIM_UID, name="job-1-channel"), checkpoint=first, config=f.DRIVER,
        labels=labels,
    ).checkpoint
    entry = both.entries[f.CLAIM_UID]
    after = preparing.plan_unprepare(f.ref(f.claim()), checkpoint=both, now=f.NOW).checkpoint
    assert preparing.plan_label_release(
        entry, after=after, node=f.NODE, node_labels=labels, resource_version="7"
    ) is None


def test_the_domains_own_daemon_claim_does_not_keep_the_node_label() -> None:
    """The IMEX daemon's claim is prepared on the labelled node too; counting it would keep
    the label, the label keeps the daemon (its DaemonSet selects the label) and the daemon
    keeps its claim: the node would never be released. Only workload claims count."""
    labels = {names.COMPUTE_DOMAIN_LABEL: f.CD_UID}
    node = dataclasses.replace(
        f.NODE,
        imex_mgmt=node_facts.ImexMgmtDevice(path="/dev/nvidia-caps/nvidia-cap1", major=511, minor=1,
                                        file_mode=256),
        daemon_config_root="/var/lib/kubelet/plugins/compute-domain.nvidia.com/domains",
    )
    domains = {f.CD_UID: f.domain()}
    with_daemon = f.prepare(
        f.daemon_claim(f.OTHER_CLAIM_UID), config=f.DRIVER, node=node, domains=domains,
        labels=labels,
    )
    assert with_daemon.error is None
    both = f.prepare(
        f.claim(), checkpoint=with_daemon.checkpoint, config=f.DRIVER, node=node,
        labels=labels,
    ).checkpoint
    entry = both.entries[f.CLAIM_UID]
    after = preparing.plan_unprepare(f.ref(f.claim()), checkpoint=both, now=f.NOW).checkpoint
    assert f.OTHER_CLAIM_UID in after.entries  # the daemon's claim is still prepared
    release = preparing.plan_label_release(
        entry, after=after, node=node, node_labels=labels, resource_version="7"
    )
    assert release == models.PatchObject(
        kind="Node", namespace="", name=f.NODE_NAME,
        patch={"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None}}},
        resource_version="7",
    )
    # The same with the index rebuilt from the entries (a checkpoint read back from disk).
    reloaded = dataclasses.replace(after, entries=dict(after.entries), index=None)
    assert preparing.plan_label_release(
        entry, after=reloaded, node=node, node_labels=labels, resource_version="7"
    ) == release


def test_a_label_naming_another_domain_or_a_host_managed_entry_is_left_alone() -> None:
    prepared = f.prepare(
        f.claim(), config=f.DRIVER, labels={names.COMPUTE_DOMAIN_LABEL: f.CD_UID}
    ).checkpoint
    entry = prepared.entries[f.CLAIM_UID]
    empty = dataclasses.replace(prepared, entries={})
    other = {names.COMPUTE_DOMAIN_LABEL: f.OTHER_CD_UID}
    assert preparing.plan_label_release(
        entry, after=empty, node=f.NODE, node_labels=other, resource_version="7"
    ) is None
    host_entry = f.prepare(f.claim()).checkpoint.entries[f.CLAIM_UID]
    assert preparing.plan_label_release(
        host_entry, after=empty, node=f.NODE,
        node_labels={names.COMPUTE_DOMAIN_LABEL: f.CD_UID}, resource_version="7",
    ) is None
