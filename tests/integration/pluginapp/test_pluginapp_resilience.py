"""The plugin keeps its promises when things around it fail: API outages, bad files, slow claims.

Each test runs a `PluginDriver` on the files of a one-node embedded deployment, with the
cluster or CDI port wrapped so that it fails the way the test needs.
"""

from __future__ import annotations

import contextlib
import glob
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from pluginapp_env import create_claim, create_domain, node, prepare, restart

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from apps.cli import embedded
from apps.kubeletplugin import domains as plugin_domains
from apps.kubeletplugin import driver as plugin_driver
from apps.pluginkit import driver as claim_driver
from core import cdi, errors, kinds, models, names
from core.computedomain import checkpoint_records as cd_records


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        yield deployment


class FlakyCluster:
    """The embedded cluster, failing `get`/`list` with ClusterError while `failures` > 0."""

    def __init__(self, inner: Any, *, failures: int = 0) -> None:
        self._inner = inner
        self.failures = failures

    def _maybe_fail(self) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise errors.ClusterError("connection refused (test outage)")

    def get(self, kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        self._maybe_fail()
        return self._inner.get(kind, namespace=namespace, name=name)  # type: ignore[no-any-return]

    def list(self, kind: str, **kwargs: Any) -> Any:
        self._maybe_fail()
        return self._inner.list(kind, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class TrackingCheckpoints(fs_checkpoints.FileCheckpointStore):
    """The file store, remembering whether the node-wide lock is held right now."""

    held = False

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:  # type: ignore[override]
        with super().locked():
            self.held = True
            try:
                yield
            finally:
                self.held = False


class FailingCDI(fs_cdi.CDIDirectory):
    """The CDI directory, raising OSError when writing the spec of `fail_uid`."""

    fail_uid = ""

    def write(self, claim_uid: names.ClaimUID, spec: Mapping[str, Any]) -> None:
        if claim_uid == self.fail_uid:
            raise OSError(28, "No space left on device")
        super().write(claim_uid, spec)


def _driver(
    env: embedded.Embedded,
    *,
    cluster: Any = None,
    checkpoints: Any = None,
    cdi_store: Any = None,
    retry_budget_s: float = 2.0,
    domains: Any = None,
) -> plugin_driver.PluginDriver:
    settings = node(env).settings
    return plugin_driver.new_driver(
        ports=claim_driver.PluginPorts(
            cluster=cluster or env.cluster,
            checkpoints=checkpoints or fs_checkpoints.FileCheckpointStore(settings.checkpoint_path),
            cdi=cdi_store or fs_cdi.CDIDirectory(settings.cdi_root),
        ),
        node=node(env).plugin.node,
        config=env.config,
        retry_budget_s=retry_budget_s,
        domains=domains,
    )


def _entries(env: embedded.Embedded) -> Mapping[names.ClaimUID, models.CheckpointEntry]:
    current = fs_checkpoints.read_checkpoint(
        node(env).settings.checkpoint_path, cd_records.CODEC
    )
    assert current is not None
    return current.entries


def _cdi(env: embedded.Embedded) -> fs_cdi.CDIDirectory:
    return fs_cdi.CDIDirectory(node(env).settings.cdi_root)


def _corrupt_checkpoint(env: embedded.Embedded) -> None:
    with open(node(env).settings.checkpoint_path, "r+b") as f:
        f.seek(20)
        f.write(b"#")


# ------------------------------------------------------------ corrupt or missing checkpoint


def test_unreadable_cdi_spec_during_rebuild_holds_every_channel_instead_of_losing_state(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    ref = create_claim(env, "a", domain_id=domain)
    assert not prepare(env, ref).error
    # A live claim whose spec file is torn (the start-up clean-up keeps its entry).
    torn = create_claim(env, "torn", domain_id=domain)
    assert not prepare(env, torn).error
    bad = torn.uid
    with open(_cdi(env).spec_path(bad), "w", encoding="utf-8") as f:
        f.write("{not json")
    _corrupt_checkpoint(env)
    restart(env)
    entries = _entries(env)
    assert ref.uid in entries
    assert entries[bad].record.channel_ids == tuple(range(names.MAX_CHANNEL_ID + 1))
    events = env.cluster.list(kinds.EVENT.kind, namespace="default").items
    assert any(e["reason"] == "CheckpointCorrupt" and bad in e["message"] for e in events)


def test_a_failed_rebuild_leaves_the_corrupt_checkpoint_in_place(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    _corrupt_checkpoint(env)
    path = node(env).settings.checkpoint_path
    with open(path, "rb") as f:
        corrupt = f.read()

    class UnlistableCDI(fs_cdi.CDIDirectory):
        def claim_uids(self) -> frozenset[names.ClaimUID]:
            raise OSError(5, "Input/output error")

    driver = _driver(env, cdi_store=UnlistableCDI(node(env).settings.cdi_root))
    with pytest.raises(OSError):
        driver.recover()
    with open(path, "rb") as f:
        assert f.read() == corrupt, "the checkpoint must stay until a rebuild succeeds"
    assert not glob.glob(path + ".corrupt-*")


def test_missing_checkpoint_with_cdi_specs_is_rebuilt_not_started_empty(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    os.unlink(node(env).settings.checkpoint_path)
    restart(env)
    assert ref.uid in _entries(env)
    other = create_claim(env, "b", domain_id=create_domain(env, "other"))
    assert "held by" in prepare(env, other).error
    assert ref.uid in _cdi(env).claim_uids()


def test_a_rebuilt_claim_shares_channel_zero_with_its_own_compute_domain(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    first = create_claim(env, "a", domain_id=domain)
    assert not prepare(env, first).error
    spec = _cdi(env).read(first.uid)
    assert spec is not None
    assert f"{cdi.DOMAIN_ENV}={domain}" in spec["devices"][0]["containerEdits"]["env"]
    _corrupt_checkpoint(env)
    restart(env)
    assert _entries(env)[first.uid].record.domain_id == domain
    second = create_claim(env, "b", domain_id=domain)
    assert not prepare(env, second).error


# ------------------------------------------------------------ orphan CDI specs


def test_recover_deletes_cdi_specs_without_a_holding_entry(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    orphan = names.ClaimUID("orphan")
    _cdi(env).write(orphan, cdi.claim_spec(claim_uid=orphan, channel_ids=[0], major=242,
                                           domain_id="gone"))
    restart(env)
    assert _cdi(env).claim_uids() == frozenset({ref.uid})


def test_a_reboot_removes_the_cdi_specs_of_the_dropped_claims(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    with open(node(env).settings.boot_id_path, "w", encoding="utf-8") as f:
        f.write("a-new-boot-id\n")
    restart(env)
    assert _cdi(env).claim_uids() == frozenset()


def test_unprepare_of_an_unknown_claim_deletes_its_left_over_cdi_spec(
    env: embedded.Embedded,
) -> None:
    stray = models.ClaimRef(uid=names.ClaimUID("stray"), namespace="team", name="stray")
    _cdi(env).write(stray.uid, cdi.claim_spec(claim_uid=stray.uid, channel_ids=[0], major=242,
                                              domain_id="gone"))
    result = node(env).kubelet.unprepare(names.DRIVER_NAME, (stray,))[stray.uid]
    assert not result.error
    assert _cdi(env).claim_uids() == frozenset()


# ------------------------------------------------------------ kubelet calls


def test_one_retry_budget_is_shared_by_all_claims_of_a_kubelet_call(
    env: embedded.Embedded,
) -> None:
    holder = create_claim(env, "holder", domain_id=create_domain(env))
    assert not prepare(env, holder).error
    other = create_domain(env, "other")
    blocked = (create_claim(env, "b1", domain_id=other), create_claim(env, "b2", domain_id=other))
    driver = _driver(env, retry_budget_s=1.0)
    started = time.monotonic()
    results = driver.node_prepare(blocked)
    elapsed = time.monotonic() - started
    assert all("held by" in results[ref.uid].error for ref in blocked)
    assert elapsed < 1.7, f"two blocked claims took {elapsed:.2f}s with a 1 s budget per call"


def test_an_unexpected_error_on_one_claim_keeps_the_other_claims_answer(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    good, bad = create_claim(env, "a", domain_id=domain), create_claim(env, "b", domain_id=domain)
    store = FailingCDI(node(env).settings.cdi_root)
    store.fail_uid = bad.uid
    results = _driver(env, cdi_store=store).node_prepare((good, bad))
    assert not results[good.uid].error and results[good.uid].devices
    assert results[bad.uid].error.startswith("internal error preparing claim:")
    assert "No space left on device" in results[bad.uid].error


def test_api_server_errors_are_retried_within_the_budget(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    flaky = FlakyCluster(env.cluster, failures=2)
    result = _driver(env, cluster=flaky).node_prepare((ref,))[ref.uid]
    assert not result.error and result.devices
    assert flaky.failures == 0


def test_api_server_outage_is_reported_as_retryable_with_a_clear_message(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    flaky = FlakyCluster(env.cluster, failures=10**6)
    result = _driver(env, cluster=flaky, retry_budget_s=0.3).node_prepare((ref,))[ref.uid]
    assert "the API server failed while reading ResourceClaim team/a" in result.error


def test_a_completed_claim_is_prepared_again_during_an_api_outage(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    first = prepare(env, ref)
    assert not first.error
    down = FlakyCluster(env.cluster, failures=10**6)
    again = _driver(env, cluster=down, retry_budget_s=0.3).node_prepare((ref,))[ref.uid]
    assert not again.error
    assert again.devices == first.devices


def test_compute_domains_are_looked_up_outside_the_node_lock(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    store = TrackingCheckpoints(node(env).settings.checkpoint_path)
    lock_held_while_listing: list[bool] = []

    def refresh() -> dict[names.ComputeDomainUID, models.ComputeDomain]:
        lock_held_while_listing.append(store.held)
        return plugin_domains.list_domains(env.cluster)

    def view() -> plugin_domains.ReadThroughDomains:
        return plugin_domains.ReadThroughDomains({}, refresh=refresh)  # a cache miss

    result = _driver(env, checkpoints=store, domains=view).node_prepare((ref,))[ref.uid]
    assert not result.error
    assert lock_held_while_listing == [False]
