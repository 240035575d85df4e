"""The runtime CDI judgment, one case per verdict and per way an answer can be malformed.

Covers: containerd with CDI on (default dirs, our root spelled /run or /var/run, trailing
slashes), off, too old (no enableCDI), other spec dirs, an empty and a null dir list; CRI-O new
and old, with our root among its defaults or not; an unreachable runtime, an unknown runtime,
an unreadable config, malformed fields. Refusing messages say what is wrong and how to fix it.
"""

from __future__ import annotations

import json

import pytest

from core import runtime_cdi
from core.runtime_cdi import Verdict


def _containerd(config: object, *, version: str = "v1.7.27") -> runtime_cdi.RuntimeAnswer:
    return runtime_cdi.RuntimeAnswer.of(
        name="containerd", version=version,
        info={"config": json.dumps(config), "golang": '"go1.22"'},
    )


def _judge(answer: runtime_cdi.RuntimeAnswer | runtime_cdi.Unreachable,
           root: str = "/var/run/cdi") -> runtime_cdi.Judgment:
    return runtime_cdi.judge(answer, cdi_root=root)


@pytest.mark.parametrize("root", ["/var/run/cdi", "/run/cdi", "/var/run/cdi/", "//run/./cdi"])
def test_containerd_with_cdi_on_and_default_dirs_applies_our_specs(root: str) -> None:
    judged = _judge(_containerd({"enableCDI": True, "cdiSpecDirs": ["/etc/cdi", "/var/run/cdi"]}),
                    root)
    assert judged.verdict is Verdict.APPLIED
    assert not judged.refusing
    assert judged.runtime == "containerd v1.7.27"


def test_containerd_reading_run_cdi_applies_specs_written_to_var_run_cdi() -> None:
    judged = _judge(_containerd({"enableCDI": True, "cdiSpecDirs": ["/run/cdi"]}))
    assert judged.verdict is Verdict.APPLIED


@pytest.mark.parametrize("dirs", [None, "absent"])
def test_containerd_without_spec_dirs_uses_its_defaults(dirs: object) -> None:
    config: dict[str, object] = {"enableCDI": True}
    if dirs != "absent":
        config["cdiSpecDirs"] = dirs
    assert _judge(_containerd(config)).verdict is Verdict.APPLIED


def test_containerd_with_cdi_off_refuses_and_says_how_to_enable_it() -> None:
    judged = _judge(_containerd({"enableCDI": False, "cdiSpecDirs": ["/etc/cdi"]}))
    assert judged.verdict is Verdict.CDI_OFF
    assert judged.refusing
    assert "CDI disabled (enableCDI=false)" in judged.message
    assert "enable_cdi = true" in judged.message
    assert "/etc/containerd/config.toml" in judged.message
    assert '[plugins."io.containerd.grpc.v1.cri"]' in judged.message
    assert "restart containerd" in judged.message


def test_containerd_reading_other_dirs_refuses_naming_both() -> None:
    judged = _judge(_containerd({"enableCDI": True, "cdiSpecDirs": ["/etc/cdi", "/opt/cdi"]}))
    assert judged.verdict is Verdict.ROOT_NOT_WATCHED
    assert judged.refusing
    assert "/etc/cdi,/opt/cdi" in judged.message
    assert "/var/run/cdi" in judged.message
    assert "cdi_spec_dirs" in judged.message
    assert "kubeletPlugin.cdiRoot" in judged.message


def test_containerd_with_an_empty_dir_list_reads_nothing() -> None:
    judged = _judge(_containerd({"enableCDI": True, "cdiSpecDirs": []}))
    assert judged.verdict is Verdict.ROOT_NOT_WATCHED
    assert "from none" in judged.message


def test_containerd_older_than_1_7_has_no_enable_cdi_and_refuses() -> None:
    judged = _judge(_containerd({"containerd": {"snapshotter": "overlayfs"}}, version="1.6.20"))
    assert judged.verdict is Verdict.CDI_OFF
    assert "upgrade containerd to 1.7 or newer" in judged.message


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"enableCDI": "yes"}, "enableCDI='yes'"),
        ({"enableCDI": True, "cdiSpecDirs": "/etc/cdi"}, "cdiSpecDirs='/etc/cdi'"),
        ({"enableCDI": True, "cdiSpecDirs": [1]}, "cdiSpecDirs=[1]"),
    ],
)
def test_malformed_containerd_fields_are_unknown_not_refusing(config: object, words: str) -> None:
    judged = _judge(_containerd(config))
    assert judged.verdict is Verdict.UNKNOWN
    assert not judged.refusing
    assert words in judged.message


@pytest.mark.parametrize("raw", ["{not json", '["a list"]'])
def test_an_unreadable_config_is_unknown(raw: str) -> None:
    answer = runtime_cdi.RuntimeAnswer.of(name="containerd", version="1.7.0", info={"config": raw})
    assert _judge(answer).verdict is Verdict.UNKNOWN


def test_containerd_answering_without_verbose_info_is_unknown() -> None:
    answer = runtime_cdi.RuntimeAnswer.of(name="containerd", version="2.1.0", info={})
    judged = _judge(answer)
    assert judged.verdict is Verdict.UNKNOWN
    assert "prepares go on unchecked" in judged.message


def test_a_fork_with_a_containerd_config_is_judged_by_its_config_not_its_name() -> None:
    answer = runtime_cdi.RuntimeAnswer.of(
        name="acme-runtime", version="0.0.1",
        info={"config": json.dumps({"enableCDI": False})},
    )
    assert _judge(answer).verdict is Verdict.CDI_OFF


@pytest.mark.parametrize("version", ["1.23.0", "v1.31.4", "2.0.0"])
def test_crio_with_cdi_applies_specs_in_its_default_dirs(version: str) -> None:
    answer = runtime_cdi.RuntimeAnswer.of(name="cri-o", version=version, info={})
    judged = _judge(answer)
    assert judged.verdict is Verdict.APPLIED


def test_crio_older_than_1_23_refuses() -> None:
    judged = _judge(runtime_cdi.RuntimeAnswer.of(name="cri-o", version="1.22.5", info={}))
    assert judged.verdict is Verdict.CDI_OFF
    assert "upgrade CRI-O to 1.23 or newer" in judged.message


def test_crio_with_a_root_outside_its_defaults_is_unknown_with_the_fix() -> None:
    judged = _judge(runtime_cdi.RuntimeAnswer.of(name="cri-o", version="1.30.0", info={}),
                    root="/opt/cdi")
    assert judged.verdict is Verdict.UNKNOWN
    assert "cdi_spec_dirs" in judged.message and "/opt/cdi" in judged.message


def test_crio_with_an_unreadable_version_is_unknown() -> None:
    judged = _judge(runtime_cdi.RuntimeAnswer.of(name="cri-o", version="dev", info={}))
    assert judged.verdict is Verdict.UNKNOWN


def test_another_runtime_is_unknown() -> None:
    judged = _judge(runtime_cdi.RuntimeAnswer.of(name="docker", version="27.0", info={}))
    assert judged.verdict is Verdict.UNKNOWN
    assert judged.runtime == "docker 27.0"


def test_an_unreachable_runtime_is_unknown_and_says_how_to_check() -> None:
    judged = _judge(runtime_cdi.Unreachable(endpoint="unix:///run/containerd/containerd.sock",
                                            reason="no such file"))
    assert judged.verdict is Verdict.UNKNOWN
    assert not judged.refusing
    assert "no such file" in judged.message
    assert "kubeletPlugin.containerRuntimeEndpoint" in judged.message


@pytest.mark.parametrize(
    ("path", "normal"),
    [("/var/run", "/run"), ("/var/run/cdi/", "/run/cdi"), ("/etc/cdi", "/etc/cdi"),
     ("/var/running", "/var/running"), ("etc/cdi", "/etc/cdi")],
)
def test_normalize_dir(path: str, normal: str) -> None:
    assert runtime_cdi.normalize_dir(path) == normal


READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok",
         "lastHeartbeatTime": "t0", "lastTransitionTime": "t0"}


def _condition(conditions: list[dict[str, object]] | None) -> dict[str, object]:
    assert conditions is not None
    (ours,) = [c for c in conditions if c["type"] == runtime_cdi.CONDITION_TYPE]
    return ours


def test_the_node_condition_is_true_while_refusing_and_keeps_the_others() -> None:
    off = _judge(_containerd({"enableCDI": False}))
    conditions = runtime_cdi.node_conditions([READY], off, now="t1")
    assert conditions is not None and conditions[0] == READY
    assert _condition(conditions) == {
        "type": "ContainerRuntimeCDIDisabled", "status": "True", "reason": "CDIOff",
        "message": off.message, "lastHeartbeatTime": "t1", "lastTransitionTime": "t1"}


@pytest.mark.parametrize(
    ("answer", "status", "reason"),
    [(_containerd({"enableCDI": True}), "False", "CDIApplied"),
     (_containerd({"enableCDI": True, "cdiSpecDirs": []}), "True", "CDIRootNotWatched"),
     (runtime_cdi.Unreachable(endpoint="x", reason="y"), "Unknown", "RuntimeNotUnderstood")],
)
def test_each_verdict_has_its_condition_status_and_reason(
    answer: runtime_cdi.RuntimeAnswer | runtime_cdi.Unreachable, status: str, reason: str,
) -> None:
    ours = _condition(runtime_cdi.node_conditions([], _judge(answer), now="t1"))
    assert (ours["status"], ours["reason"]) == (status, reason)


def test_an_unchanged_condition_is_not_written_again() -> None:
    off = _judge(_containerd({"enableCDI": False}))
    first = runtime_cdi.node_conditions([READY], off, now="t1")
    assert first is not None
    assert runtime_cdi.node_conditions(first, off, now="t2") is None


def test_the_transition_time_moves_only_with_the_status() -> None:
    off = _judge(_containerd({"enableCDI": False}))
    other = _judge(_containerd({"enableCDI": True, "cdiSpecDirs": ["/opt"]}))
    on = _judge(_containerd({"enableCDI": True}))
    first = runtime_cdi.node_conditions([], off, now="t1")
    assert first is not None
    second = runtime_cdi.node_conditions(first, other, now="t2")  # still True: new reason
    assert _condition(second)["lastTransitionTime"] == "t1"
    assert _condition(second)["reason"] == "CDIRootNotWatched"
    assert second is not None
    third = runtime_cdi.node_conditions(second, on, now="t3")
    assert (_condition(third)["status"], _condition(third)["lastTransitionTime"]) == ("False", "t3")
    assert third is not None and len(third) == 1


def test_refusing_nodes_skips_malformed_nodes_and_conditions() -> None:
    ours = {"type": runtime_cdi.CONDITION_TYPE, "status": "True", "message": "m"}
    nodes: list[dict[str, object]] = [
        {"metadata": {"name": "b"}, "status": {"conditions": [ours]}},
        {"metadata": {"name": "a"}, "status": {"conditions": ["junk", ours]}},
        {"metadata": {"name": "c"}, "status": {"conditions": "junk"}},
        {"metadata": {"name": "d"}, "status": "junk"},
        {"metadata": {"name": "e"}},
        {"status": {"conditions": [ours]}},
    ]
    assert runtime_cdi.refusing_nodes(nodes) == (("", "m"), ("a", "m"), ("b", "m"))
