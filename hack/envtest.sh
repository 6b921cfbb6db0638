#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver and etcd) from their Go modules with the
# machine's Go toolchain and the Go module proxy. The binaries land in a cache folder outside
# the repository, keyed by version, so a second run rebuilds nothing. Prints that folder.
#
#   hack/envtest.sh            build (if needed) and print the folder
#   ENVTEST_CACHE=/some/dir    override the cache root (default: ~/.cache/gardener-extension-node/envtest)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
apiserver_module="$here/envtest/kube-apiserver"
etcd_module="$here/envtest/etcd"

module_version() { # <go.mod> <module path>
  awk -v m="$2" '$1 == "require" && $2 == m { print $3 } $1 == m && $2 ~ /^v/ { print $2 }' "$1" | head -n 1
}

kube_version="$(module_version "$apiserver_module/go.mod" k8s.io/kubernetes)"
etcd_version="$(module_version "$etcd_module/go.mod" go.etcd.io/etcd/server/v3)"
if [[ -z "$kube_version" || -z "$etcd_version" ]]; then
  echo "envtest: cannot read the pinned versions from hack/envtest/*/go.mod" >&2
  exit 1
fi

cache_root="${ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gardener-extension-node/envtest}"
out="$cache_root/$kube_version-etcd-$etcd_version"
mkdir -p "$out"

export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

build() { # <module dir> <package> <binary name> <version>
  local dir="$1" pkg="$2" name="$3" version="$4"
  local stamp="$out/.$name.version"
  if [[ -x "$out/$name" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
    echo "envtest: $name $version already built" >&2
    return
  fi
  echo "envtest: building $name $version (this takes several minutes the first time)" >&2
  local ldflags=""
  if [[ "$name" == kube-apiserver ]]; then
    # The version the binary reports; upstream sets it with the same linker flags.
    local gv="k8s.io/component-base/version"
    ldflags="-X $gv.gitVersion=$version -X $gv.gitMajor=1 -X $gv.gitMinor=$(cut -d. -f2 <<<"$version")"
    ldflags="$ldflags -X $gv.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$version"
  fi
  (cd "$dir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$out/$name.tmp" "$pkg")
  mv -f "$out/$name.tmp" "$out/$name"
  echo "$version" >"$stamp"
}

build "$apiserver_module" k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$kube_version"
build "$etcd_module" go.etcd.io/etcd/server/v3 etcd "$etcd_version"

echo "$out"
