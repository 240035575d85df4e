"""Properties of the GPU prepare planner over random nodes and claims.

Whatever the node and the claim: a prepared device is on the node; the steps run
PrepareStarted, GPU actions, CDI spec, PrepareCompleted; the spec validates against the CDI
schema; a refusal plans no step; a repeated prepare plans nothing new; unprepare leaves no
entry holding the claim.
"""

from __future__ import annotations

import gpu_prep_fixtures as f
from hypothesis import given, settings
from hypothesis import strategies as st

from core import checkpoint as checkpoints
from core import models
from core.gpu import actions, devices
from core.gpu import checkpoint_records as records
from core.gpu import preparing as p


@st.composite
def inventories(draw: st.DrawFn) -> devices.GpuInventory:
    minors = draw(st.lists(st.integers(0, 7), unique=True, max_size=4))
    mig_parents = draw(st.lists(st.integers(8, 11), unique=True, max_size=2))
    migs = tuple(f.mig(parent, start) for parent in mig_parents for start in range(2))
    vfios = tuple(f.vfio(i) for i in range(draw(st.integers(0, 2))))
    return devices.GpuInventory(gpus=tuple(f.gpu(m) for m in minors), migs=migs, vfios=vfios)


_NAMES = st.sampled_from(
    ["gpu-0", "gpu-1", "gpu-3", "gpu-7", "gpu-9", "gpu-vfio-0", "gpu-vfio-1",
     f.mig(8, 0).name, f.mig(8, 1).name, f.mig(11, 1).name]
)
_CONFIGS = st.sampled_from([
    [], [f.config(f.time_slicing("Long"))], [f.config(f.time_slicing(), requests=["r0"])],
    [f.config({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig",
               "iommu": {"enableAPIDevice": True}})],
])


@settings(max_examples=150, deadline=None)
@given(
    inventory=inventories(),
    wanted=st.lists(_NAMES, min_size=1, max_size=3, unique=True),
    cfgs=_CONFIGS,
    gates=st.sampled_from([f.ALL_GATES, f.NO_GATES]),
)
def test_prepare_gives_only_node_devices_in_the_fixed_step_order(
    inventory: devices.GpuInventory,
    wanted: list[str],
    cfgs: list[models.RawOpaqueConfig],
    gates: models.FeatureGates,
) -> None:
    claim = f.claim(*wanted, configs=cfgs)
    empty = p.empty_gpu_checkpoint(boot_id="b")
    outcome = p.plan_gpu_prepare(claim, checkpoint=empty, inventory=inventory, files=f.FILES,
                                 gates=gates, now=1.0)
    if outcome.error is not None:
        assert outcome.steps == () and outcome.checkpoint is empty
        return
    on_node = {
        *(g.name for g in inventory.gpus), *(m.name for m in inventory.migs),
        *(v.name for v in inventory.vfios),
    }
    assert {d.device_name for d in outcome.devices} <= on_node
    assert sorted(d.device_name for d in outcome.devices) == sorted(wanted)
    steps = outcome.steps
    first, last = steps[0], steps[-1]
    assert isinstance(first, models.WriteCheckpoint) and isinstance(last, models.WriteCheckpoint)
    assert first.checkpoint.entries[claim.uid].state is models.ClaimState.PREPARE_STARTED
    assert last.checkpoint.entries[claim.uid].state is models.ClaimState.PREPARE_COMPLETED
    assert isinstance(steps[-2], models.WriteCDISpec)
    middle = steps[1:-2]
    assert all(isinstance(s, actions.SetTimeSlice | actions.BindVfio) for s in middle)
    binds = [i for i, s in enumerate(middle) if isinstance(s, actions.BindVfio)]
    assert binds == list(range(len(binds)))  # binds come before time-slices
    written = steps[-2]
    assert isinstance(written, models.WriteCDISpec)
    spec = f.check_cdi(written.spec)
    ids = {i.partition("=")[2] for d in outcome.devices for i in d.cdi_device_ids}
    assert ids == {d["name"] for d in spec["devices"]}
    again = p.plan_gpu_prepare(claim, checkpoint=outcome.checkpoint, inventory=inventory,
                               files=f.FILES, gates=gates, now=2.0)
    assert again.steps == () and again.devices == outcome.devices
    ref = models.ClaimRef(uid=claim.uid, namespace=claim.namespace, name=claim.name)
    gone = p.plan_gpu_unprepare(ref, checkpoint=outcome.checkpoint, inventory=inventory, now=3.0)
    assert claim.uid not in gone.checkpoint.entries
    assert records.decode(checkpoints.encode(gone.checkpoint)) == gone.checkpoint
