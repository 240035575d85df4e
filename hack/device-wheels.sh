#!/usr/bin/env bash
# Wheels for running the driver's GPU checks on a lent GPU machine without internet (its image
# has Python 3.12, grpcio, protobuf, nvidia-ml-py, pytest, pyyaml, aiohttp, click, hypothesis):
# the runtime dependencies it lacks, at the versions of this checkout's venv, for CPython 3.12
# on manylinux x86_64, into .whl/ (ignore it in .git/info/exclude). On the machine:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:$PWD hack/gpu-check.sh   (with PYTHON=python3)
set -euo pipefail
cd "$(dirname "$0")/.."
pip=(.venv/bin/python -m pip)
names=(
  kubernetes pydantic pydantic-core annotated-types typing-inspection aiohttp-retry durationpy
  websocket-client oauthlib requests-oauthlib python-dateutil grpcio protobuf
  grpcio-health-checking nvidia-ml-py tenacity prometheus-client cel-python google-re2 lark
  pendulum jmespath tzdata kubernetes-validate jsonschema referencing rpds-py
  jsonschema-specifications importlib-resources
)
pins=()
for name in "${names[@]}"; do
  version=$("${pip[@]}" show "$name" 2>/dev/null | awk '/^Version:/{print $2}')
  if [[ -z "$version" ]]; then
    echo "error: $name is not installed in .venv: run make test (or make demo) first" >&2
    exit 2
  fi
  pins+=("$name==$version")
done
platforms=()
for tag in manylinux_2_17 manylinux2014 manylinux_2_24 manylinux_2_27 manylinux_2_28 \
           manylinux_2_31 manylinux_2_34; do
  platforms+=(--platform "${tag}_x86_64")
done
"${pip[@]}" download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${platforms[@]}" --platform any -d .whl "${pins[@]}"
echo "device-wheels: $(ls .whl | wc -l) wheels in .whl ($(du -sh .whl | cut -f1))"
