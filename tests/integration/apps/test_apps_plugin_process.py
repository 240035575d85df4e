"""`compute-domain-kubelet-plugin` as a real process, driven like a kubelet would drive it.

The plugin runs as `python -m apps.kubeletplugin` with a simulated GB200 node, its real
`KubeCluster` talking HTTP to an `EmbeddedAPIServer` in this test process; the test speaks to
it only through our proto-built gRPC clients (registration, DRA v1 and v1beta1) and looks at
what it leaves on disk (CDI specs, checkpoint) and in the cluster (ResourceSlices, Events).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence

import app_processes
import pytest
from app_processes import NAMESPACE, PluginPaths, eventually

from adapters.fs import checkpoints as fs_checkpoints
from adapters.grpc import client as grpc_client
from adapters.memory import apiserver
from adapters.memory import cluster as memory_cluster
from adapters.nvml import simulated
from core import kinds, models, names
from core.computedomain import checkpoint_records as cd_records

pytestmark = pytest.mark.slow

VERSIONS: tuple[grpc_client.DRAVersion, ...] = ("v1", "v1beta1")


def wait_registered(
    process: app_processes.AppProcess, paths: PluginPaths
) -> grpc_client.PluginInfo:
    """GetInfo on the registration socket, as the kubelet's plugin watcher does."""

    def probe() -> grpc_client.PluginInfo | None:
        if not process.running:
            raise AssertionError(
                f"plugin exited with {process.popen.returncode} before registering; "
                f"output:\n{process.output()}"
            )
        return grpc_client.try_register(str(paths.registration_socket))

    return eventually(
        probe, what="the plugin's registration socket to answer GetInfo",
        timeout_s=app_processes.START_TIMEOUT_S,
    )


def prepare(
    paths: PluginPaths, refs: Sequence[models.ClaimRef], *, version: grpc_client.DRAVersion
) -> dict[names.ClaimUID, models.ClaimResult]:
    with grpc_client.DRAClient(str(paths.dra_socket), version=version) as dra:
        return dra.prepare(refs)


def unprepare(
    paths: PluginPaths, refs: Sequence[models.ClaimRef], *, version: grpc_client.DRAVersion
) -> dict[names.ClaimUID, models.ClaimResult]:
    with grpc_client.DRAClient(str(paths.dra_socket), version=version) as dra:
        return dra.unprepare(refs)


def cdi_ids(result: models.ClaimResult) -> tuple[str, ...]:
    return tuple(i for d in result.devices for i in d.cdi_device_ids)


def checkpoint_entries(paths: PluginPaths) -> dict[names.ClaimUID, models.CheckpointEntry]:
    # snapshot + journal
    current = fs_checkpoints.read_checkpoint(str(paths.checkpoint), cd_records.CODEC)
    assert current is not None
    return {
        uid: entry
        for uid, entry in current.entries.items()
        if entry.state is not models.ClaimState.PREPARE_ABORTED
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunningPlugin:
    cluster: memory_cluster.InMemoryCluster
    paths: PluginPaths
    process: app_processes.AppProcess
    node: str
    cd_uid: str
    info: grpc_client.PluginInfo


@pytest.fixture(scope="module")
def running_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlugin]:
    """One plugin process (and API server) shared by the tests that only prepare/unprepare."""
    logs = tmp_path_factory.mktemp("plugin")
    cluster = memory_cluster.InMemoryCluster()
    server = apiserver.EmbeddedAPIServer(cluster).start()
    kubeconfig = logs / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    root = pathlib.Path(tempfile.mkdtemp(prefix="cdapp-", dir="/tmp"))
    paths = PluginPaths(root=root / "node")
    node = app_processes.first_node()
    paths.write_node_files(node)
    cd_uid = str(app_processes.compute_domain(cluster, "shared")["metadata"]["uid"])
    process = app_processes.AppProcess(
        "apps.kubeletplugin",
        app_processes.plugin_args(
            paths, node=node, kubeconfig=kubeconfig,
            mode_flags=app_processes.host_managed_flags(),
        ),
        log_path=logs / "plugin.log",
    )
    try:
        info = wait_registered(process, paths)
        yield RunningPlugin(
            cluster=cluster, paths=paths, process=process, node=node, cd_uid=cd_uid, info=info
        )
    finally:
        process.kill()
        server.stop()
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------ registration and slices


def test_plugin_process_registers_as_a_dra_plugin_speaking_v1_and_v1beta1(
    running_plugin: RunningPlugin,
) -> None:
    info = running_plugin.info

    assert info.type == "DRAPlugin"
    assert info.name == names.DRIVER_NAME
    assert info.endpoint == str(running_plugin.paths.dra_socket)
    assert set(info.supported_versions) >= {"v1.DRAPlugin", "v1beta1.DRAPlugin"}


def test_plugin_process_publishes_its_resource_slice_in_the_embedded_cluster(
    running_plugin: RunningPlugin,
) -> None:
    def mine() -> list[dict[str, object]] | None:
        found = [
            dict(s)
            for s in running_plugin.cluster.list(kinds.RESOURCE_SLICE.kind).items
            if s["spec"].get("nodeName") == running_plugin.node
            and s["spec"].get("driver") == names.DRIVER_NAME
        ]
        return found or None

    published = eventually(mine, what="the node's ResourceSlice")

    devices = [d["name"] for s in published for d in s["spec"]["devices"]]  # type: ignore[index]
    assert names.channel_device_name(0) in devices


# ------------------------------------------------------------------ prepare / unprepare


@pytest.mark.parametrize("version", VERSIONS)
def test_plugin_process_prepares_and_unprepares_a_claim(
    running_plugin: RunningPlugin, version: grpc_client.DRAVersion
) -> None:
    rp = running_plugin
    ref = app_processes.resource_claim(
        rp.cluster, f"ok-{version}", node=rp.node, cd_uid=rp.cd_uid
    )

    prepared = prepare(rp.paths, [ref], version=version)

    assert prepared[ref.uid].error == ""
    (device,) = prepared[ref.uid].devices
    assert device.pool_name == rp.node
    assert device.device_name == names.channel_device_name(0)
    assert device.cdi_device_ids == (f"{names.CDI_KIND_CLAIM}={ref.uid}-channel-0",)
    spec = json.loads(rp.paths.cdi_file(ref.uid).read_text())
    nodes = [n for d in spec["devices"] for n in d["containerEdits"].get("deviceNodes", ())]
    assert [n["path"] for n in nodes] == [f"{names.IMEX_CHANNEL_DIR}/channel0"]
    assert ref.uid in checkpoint_entries(rp.paths)

    unprepared = unprepare(rp.paths, [ref], version=version)

    assert unprepared == {ref.uid: models.ClaimResult()}
    assert not rp.paths.cdi_file(ref.uid).exists()
    assert ref.uid not in checkpoint_entries(rp.paths)


@pytest.mark.parametrize("version", VERSIONS)
def test_plugin_process_reports_per_claim_errors_beside_a_good_claim(
    running_plugin: RunningPlugin, version: grpc_client.DRAVersion
) -> None:
    rp = running_plugin
    good = app_processes.resource_claim(
        rp.cluster, f"good-{version}", node=rp.node, cd_uid=rp.cd_uid
    )
    all_channels = app_processes.resource_claim(
        rp.cluster, f"all-{version}", node=rp.node, cd_uid=rp.cd_uid, allocation_mode="All"
    )
    unallocated = app_processes.resource_claim(
        rp.cluster, f"unallocated-{version}", node=rp.node, cd_uid=rp.cd_uid, allocated=False
    )

    results = prepare(rp.paths, [good, all_channels, unallocated], version=version)

    assert results[good.uid].error == "" and cdi_ids(results[good.uid])
    refused = results[all_channels.uid].error
    assert "allocationMode 'All' is not supported in host-managed" in refused
    assert results[all_channels.uid].devices == ()
    assert "has no allocation" in results[unallocated.uid].error
    assert rp.paths.cdi_file(good.uid).exists()
    assert not rp.paths.cdi_file(all_channels.uid).exists()
    assert not rp.paths.cdi_file(unallocated.uid).exists()
    entries = checkpoint_entries(rp.paths)
    assert good.uid in entries
    assert all_channels.uid not in entries and unallocated.uid not in entries

    def failure_event() -> bool:
        return any(
            e.get("reason") == "PrepareFailed"
            and e["involvedObject"].get("name") == all_channels.name
            for e in rp.cluster.list(kinds.EVENT.kind, namespace=NAMESPACE).items
        )

    eventually(failure_event, what="a PrepareFailed event on the allocationMode All claim")
    assert unprepare(rp.paths, [good, all_channels, unallocated], version=version) == {
        good.uid: models.ClaimResult(),
        all_channels.uid: models.ClaimResult(),
        unallocated.uid: models.ClaimResult(),
    }
    assert not rp.paths.cdi_file(good.uid).exists()


@pytest.mark.parametrize("version", VERSIONS)
def test_plugin_process_answers_empty_requests_with_empty_responses(
    running_plugin: RunningPlugin, version: grpc_client.DRAVersion
) -> None:
    assert prepare(running_plugin.paths, [], version=version) == {}
    assert unprepare(running_plugin.paths, [], version=version) == {}


def test_plugin_process_reports_a_claim_unknown_to_the_api_server_as_an_error(
    running_plugin: RunningPlugin,
) -> None:
    ghost = models.ClaimRef(
        uid=names.ClaimUID("00000000-0000-0000-0000-000000000001"),
        namespace=NAMESPACE,
        name="never-created",
    )

    results = prepare(running_plugin.paths, [ghost], version="v1")

    assert "not found" in results[ghost.uid].error
    assert not running_plugin.paths.cdi_file(ghost.uid).exists()


def test_plugin_process_prepare_is_idempotent_across_versions(
    running_plugin: RunningPlugin,
) -> None:
    rp = running_plugin
    ref = app_processes.resource_claim(rp.cluster, "twice", node=rp.node, cd_uid=rp.cd_uid)

    first = prepare(rp.paths, [ref], version="v1")
    stamp = rp.paths.cdi_file(ref.uid).stat()
    second = prepare(rp.paths, [ref], version="v1beta1")

    assert cdi_ids(first[ref.uid]) == cdi_ids(second[ref.uid]) != ()
    after = rp.paths.cdi_file(ref.uid).stat()
    assert (after.st_ino, after.st_mtime_ns) == (stamp.st_ino, stamp.st_mtime_ns)
    unprepare(rp.paths, [ref], version="v1")


# ------------------------------------------------------------------ crash, restart, signals


def _start(
    launch: app_processes.Launch,
    served_kubeconfig: pathlib.Path,
    paths: PluginPaths,
    *,
    node: str,
    mode_flags: Sequence[str] | None = None,
    host_imex_check: bool = False,
) -> app_processes.AppProcess:
    flags = app_processes.host_managed_flags() if mode_flags is None else mode_flags
    return launch(
        "apps.kubeletplugin",
        app_processes.plugin_args(paths, node=node, kubeconfig=served_kubeconfig,
                                  mode_flags=flags, host_imex_check=host_imex_check),
    )


def test_claim_stays_prepared_across_a_kill_9_and_restart_and_unprepare_cleans_up(
    served: app_processes.ServedCluster,
    node_paths: PluginPaths,
    launch: app_processes.Launch,
) -> None:
    node = app_processes.first_node()
    node_paths.write_node_files(node)
    cd_uid = str(app_processes.compute_domain(served.cluster, "crashy")["metadata"]["uid"])
    ref = app_processes.resource_claim(served.cluster, "survivor", node=node, cd_uid=cd_uid)
    first = _start(launch, served.kubeconfig, node_paths, node=node)
    wait_registered(first, node_paths)
    before = prepare(node_paths, [ref], version="v1")[ref.uid]
    assert before.error == "" and cdi_ids(before)
    stamp = node_paths.cdi_file(ref.uid).stat()

    first.kill()
    second = _start(launch, served.kubeconfig, node_paths, node=node)
    wait_registered(second, node_paths)
    again = prepare(node_paths, [ref], version="v1")[ref.uid]

    assert again.error == ""
    assert cdi_ids(again) == cdi_ids(before)
    after = node_paths.cdi_file(ref.uid).stat()
    assert (after.st_ino, after.st_mtime_ns) == (stamp.st_ino, stamp.st_mtime_ns), "rewritten"
    assert unprepare(node_paths, [ref], version="v1") == {ref.uid: models.ClaimResult()}
    assert not node_paths.cdi_file(ref.uid).exists()
    assert ref.uid not in checkpoint_entries(node_paths)


def test_plugin_process_removes_its_sockets_and_exits_0_on_sigterm(
    served: app_processes.ServedCluster,
    node_paths: PluginPaths,
    launch: app_processes.Launch,
) -> None:
    node = app_processes.first_node()
    node_paths.write_node_files(node)
    process = _start(launch, served.kubeconfig, node_paths, node=node)
    wait_registered(process, node_paths)
    assert node_paths.dra_socket.exists()

    process.signal(signal.SIGTERM)

    assert process.wait() == 0, process.output()
    assert not node_paths.registration_socket.exists()
    assert not node_paths.dra_socket.exists()


def test_plugin_process_without_the_imex_channel_device_exits_naming_the_fix(
    served: app_processes.ServedCluster,
    node_paths: PluginPaths,
    launch: app_processes.Launch,
) -> None:
    node = app_processes.first_node()
    without_channels = "\n".join(
        line
        for line in simulated.simulated_proc_devices().splitlines()
        if names.IMEX_CHANNELS_PROC_NAME not in line
    )
    node_paths.write_node_files(node, proc_devices=without_channels)

    process = _start(launch, served.kubeconfig, node_paths, node=node)

    code = process.wait()
    output = process.output()
    assert code != 0
    assert names.IMEX_CHANNELS_PROC_NAME in output
    assert "NVreg_CreateImexChannel0=1" in output
    assert not node_paths.registration_socket.exists()


def test_plugin_process_in_host_managed_mode_without_the_gate_exits_2_naming_the_gate(
    served: app_processes.ServedCluster,
    node_paths: PluginPaths,
    launch: app_processes.Launch,
) -> None:
    node = app_processes.first_node()
    node_paths.write_node_files(node)

    process = _start(
        launch, served.kubeconfig, node_paths, node=node,
        mode_flags=["--imex-mode", "hostManaged", "--imex-isolation", "none"],
    )

    assert process.wait() == 2
    assert "requires feature gate HostManagedIMEXDaemon=true" in process.output()
    assert not node_paths.registration_socket.exists()


def test_plugin_process_refuses_prepare_while_the_host_imex_query_cannot_run(
    served: app_processes.ServedCluster,
    node_paths: PluginPaths,
    launch: app_processes.Launch,
) -> None:
    # The readiness query (on by default, see test_plugin_settings) with a driver root that
    # has no nvidia-imex-ctl: the prepare is refused naming the tool and the socket, retried.
    node = app_processes.first_node()
    node_paths.write_node_files(node)
    cd_uid = str(app_processes.compute_domain(served.cluster, "probed")["metadata"]["uid"])
    ref = app_processes.resource_claim(served.cluster, "probed", node=node, cd_uid=cd_uid)
    process = _start(launch, served.kubeconfig, node_paths, node=node, host_imex_check=True)
    wait_registered(process, node_paths)

    error = prepare(node_paths, [ref], version="v1")[ref.uid].error

    assert "host nvidia-imex daemon is not ready" in error
    assert "queried via /etc/nvidia-imex/imex_ctrl.sock" in error
    assert "nvidia-imex-ctl not found under the driver root" in error
    assert not node_paths.cdi_file(ref.uid).exists()


def test_plugin_process_driver_managed_on_a_driver_too_old_for_dns_names_exits_2_naming_the_gate(
    served: app_processes.ServedCluster,
    node_paths: PluginPaths,
    launch: app_processes.Launch,
) -> None:
    # Upstream refuses IMEXDaemonsWithDNSNames (on by default) below driver 570.158.01.
    node = app_processes.first_node()
    node_paths.write_node_files(node)

    process = _start(
        launch, served.kubeconfig, node_paths, node=node,
        mode_flags=["--imex-mode", "driverManaged",
                    "--nvml", f"simulated:{app_processes.PROFILE}@570.148.08"],
    )

    assert process.wait() == 2
    errors = [line for line in process.output().splitlines() if line.startswith("error:")]
    assert len(errors) == 1, process.output()
    assert "IMEXDaemonsWithDNSNames" in errors[0] and "570.158.01" in errors[0]
    assert "570.148.08" in errors[0]
    assert not node_paths.registration_socket.exists()


# ------------------------------------------------------------------ stale entries


def _events(cluster: memory_cluster.InMemoryCluster, reason: str) -> list[str]:
    return [
        e["message"] for e in cluster.list(kinds.EVENT.kind, namespace="default").items
        if e["reason"] == reason
    ]


def test_entry_of_a_claim_deleted_while_the_plugin_was_down_is_cleaned_at_start(
    served: app_processes.ServedCluster,
    node_paths: PluginPaths,
    launch: app_processes.Launch,
) -> None:
    node = app_processes.first_node()
    node_paths.write_node_files(node)
    cd_uid = str(app_processes.compute_domain(served.cluster, "gone")["metadata"]["uid"])
    ref = app_processes.resource_claim(served.cluster, "gone", node=node, cd_uid=cd_uid)
    first = _start(launch, served.kubeconfig, node_paths, node=node)
    wait_registered(first, node_paths)
    assert prepare(node_paths, [ref], version="v1")[ref.uid].error == ""
    first.kill()
    served.cluster.delete(kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name="gone")

    second = _start(launch, served.kubeconfig, node_paths, node=node)
    wait_registered(second, node_paths)

    eventually(lambda: not node_paths.cdi_file(ref.uid).exists(), what="the stale CDI file")
    assert ref.uid not in checkpoint_entries(node_paths)
    assert any(ref.uid in m for m in _events(served.cluster, "StaleClaimCleaned"))


def test_stale_entry_clean_up_latency_after_the_claim_disappears(
    served: app_processes.ServedCluster,
    node_paths: PluginPaths,
    launch: app_processes.Launch,
) -> None:
    """Measured, not asserted: printed for the record (interval 5 s here; chart default 30 s)."""
    node = app_processes.first_node()
    node_paths.write_node_files(node)
    cd_uid = str(app_processes.compute_domain(served.cluster, "lat")["metadata"]["uid"])
    process = launch("apps.kubeletplugin", [
        *app_processes.plugin_args(
            node_paths, node=node, kubeconfig=served.kubeconfig,
            mode_flags=app_processes.host_managed_flags(),
        ),
        "--stale-claim-cleanup-interval-seconds", "5",
    ])
    wait_registered(process, node_paths)
    latencies = []
    for i in range(3):
        ref = app_processes.resource_claim(served.cluster, f"lat-{i}", node=node, cd_uid=cd_uid)
        assert prepare(node_paths, [ref], version="v1")[ref.uid].error == ""
        gone_at = time.monotonic()
        served.cluster.delete(kinds.RESOURCE_CLAIM.kind, namespace=NAMESPACE, name=f"lat-{i}")
        eventually(
            lambda ref=ref: not node_paths.cdi_file(ref.uid).exists(),  # type: ignore[misc]
            what="the stale CDI file", every_s=0.05,
        )
        latencies.append(time.monotonic() - gone_at)
        assert ref.uid not in checkpoint_entries(node_paths)
    print(f"stale-claim clean-up latency (interval 5 s): {[round(x, 2) for x in latencies]} s")


# ------------------------------------------------------------------ unreadable checkpoint path


def test_a_directory_in_place_of_the_checkpoint_is_moved_aside_and_the_plugin_serves(
    served: app_processes.ServedCluster,
    node_paths: PluginPaths,
    launch: app_processes.Launch,
) -> None:
    node = app_processes.first_node()
    node_paths.write_node_files(node)
    cd_uid = str(app_processes.compute_domain(served.cluster, "dir")["metadata"]["uid"])
    kept = app_processes.resource_claim(served.cluster, "kept", node=node, cd_uid=cd_uid)
    first = _start(launch, served.kubeconfig, node_paths, node=node)
    wait_registered(first, node_paths)
    assert prepare(node_paths, [kept], version="v1")[kept.uid].error == ""
    first.kill()
    node_paths.checkpoint.unlink()
    node_paths.checkpoint.mkdir()  # IsADirectoryError at every read

    second = _start(launch, served.kubeconfig, node_paths, node=node)
    wait_registered(second, node_paths)

    assert node_paths.checkpoint.is_file()
    quarantined = node_paths.plugin_dir.glob(f"{node_paths.checkpoint.name}.corrupt-*")
    assert [p.name for p in quarantined] != []
    assert kept.uid in checkpoint_entries(node_paths), "rebuilt from its CDI file"
    fresh = app_processes.resource_claim(served.cluster, "fresh", node=node, cd_uid=cd_uid)
    assert prepare(node_paths, [fresh], version="v1")[fresh.uid].error == ""
    assert any("moved" in m for m in _events(served.cluster, "CheckpointUnreadable"))


def test_a_checkpoint_path_nothing_can_be_written_to_serves_no_prepares_but_stays_up(
    served: app_processes.ServedCluster,
    node_paths: PluginPaths,
    launch: app_processes.Launch,
) -> None:
    """An immutable directory (chattr +i) where the file goes: it can be neither read, moved
    aside nor replaced, even by root (what a read-only or foreign-owned path is to the plugin)."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    node = app_processes.first_node()
    node_paths.write_node_files(node)
    cd_uid = str(app_processes.compute_domain(served.cluster, "ro")["metadata"]["uid"])
    held = app_processes.resource_claim(served.cluster, "held", node=node, cd_uid=cd_uid)
    first = _start(launch, served.kubeconfig, node_paths, node=node)
    wait_registered(first, node_paths)
    assert prepare(node_paths, [held], version="v1")[held.uid].error == ""
    first.kill()
    node_paths.checkpoint.unlink()
    node_paths.checkpoint.mkdir()
    subprocess.run(["chattr", "+i", str(node_paths.checkpoint)], check=True)
    try:
        second = _start(launch, served.kubeconfig, node_paths, node=node)
        info = wait_registered(second, node_paths)
        assert info.name == names.DRIVER_NAME

        fresh = app_processes.resource_claim(served.cluster, "fresh", node=node, cd_uid=cd_uid)
        refused = prepare(node_paths, [fresh], version="v1")[fresh.uid]
        assert "cannot be written" in refused.error and "serves no prepares" in refused.error
        assert not node_paths.cdi_file(fresh.uid).exists()
        assert unprepare(node_paths, [held], version="v1") == {held.uid: models.ClaimResult()}
        assert not node_paths.cdi_file(held.uid).exists()
        assert second.running
        (message,) = _events(served.cluster, "CheckpointUnwritable")
        assert str(node_paths.checkpoint) in message
    finally:
        subprocess.run(["chattr", "-i", str(node_paths.checkpoint)], check=True)
