#!/usr/bin/env bash
# Builds the real components the tests and `make start` run, from their Go modules with the
# machine's Go toolchain and the Go module proxy:
#
#   hack/envtest/kubernetes/                 kube-apiserver, kube-controller-manager
#                                            (k8s.io/kubernetes with its staging replaces)
#   hack/envtest/etcd/                       etcd (go.etcd.io/etcd/server/v3)
#   hack/envtest/gardener-resource-manager/  gardener-resource-manager (github.com/gardener/gardener)
#
# and with `--node` also what a shoot node and its scheduler run (make e2e):
#
#   hack/envtest/kubernetes/                 kubelet, kube-scheduler
#   hack/envtest/containerd/                 containerd, containerd-shim-runc-v2, ctr
#                                            (github.com/containerd/containerd/v2)
#   hack/envtest/gvisor/                     runsc, containerd-shim-runsc-v1 (gvisor.dev/gvisor,
#                                            a pseudo-version of its `go` branch)
#
# The binaries land in a cache folder outside the repository, keyed by version, so a second
# run rebuilds nothing. Prints that folder. A lock on the folder makes concurrent first runs
# wait for each other instead of building into the same files.
#
#   hack/envtest.sh            build (if needed) and print the folder
#   hack/envtest.sh --node     the same, plus the node components
#   ENVTEST_CACHE=/some/dir    override the cache root (default: ~/.cache/gardener-extension-node/envtest)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kubernetes_module="$here/envtest/kubernetes"
etcd_module="$here/envtest/etcd"
grm_module="$here/envtest/gardener-resource-manager"
containerd_module="$here/envtest/containerd"
gvisor_module="$here/envtest/gvisor"
node=false
if [[ "${1:-}" == "--node" ]]; then node=true; fi

module_version() { # <go.mod> <module path>
  awk -v m="$2" '$1 == "require" && $2 == m { print $3 } $1 == m && $2 ~ /^v/ { print $2 }' "$1" | head -n 1
}

kube_version="$(module_version "$kubernetes_module/go.mod" k8s.io/kubernetes)"
etcd_version="$(module_version "$etcd_module/go.mod" go.etcd.io/etcd/server/v3)"
gardener_version="$(module_version "$grm_module/go.mod" github.com/gardener/gardener)"
if [[ -z "$kube_version" || -z "$etcd_version" || -z "$gardener_version" ]]; then
  echo "envtest: cannot read the pinned versions from hack/envtest/*/go.mod" >&2
  exit 1
fi

cache_root="${ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gardener-extension-node/envtest}"
out="$cache_root/$kube_version-etcd-$etcd_version"
mkdir -p "$out"
exec 9>"$out/.lock"
if ! flock -n 9; then
  echo "envtest: another build into $out is running; waiting for it" >&2
  flock 9
fi

export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

build() { # <module dir> <package> <binary name> <version> [ldflags] [build tags]
  local dir="$1" pkg="$2" name="$3" version="$4" ldflags="${5:-}" tags="${6:-}"
  local stamp="$out/.$name.version"
  if [[ -x "$out/$name" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
    echo "envtest: $name $version already built" >&2
    return
  fi
  echo "envtest: building $name $version (this takes several minutes the first time)" >&2
  local started=$SECONDS
  (cd "$dir" && go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$out/$name.tmp" "$pkg")
  mv -f "$out/$name.tmp" "$out/$name"
  echo "$version" >"$stamp"
  echo "envtest: built $name in $((SECONDS - started)) s" >&2
}

# The version the Kubernetes binaries report; upstream sets it with the same linker flags.
gv="k8s.io/component-base/version"
kube_ldflags="-X $gv.gitVersion=$kube_version -X $gv.gitMajor=1 -X $gv.gitMinor=$(cut -d. -f2 <<<"$kube_version")"
kube_ldflags="$kube_ldflags -X $gv.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$kube_version"

build "$kubernetes_module" k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$kube_version" "$kube_ldflags"
build "$etcd_module" go.etcd.io/etcd/server/v3 etcd "$etcd_version"
build "$kubernetes_module" k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager "$kube_version" "$kube_ldflags"
build "$grm_module" github.com/gardener/gardener/cmd/gardener-resource-manager gardener-resource-manager \
  "$gardener_version" "-X github.com/gardener/gardener/pkg/version.gitVersion=$gardener_version"

if $node; then
  build "$kubernetes_module" k8s.io/kubernetes/cmd/kubelet kubelet "$kube_version" "$kube_ldflags"
  build "$kubernetes_module" k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler "$kube_version" "$kube_ldflags"
  containerd_version="$(module_version "$containerd_module/go.mod" github.com/containerd/containerd/v2)"
  gvisor_version="$(module_version "$gvisor_module/go.mod" gvisor.dev/gvisor)"
  if [[ -z "$containerd_version" || -z "$gvisor_version" ]]; then
    echo "envtest: cannot read the containerd or gVisor version from hack/envtest/*/go.mod" >&2
    exit 1
  fi
  # Static builds without the btrfs snapshotter (cgo); overlayfs and native remain.
  cv="github.com/containerd/containerd/v2/version"
  containerd_ldflags="-X $cv.Version=$containerd_version -X $cv.Package=github.com/containerd/containerd/v2"
  for cmd in containerd containerd-shim-runc-v2 ctr; do
    build "$containerd_module" "github.com/containerd/containerd/v2/cmd/$cmd" "$cmd" "$containerd_version" \
      "$containerd_ldflags" "no_btrfs osusergo netgo"
  done
  gvisor_ldflags="-X gvisor.dev/gvisor/runsc/version.version=$gvisor_version"
  build "$gvisor_module" gvisor.dev/gvisor/runsc runsc "$gvisor_version" "$gvisor_ldflags"
  build "$gvisor_module" gvisor.dev/gvisor/shim containerd-shim-runsc-v1 "$gvisor_version" "$gvisor_ldflags"
fi

echo "$out"
