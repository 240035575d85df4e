"""Fixtures for the Fabric Manager adapters: the fake libnvfm, compiled once per session,
and a driver root where it and a listening Fabric Manager socket are (`fm_fake_library`)."""

from __future__ import annotations

import pathlib
import shutil
import tempfile
import threading
from collections.abc import Iterator

import fm_fake_library
import pytest

from adapters.fabricmanager import address


@pytest.fixture(scope="session")
def fake_libnvfm(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The compiled fake, `libnvfm.so.1`, in a directory of its own."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is needed to build the fake libnvfm")
    return fm_fake_library.build(gcc=gcc, directory=tmp_path_factory.mktemp("fake-libnvfm"))


@pytest.fixture
def fake_fm(fake_libnvfm: pathlib.Path) -> Iterator[fm_fake_library.FakeFm]:
    # NB: a short root under /tmp: a unix socket path holds at most 107 bytes.
    root = pathlib.Path(tempfile.mkdtemp(prefix="fm-", dir="/tmp"))
    try:
        (root / fm_fake_library.LIBRARY_DIR).mkdir(parents=True)
        library = root / fm_fake_library.LIBRARY_DIR / "libnvfm.so.1"
        shutil.copy(fake_libnvfm, library)
        socket_path = root / address.DEFAULT_SOCKET
        socket_path.parent.mkdir(parents=True)
        server = fm_fake_library.Accepting(str(socket_path), fm_fake_library.Close)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield fm_fake_library.FakeFm(
                driver_root=root, library=library, socket=socket_path,
                state=root / "fake-fm-state",
            )
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
    finally:
        shutil.rmtree(root)
