"""The checked-in stubs are exactly what `python -m adapters.grpc.generate` produces now.

Fails when a .proto changed without `make protos`, or when someone edited a stub by hand.
"""

from __future__ import annotations

import pathlib

from adapters.grpc import generate


def test_checked_in_stubs_match_a_fresh_generation(tmp_path: pathlib.Path) -> None:
    fresh = generate.generate(tmp_path)
    checked_in = tuple(
        sorted(
            p.name
            for p in generate.DEFAULT_OUT.iterdir()
            if p.name.endswith(generate.GENERATED_SUFFIXES)
        )
    )
    assert checked_in == fresh, "run `make protos` and commit adapters/grpc/generated/"
    stale = [
        name
        for name in fresh
        if (tmp_path / name).read_bytes() != (generate.DEFAULT_OUT / name).read_bytes()
    ]
    assert stale == [], f"stubs out of date: {stale}; run `make protos`"


def test_every_proto_yields_messages_typing_stub_and_services(tmp_path: pathlib.Path) -> None:
    fresh = set(generate.generate(tmp_path))
    for proto in generate.proto_files(generate.PROTO_ROOT):
        stem = pathlib.PurePosixPath(proto).stem
        assert {f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py"} <= fresh


def test_protoc_command_targets_messages_typing_and_services() -> None:
    argv = generate.build_protoc_command(
        proto_root=pathlib.Path("/p"), out_root=pathlib.Path("/o"), files=("a.proto",)
    )
    assert argv == (
        "grpc_tools.protoc",
        "--proto_path=/p",
        "--python_out=/o",
        "--pyi_out=/o",
        "--grpc_python_out=/o",
        "a.proto",
    )
