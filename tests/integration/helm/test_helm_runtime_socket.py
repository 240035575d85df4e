"""The plugins reach the container runtime's CRI socket for the CDI check (chart value
kubeletPlugin.containerRuntimeEndpoint).

Covers: by default both plugin containers mount containerd's and CRI-O's socket directories
read-only at the host's paths and get an empty CONTAINER_RUNTIME_ENDPOINT (auto-detect); a set
endpoint mounts just that socket; "none" mounts nothing; the schema refuses a relative path.
"""

from __future__ import annotations

from typing import Any

import chart_rendering as cr
import pytest

BOTH = {"resources": {"gpus": {"enabled": True}}}


def _containers(values: dict[str, Any]) -> list[dict[str, Any]]:
    plugin = cr.one(cr.render(values), "DaemonSet")
    containers: list[dict[str, Any]] = plugin["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 2
    return containers


def _volumes(values: dict[str, Any]) -> dict[str, Any]:
    plugin = cr.one(cr.render(values), "DaemonSet")
    return {v["name"]: v for v in plugin["spec"]["template"]["spec"]["volumes"]}


def _runtime_mounts(container: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    return {m["name"]: (m["mountPath"], m.get("readOnly", False))
            for m in container["volumeMounts"]
            if m["name"] in ("containerd-socket-dir", "crio-socket-dir",
                             "container-runtime-socket")}


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container["env"]}


def test_by_default_both_plugins_look_for_containerd_and_crio() -> None:
    for container in _containers(BOTH):
        assert _env(container)["CONTAINER_RUNTIME_ENDPOINT"] == ""
        assert _runtime_mounts(container) == {
            "containerd-socket-dir": ("/run/containerd", True),
            "crio-socket-dir": ("/var/run/crio", True),
        }
    volumes = _volumes(BOTH)
    assert volumes["containerd-socket-dir"]["hostPath"] == {
        "path": "/run/containerd", "type": "DirectoryOrCreate"}
    assert volumes["crio-socket-dir"]["hostPath"] == {
        "path": "/var/run/crio", "type": "DirectoryOrCreate"}


@pytest.mark.parametrize("endpoint", ["/run/k3s/containerd/containerd.sock",
                                      "unix:///run/k3s/containerd/containerd.sock"])
def test_a_set_endpoint_mounts_just_that_socket(endpoint: str) -> None:
    values = {**BOTH, "kubeletPlugin": {"containerRuntimeEndpoint": endpoint}}
    for container in _containers(values):
        assert _env(container)["CONTAINER_RUNTIME_ENDPOINT"] == endpoint
        assert _runtime_mounts(container) == {
            "container-runtime-socket": ("/run/k3s/containerd/containerd.sock", True)}
    volumes = _volumes(values)
    assert volumes["container-runtime-socket"]["hostPath"] == {
        "path": "/run/k3s/containerd/containerd.sock", "type": "Socket"}
    assert "containerd-socket-dir" not in volumes


def test_none_mounts_nothing_and_turns_the_check_off() -> None:
    values = {**BOTH, "kubeletPlugin": {"containerRuntimeEndpoint": "none"}}
    for container in _containers(values):
        assert _env(container)["CONTAINER_RUNTIME_ENDPOINT"] == "none"
        assert _runtime_mounts(container) == {}


def test_a_relative_endpoint_is_refused() -> None:
    error = cr.render_error({"kubeletPlugin": {"containerRuntimeEndpoint": "run/x.sock"}})
    assert "containerRuntimeEndpoint" in error
