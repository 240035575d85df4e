"""Each binary's settings through the one shell: typed flags, env fallbacks, aliases, logs."""

from __future__ import annotations

import logging

import pytest

from apps.cli import plan as cli_plan
from apps.controller import settings as controller_settings
from apps.daemon import settings as daemon_settings
from apps.gpuplugin import settings as gpu_settings
from apps.kubeletplugin import settings as plugin_settings


def test_controller_flags_fall_back_to_the_env_the_chart_sets() -> None:
    parsed = controller_settings.parse([], {
        "NAMESPACE": "drv", "IMEX_MODE": "hostManaged", "IMEX_ISOLATION": "channel",
        "LEADER_ELECT": "true", "METRICS_PORT": "8080", "HEALTH_PORT": "0",
        "POD_NAME": "ctl-0", "WORKERS": "4", "LOG_VERBOSITY": "4",
    })
    assert (parsed.namespace, parsed.imex_mode, parsed.imex_isolation) == (
        "drv", "hostManaged", "channel")
    assert parsed.leader_elect is True
    assert (parsed.metrics_port, parsed.health_port) == (8080, None)
    assert (parsed.identity, parsed.workers, parsed.log_verbosity) == ("ctl-0", 4, 4)


def test_a_flag_wins_over_its_env_var() -> None:
    parsed = controller_settings.parse(["--workers", "3"], {"WORKERS": "9"})
    assert parsed.workers == 3


@pytest.mark.parametrize("text", ["true", "True", "1", "yes"])
def test_leader_election_accepts_the_usual_spellings_of_true(text: str) -> None:
    assert controller_settings.parse(["--leader-elect", text], {}).leader_elect is True


def test_leader_elect_maybe_is_refused_not_false(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        controller_settings.parse(["--leader-elect", "maybe"], {})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "--leader-elect" in err


@pytest.mark.parametrize("argv", [
    ["--mode", "hostManaged", "--isolation", "channel"],
    ["--imex-mode", "hostManaged", "--imex-isolation", "channel"],
])
def test_mode_flags_have_one_name_and_the_old_one_everywhere(argv: list[str]) -> None:
    controller = controller_settings.parse(argv, {})
    plugin = plugin_settings.parse([*argv, "--node-name", "n"], {})
    assert (controller.imex_mode, controller.imex_isolation) == ("hostManaged", "channel")
    assert (plugin.imex_mode, plugin.imex_isolation) == ("hostManaged", "channel")
    planned = cli_plan.parse([*argv, "cd.yaml"], {})
    assert (planned.imex_mode, planned.imex_isolation) == ("hostManaged", "channel")


def test_the_channels_max_flag_has_the_same_name_in_the_controller_and_the_demo() -> None:
    assert controller_settings.parse(["--imex-channels-max", "5"], {}).max_channels == 5
    assert controller_settings.parse(["--channels-max", "5"], {}).max_channels == 5


def test_plugin_and_gpu_plugin_read_the_chart_env() -> None:
    env = {"NODE_NAME": "n1", "HEALTH_PORT": "51515", "METRICS_PORT": "0",
           "HOST_IMEX_CHECK": "false", "RETRY_BUDGET_SECONDS": "12.5", "LOG_VERBOSITY": "4"}
    plugin = plugin_settings.parse([], env)
    assert (plugin.node_name, plugin.health_port, plugin.metrics_port) == ("n1", 51515, None)
    assert (plugin.host_imex_check, plugin.retry_budget_s) == (False, 12.5)
    gpu = gpu_settings.parse([], {**env, "HEALTH_PORT": "51516"})
    assert (gpu.health_port, gpu.retry_budget_s, gpu.log_verbosity) == (51516, 12.5, 4)


def test_the_daemon_reads_its_max_nodes_from_env_and_keeps_an_empty_clique() -> None:
    parsed = daemon_settings.parse(["run"], {"MAX_NODES_PER_IMEX_DOMAIN": "", "CLIQUE_ID": ""})
    assert parsed.max_nodes == 18 and parsed.clique_id == ""


def _levels() -> dict[str, int]:
    return {name: logging.getLogger(name).getEffectiveLevel()
            for name in ("compute-domain-controller", "urllib3", "kubernetes")}


@pytest.mark.parametrize(("verbosity", "ours", "libraries"), [
    (0, logging.WARNING, logging.WARNING),
    (2, logging.INFO, logging.WARNING),
    (4, logging.DEBUG, logging.WARNING),  # the chart's default: no DEBUG line per HTTP request
    (7, logging.DEBUG, logging.DEBUG),
])
def test_one_logging_setup_with_the_documented_scale(
    verbosity: int, ours: int, libraries: int
) -> None:
    from apps.shell import logs

    root = logging.getLogger()
    before = (root.level, list(root.handlers))
    try:
        logs.configure(verbosity)
        levels = _levels()
        assert levels["compute-domain-controller"] == ours
        assert levels["urllib3"] == libraries and levels["kubernetes"] == libraries
        logs.configure(verbosity)  # idempotent: one handler of ours, not two
        ours_handlers = [h for h in root.handlers if h not in before[1]]
        assert len(ours_handlers) == 1
    finally:
        for handler in [h for h in root.handlers if h not in before[1]]:
            root.removeHandler(handler)
        root.setLevel(before[0])
        for name in logs.QUIET_LIBRARIES:
            logging.getLogger(name).setLevel(logging.NOTSET)
