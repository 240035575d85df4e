#!/usr/bin/env bash
# Builds a real kube-apiserver (and finds an etcd) for the integration tier, into a cache outside
# the repo, reused when present. Prints the cache directory on its last line.
#
#   KUBE_VERSION   k8s.io/kubernetes module version to build (default v1.34.4: builds and verifies
#                  through the module proxy; some later patch releases fail their checksum lookup)
#   KUBE_CACHE     where binaries live (default ~/.cache/cd-dra-driver/kube-<version>)
set -euo pipefail

version="${KUBE_VERSION:-v1.34.4}"
cache="${KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cd-dra-driver/kube-${version}}"
mkdir -p "$cache"

log() { echo "kube-apiserver.sh: $*" >&2; }

build_apiserver() {
  command -v go >/dev/null || { log "go is not installed; it is needed once to build kube-apiserver"; exit 2; }
  local work; work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  local staging_version="v0.${version#v1.}"
  local gomod; gomod="$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${version}" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  # k8s.io/kubernetes points every staging module at ./staging; pin each to its published v0.x.
  {
    echo "module kubeapiserverbuild"
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
  printf 'package main\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver/app"\n' > "$work/tools.go"
  log "building kube-apiserver ${version} (about 15 minutes on 2 cores, once)"
  (cd "$work" && GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true)
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=${version} \
      -X k8s.io/component-base/version.gitMajor=1 \
      -X k8s.io/component-base/version.gitMinor=$(echo "$version" | cut -d. -f2)" \
      -o "$cache/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$cache/kube-apiserver.tmp" "$cache/kube-apiserver"
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

[ -x "$cache/kube-apiserver" ] || build_apiserver
find_etcd
"$cache/kube-apiserver" --version >&2
echo "$cache"
