"""The CRI client over a real unix socket, against a runtime answering like containerd and CRI-O.

Covers: the answer the judgment gets (containerd with CDI on, off, other spec dirs, too old;
CRI-O), the verbose flag reaching the runtime, an endpoint without a socket, a socket nobody
serves, a runtime without the RuntimeService, the usual endpoints tried in order, and the
endpoint spellings.
"""

from __future__ import annotations

import pathlib
import socket
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from adapters.grpc import cri, cri_fake
from core import ports, runtime_cdi
from core.runtime_cdi import Verdict


@pytest.fixture
def runtime(sock_base: pathlib.Path) -> Iterator[cri_fake.FakeRuntime]:
    fake = cri_fake.FakeRuntime(str(sock_base / "containerd.sock")).start()
    try:
        yield fake
    finally:
        fake.stop()


def _judge_over_the_wire(runtime: cri_fake.FakeRuntime) -> runtime_cdi.Judgment:
    client: ports.ContainerRuntime = cri.CriRuntime(f"unix://{runtime.socket_path}")
    return runtime_cdi.judge(client.ask(), cdi_root="/var/run/cdi")


def test_containerd_with_cdi_on_is_applied(runtime: cri_fake.FakeRuntime) -> None:
    client = cri.CriRuntime(runtime.socket_path)
    answer = client.ask()
    assert isinstance(answer, runtime_cdi.RuntimeAnswer)
    assert (answer.name, answer.version) == ("containerd", "v2.1.4")
    assert "config" in dict(answer.info)  # the client asked for the verbose status
    assert runtime_cdi.judge(answer, cdi_root="/var/run/cdi").verdict is Verdict.APPLIED


def test_containerd_with_cdi_off_refuses(runtime: cri_fake.FakeRuntime) -> None:
    runtime.answer_like(name="containerd", version="1.7.27",
                        info=cri_fake.containerd_info(enable_cdi=False))
    judged = _judge_over_the_wire(runtime)
    assert judged.verdict is Verdict.CDI_OFF
    assert "containerd 1.7.27" in judged.message


def test_containerd_reading_other_dirs_refuses(runtime: cri_fake.FakeRuntime) -> None:
    runtime.answer_like(name="containerd", version="1.7.27",
                        info=cri_fake.containerd_info(enable_cdi=True, spec_dirs=["/etc/cdi"]))
    assert _judge_over_the_wire(runtime).verdict is Verdict.ROOT_NOT_WATCHED


def test_containerd_1_6_refuses(runtime: cri_fake.FakeRuntime) -> None:
    runtime.answer_like(name="containerd", version="1.6.33",
                        info=cri_fake.containerd_info(enable_cdi=None))
    assert _judge_over_the_wire(runtime).verdict is Verdict.CDI_OFF


def test_crio_is_judged_by_its_version(runtime: cri_fake.FakeRuntime) -> None:
    runtime.answer_like(name="cri-o", version="1.31.2", info={})
    assert _judge_over_the_wire(runtime).verdict is Verdict.APPLIED
    runtime.answer_like(name="cri-o", version="1.22.0", info={})
    assert _judge_over_the_wire(runtime).verdict is Verdict.CDI_OFF


def test_no_socket_is_unreachable(sock_base: pathlib.Path) -> None:
    answer = cri.CriRuntime(str(sock_base / "missing.sock")).ask()
    assert isinstance(answer, runtime_cdi.Unreachable)
    assert answer.reason == f"no CRI socket at {sock_base / 'missing.sock'}"


def test_a_socket_nobody_serves_is_unreachable(sock_base: pathlib.Path) -> None:
    path = sock_base / "dead.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))  # bound, never listening: connections are refused
    try:
        answer = cri.CriRuntime(str(path), timeout_s=2.0).ask()
    finally:
        dead.close()
    assert isinstance(answer, runtime_cdi.Unreachable)
    assert answer.reason.startswith("UNAVAILABLE")


def test_a_server_without_the_runtime_service_is_unreachable(sock_base: pathlib.Path) -> None:
    path = sock_base / "other.sock"
    server = grpc.server(futures.ThreadPoolExecutor(1))
    server.add_insecure_port(f"unix://{path}")
    server.start()
    try:
        answer = cri.CriRuntime(str(path)).ask()
    finally:
        server.stop(0)
    assert isinstance(answer, runtime_cdi.Unreachable)
    assert answer.reason.startswith("UNIMPLEMENTED")


def test_the_usual_endpoints_are_tried_in_order(
    monkeypatch: pytest.MonkeyPatch, runtime: cri_fake.FakeRuntime, sock_base: pathlib.Path
) -> None:
    monkeypatch.setattr(cri, "DEFAULT_ENDPOINTS", (
        f"unix://{sock_base / 'absent.sock'}", f"unix://{runtime.socket_path}"))
    client = cri.CriRuntime("")
    assert client.endpoints == cri.DEFAULT_ENDPOINTS
    assert isinstance(client.ask(), runtime_cdi.RuntimeAnswer)


def test_defaults_and_spellings_of_the_endpoint() -> None:
    assert cri.endpoints_to_try("") == (
        "unix:///run/containerd/containerd.sock", "unix:///var/run/crio/crio.sock")
    assert cri.endpoints_to_try("/x/c.sock") == ("unix:///x/c.sock",)
    assert cri.endpoints_to_try(" unix:///x/c.sock ") == ("unix:///x/c.sock",)
