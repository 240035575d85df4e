"""Regenerate the kubelet gRPC stubs in `adapters/grpc/generated/` from `proto/`.

The one place that runs protoc, so that the checked-in stubs are reproducible byte for byte
(`make protos` writes them, `make check-protos` compares a fresh generation with them).

The proto sources live under `proto/adapters/grpc/generated/`, mirroring the Python package, so
protoc emits `from adapters.grpc.generated import ...` imports that resolve without rewriting and
every descriptor has a unique file name. The generator version is pinned: stubs check the
protobuf runtime at import, so a newer generator could demand a newer runtime than we declare.

Usage: `python -m adapters.grpc.generate [--out DIR]`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import pathlib
import shutil
import sys
import tempfile

GRPCIO_TOOLS_VERSION = "1.85.1"
PACKAGE_PATH = pathlib.PurePosixPath("adapters/grpc/generated")
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO_ROOT / "proto"
DEFAULT_OUT = REPO_ROOT / PACKAGE_PATH
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def proto_files(proto_root: pathlib.Path) -> tuple[str, ...]:
    """Proto paths relative to `proto_root`, sorted (deterministic output order)."""
    return tuple(
        sorted(p.relative_to(proto_root).as_posix() for p in proto_root.rglob("*.proto"))
    )


def build_protoc_command(
    *, proto_root: pathlib.Path, out_root: pathlib.Path, files: tuple[str, ...]
) -> tuple[str, ...]:
    """The protoc argument vector (argv[0] included) for messages, typing stubs and services."""
    return (
        "grpc_tools.protoc",
        f"--proto_path={proto_root}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *files,
    )


def check_generator_version() -> None:
    installed = importlib.metadata.version("grpcio-tools")
    if installed != GRPCIO_TOOLS_VERSION:
        raise SystemExit(
            f"grpcio-tools {installed} is installed but the stubs are generated with "
            f"{GRPCIO_TOOLS_VERSION}; run `pip install grpcio-tools=={GRPCIO_TOOLS_VERSION}`."
        )


def generate(out_dir: pathlib.Path, *, proto_root: pathlib.Path = PROTO_ROOT) -> tuple[str, ...]:
    """Write the generated modules into `out_dir` (flat); return their file names, sorted.

    Old generated files in `out_dir` are removed first, so a deleted .proto leaves no stub behind.
    Other files there (the package's `__init__.py`) are kept.
    """
    check_generator_version()
    from grpc_tools import protoc  # NB: imported late so `--help` works without grpcio-tools.

    files = proto_files(proto_root)
    if not files:
        raise SystemExit(f"no .proto files under {proto_root}")
    with tempfile.TemporaryDirectory() as scratch:
        scratch_root = pathlib.Path(scratch)
        argv = build_protoc_command(proto_root=proto_root, out_root=scratch_root, files=files)
        if protoc.main(list(argv)) != 0:
            raise SystemExit(f"protoc failed: {' '.join(argv)}")
        emitted = (scratch_root / PACKAGE_PATH).iterdir()
        produced = sorted(p for p in emitted if p.name.endswith(GENERATED_SUFFIXES))
        out_dir.mkdir(parents=True, exist_ok=True)
        for old in out_dir.iterdir():
            if old.name.endswith(GENERATED_SUFFIXES):
                old.unlink()
        for path in produced:
            shutil.copyfile(path, out_dir / path.name)
    return tuple(p.name for p in produced)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="target directory")
    args = parser.parse_args(argv)
    names = generate(args.out)
    print(f"wrote {len(names)} files to {args.out}: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
