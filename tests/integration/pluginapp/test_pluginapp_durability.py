"""The plugin never loses prepared state: restarts, corrupt checkpoints, reboots, mode switches.

Runs the real plugin (gRPC, files) on a one-node embedded deployment.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Iterator

import pytest
from pluginapp_env import (
    create_claim,
    create_domain,
    node,
    prepare,
    restart,
    unprepare,
)

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from apps.cli import embedded
from core import checkpoint as checkpoint_codec
from core import kinds, names
from core.computedomain import checkpoint_records as cd_records
from core.computedomain import modes


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        yield deployment


def _prepared_uids(env: embedded.Embedded) -> set[str]:
    current = fs_checkpoints.read_checkpoint(node(env).settings.checkpoint_path, cd_records.CODEC)
    assert current is not None
    return set(current.entries)


def test_prepared_claim_survives_a_plugin_restart_with_the_same_cdi_ids(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    first = prepare(env, ref)
    restart(env)
    again = prepare(env, ref)
    assert not first.error and again.devices == first.devices
    assert not unprepare(env, ref).error
    assert fs_cdi.CDIDirectory(node(env).settings.cdi_root).claim_uids() == frozenset()


def test_corrupt_checkpoint_is_moved_aside_and_rebuilt_from_cdi_files(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    path = node(env).settings.checkpoint_path
    with open(path, "r+b") as f:
        f.seek(20)
        f.write(b"#")
    restart(env)
    assert glob.glob(path + ".corrupt-*"), "the corrupt file must be kept, not replaced"
    assert ref.uid in _prepared_uids(env)
    events = env.cluster.list(kinds.EVENT.kind, namespace="default").items
    assert any(e["reason"] == "CheckpointCorrupt" for e in events)
    # The rebuilt entry is enough to unprepare cleanly.
    assert not unprepare(env, ref).error
    assert fs_cdi.CDIDirectory(node(env).settings.cdi_root).claim_uids() == frozenset()


def test_a_reboot_drops_prepared_state(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    with open(node(env).settings.boot_id_path, "w", encoding="utf-8") as f:
        f.write("a-new-boot-id\n")
    restart(env)
    assert _prepared_uids(env) == set()


def test_claims_prepared_under_another_mode_block_new_prepares_but_still_unprepare(
    env: embedded.Embedded,
) -> None:
    domain = create_domain(env)
    old = create_claim(env, "old", domain_id=domain)
    assert not prepare(env, old).error
    env.config = modes.resolve_driver_config(
        mode="driverManaged", isolation="", feature_gates="", namespace=env.config.namespace
    ).config
    restart(env)
    new = create_claim(env, "new", domain_id=domain)
    refused = prepare(env, new)
    assert "drain" in refused.error and "hostManaged" in refused.error
    assert not unprepare(env, old).error
    assert fs_cdi.CDIDirectory(node(env).settings.cdi_root).claim_uids() == frozenset()


def test_claim_recreated_under_the_same_name_is_refused(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    stale = ref.__class__(uid=names.ClaimUID("0" * 8), namespace=ref.namespace, name=ref.name)
    result = prepare(env, stale)
    assert "deleted and recreated" in result.error


def test_claim_without_allocation_is_refused_without_writing_anything(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env), allocated=False)
    result = prepare(env, ref)
    assert result.error and "allocation" in result.error
    assert fs_cdi.CDIDirectory(node(env).settings.cdi_root).claim_uids() == frozenset()
    assert ref.uid not in _prepared_uids(env)


def test_missing_claim_is_reported_as_retryable_after_the_budget(
    env: embedded.Embedded,
) -> None:
    ghost = create_claim(env, "ghost", domain_id=create_domain(env))
    env.cluster.delete(kinds.RESOURCE_CLAIM.kind, namespace=ghost.namespace, name=ghost.name)
    assert "not found" in prepare(env, ghost).error


def test_metrics_count_prepared_devices_and_errors(env: embedded.Embedded) -> None:
    domain = create_domain(env)
    ref = create_claim(env, "a", domain_id=domain)
    bad = create_claim(env, "b", domain_id=domain, allocation_mode="All")
    prepare(env, ref)
    prepare(env, bad)
    text = node(env).plugin.metrics.exposition().decode()
    cd_driver = 'driver="compute-domain.nvidia.com"'
    assert f'nvidia_dra_prepared_devices{{device_type="channel",{cd_driver}' in text
    assert "nvidia_dra_prepared_devices" in text and "} 1.0" in text
    assert 'kind="permanent"' in text
    assert 'nvidia_dra_requests_total{driver="compute-domain.nvidia.com"' in text


def test_host_imex_check_blocks_prepare_until_the_host_daemon_is_ready(
    env: embedded.Embedded, tmp_path: os.PathLike[str]
) -> None:
    from adapters.nvml import imexctl

    answer = os.path.join(tmp_path, "answer")
    script = os.path.join(tmp_path, "nvidia-imex-ctl")
    with open(script, "w", encoding="utf-8") as f:
        f.write(f"#!/bin/sh\ncat {answer}\n")
    os.chmod(script, 0o755)
    with open(answer, "w", encoding="utf-8") as f:
        f.write("NOT_READY\n")
    probe = imexctl.HostIMEXProbe(driver_root="/", socket_path="/run/imex.sock", ctl_path=script)
    node(env).plugin.driver.half._host_imex_probe = probe.check  # the app wires this from settings
    ref = create_claim(env, "a", domain_id=create_domain(env))
    refused = prepare(env, ref)
    assert "host nvidia-imex daemon is not ready" in refused.error
    assert "/run/imex.sock" in refused.error
    with open(answer, "w", encoding="utf-8") as f:
        f.write("READY\n")
    assert not prepare(env, ref).error


def test_a_checkpoint_changed_behind_the_plugins_back_is_read_again(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    path = node(env).settings.checkpoint_path
    current = fs_checkpoints.read_checkpoint(path, cd_records.CODEC)
    assert current is not None
    with open(path, "wb") as f:  # e.g. an operator restoring an older copy
        f.write(checkpoint_codec.encode(dataclasses.replace(current, entries={})))
    os.truncate(path + fs_checkpoints.JOURNAL_SUFFIX, 0)  # ... and its (empty) journal
    again = prepare(env, ref)
    assert not again.error
    assert ref.uid in _prepared_uids(env)  # prepared anew, not served from memory
