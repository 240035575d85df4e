#!/usr/bin/env bash
# Builds real Kubernetes components for the integration tiers from the Go module proxy, into a
# cache outside the repo, reused when present, finds an etcd, and keeps the CRI API's .proto of
# the same release beside them (the stand-in container runtime of the control-plane tier serves
# it). Prints the cache directory on its last line.
#
#   KUBE_VERSION     k8s.io/kubernetes module version (default v1.34.4; v1.35.4, v1.36.3 and v1.37.2
#                    also build and verify through the module proxy)
#   KUBE_CACHE       where binaries live (default ~/.cache/cd-dra-driver/kube-<version>)
#   KUBE_COMPONENTS  which to build (default: kube-apiserver kube-scheduler kube-controller-manager
#                    kubelet); the ones already in the cache are not built again
set -euo pipefail

version="${KUBE_VERSION:-v1.34.4}"
cache="${KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cd-dra-driver/kube-${version}}"
read -r -a components <<< "${KUBE_COMPONENTS:-kube-apiserver kube-scheduler kube-controller-manager kubelet}"
mkdir -p "$cache"

log() { echo "kube-components.sh: $*" >&2; }

build_components() {
  command -v go >/dev/null || { log "go is not installed; it is needed once to build $*"; exit 2; }
  local work; work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  local staging_version="v0.${version#v1.}"
  local gomod; gomod="$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${version}" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  # k8s.io/kubernetes points every staging module at ./staging; pin each to its published v0.x.
  {
    echo "module kubecomponentsbuild"
    echo
    echo "go 1.24.0"
    echo
    echo "require k8s.io/kubernetes ${version}"
    echo
    echo "replace ("
    grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" \
      | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } > "$work/go.mod"
  local packages=()
  {
    echo "package main"
    echo
    for c in "$@"; do
      echo "import _ \"k8s.io/kubernetes/cmd/$c/app\""
      packages+=("k8s.io/kubernetes/cmd/$c")
    done
  } > "$work/tools.go"
  log "building $* ${version} (about 25 minutes on 2 cores for all four, once)"
  (cd "$work" && GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true)
  mkdir -p "$cache/.tmp"
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=${version} \
      -X k8s.io/component-base/version.gitMajor=1 \
      -X k8s.io/component-base/version.gitMinor=$(echo "$version" | cut -d. -f2)" \
      -o "$cache/.tmp/" "${packages[@]}")
  for c in "$@"; do mv "$cache/.tmp/$c" "$cache/$c"; done
}

find_etcd() {
  if [ -x "$cache/etcd" ]; then return; fi
  if ! command -v etcd >/dev/null && [ -x /usr/bin/apt-get ] && [ "$(id -u)" = 0 ]; then
    log "installing etcd-server from Debian"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server) >/dev/null 2>&1 || true
  fi
  local found; found="$(command -v etcd || true)"
  [ -n "$found" ] || { log "no etcd: install Debian's etcd-server package"; exit 2; }
  ln -sf "$found" "$cache/etcd"
}

# The CRI definition the kubelet of this release speaks (k8s.io/cri-api, from the module proxy).
find_cri_proto() {
  [ -f "$cache/cri-api.proto" ] && return
  local work; work="$(mktemp -d)"
  local dir; dir="$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "k8s.io/cri-api@v0.${version#v1.}" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  rm -rf "$work"
  cp "$dir/pkg/apis/runtime/v1/api.proto" "$cache/cri-api.proto.tmp"
  mv "$cache/cri-api.proto.tmp" "$cache/cri-api.proto"
}

missing=()
for c in "${components[@]}"; do [ -x "$cache/$c" ] || missing+=("$c"); done
[ "${#missing[@]}" -eq 0 ] || build_components "${missing[@]}"
find_etcd
find_cri_proto
for c in "${components[@]}"; do "$cache/$c" --version >&2; done
echo "$cache"
