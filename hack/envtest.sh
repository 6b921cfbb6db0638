#!/usr/bin/env bash
# Builds the real components the tests and `make start` run, from their Go modules with the
# machine's Go toolchain and the Go module proxy:
#
#   hack/envtest/components/   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
#                              (k8s.io/kubernetes with its staging replaces), etcd
#                              (go.etcd.io/etcd/server/v3), gardener-resource-manager and
#                              gardener-node-agent (github.com/gardener/gardener), helm
#                              (helm.sh/helm/v4), crane (github.com/google/go-containerregistry:
#                              the loopback OCI registry of the takeover e2e and its pushes),
#                              provision-osc (ours: gardenlet's nodeinit rendering, see its main.go)
#                              and the machine controllers the Worker e2e drives:
#                              machine-controller-manager (MCM core: MachineDeployments and
#                              MachineSets, github.com/gardener/machine-controller-manager),
#                              machine-controller-manager-provider-local (gardener's provider-local
#                              machine controller, the real one) and machine-provider-nspawn (ours:
#                              MCM's provider framework with provider-local's MachineClasses, whose
#                              machines the harness's node cloud boots as systemd-nspawn
#                              containers, see its main.go)
#
# All of them link the Kubernetes libraries, so they share one wrapper module and are built by
# one `go build`: every common package (client-go, apiserver, controller-runtime, ...) compiles
# once, at one version. With `--node` also the rest of what a shoot node runs (make e2e):
#
#   hack/envtest/containerd/   containerd, containerd-shim-runc-v2, ctr
#                              (github.com/containerd/containerd/v2)
#   hack/envtest/gvisor/       runsc, containerd-shim-runsc-v1 (gvisor.dev/gvisor, a
#                              pseudo-version of its `go` branch)
#
# These two pin their own dependency graphs (containerd's and gVisor's), which do not meet the
# Kubernetes one, so each is its own module and build.
#
# The binaries land in a cache folder outside the repository; a stamp next to them (the
# versions plus a hash of the module's go.sum) says what they were built from, so a second run
# rebuilds nothing and a changed pin rebuilds. Prints that folder. A lock on the folder makes
# concurrent first runs wait for each other instead of building into the same files.
#
#   hack/envtest.sh            build (if needed) and print the folder
#   hack/envtest.sh --node     the same, plus containerd and gVisor
#   ENVTEST_CACHE=/some/dir    override the cache root (default: ~/.cache/gardener-extension-node/envtest)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
components_module="$here/envtest/components"
containerd_module="$here/envtest/containerd"
gvisor_module="$here/envtest/gvisor"
node=false
if [[ "${1:-}" == "--node" ]]; then node=true; fi

module_version() { # <go.mod> <module path>
  awk -v m="$2" '$1 == "require" && $2 == m { print $3 } $1 == m && $2 ~ /^v/ { print $2 }' "$1" | head -n 1
}
sum_hash() { # <module dir>: its dependency graph and its own Go files, in 16 hex digits
  (cd "$1" && find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort | xargs sha256sum) |
    sha256sum | cut -c1-16
}

kube_version="$(module_version "$components_module/go.mod" k8s.io/kubernetes)"
etcd_version="$(module_version "$components_module/go.mod" go.etcd.io/etcd/server/v3)"
gardener_version="$(module_version "$components_module/go.mod" github.com/gardener/gardener)"
helm_version="$(module_version "$components_module/go.mod" helm.sh/helm/v4)"
if [[ -z "$kube_version" || -z "$etcd_version" || -z "$gardener_version" || -z "$helm_version" ]]; then
  echo "envtest: cannot read the pinned versions from hack/envtest/components/go.mod" >&2
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

built() { # <stamp name> <stamp> <binary>...: whether every binary exists and the stamp matches
  local stamp_file="$out/.$1.stamp" stamp="$2"
  shift 2
  [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp" ]] || return 1
  local name
  for name in "$@"; do [[ -x "$out/$name" ]] || return 1; done
}

# build <set> <stamp> <module dir> <ldflags> <tags> <package=binary>...: one `go build` of
# every package into a scratch folder, then each binary moved into place under its name.
build() {
  local set="$1" stamp="$2" dir="$3" ldflags="$4" tags="$5"
  shift 5
  local names=() pkgs=() pair
  for pair in "$@"; do pkgs+=("${pair%%=*}"); names+=("${pair##*=}"); done
  if built "$set" "$stamp" "${names[@]}"; then
    echo "envtest: $set ($stamp) already built" >&2
    return
  fi
  echo "envtest: building $set: ${names[*]} (this takes several minutes the first time)" >&2
  local started=$SECONDS scratch="$out/.build-$set"
  rm -rf "$scratch" && mkdir -p "$scratch"
  (cd "$dir" && go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$scratch/" "${pkgs[@]}")
  local i
  for i in "${!pkgs[@]}"; do
    # `go build -o DIR/` names a binary after its package path, the element before a /vN.
    local produced="${pkgs[$i]}"
    if [[ "$produced" =~ /v[0-9]+$ ]]; then produced="${produced%/*}"; fi
    mv -f "$scratch/${produced##*/}" "$out/${names[$i]}"
  done
  rm -rf "$scratch"
  echo "$stamp" >"$out/.$set.stamp"
  echo "envtest: built $set in $((SECONDS - started)) s" >&2
}

# The versions the binaries report; upstream sets them with the same linker flags. One build
# links one value per variable into every binary: gardener-resource-manager, which upstream
# stamps with gardener's version through the same component-base variables, reports the
# Kubernetes version here (it only shows in `--version` and the build-info metric).
gv="k8s.io/component-base/version"
ldflags="-X $gv.gitVersion=$kube_version -X $gv.gitMajor=1 -X $gv.gitMinor=$(cut -d. -f2 <<<"$kube_version")"
ldflags="$ldflags -X $gv.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$kube_version"
ldflags="$ldflags -X helm.sh/helm/v4/internal/version.version=$helm_version"
build components "$kube_version etcd-$etcd_version gardener-$gardener_version helm-$helm_version $(sum_hash "$components_module")" \
  "$components_module" "$ldflags" "" \
  k8s.io/kubernetes/cmd/kube-apiserver=kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager=kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler=kube-scheduler \
  k8s.io/kubernetes/cmd/kubelet=kubelet \
  go.etcd.io/etcd/server/v3=etcd \
  github.com/gardener/gardener/cmd/gardener-resource-manager=gardener-resource-manager \
  github.com/gardener/gardener/cmd/gardener-node-agent=gardener-node-agent \
  github.com/google/go-containerregistry/cmd/crane=crane \
  github.com/gardener-extension-node/hack/envtest/components/provision-osc=provision-osc \
  github.com/gardener/machine-controller-manager/cmd/machine-controller-manager=machine-controller-manager \
  github.com/gardener/gardener/cmd/machine-controller-manager-provider-local=machine-controller-manager-provider-local \
  github.com/gardener-extension-node/hack/envtest/components/machine-provider-nspawn=machine-provider-nspawn \
  helm.sh/helm/v4/cmd/helm=helm

if $node; then
  containerd_version="$(module_version "$containerd_module/go.mod" github.com/containerd/containerd/v2)"
  gvisor_version="$(module_version "$gvisor_module/go.mod" gvisor.dev/gvisor)"
  if [[ -z "$containerd_version" || -z "$gvisor_version" ]]; then
    echo "envtest: cannot read the containerd or gVisor version from hack/envtest/*/go.mod" >&2
    exit 1
  fi
  # Static builds without the btrfs snapshotter (cgo); overlayfs and native remain.
  cv="github.com/containerd/containerd/v2/version"
  build containerd "$containerd_version $(sum_hash "$containerd_module")" "$containerd_module" \
    "-X $cv.Version=$containerd_version -X $cv.Package=github.com/containerd/containerd/v2" \
    "no_btrfs osusergo netgo" \
    github.com/containerd/containerd/v2/cmd/containerd=containerd \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2=containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr=ctr
  build gvisor "$gvisor_version $(sum_hash "$gvisor_module")" "$gvisor_module" \
    "-X gvisor.dev/gvisor/runsc/version.version=$gvisor_version" "" \
    gvisor.dev/gvisor/runsc=runsc \
    gvisor.dev/gvisor/shim=containerd-shim-runsc-v1
fi

echo "$out"
