"""Node facts the plugin derives at startup: the NVLink clique ID and the IMEX channel major."""

from __future__ import annotations

import pytest

from core import errors, models, procdevices
from core.computedomain import cliques

CLUSTER = bytes.fromhex("8c2b3f4e5a6d4e7f8091a2b3c4d5e6f7")
CLUSTER_TEXT = "8c2b3f4e-5a6d-4e7f-8091-a2b3c4d5e6f7"


def _gpu(
    n: int,
    *,
    state: models.FabricState = models.FabricState.COMPLETED,
    cluster: bytes = CLUSTER,
    clique: int = 32766,
    ok: bool = True,
) -> models.FabricRecord:
    return models.FabricRecord(
        gpu_uuid=f"GPU-{n:08d}-0000-0000-0000-000000000000",
        state=state,
        cluster_uuid=cluster,
        clique_id=clique,
        status_ok=ok,
    )


def test_clique_id_is_cluster_uuid_dot_clique_when_all_gpus_agree() -> None:
    records = [_gpu(i) for i in range(4)]
    assert cliques.clique_id_from_fabric(records) == f"{CLUSTER_TEXT}.32766"


def test_clique_id_rejects_gpus_that_disagree_naming_them() -> None:
    records = [_gpu(0), _gpu(1), _gpu(2, clique=7)]
    with pytest.raises(errors.PermanentError) as err:
        cliques.clique_id_from_fabric(records)
    assert records[2].gpu_uuid in err.value.message
    assert f"{CLUSTER_TEXT}.7" in err.value.message
    assert f"{CLUSTER_TEXT}.32766" in err.value.message


def test_clique_id_is_empty_when_fabric_not_supported() -> None:
    records = [_gpu(i, state=models.FabricState.NOT_SUPPORTED) for i in range(8)]
    assert cliques.clique_id_from_fabric(records) == ""


def test_clique_id_is_empty_for_an_all_zero_cluster_uuid() -> None:
    records = [_gpu(i, cluster=b"\x00" * 16) for i in range(2)]
    assert cliques.clique_id_from_fabric(records) == ""


def test_clique_id_is_empty_on_a_node_without_gpus() -> None:
    assert cliques.clique_id_from_fabric([]) == ""


@pytest.mark.parametrize(
    "state", [models.FabricState.NOT_STARTED, models.FabricState.IN_PROGRESS]
)
def test_clique_id_asks_to_retry_while_the_fabric_is_forming(state: models.FabricState) -> None:
    with pytest.raises(errors.RetryableError) as err:
        cliques.clique_id_from_fabric([_gpu(0), _gpu(1, state=state)])
    assert _gpu(1).gpu_uuid in err.value.message
    assert "not complete" in err.value.message


def test_clique_id_asks_to_retry_when_a_completed_gpu_reports_failure() -> None:
    with pytest.raises(errors.RetryableError) as err:
        cliques.clique_id_from_fabric([_gpu(0), _gpu(3, ok=False)])
    assert _gpu(3).gpu_uuid in err.value.message


# A trimmed /proc/devices of an H100 node with the nvidia driver (580) loaded.
H100_PROC_DEVICES = """\
Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  5 /dev/tty
  5 /dev/console
 10 misc
 13 input
 29 fb
136 pts
195 nvidia-frontend
234 nvidia-nvswitch
235 nvidia-nvlink
237 nvidia-caps
239 nvidia-uvm
242 nvidia-caps-imex-channels
510 nvidia-caps-imex-channels-like

Block devices:
  7 loop
  8 sd
259 blkext
999 nvidia-caps-imex-channels
"""


def test_channel_major_is_parsed_from_proc_devices() -> None:
    assert procdevices.imex_channel_major(H100_PROC_DEVICES) == 242


def test_channel_major_ignores_block_devices() -> None:
    text = H100_PROC_DEVICES.replace("242 nvidia-caps-imex-channels\n", "")
    with pytest.raises(errors.ConfigError):
        procdevices.imex_channel_major(text)


def test_missing_channel_major_says_what_to_check() -> None:
    with pytest.raises(errors.ConfigError) as err:
        procdevices.imex_channel_major("Character devices:\n  1 mem\n\nBlock devices:\n  7 loop\n")
    assert "nvidia-caps-imex-channels" in err.value.message
    assert "NVreg_CreateImexChannel0" in err.value.message
    assert "nvidia-modprobe" in err.value.message
