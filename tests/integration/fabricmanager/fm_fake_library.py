"""The fake libnvfm (fake_libnvfm.c) built with gcc, and what a test sees of it (`FakeFm`).

`build` compiles the library with its partition table generated from a Python table
(`core.gpu.fm_partitions.HGX_8GPU_PARTITIONS` in the fixtures); `FakeFm` is a driver root
holding it, Fabric Manager's socket there and the fake's state file, with the real client
(`adapters.fabricmanager.real.NvfmFabricManager`) over it.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import socketserver
import subprocess

from adapters.fabricmanager import address, real
from core.gpu import fm_partitions

SOURCE = pathlib.Path(__file__).with_name("fake_libnvfm.c")
LIBRARY_DIR = "usr/lib64"


def table_header(partitions: tuple[fm_partitions.Partition, ...]) -> str:
    """`fake_table.h`: FAKE_TABLE, one {id, number of GPUs, {module ids}} per partition."""
    rows = ",\n".join(
        f"    {{{p.partition_id}, {p.size}, {{{', '.join(map(str, sorted(p.module_ids)))}}}}}"
        for p in partitions
    )
    return f"static const struct fake_partition FAKE_TABLE[] = {{\n{rows}\n}};\n"


def build(*, gcc: str, directory: pathlib.Path) -> pathlib.Path:
    """Compile the fake with the HGX 8-GPU table into `directory`: `libnvfm.so.1` (its SONAME)."""
    (directory / "fake_table.h").write_text(table_header(fm_partitions.HGX_8GPU_PARTITIONS))
    library = directory / "libnvfm.so.1"
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{directory}",
         "-Wl,-soname,libnvfm.so.1", "-o", str(library), str(SOURCE)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return library


class Accepting(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Fabric Manager's socket as the fake needs it: it accepts connections, nothing more."""

    daemon_threads = True


class Close(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        """Accept and close: the fake only checks that something listens."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class FakeFm:
    """A driver root with the fake library, Fabric Manager's socket and the fake's state."""

    driver_root: pathlib.Path
    library: pathlib.Path
    socket: pathlib.Path
    state: pathlib.Path

    def env(self, **knobs: str) -> dict[str, str]:
        """Our environment plus the fake's state file and `knobs` (FAKE_NVFM_...)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVFM_", "NVIDIA_"))}
        return {**env, "FAKE_NVFM_STATE": str(self.state), **knobs}

    def manager(self, *, timeout_s: float = 30.0, **knobs: str) -> real.NvfmFabricManager:
        """The real client over the fake, at the default socket of the driver root."""
        return real.NvfmFabricManager(
            endpoint=address.fabric_manager_address({}, driver_root=str(self.driver_root)),
            library=str(self.library), driver_root=str(self.driver_root),
            timeout_s=timeout_s, env=self.env(**knobs),
        )


