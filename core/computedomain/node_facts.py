"""What the ComputeDomain half's kubelet plugin knows of its node beyond its name and boot."""

from __future__ import annotations

import dataclasses

from core import models


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostBinary:
    """A host executable bind-mounted read-only into a container at `container_path`."""

    host_path: str
    container_path: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImexMgmtDevice:
    """`/dev/nvidia-caps/nvidia-cap<N>`, the device `nvidia-imex` manages the fabric through."""

    path: str
    major: int
    minor: int
    file_mode: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImexNodeFacts(models.NodeFacts):
    """Node-local facts the ComputeDomain plugin reads at startup and passes into every
    planner: the node's NVLink clique ("" when it has none) and the IMEX channel devices'
    major number, and what driver-managed daemon claims need."""

    clique_id: str
    channel_major: int
    # Driver-managed daemon claims: the IMEX management capability device (None when the node
    # lacks it) and the host directory holding one IMEX config dir per ComputeDomain.
    imex_mgmt: ImexMgmtDevice | None = None
    daemon_config_root: str = ""
    # The host driver's `nvidia-imex` / `nvidia-imex-ctl`, mounted into daemon pods (our image
    # ships no driver files; empty where the node has none).
    imex_binaries: tuple[HostBinary, ...] = ()
