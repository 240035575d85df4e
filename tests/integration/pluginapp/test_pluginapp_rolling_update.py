"""Two ComputeDomain plugins of one node serving side by side, as a rolling update runs them.

The old and the new plugin pod share the plugin directory, the checkpoint and the CDI root;
the kubelet may send any call to either. Covers: a claim prepared by one is unprepared by the
other; each sees what the other wrote; the old one's stop with the new one serving leaves the
node's label and the journal to it (no compaction) and removes only its own sockets; the last
plugin's stop removes the label and compacts, as a plain stop always did; both writing at
once (the node-wide lock and the write generation) lose no claim and leave no stray CDI spec.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import threading
from collections.abc import Iterator

import pytest
from pluginapp_env import create_claim, create_domain, node

from adapters.fs import checkpoints as fs_checkpoints
from adapters.grpc import client
from apps.cli import embedded
from apps.kubeletplugin import wiring
from apps.pluginkit import serving
from core import kinds, models, names
from core.computedomain import checkpoint_records as cd_records
from core.computedomain import node_facts

Plugin = serving.Plugin[node_facts.ImexNodeFacts]

OLD_UID = "0f4b2a5e-8c1d-4e2f-9a3b-7c6d5e4f3a2b"
NEW_UID = "7d1e9c3a-2b4f-4a6e-8d5c-1f0e9b8a7c6d"


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        # The embedded node's own plugin (fixed socket names) makes way for per-pod ones.
        node(deployment).plugin.stop(grace_s=0)
        yield deployment


def _start(env: embedded.Embedded, uid: str) -> Plugin:
    simulated = node(env)
    settings = dataclasses.replace(
        simulated.settings, rolling_update_pod_uid=uid, gpu_clique_label_enabled=True)
    facts = simulated.plugin.node
    return wiring.start_plugin(settings, config=env.config, cluster=env.cluster, node=facts,
                               probe_clique=lambda: facts.clique_id)


def _prepare(plugin: Plugin, ref: models.ClaimRef) -> models.ClaimResult:
    with client.DRAClient(plugin.server.dra_socket_path, timeout_s=10) as dra:
        return dra.prepare([ref])[ref.uid]


def _unprepare(plugin: Plugin, ref: models.ClaimRef) -> models.ClaimResult:
    with client.DRAClient(plugin.server.dra_socket_path, timeout_s=10) as dra:
        return dra.unprepare([ref])[ref.uid]


def _label(env: embedded.Embedded) -> str | None:
    obj = env.cluster.get(kinds.NODE.kind, namespace="", name=node(env).name)
    return (obj["metadata"].get("labels") or {}).get(names.GPU_CLIQUE_LABEL)


def _on_disk(env: embedded.Embedded) -> dict[str, models.ClaimState]:
    current = fs_checkpoints.read_checkpoint(node(env).settings.checkpoint_path, cd_records.CODEC)
    assert current is not None
    return {uid: entry.state for uid, entry in current.entries.items()}


def test_old_and_new_plugin_share_the_claims_and_the_old_hands_over_at_its_stop(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    a, b, c = (create_claim(env, name, domain_id=domain) for name in ("a", "b", "c"))
    old = _start(env, OLD_UID)
    assert not _prepare(old, a).error
    new = _start(env, NEW_UID)
    try:
        assert _label(env) is not None
        # Either pod serves any call: the new one unprepares what the old one prepared, and
        # the old one sees the new one's writes.
        assert not _prepare(new, b).error
        assert not _unprepare(new, a).error
        assert not _prepare(old, c).error
        assert _prepare(old, b).devices == _prepare(new, b).devices
        journal = node(env).settings.checkpoint_path + fs_checkpoints.JOURNAL_SUFFIX
        before = os.path.getsize(journal)

        old.stop(grace_s=5)

        assert not os.path.exists(old.server.dra_socket_path)
        assert not os.path.exists(old.server.registration_socket_path)
        assert os.path.exists(new.server.registration_socket_path)
        assert _label(env) is not None, "the new plugin still vouches for the clique"
        assert os.path.getsize(journal) == before, "no compaction under the new plugin"
        assert _on_disk(env) == {b.uid: models.ClaimState.PREPARE_COMPLETED,
                                 c.uid: models.ClaimState.PREPARE_COMPLETED}
        assert not _unprepare(new, c).error
    finally:
        new.stop(grace_s=5)
    # The last plugin of the node: label gone, journal folded into the snapshot.
    assert _label(env) is None
    assert os.path.getsize(journal) == 0
    assert _on_disk(env) == {b.uid: models.ClaimState.PREPARE_COMPLETED}


def test_old_and_new_plugin_writing_at_once_lose_no_claim(env: embedded.Embedded) -> None:
    domain = create_domain(env)
    claims = [create_claim(env, f"c{i}", domain_id=domain) for i in range(24)]
    old, new = _start(env, OLD_UID), _start(env, NEW_UID)
    errors: list[str] = []

    def work(plugin: Plugin, mine: list[models.ClaimRef], *, unprepare_every: int) -> None:
        for i, ref in enumerate(mine):
            for result in (_prepare(plugin, ref),
                           *((_unprepare(plugin, ref),) if i % unprepare_every == 0 else ())):
                if result.error:
                    errors.append(f"{ref.name}: {result.error}")

    # Each prepares its half of the claims and unprepares some of them, all at once; the new
    # one also unprepares claims the old one prepared.
    threads = [
        threading.Thread(target=work, args=(old, claims[0::2]), kwargs={"unprepare_every": 3}),
        threading.Thread(target=work, args=(new, claims[1::2]), kwargs={"unprepare_every": 4}),
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        expected = {ref.uid for i, ref in enumerate(claims[0::2]) if i % 3}
        expected |= {ref.uid for i, ref in enumerate(claims[1::2]) if i % 4}
        assert set(_on_disk(env)) == expected
        for ref in claims[0::2][1::3]:
            assert not _unprepare(new, ref).error
            expected.discard(ref.uid)
    finally:
        old.stop(grace_s=5)
        new.stop(grace_s=5)
    assert set(_on_disk(env)) == expected
    cdi_uids = {p.name.split("claim_")[1].split(".")[0]
                for p in pathlib.Path(node(env).settings.cdi_root).glob("*claim_*")}
    assert cdi_uids == expected
