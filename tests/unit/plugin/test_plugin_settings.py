"""The kubelet plugin's flags: the stale-claim clean-up interval, channel slots, validation."""

from __future__ import annotations

import pytest

from apps.kubeletplugin import settings as plugin_settings


def test_the_clean_up_interval_defaults_to_30_seconds() -> None:
    parsed = plugin_settings.parse(["--node-name", "n"], {})
    assert parsed.stale_claim_cleanup_interval_s == 30.0


def test_the_clean_up_interval_comes_from_the_environment_the_chart_sets() -> None:
    parsed = plugin_settings.parse(
        ["--node-name", "n"], {"STALE_CLAIM_CLEANUP_INTERVAL_SECONDS": "2.5"}
    )
    assert parsed.stale_claim_cleanup_interval_s == 2.5


@pytest.mark.parametrize("bad", ["0", "-1", "soon", "inf", "nan"])
def test_a_clean_up_interval_that_is_not_positive_seconds_is_refused(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        plugin_settings.parse(
            ["--node-name", "n", "--stale-claim-cleanup-interval-seconds", bad], {}
        )
    assert exited.value.code == 2
    assert "must be a number of seconds above 0" in capsys.readouterr().err


def test_the_channel_slots_come_from_the_environment_the_chart_sets() -> None:
    parsed = plugin_settings.parse(["--node-name", "n"], {"IMEX_CHANNEL_SLOTS": "2"})
    assert parsed.channel_slots == 2
    assert plugin_settings.parse(["--node-name", "n"], {}).channel_slots == 8


@pytest.mark.parametrize("bad", ["eight", "2.5", "", "0", "-1"])
def test_channel_slots_that_are_not_a_whole_number_above_0_are_refused(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        plugin_settings.parse(["--node-name", "n"], {"IMEX_CHANNEL_SLOTS": bad})
    assert exited.value.code == 2
    assert "--imex-channel-slots (env IMEX_CHANNEL_SLOTS) must be a whole number above 0" in (
        capsys.readouterr().err
    )


def test_the_host_imex_check_is_on_by_default_with_upstreams_socket() -> None:
    parsed = plugin_settings.parse(["--node-name", "n"], {})
    assert parsed.host_imex_check is True
    assert parsed.imex_host_socket == "/etc/nvidia-imex/imex_ctrl.sock"
    off = plugin_settings.parse(["--node-name", "n"], {"HOST_IMEX_CHECK": "false"})
    assert off.host_imex_check is False


@pytest.mark.parametrize("env_name", ["IMEX_HOST_SOCKET_PATH", "IMEX_HOST_SOCKET"])
def test_the_host_socket_comes_from_upstreams_env_name_or_ours(env_name: str) -> None:
    parsed = plugin_settings.parse(["--node-name", "n"], {env_name: "/run/imex/c.sock"})
    assert parsed.imex_host_socket == "/run/imex/c.sock"


def test_upstreams_imex_env_names_reach_the_settings() -> None:
    parsed = plugin_settings.parse(
        ["--node-name", "n"], {"IMEX_MODE": "hostManaged", "IMEX_ISOLATION": "domain"}
    )
    assert (parsed.imex_mode, parsed.imex_isolation) == ("hostManaged", "domain")


@pytest.mark.parametrize("module", ["apps.kubeletplugin.settings", "apps.gpuplugin.settings"])
def test_the_container_runtime_endpoint_is_auto_detected_unless_set(module: str) -> None:
    parse = __import__(module, fromlist=["parse"]).parse
    assert parse(["--node-name", "n"], {}).container_runtime_endpoint == ""
    from_env = parse(["--node-name", "n"], {"CONTAINER_RUNTIME_ENDPOINT": "unix:///x.sock"})
    assert from_env.container_runtime_endpoint == "unix:///x.sock"
    from_flag = parse(["--node-name", "n", "--container-runtime-endpoint", "none"], {})
    assert from_flag.container_runtime_endpoint == "none"


@pytest.mark.parametrize("module", ["apps.kubeletplugin.settings", "apps.gpuplugin.settings"])
def test_the_pod_uid_for_per_pod_sockets_comes_from_the_environment_the_chart_sets(
    module: str,
) -> None:
    parse = __import__(module, fromlist=["parse"]).parse
    assert parse(["--node-name", "n"], {}).rolling_update_pod_uid == ""
    uid = "0f4b2a5e-8c1d-4e2f-9a3b-7c6d5e4f3a2b"
    assert parse(["--node-name", "n"], {"ROLLING_UPDATE_POD_UID": uid}).rolling_update_pod_uid \
        == uid


@pytest.mark.parametrize("bad", ["../x", "a/b", "uid with space", "ü"])
def test_a_pod_uid_that_cannot_name_a_socket_is_refused(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        plugin_settings.parse(["--node-name", "n"], {"ROLLING_UPDATE_POD_UID": bad})
    assert exited.value.code == 2
    assert "--rolling-update-pod-uid (env ROLLING_UPDATE_POD_UID) must be a pod UID" in (
        capsys.readouterr().err)
