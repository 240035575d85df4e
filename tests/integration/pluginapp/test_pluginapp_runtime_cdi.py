"""The ComputeDomain plugin on the embedded cluster asks a stand-in container runtime about CDI.

A real plugin, its real gRPC sockets and the kubelet emulator; the runtime is
`adapters.grpc.cri_fake` on a unix socket, answering like containerd. With CDI off, every
prepare is answered with the message (what is wrong and how to fix it) and the Node gets a
Warning Event and condition `ContainerRuntimeCDIDisabled=True`; once the runtime has CDI on
and reads our CDI root, the next check lets prepares through (condition False); a runtime
socket that is not there only warns.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pluginapp_env import create_claim, create_domain, node, prepare

from adapters.grpc import cri_fake
from apps.cli import embedded
from apps.pluginkit import runtime_cdi_check
from core import kinds, runtime_cdi


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        yield deployment


@pytest.fixture
def runtime(env: embedded.Embedded) -> Iterator[cri_fake.FakeRuntime]:
    fake = cri_fake.FakeRuntime(os.path.join(env.workdir, "cri.sock"))
    fake.answer_like(name="containerd", version="1.7.27",
                     info=cri_fake.containerd_info(enable_cdi=False))
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def _restart_checked(env: embedded.Embedded, socket_path: str) -> embedded.SimulatedNode:
    current = node(env)
    current.kubelet.close()
    current.plugin.stop(grace_s=0)
    return embedded.start_node(env, current.name, profile="gb200-nvl72", retry_budget_s=0.2,
                               container_runtime_endpoint=socket_path)


def _check(simulated: embedded.SimulatedNode) -> runtime_cdi_check.RuntimeCDICheck:
    check = simulated.plugin.runtime_check
    assert check is not None
    return check


def _condition(env: embedded.Embedded, node_name: str) -> tuple[str, str]:
    obj = env.cluster.get(kinds.NODE.kind, namespace="", name=node_name)
    (ours,) = [c for c in obj["status"]["conditions"]
               if c["type"] == runtime_cdi.CONDITION_TYPE]
    return ours["status"], ours["reason"]


def test_prepares_are_refused_while_cdi_is_off_and_served_once_it_is_on(
    env: embedded.Embedded, runtime: cri_fake.FakeRuntime
) -> None:
    simulated = _restart_checked(env, runtime.socket_path)
    ref = create_claim(env, "a", domain_id=create_domain(env))
    # The first judgment holds from the start; its Event and condition follow on a thread.
    assert _check(simulated).round_done.wait(10)

    refused = prepare(env, ref)
    assert "has CDI disabled (enableCDI=false)" in refused.error
    assert "enable_cdi = true" in refused.error and "restart containerd" in refused.error
    assert not refused.devices
    events = env.cluster.list(kinds.EVENT.kind, namespace="default").items
    assert [(e["type"], e["involvedObject"]["name"]) for e in events
            if e["reason"] == runtime_cdi_check.EVENT_REASON] == [("Warning", simulated.name)]
    assert _condition(env, simulated.name) == ("True", "CDIOff")

    runtime.answer_like(name="containerd", version="1.7.27", info=cri_fake.containerd_info(
        enable_cdi=True, spec_dirs=["/etc/cdi", simulated.settings.cdi_root]))
    assert _check(simulated).check_once().verdict is runtime_cdi.Verdict.APPLIED
    served = prepare(env, ref)
    assert not served.error
    assert served.devices
    assert _condition(env, simulated.name) == ("False", "CDIApplied")


def test_a_runtime_reading_other_dirs_refuses_naming_our_root(
    env: embedded.Embedded, runtime: cri_fake.FakeRuntime
) -> None:
    runtime.answer_like(name="containerd", version="2.1.4",
                        info=cri_fake.containerd_info(enable_cdi=True, spec_dirs=["/etc/cdi"]))
    simulated = _restart_checked(env, runtime.socket_path)
    ref = create_claim(env, "a", domain_id=create_domain(env))
    refused = prepare(env, ref)
    assert f"not from this driver's CDI root {simulated.settings.cdi_root}" in refused.error


def test_a_missing_runtime_socket_only_warns(env: embedded.Embedded) -> None:
    simulated = _restart_checked(env, os.path.join(env.workdir, "absent.sock"))
    judged = _check(simulated).judgment
    assert judged is not None and judged.verdict is runtime_cdi.Verdict.UNKNOWN
    ref = create_claim(env, "a", domain_id=create_domain(env))
    assert not prepare(env, ref).error
