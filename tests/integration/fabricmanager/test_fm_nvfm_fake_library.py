"""The real Fabric Manager client through its real child process, over the fake libnvfm.

Covers: `open_fabric_manager` picks the simulated Fabric Manager in a simulated driver root,
else the real client with the library under the driver root (or where the loader finds it)
and Fabric Manager at the socket or TCP address the environment names, and refuses to start
without the library, saying what to install; an activation checks the state first (the fake,
as FM, refuses to activate an active partition); Fabric Manager unreachable is retryable;
libnvfm crashing or hanging is retryable and the next call works; each FM return code ends
as the error it means; a library of another layout is refused; the child answering nonsense,
or FM reporting a partition that names a GPU twice, are errors with what to do.
"""

from __future__ import annotations

import pathlib
import socket
import socketserver
import sys
import threading
from collections.abc import Iterator

import pytest
from fm_fake_library import FakeFm

from adapters.fabricmanager import _codec, address, fmctl, opening, real, simulated
from adapters.fs import simulated_driverroot
from core import errors, ports
from core.gpu import fm_partitions


def _active(fm: ports.FabricManager) -> list[int]:
    return [p.partition_id for p in fm.partitions() if p.active]


def test_a_simulated_driver_root_gets_the_simulated_fabric_manager(
    tmp_path: pathlib.Path,
) -> None:
    simulated_driverroot.install(str(tmp_path), ld_cache=False)
    fm = opening.open_fabric_manager(driver_root=str(tmp_path), env={})
    assert isinstance(fm, simulated.SimulatedFabricManager)
    fm.activate(1)
    again = opening.open_fabric_manager(driver_root=str(tmp_path), env={})
    assert _active(again) == [1]  # its state lives in the driver root


def test_a_driver_root_with_libnvfm_gets_the_real_client_at_its_socket(fake_fm: FakeFm) -> None:
    fm = opening.open_fabric_manager(driver_root=str(fake_fm.driver_root), env=fake_fm.env())
    assert isinstance(fm, real.NvfmFabricManager)
    assert fm.library == str(fake_fm.library)
    assert fm.endpoint == address.Address(address=str(fake_fm.socket), unix_socket=True)
    assert fm.partitions() == fm_partitions.HGX_8GPU_PARTITIONS


def test_the_library_is_found_where_the_loader_looks_when_the_root_lacks_it(
    fake_fm: FakeFm, tmp_path: pathlib.Path
) -> None:
    env = {
        **fake_fm.env(),
        "LD_LIBRARY_PATH": str(fake_fm.library.parent),
        address.UNIX_SOCKET_ENV: str(fake_fm.socket),
    }
    fm = opening.open_fabric_manager(driver_root=str(tmp_path), env=env)
    assert isinstance(fm, real.NvfmFabricManager)
    assert fm.library == "libnvfm.so.1"
    fm.activate(5)
    assert _active(fm) == [5]


def test_without_libnvfm_the_plugin_is_told_what_to_install(tmp_path: pathlib.Path) -> None:
    (tmp_path / "usr/lib64").mkdir(parents=True)
    with pytest.raises(
        errors.PermanentError,
        match=r"cannot load Fabric Manager's library libnvfm\.so\.1 .*nvidia-fabricmanager-dev"
        r".*or disable the FabricManagerPartitioning feature gate",
    ):
        opening.open_fabric_manager(driver_root=str(tmp_path), env={})


def test_a_library_without_fabric_manager_calls_is_refused(fake_fm: FakeFm) -> None:
    fm = real.NvfmFabricManager(
        endpoint=address.Address(address=str(fake_fm.socket), unix_socket=True),
        library="libc.so.6",
    )
    with pytest.raises(errors.PermanentError, match=r"fmLibInit.*nvidia-fabricmanager-dev"):
        fm.check_library()


def test_a_library_gone_after_startup_is_retryable(fake_fm: FakeFm) -> None:
    fm = fake_fm.manager()
    fake_fm.library.unlink()
    with pytest.raises(errors.RetryableError, match=r"cannot load .*nvidia-fabricmanager-dev"):
        fm.partitions()


def test_activation_checks_the_state_before_asking_fabric_manager(fake_fm: FakeFm) -> None:
    fm = fake_fm.manager()
    fm.activate(1)
    # The fake, as Fabric Manager, answers FM_ST_IN_USE to activating an active partition
    # (and FM_ST_BADPARAM to deactivating an inactive one): asking would fail.
    fm.activate(1)
    assert fake_fm.state.read_text().split() == ["1"]
    fm.deactivate(1)
    fm.deactivate(1)
    assert _active(fm) == []


@pytest.mark.parametrize("call", ["partitions", "activate", "deactivate"])
def test_fabric_manager_not_listening_is_retryable(fake_fm: FakeFm, call: str) -> None:
    fm = fake_fm.manager()
    fake_fm.socket.unlink()
    with pytest.raises(
        errors.RetryableError,
        match=rf"cannot reach Fabric Manager at unix socket {fake_fm.socket}: fmConnect returned "
        r"FM_ST_CONNECTION_NOT_VALID; check that nv-fabricmanager runs",
    ):
        getattr(fm, call)(*([] if call == "partitions" else [1]))


@pytest.fixture
def tcp_fm() -> Iterator[str]:
    """Something accepting TCP connections on 127.0.0.1: "<host>:<port>"."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), socketserver.BaseRequestHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_fabric_manager_over_tcp_where_the_environment_says(
    fake_fm: FakeFm, tcp_fm: str
) -> None:
    env = {**fake_fm.env(), address.ADDRESS_ENV: tcp_fm}
    fm = opening.open_fabric_manager(driver_root=str(fake_fm.driver_root), env=env)
    fake_fm.socket.unlink()  # NB: the unix socket is not what is used
    fm.activate(3)
    assert _active(fm) == [3]


def test_nothing_listening_on_tcp_is_retryable(fake_fm: FakeFm) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = f"127.0.0.1:{probe.getsockname()[1]}"  # bound, not listening: refused
        env = {**fake_fm.env(), address.ADDRESS_ENV: free}
        fm = opening.open_fabric_manager(driver_root=str(fake_fm.driver_root), env=env)
        refused = f"cannot reach Fabric Manager at TCP {free}: fmConnect returned"
        with pytest.raises(errors.RetryableError, match=refused):
            fm.partitions()


def test_a_crash_in_libnvfm_is_retryable_and_the_next_call_works(fake_fm: FakeFm) -> None:
    crash_once = fake_fm.driver_root / "crash-once"
    fm = fake_fm.manager(FAKE_NVFM_CRASH_ONCE=str(crash_once))
    crash_once.touch()
    with pytest.raises(
        errors.RetryableError,
        match=r"activate of partition 1 failed: libnvfm crashed with SIGABRT .*the next call "
        "starts a new one",
    ):
        fm.activate(1)
    assert _active(fm) == []
    fm.activate(1)
    assert _active(fm) == [1]


@pytest.mark.parametrize(
    "call",
    ["fmLibInit", "fmConnect", "fmGetSupportedFabricPartitions", "fmActivateFabricPartition"],
)
def test_a_crash_in_any_call_is_retryable(fake_fm: FakeFm, call: str) -> None:
    with pytest.raises(errors.RetryableError, match="crashed with SIGABRT"):
        fake_fm.manager(FAKE_NVFM_CRASH=call).activate(2)


def test_a_hung_libnvfm_is_killed_and_retryable(fake_fm: FakeFm) -> None:
    fm = fake_fm.manager(timeout_s=2, FAKE_NVFM_HANG="fmActivateFabricPartition")
    with pytest.raises(
        errors.RetryableError, match=r"did not finish within 2s and was killed.*nv-fabricmanager"
    ):
        fm.activate(1)


@pytest.mark.parametrize(
    ("failing", "status", "error", "message"),
    [
        ("fmLibInit", -2, errors.RetryableError, "fmLibInit returned FM_ST_GENERIC_ERROR"),
        ("fmConnect", -5, errors.RetryableError, "fmConnect returned FM_ST_TIMEOUT"),
        ("fmGetSupportedFabricPartitions", -4, errors.RetryableError,
         "cannot reach .* returned FM_ST_UNINITIALIZED"),
        ("fmActivateFabricPartition", -9, errors.RetryableError,
         "returned FM_ST_CONNECTION_NOT_VALID"),
        ("fmActivateFabricPartition", -22, errors.RetryableError, "returned FM_ST_NOT_READY"),
        ("fmActivateFabricPartition", -7, errors.PermanentError,
         r"cannot activate Fabric Manager partition 1 \(modules \[1, 2, 3, 4, 5, 6, 7, 8\]\): "
         r"its GPUs are in use \(FM_ST_IN_USE\)"),
        ("fmActivateFabricPartition", -1, errors.PermanentError,
         r"refused partition 1 \(fmActivateFabricPartition returned FM_ST_BADPARAM\).*fmpm -l"),
        ("fmActivateFabricPartition", -3, errors.PermanentError,
         r"does not manage partitions .*FM_ST_NOT_SUPPORTED.*FABRIC_MODE=1"),
        ("fmGetSupportedFabricPartitions", -8, errors.PermanentError,
         r"does not manage partitions .*FM_ST_NOT_CONFIGURED.*FabricManagerPartitioning"),
        ("fmActivateFabricPartition", -10, errors.PermanentError,
         r"refused fmActivateFabricPartition for partition 1 \(FM_ST_NVLINK_ERROR\); check "
         "NVLink health"),
        ("fmActivateFabricPartition", -99, errors.PermanentError, r"\(fmReturn_t -99\)"),
    ],
)
def test_each_fabric_manager_return_code_ends_as_the_error_it_means(
    fake_fm: FakeFm, failing: str, status: int, error: type[errors.DriverError], message: str
) -> None:
    fm = fake_fm.manager(FAKE_NVFM_FAIL=f"{failing}:{status}")
    with pytest.raises(error, match=message):
        fm.activate(1)


def test_deactivation_refused_as_in_use_is_not_misread_as_an_activation(fake_fm: FakeFm) -> None:
    fake_fm.manager().activate(1)
    fm = fake_fm.manager(FAKE_NVFM_FAIL="fmDeactivateFabricPartition:-7")
    with pytest.raises(errors.PermanentError, match=r"refused fmDeactivateFabricPartition for"):
        fm.deactivate(1)


def test_a_library_with_another_list_version_is_refused(fake_fm: FakeFm) -> None:
    fm = fake_fm.manager(FAKE_NVFM_LIST_VERSION="2")
    with pytest.raises(
        errors.PermanentError,
        match=r"does not accept the struct versions .*FM_ST_VERSION_MISMATCH.*install the "
        "libnvfm of the running nvidia-fabricmanager",
    ):
        fm.partitions()


def test_a_count_beyond_the_struct_is_refused_not_clamped(fake_fm: FakeFm) -> None:
    fm = fake_fm.manager(FAKE_NVFM_OVERCOUNT="1")
    with pytest.raises(
        errors.PermanentError, match=r"another layout .*reported 65 partitions; .*holds 64"
    ):
        fm.partitions()


def _answering(fake_fm: FakeFm, stdout: str) -> real.NvfmFabricManager:
    """The real client with its child replaced by one printing `stdout`."""
    return real.NvfmFabricManager(
        endpoint=address.Address(address=str(fake_fm.socket), unix_socket=True),
        command=(sys.executable, "-c", f"import sys; print({stdout!r})"),
    )


def test_a_child_answering_nonsense_is_retryable(fake_fm: FakeFm) -> None:
    with pytest.raises(errors.RetryableError, match=r"answered nonsense \(schema None"):
        _answering(fake_fm, '{"ok": true}').partitions()
    with pytest.raises(errors.RetryableError, match=r"answered nonsense .*no answer"):
        _answering(fake_fm, "not json").partitions()


def test_a_partition_naming_a_gpu_twice_is_refused(fake_fm: FakeFm) -> None:
    twice = _codec.ListedPartition(
        partition_id=3, active=False,
        gpus=(_codec.Gpu(physical_id=1), _codec.Gpu(physical_id=1)),
    )
    answer = _codec.Answer(outcome=_codec.Outcome.DONE, partitions=(twice,))
    with pytest.raises(errors.PermanentError, match=r"partition 3 with GPU module ids \[1\] twice"):
        _answering(fake_fm, _codec.encode_answer(answer)).partitions()


def test_the_child_refuses_a_request_it_cannot_read() -> None:
    assert fmctl.main([]) == 2
    assert fmctl.main(['{"schema": 1, "action": "explode"}']) == 2
