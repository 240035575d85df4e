"""Every env var the chart sets on a container is a flag of the binary it runs (issue 17).

The shell (`apps/shell/flags.py`) gives each flag its env var; the chart renders env vars, not
flags. So a renamed flag must keep the env name the chart renders, and a chart env var that no
flag reads is either read elsewhere on purpose (listed here with why) or a mistake.
"""

from __future__ import annotations

from typing import Any

import chart_rendering as cr
import pytest

from apps.cli import preflight, webhook
from apps.controller import settings as controller_settings
from apps.gpuplugin import settings as gpu_settings
from apps.kubeletplugin import settings as plugin_settings

COMMANDS = {
    "compute-domain-controller": controller_settings.COMMAND,
    "compute-domain-kubelet-plugin": plugin_settings.COMMAND,
    "gpu-kubelet-plugin": gpu_settings.COMMAND,
    "computedomain webhook": webhook.COMMAND,
    "computedomain preflight": preflight.COMMAND,
}
# cdd.commonEnv gives the controller, the plugin and the webhook the same IMEX settings; each
# reads the ones it uses.
SHARED = {
    "compute-domain-controller": {"IMEX_CHANNEL_SLOTS"},
    "compute-domain-kubelet-plugin": {"IMEX_CHANNELS_MAX"},
    "computedomain webhook": {"IMEX_CHANNELS_MAX", "IMEX_CHANNEL_SLOTS"},
}
# Read outside the flags, on purpose.
ELSEWHERE = {
    # The container runtime's, not ours: no GPU is injected into the plugin containers.
    "NVIDIA_VISIBLE_DEVICES",
    # Set for parity with upstream's chart; the plugin does not read it.
    "POD_UID",
}

VALUES = [
    {},
    cr.imex("hostManaged", "channel", featureGates={"HostManagedIMEXDaemon": True}),
    {"resources": {"gpus": {"enabled": True}}},
    # Upstream's keys that add env (issue 19).
    {"gpuResourcesEnabledOverride": True, "altProcDevices": "/var/lib/mock/devices",
     "nvidiaCDIHookPath": "/usr/bin/nvidia-cdi-hook",
     "kubeletPlugin": {"metrics": {"enabled": False}}},
    {"webhook": {"enabled": True, "tls": {"secretName": "tls"}}, **cr.host_managed()},
]


def _env_names(command: Any) -> set[str]:
    return {name for param in command.params for name in getattr(param, "env_names", ())}


@pytest.mark.parametrize("values", VALUES)
def test_every_env_var_the_chart_sets_is_a_flag_of_its_binary(values: dict[str, Any]) -> None:
    checked = 0
    unread: dict[str, list[str]] = {}
    for obj in cr.render(values, is_upgrade=True):
        spec = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in spec.get("containers", []):
            argv = [*container.get("command", []), *container.get("args", [])]
            key = " ".join(argv[:2]) if argv[:1] == ["computedomain"] else (argv or [""])[0]
            if key not in COMMANDS:
                continue
            checked += 1
            env = {e["name"] for e in container.get("env", [])}
            extra = env - _env_names(COMMANDS[key]) - ELSEWHERE - SHARED.get(key, set())
            if extra:
                unread[key] = sorted(extra)
    assert checked
    assert unread == {}, "env vars the chart sets that no flag of the binary reads"
