"""A plugin restarted in the other IMEX mode while it holds old-mode claims says so, once."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from pluginapp_env import create_claim, create_domain, node, prepare

from adapters.fs import cdi as fs_cdi
from adapters.fs import checkpoints as fs_checkpoints
from apps.cli import embedded
from apps.kubeletplugin import driver as plugin_driver
from apps.pluginkit import driver as claim_driver
from core import kinds, models


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        yield deployment


def _restarted_in(
    env: embedded.Embedded, config: models.DriverConfig
) -> plugin_driver.PluginDriver:
    settings = node(env).settings
    driver = plugin_driver.new_driver(
        ports=claim_driver.PluginPorts(
            cluster=env.cluster,
            checkpoints=fs_checkpoints.FileCheckpointStore(settings.checkpoint_path),
            cdi=fs_cdi.CDIDirectory(settings.cdi_root),
        ),
        node=node(env).plugin.node,
        config=config,
    )
    driver.recover()
    return driver


def _mode_events(env: embedded.Embedded) -> list[str]:
    return [
        e["message"] for e in env.cluster.list(kinds.EVENT.kind, namespace="default").items
        if e["reason"] == "ClaimsPreparedUnderOtherMode"
    ]


def test_a_restart_in_the_other_mode_with_old_claims_emits_one_node_event(
    env: embedded.Embedded,
) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    driver_managed = dataclasses.replace(
        env.config, mode=models.IMEXMode.DRIVER_MANAGED, isolation=models.Isolation.DOMAIN
    )
    _restarted_in(env, driver_managed)
    messages = _mode_events(env)
    assert len(messages) == 1
    assert "team/a (hostManaged/none)" in messages[0]
    assert "driverManaged/domain" in messages[0]
    assert "drain" in messages[0]


def test_a_restart_in_the_same_mode_emits_no_mode_event(env: embedded.Embedded) -> None:
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
    _restarted_in(env, env.config)
    assert _mode_events(env) == []
