#!/usr/bin/env bash
# Builds NVIDIA's `nvidia-cdi-hook` (the program our GPU CDI specs name in their createContainer
# hooks) from the Go module proxy into a cache outside the repo, reused when present, for the
# integration test that runs those hooks against a scratch root filesystem. Prints the binary's
# path on its last line. Needs go and a C compiler (the toolkit links go-nvml through cgo).
#
#   CDI_HOOK_VERSION  github.com/NVIDIA/nvidia-container-toolkit release (default v1.19.1, the
#                     version the upstream driver's go.mod pins)
#   CDI_HOOK_CACHE    where the binary lives (default ~/.cache/cd-dra-driver/nvidia-cdi-hook-<version>)
set -euo pipefail

version="${CDI_HOOK_VERSION:-v1.19.1}"
cache="${CDI_HOOK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cd-dra-driver/nvidia-cdi-hook-${version}}"
binary="$cache/nvidia-cdi-hook"

log() { echo "nvidia-cdi-hook.sh: $*" >&2; }

if [ ! -x "$binary" ]; then
  command -v go >/dev/null || { log "go is not installed; it is needed once to build nvidia-cdi-hook"; exit 2; }
  mkdir -p "$cache/.tmp"
  log "building nvidia-cdi-hook ${version} from the Go module proxy (about 35 s on 2 cores with cold Go caches, once)"
  # `go install pkg@version` builds the released module as published: no local go.mod, no fork.
  GOBIN="$cache/.tmp" GOFLAGS=-mod=mod \
    go install -trimpath -ldflags "-s -w" \
    "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook@${version}"
  mv "$cache/.tmp/nvidia-cdi-hook" "$binary"
fi
"$binary" --version >&2
echo "$binary"
