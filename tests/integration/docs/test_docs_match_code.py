"""The docs and the chart say what the code does (issue 17).

Covers: the metrics and Events tables of docs/operations.md against the names in the code; the
verbosity scale (values.yaml, operations.md) against the one logging setup; NOTES.txt under
channel isolation; file paths named in chart comments; the Containerfile's entry points against
pyproject's console scripts; `python -m bench --only-plugin` running the plugin figures only.
"""

from __future__ import annotations

import pathlib
import re
import sys
import tomllib
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
OPERATIONS = (ROOT / "docs/operations.md").read_text()
CHART = ROOT / "helm/nvidia-dra-driver"


def _code(*tops: str) -> str:
    return "\n".join(p.read_text() for top in tops for p in sorted((ROOT / top).rglob("*.py"))
                     if "generated" not in p.parts)


def _table(section: str) -> str:
    """The text of one `## section` of operations.md."""
    match = re.search(rf"^## {section}\n(.*?)(?=^## )", OPERATIONS, re.S | re.M)
    assert match, section
    return match.group(1)


def test_the_metrics_table_lists_every_metric_and_no_other() -> None:
    in_code = set(re.findall(r"\"(nvidia_dra_\w+)\"", _code("apps", "adapters")))
    in_docs = set(re.findall(r"^\| `(nvidia_dra_\w+)`", _table("Metrics"), re.M))
    assert in_code == in_docs


EVENT_PATTERNS = (
    r"_REASON: Final = \"([A-Z]\w+)\"",
    r"reason=\"([A-Z]\w+)\"",
    r"_emit_node_event\(\s*\"([A-Z]\w+)\"",
    r"events\.emit\(\s*\"([A-Z]\w+)\"",
    r"self\._emit\(\s*\w+,\s*\"([A-Z]\w+)\"",
    r"_refused\(\s*\"([A-Z]\w+)\"",
)


def test_the_events_table_lists_every_event_reason_the_driver_emits() -> None:
    code = _code("core", "apps")
    in_code = {r for pattern in EVENT_PATTERNS for r in re.findall(pattern, code)}
    in_docs = set(re.findall(r"`([A-Z]\w+)`", _table("Events")))
    assert in_code - in_docs == set()


def test_the_verbosity_scale_is_the_one_the_code_has() -> None:
    from apps.shell import logs

    values = (CHART / "values.yaml").read_text()
    comment = values.split("logVerbosity:")[0].rsplit("\n\n", 1)[-1]
    for level, meaning in logs.SCALE:
        assert f"{level}: {meaning}" in comment, (level, meaning)
        assert f"| {level} | {meaning} |" in OPERATIONS, (level, meaning)


def test_notes_under_channel_isolation_describe_channel_isolation() -> None:
    sys.path.insert(0, str(ROOT / "tests/integration/helm"))
    try:
        import chart_rendering as cr
    finally:
        sys.path.pop(0)
    notes = cr.notes(
        cr.imex("hostManaged", "channel", featureGates={"HostManagedIMEXDaemon": True}))
    assert "isolation: channel" in notes
    assert "Isolation none" not in notes and "host IMEX channel 0" not in notes
    assert "own IMEX channel" in notes
    shared = cr.notes(cr.host_managed())
    assert "host IMEX channel 0" in shared


def test_paths_named_in_chart_comments_exist() -> None:
    named = set()
    for path in CHART.rglob("*"):
        if path.is_file() and path.suffix in (".tpl", ".yaml", ".txt", ".json"):
            named |= set(re.findall(
                r"\b((?:core|apps|adapters|docs|bench|hack|demo)/[\w/.-]+\.(?:py|md|sh|yaml))",
                path.read_text()))
    assert named, "no path found: the pattern is wrong"
    assert sorted(p for p in named if not (ROOT / p).exists()) == []


def test_modules_named_in_chart_comments_exist() -> None:
    """Dotted names (`core.computedomain.modes.resolve_driver_config`): a module file of it."""
    named = set()
    for path in CHART.rglob("*"):
        if path.is_file() and path.suffix in (".tpl", ".yaml", ".txt"):
            named |= set(re.findall(r"\b((?:core|apps|adapters)(?:\.[a-z_]+)+)", path.read_text()))
    missing = [n for n in named if not any(
        (ROOT / "/".join(n.split(".")[:i])).with_suffix(".py").exists()
        for i in range(2, len(n.split(".")) + 1))]
    assert sorted(missing) == []


def test_the_containerfile_lists_every_entry_point() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    text = (ROOT / "Containerfile").read_text()
    listed = re.search(r"console scripts\n# \(([^)]*)\)", text)
    assert listed, "the Containerfile names its console scripts in one comment"
    names = listed.group(1).replace("\n#", " ").split(",")
    assert sorted(n.strip() for n in names) == sorted(scripts)


def _record_bench_figures(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str]]:
    """bench's __main__ with every figure replaced by a recorder of its name."""
    sys.path.insert(0, str(ROOT))
    import bench.__main__ as bench_main

    ran: list[str] = []

    def record(name: str) -> Any:
        def figure(*_args: Any, **_kw: Any) -> dict[str, Any]:
            ran.append(name)
            return {}
        return figure

    for module_name in ("controlplane", "gpu", "scenarios", "daemon_domain", "controller_latency",
                        "channel_assignment", "controller_watch", "realkube_controller",
                        "binding_conditions"):
        module = getattr(bench_main, module_name)
        for attr in dir(module):
            if not attr.startswith("_") and callable(getattr(module, attr)) and getattr(
                    getattr(module, attr), "__module__", "") == module.__name__:
                monkeypatch.setattr(module, attr, record(f"{module_name}.{attr}"))
    return bench_main, ran


def test_bench_only_plugin_runs_the_plugin_figures_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    bench_main, ran = _record_bench_figures(monkeypatch)
    monkeypatch.setattr(sys, "argv", ["bench", "--only-plugin", "--out", str(tmp_path)])
    assert bench_main.main() == 0
    assert ran and all(name.split(".")[0] in ("scenarios", "daemon_domain") for name in ran), ran


def test_bench_only_binding_runs_the_binding_conditions_figure_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    bench_main, ran = _record_bench_figures(monkeypatch)
    monkeypatch.setattr(sys, "argv", ["bench", "--only-binding", "--out", str(tmp_path)])
    assert bench_main.main() == 0
    assert ran == ["binding_conditions.run"]
