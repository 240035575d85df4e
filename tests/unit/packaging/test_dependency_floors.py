"""The declared dependency floors are honest, and every install uses the tested pins.

Covers: every requirement in pyproject.toml has a floor; `constraints.txt` pins each of them
at a version the requirement accepts; the Makefile and the Containerfile install from it;
the tenacity API we call exists at the declared floor; no tenacity internals are built by hand.
"""

from __future__ import annotations

import ast
import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[3]
_REQ = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(?:(==|>=)\s*([0-9][0-9A-Za-z.]*))?")

# Keyword arguments of tenacity callables that appeared after tenacity 8, with the first
# release on PyPI that has them (checked in the 9.1.2-9.1.4 and 9.2.1 wheels; 9.2.0 is not
# on PyPI).
_TENACITY_KEYWORD_SINCE = {
    ("wait_exponential_jitter", "multiplier"): "9.2.1",
    ("wait_exponential_jitter", "min"): "9.2.1",
}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements() -> dict[str, tuple[str, str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        declared.extend(extra)
    found: dict[str, tuple[str, str]] = {}
    for requirement in declared:
        match = _REQ.match(requirement)
        assert match, requirement
        found[_norm(match.group(1))] = (match.group(3) or "", match.group(4) or "")
    return found


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        assert version, f"constraints.txt: {line!r} is not pinned with =="
        pins[_norm(name)] = version.strip()
    return pins


def test_every_dependency_declares_a_floor() -> None:
    unfloored = sorted(name for name, (op, _) in _requirements().items() if not op)
    assert unfloored == []


def test_constraints_pin_every_dependency_within_its_declared_range() -> None:
    pins = _pins()
    for name, (op, floor) in _requirements().items():
        assert name in pins, f"{name} is not pinned in constraints.txt"
        if op == "==":
            assert pins[name] == floor, name
        else:
            assert _version(pins[name]) >= _version(floor), (name, pins[name], floor)


def test_make_and_the_image_install_from_the_constraints() -> None:
    makefile = (ROOT / "Makefile").read_text()
    stamp_rule = makefile.split("$(STAMP):", 1)[1].split("\n\n", 1)[0]
    assert "-c constraints.txt" in stamp_rule and "constraints.txt" in stamp_rule.splitlines()[0]
    containerfile = (ROOT / "Containerfile").read_text()
    assert "COPY constraints.txt" in containerfile or "constraints.txt /src/" in containerfile
    assert "-c constraints.txt" in containerfile


def _tenacity_calls() -> list[tuple[str, str, str]]:
    """(file, callable, keyword) of every `tenacity.X(keyword=...)` in the shipped code."""
    calls: list[tuple[str, str, str]] = []
    for package in ("core", "adapters", "apps"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "tenacity"):
                    for keyword in node.keywords:
                        calls.append((str(path.relative_to(ROOT)), node.func.attr,
                                      keyword.arg or "**"))
                    if not node.keywords:
                        calls.append((str(path.relative_to(ROOT)), node.func.attr, ""))
    return calls


def test_the_tenacity_floor_has_every_keyword_the_code_passes() -> None:
    _, floor = _requirements()["tenacity"]
    too_new = [
        (where, fn, kw, since) for where, fn, kw in _tenacity_calls()
        if (since := _TENACITY_KEYWORD_SINCE.get((fn, kw))) and _version(floor) < _version(since)
    ]
    assert too_new == []


def test_no_tenacity_internals_are_built_by_hand() -> None:
    by_hand = [(where, fn) for where, fn, _ in _tenacity_calls() if fn == "RetryCallState"]
    assert by_hand == []
