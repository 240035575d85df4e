"""Upgrading the plugins without a gap (chart value kubeletPlugin.seamlessUpgrade).

Covers: by default (the Helm engine renders for a 1.33+ cluster) both plugin containers get
their pod's UID as ROLLING_UPDATE_POD_UID and the DaemonSet surges (maxSurge 1, maxUnavailable
0); false renders today's fixed socket names and plain RollingUpdate; an updateStrategy set by
the user wins either way; the schema refuses what is neither a boolean nor null, and unknown
rollingUpdate keys.
"""

from __future__ import annotations

from typing import Any

import chart_rendering as cr
import pytest

BOTH = {"resources": {"gpus": {"enabled": True}}}
SURGE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
UID_FROM_POD = {"fieldRef": {"fieldPath": "metadata.uid"}}


def _plugin(values: dict[str, Any]) -> dict[str, Any]:
    return cr.one(cr.render(values), "DaemonSet")


def _pod_uid_env(plugin: dict[str, Any]) -> list[Any]:
    containers = plugin["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 2
    return [next((e.get("valueFrom") for e in c["env"] if e["name"] == "ROLLING_UPDATE_POD_UID"),
                 None) for c in containers]


def _with(**plugin_values: Any) -> dict[str, Any]:
    return {**BOTH, "kubeletPlugin": plugin_values}


def test_by_default_both_plugins_name_their_sockets_after_the_pod_and_the_daemonset_surges(
) -> None:
    plugin = _plugin(BOTH)
    assert _pod_uid_env(plugin) == [UID_FROM_POD, UID_FROM_POD]
    assert plugin["spec"]["updateStrategy"] == SURGE


def test_true_is_the_same_as_the_default_on_this_cluster() -> None:
    assert _plugin(_with(seamlessUpgrade=True)) == _plugin(BOTH)


def test_false_keeps_the_fixed_socket_names_and_a_plain_rolling_update() -> None:
    plugin = _plugin(_with(seamlessUpgrade=False))
    assert _pod_uid_env(plugin) == [None, None]
    assert plugin["spec"]["updateStrategy"] == {"type": "RollingUpdate"}


@pytest.mark.parametrize("seamless", [True, False])
def test_a_set_update_strategy_wins(seamless: bool) -> None:
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}
    plugin = _plugin(_with(seamlessUpgrade=seamless, updateStrategy=strategy))
    assert plugin["spec"]["updateStrategy"] == strategy


def test_the_schema_refuses_a_string_for_seamless_upgrade() -> None:
    assert "seamlessUpgrade" in cr.render_error(_with(seamlessUpgrade="yes"))


def test_the_schema_refuses_an_unknown_rolling_update_key() -> None:
    error = cr.render_error(_with(updateStrategy={"rollingUpdate": {"maxSurges": 1}}))
    assert "maxSurges" in error
