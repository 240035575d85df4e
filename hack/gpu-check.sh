#!/usr/bin/env bash
# The real-GPU check: gpu-kubelet-plugin with real NVML on this host, judged by nvidia-smi.
# Skips (does not fail) where there is no GPU or NVML. Results (the published ResourceSlice and
# the prepared claim's CDI spec) go to $GPU_CHECK_OUT (default /tmp/gpu-check).
# Usage: hack/gpu-check.sh [extra pytest args]; NVIDIA_DRIVER_ROOT=/run/nvidia/driver for the
# GPU Operator's driver root.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
if [[ ! -x "$python" ]]; then
  echo "error: $python not found: build the venv first (make gpu-check does), or set PYTHON to an interpreter with the driver installed" >&2
  exit 2
fi
export GPU_CHECK_OUT="${GPU_CHECK_OUT:-/tmp/gpu-check}"
echo "gpu-check: results go to $GPU_CHECK_OUT"
exec "$python" -m pytest tests/gpu_host -v -p no:cacheprovider "$@"
