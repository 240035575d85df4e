"""The chart lets an operator replace the imexd.cfg template the daemon pods run with.

Rendered by the real Helm engine: the text lands in a ConfigMap mounted into the kubelet plugin,
whose IMEX_DAEMON_CONFIG_TEMPLATE points at it (what `apps/kubeletplugin/daemon_claims.py`
reads); without the value, or in hostManaged mode, nothing of it is rendered.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "helm"))

import chart_rendering as cr

from apps.kubeletplugin import daemon_claims

TEMPLATE = "SERVER_PORT=50000\nIMEX_CMD_BIND_INTERFACE_IP={{ .IMEXCmdBindInterfaceIP }}\n"


def _values(template: str) -> dict[str, Any]:
    return {"resources": {"computeDomains": {"imex": {"daemonConfigTemplate": template}}}}


def test_a_template_value_is_mounted_into_the_plugin_and_named_by_its_env() -> None:
    objects = cr.render(_values(TEMPLATE))
    (config_map,) = [o for o in cr.find(objects, "ConfigMap")
                     if o["metadata"]["name"].endswith("-imexd-template")]
    assert config_map["data"] == {"imexd.cfg.tmpl": TEMPLATE}  # placeholders kept verbatim
    plugin = cr.one(objects, "DaemonSet")
    env = cr.container_env(plugin)
    path = env[daemon_claims.TEMPLATE_ENV]
    pod = plugin["spec"]["template"]["spec"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "imexd-template"]
    assert path == f"{mount['mountPath']}/imexd.cfg.tmpl"
    (volume,) = [v for v in pod["volumes"] if v["name"] == "imexd-template"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]


def _host_managed_with_template() -> dict[str, Any]:
    values = cr.host_managed()
    values["resources"]["computeDomains"]["imex"]["daemonConfigTemplate"] = TEMPLATE
    return values


def test_without_a_template_value_or_in_host_managed_mode_nothing_is_rendered() -> None:
    for values in (_values(""), _host_managed_with_template()):
        objects = cr.render(values)
        assert not [o for o in cr.find(objects, "ConfigMap")
                    if o["metadata"]["name"].endswith("-imexd-template")]
        assert daemon_claims.TEMPLATE_ENV not in cr.container_env(cr.one(objects, "DaemonSet"))
