"""A real PluginServer on unix sockets, with a small fake KubeletPluginService behind it."""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from grpc_fake_service import DRIVER, FakePluginService

from adapters.grpc import server
from core import ports

# NB: unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer.
_MAX_BASE = 60


@pytest.fixture
def sock_base(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    if len(str(tmp_path)) <= _MAX_BASE:
        yield tmp_path
        return
    short = pathlib.Path(tempfile.mkdtemp(prefix="grpc-", dir="/tmp"))
    try:
        yield short
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
def fake_service() -> FakePluginService:
    service: ports.KubeletPluginService = FakePluginService()
    assert isinstance(service, FakePluginService)
    return service


@pytest.fixture
def plugin(
    sock_base: pathlib.Path, fake_service: FakePluginService
) -> Iterator[server.PluginServer]:
    srv = server.PluginServer(
        service=fake_service,
        driver_name=DRIVER,
        plugin_dir=str(sock_base / "plugins" / DRIVER),
        registry_dir=str(sock_base / "registry"),
        health_port=0,
        health_host="127.0.0.1",
    )
    srv.start()
    try:
        yield srv
    finally:
        if not srv.wait(0):
            srv.stop(0)
