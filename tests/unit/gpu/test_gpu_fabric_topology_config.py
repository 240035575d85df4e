"""GpuConfig.fabricTopologyConfig (the seed's, gate FabricTopologySupport): decoding.

Covers: the defaults (Auto, BareMetal), every field, the round trip through
device_config_to_k8s, a config without it decoding and encoding as before, and every refusal:
gate off, unknown field, unknown strategy or model, partitionSize not 2/4/8 (and with
Disabled), negative or non-numeric bandwidth/latency, Manual without partitionIDs,
partitionIDs with Auto/Disabled, ids that are not partition ids, ids listed twice.
"""

from __future__ import annotations

from typing import Any

import pytest

from core import errors, gates, models
from core.gpu import configs

ON = models.FeatureGates(values={
    gates.FABRIC_TOPOLOGY_SUPPORT: True, gates.FABRIC_MANAGER_PARTITIONING: True,
    gates.TIME_SLICING_SETTINGS: True,
})
OFF = models.FeatureGates(values={gates.TIME_SLICING_SETTINGS: True})


def gpu_config(topology: Any, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": configs.API_VERSION, "kind": "GpuConfig",
            "fabricTopologyConfig": topology, **fields}


def decoded(topology: Any) -> configs.FabricTopologyConfig | None:
    config = configs.decode_device_config(gpu_config(topology), gates=ON)
    assert isinstance(config, configs.GpuConfig)
    return config.fabric_topology


def refused(topology: Any, *, gates: models.FeatureGates = ON) -> errors.DecodeError:
    with pytest.raises(errors.DecodeError) as caught:
        configs.decode_device_config(gpu_config(topology), gates=gates)
    return caught.value


def test_an_empty_fabric_topology_config_means_auto_on_bare_metal() -> None:
    assert decoded({}) == configs.FabricTopologyConfig(
        strategy=configs.FabricStrategy.AUTO,
        virtualization_model=configs.VirtualizationModel.BARE_METAL,
    )


def test_the_seeds_example_decodes_with_every_field() -> None:
    topology = decoded({
        "strategy": "Manual", "partitionSize": 4, "virtualizationModel": "SharedNVSwitch",
        "minBandwidth": 600.0, "maxLatency": 0.1, "partitionIDs": [1, "2"],
    })
    assert topology == configs.FabricTopologyConfig(
        strategy=configs.FabricStrategy.MANUAL, partition_size=4,
        virtualization_model=configs.VirtualizationModel.SHARED_NVSWITCH,
        min_bandwidth=600.0, max_latency=0.1, partition_ids=(1, 2),
    )


@pytest.mark.parametrize("model", ["BareMetal", "FullPassthrough", "SharedNVSwitch", "VGPU"])
@pytest.mark.parametrize("strategy", ["Auto", "Disabled"])
def test_every_strategy_and_model_decodes(strategy: str, model: str) -> None:
    topology = decoded({"strategy": strategy, "virtualizationModel": model})
    assert topology is not None
    assert (topology.strategy.value, topology.virtualization_model.value) == (strategy, model)


def test_a_config_with_it_round_trips_through_its_normalized_json() -> None:
    parameters = gpu_config(
        {"strategy": "Manual", "partitionIDs": ["3", 4], "maxLatency": 1},
        sharing={"strategy": "TimeSlicing"},
    )
    config = configs.decode_device_config(parameters, gates=ON)
    encoded = configs.device_config_to_k8s(config)
    assert encoded["fabricTopologyConfig"] == {
        "strategy": "Manual", "virtualizationModel": "BareMetal", "maxLatency": 1.0,
        "partitionIDs": [3, 4],
    }
    assert configs.decode_device_config(encoded, gates=ON) == config


def test_a_config_without_it_decodes_and_encodes_as_before() -> None:
    parameters = {"apiVersion": configs.API_VERSION, "kind": "GpuConfig",
                  "sharing": {"strategy": "TimeSlicing"}}
    config = configs.decode_device_config(parameters, gates=OFF)
    assert config == configs.GpuConfig(sharing=configs.Sharing(
        strategy=configs.SharingStrategy.TIME_SLICING, time_slicing=configs.TimeSlicing()))
    assert configs.device_config_to_k8s(config) == {
        "apiVersion": configs.API_VERSION, "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}},
    }


def test_without_the_gate_it_is_refused_naming_the_gate_and_how_to_enable_it() -> None:
    error = refused({"strategy": "Auto"}, gates=OFF)
    assert error.field == "fabricTopologyConfig"
    assert error.message == (
        "GpuConfig.fabricTopologyConfig needs feature gate FabricTopologySupport, which is "
        "off: enable it (Helm featureGates.FabricTopologySupport=true, with "
        "featureGates.FabricManagerPartitioning=true) or remove fabricTopologyConfig"
    )


def test_a_mig_device_config_has_no_fabric_topology_config() -> None:
    with pytest.raises(errors.DecodeError) as caught:
        configs.decode_device_config(
            {"apiVersion": configs.API_VERSION, "kind": "MigDeviceConfig",
             "fabricTopologyConfig": {}}, gates=ON)
    assert caught.value.field == "fabricTopologyConfig"
    assert 'unknown field "fabricTopologyConfig"' in caught.value.message


def test_an_unknown_field_is_refused_by_its_path_unless_read_back_leniently() -> None:
    error = refused({"strategy": "Auto", "bandwidth": 600})
    assert error.field == "fabricTopologyConfig.bandwidth"
    assert "accepted fields are strategy, partitionSize, virtualizationModel" in error.message
    lenient = configs.decode_device_config(
        gpu_config({"strategy": "Auto", "bandwidth": 600}), gates=ON, strict=False)
    assert isinstance(lenient, configs.GpuConfig)
    assert lenient.fabric_topology == configs.FabricTopologyConfig()


@pytest.mark.parametrize(
    ("topology", "field", "message"),
    [
        ("Auto", "fabricTopologyConfig",
         "GpuConfig.fabricTopologyConfig must be an object, got string"),
        ({"strategy": "Automatic"}, "fabricTopologyConfig.strategy",
         "GpuConfig.fabricTopologyConfig.strategy 'Automatic' is not valid: use Auto or Manual "
         "or Disabled"),
        ({"virtualizationModel": "vGPU"}, "fabricTopologyConfig.virtualizationModel",
         "GpuConfig.fabricTopologyConfig.virtualizationModel 'vGPU' is not valid: use "
         "BareMetal or FullPassthrough or SharedNVSwitch or VGPU"),
        ({"partitionSize": 3}, "fabricTopologyConfig.partitionSize",
         "GpuConfig.fabricTopologyConfig.partitionSize 3 is not valid: use 2, 4, 8 "
         "(GPUs per partition)"),
        ({"partitionSize": "4"}, "fabricTopologyConfig.partitionSize",
         "GpuConfig.fabricTopologyConfig.partitionSize '4' is not valid: use 2, 4, 8 "
         "(GPUs per partition)"),
        ({"partitionSize": True}, "fabricTopologyConfig.partitionSize",
         "GpuConfig.fabricTopologyConfig.partitionSize (a boolean) is not valid: use 2, 4, 8 "
         "(GPUs per partition)"),
        ({"strategy": "Disabled", "partitionSize": 4}, "fabricTopologyConfig.partitionSize",
         "GpuConfig.fabricTopologyConfig.partitionSize has no effect with strategy Disabled: "
         "remove it, or use strategy Auto"),
        ({"minBandwidth": -1}, "fabricTopologyConfig.minBandwidth",
         "GpuConfig.fabricTopologyConfig.minBandwidth -1 is not valid: use a number of GB/s "
         "of 0 or more"),
        ({"minBandwidth": "600GB/s"}, "fabricTopologyConfig.minBandwidth",
         "GpuConfig.fabricTopologyConfig.minBandwidth must be a number (GB/s), got string"),
        ({"maxLatency": -0.5}, "fabricTopologyConfig.maxLatency",
         "GpuConfig.fabricTopologyConfig.maxLatency -0.5 is not valid: use a number of ms "
         "of 0 or more"),
        ({"maxLatency": float("inf")}, "fabricTopologyConfig.maxLatency",
         "GpuConfig.fabricTopologyConfig.maxLatency inf is not valid: use a number of ms "
         "of 0 or more"),
        ({"maxLatency": False}, "fabricTopologyConfig.maxLatency",
         "GpuConfig.fabricTopologyConfig.maxLatency must be a number (ms), got boolean"),
        ({"strategy": "Manual"}, "fabricTopologyConfig.partitionIDs",
         "GpuConfig.fabricTopologyConfig.partitionIDs is required with strategy Manual: list "
         "the Fabric Manager partition ids the claim's GPUs form (the values of their "
         "gpu.nvidia.com/partition<N> attributes), or use strategy Auto"),
        ({"strategy": "Manual", "partitionIDs": []}, "fabricTopologyConfig.partitionIDs",
         "GpuConfig.fabricTopologyConfig.partitionIDs is required with strategy Manual: list "
         "the Fabric Manager partition ids the claim's GPUs form (the values of their "
         "gpu.nvidia.com/partition<N> attributes), or use strategy Auto"),
        ({"partitionIDs": [1]}, "fabricTopologyConfig.partitionIDs",
         "GpuConfig.fabricTopologyConfig.partitionIDs can only be used with strategy Manual "
         "(strategy is Auto): set strategy Manual, or remove partitionIDs"),
        ({"strategy": "Disabled", "partitionIDs": [1]}, "fabricTopologyConfig.partitionIDs",
         "GpuConfig.fabricTopologyConfig.partitionIDs can only be used with strategy Manual "
         "(strategy is Disabled): set strategy Manual, or remove partitionIDs"),
        ({"strategy": "Manual", "partitionIDs": "1"}, "fabricTopologyConfig.partitionIDs",
         "GpuConfig.fabricTopologyConfig.partitionIDs must be a list of partition ids, "
         "got string"),
        ({"strategy": "Manual", "partitionIDs": [1, 1]}, "fabricTopologyConfig.partitionIDs[1]",
         "GpuConfig.fabricTopologyConfig.partitionIDs[1] 1 is listed twice: list each once"),
        ({"strategy": "Manual", "partitionIDs": [2, "2"]},
         "fabricTopologyConfig.partitionIDs[1]",
         "GpuConfig.fabricTopologyConfig.partitionIDs[1] 2 is listed twice: list each once"),
    ],
)
def test_a_bad_fabric_topology_config_is_refused_saying_what_to_use(
    topology: Any, field: str, message: str,
) -> None:
    error = refused(topology)
    assert (error.field, error.message) == (field, message)


@pytest.mark.parametrize(
    ("item", "shown"),
    [("partition-1", "'partition-1'"), (-1, "-1"), (1.0, "(a number)"), (True, "(a boolean)"),
     ("", "''"), (" 1", "' 1'"), (None, "(missing)"), ({"id": 1}, "(a object)")],
)
def test_a_partition_id_must_be_fabric_managers_number(item: Any, shown: str) -> None:
    error = refused({"strategy": "Manual", "partitionIDs": [1, item]})
    assert error.field == "fabricTopologyConfig.partitionIDs[1]"
    assert error.message == (
        f"GpuConfig.fabricTopologyConfig.partitionIDs[1] {shown} is not a Fabric Manager "
        "partition id: use the partition's number as Fabric Manager reports it (the value of "
        "the GPUs' gpu.nvidia.com/partition<N> attributes), e.g. 1 or \"1\""
    )
