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


def test_clique_id_skips_a_gpu_without_fabric_beside_gpus_that_share_a_clique() -> None:
    # Upstream skips such a GPU (mock NVML: one GPU reporting ERROR_NOT_SUPPORTED).
    records = [_gpu(0), _gpu(1, state=models.FabricState.NOT_SUPPORTED), _gpu(2)]
    assert cliques.clique_id_from_fabric(records) == f"{CLUSTER_TEXT}.32766"


def test_clique_id_skips_a_gpu_with_an_all_zero_cluster_uuid_beside_a_clique() -> None:
    records = [_gpu(0, cluster=b"\x00" * 16), _gpu(1)]
    assert cliques.clique_id_from_fabric(records) == f"{CLUSTER_TEXT}.32766"


def test_clique_id_still_rejects_disagreement_among_the_gpus_that_have_a_clique() -> None:
    records = [_gpu(0), _gpu(1, state=models.FabricState.NOT_SUPPORTED), _gpu(2, clique=7)]
    with pytest.raises(errors.PermanentError, match="disagree"):
        cliques.clique_id_from_fabric(records, strict=False)


UNUSABLE = [
    pytest.param(_gpu(1, state=models.FabricState.NOT_STARTED), "not complete", id="not-started"),
    pytest.param(_gpu(1, state=models.FabricState.IN_PROGRESS), "not complete", id="in-progress"),
    pytest.param(_gpu(1, ok=False), "registration failed", id="failed-registration"),
]


@pytest.mark.parametrize(("unusable", "says"), UNUSABLE)
def test_strict_clique_id_refuses_an_unusable_fabric_naming_gpu_and_gate(
    unusable: models.FabricRecord, says: str
) -> None:
    with pytest.raises(errors.PermanentError) as err:
        cliques.clique_id_from_fabric([_gpu(0), unusable], strict=True)
    assert unusable.gpu_uuid in err.value.message
    assert says in err.value.message
    assert "CrashOnNVLinkFabricErrors" in err.value.message


@pytest.mark.parametrize(("unusable", "says"), UNUSABLE)
def test_lenient_clique_id_skips_an_unusable_gpu(
    unusable: models.FabricRecord, says: str
) -> None:
    assert cliques.clique_id_from_fabric([_gpu(0), unusable], strict=False) == (
        f"{CLUSTER_TEXT}.32766"
    )
    assert cliques.clique_id_from_fabric([unusable], strict=False) == ""


@pytest.mark.parametrize("state", [models.FabricState.NOT_STARTED, models.FabricState.IN_PROGRESS])
def test_a_single_node_nvswitch_system_skips_gpus_still_forming_even_when_strict(
    state: models.FabricState,
) -> None:
    """Gate FabricManagerPartitioning on an NVSwitch node: Fabric Manager registers a GPU only
    once a partition holding it is active, so a forming GPU is no fabric error (upstream)."""
    forming = _gpu(1, state=state)
    assert cliques.clique_id_from_fabric(
        [_gpu(0), forming], strict=True, forming_ok=True
    ) == f"{CLUSTER_TEXT}.32766"
    assert cliques.clique_id_from_fabric([forming], strict=True, forming_ok=True) == ""


def test_a_failed_registration_stays_a_fabric_error_on_a_single_node_nvswitch_system() -> None:
    with pytest.raises(errors.PermanentError, match="registration failed"):
        cliques.clique_id_from_fabric([_gpu(0), _gpu(1, ok=False)], strict=True, forming_ok=True)


def test_strict_is_the_default() -> None:
    with pytest.raises(errors.PermanentError):
        cliques.clique_id_from_fabric([_gpu(0, state=models.FabricState.IN_PROGRESS)])


def test_a_reread_clique_replaces_the_known_one_but_none_keeps_it() -> None:
    assert cliques.refreshed_clique_id("", "a.1") == "a.1"
    assert cliques.refreshed_clique_id("a.1", "a.2") == "a.2"
    assert cliques.refreshed_clique_id("a.1", "") == "a.1"


def test_gpu_clique_label_patches() -> None:
    assert cliques.gpu_clique_label_patch("") is None
    assert cliques.gpu_clique_label_patch("a.1") == {
        "metadata": {"labels": {"nvidia.com/gpu.clique": "a.1"}}
    }
    assert cliques.gpu_clique_label_removal() == {
        "metadata": {"labels": {"nvidia.com/gpu.clique": None}}
    }
    assert cliques.CLIQUE_REFRESH_INTERVAL_S == 600.0


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
