"""docs/library.md's example runs as written (the public API it shows exists and behaves)."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "library.md"


def test_library_doc_example_runs_and_refuses_allocation_mode_all() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "docs/library.md must contain a python example"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), {})
    assert "Single" in out.getvalue()


def test_public_names_are_exported() -> None:
    import core

    for name in core.__all__:
        assert hasattr(core, name), name
