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
#                              provision-osc, reconcile-osc and machine-state (ours: gardenlet's
#                              nodeinit and reconcile OSC rendering, gardenlet's machine state
#                              record and restore; see their main.go) and the machine controllers the Worker e2e drives:
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
# Kubernetes one, so each is its own module and build. With `--prometheus` also the monitoring
# tools the rules tests and the monitoring e2e run:
#
#   hack/envtest/prometheus/   prometheus (the server; its API, no web UI assets) and promtool
#                              (github.com/prometheus/prometheus)
#
# Prometheus is its own module for the same reason: v0.316.0 requires prometheus/client_golang
# v1.25.0, whose API client's Query returns one value more than gardener v1.149.3's
# pkg/utils/kubernetes/health takes, so in the wrapper module gardener's binaries no longer
# compile. Its build tags keep, of the service discoveries, only kubernetes (file and static are
# always in), which halves its build time and nearly halves its binaries.
#
# The binaries land in a cache folder outside the repository; a stamp next to them (the
# versions plus a hash of the module's go.sum) says what they were built from, so a second run
# rebuilds nothing and a changed pin rebuilds. Prints that folder. A lock on the folder makes
# concurrent first runs wait for each other instead of building into the same files.
#
#   hack/envtest.sh            build (if needed) and print the folder
#   hack/envtest.sh --node     the same, plus containerd and gVisor
#   hack/envtest.sh --prometheus   the same, plus prometheus and promtool (combines with --node)
#   ENVTEST_CACHE=/some/dir    override the cache root (default: ~/.cache/gardener-extension-node/envtest)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
components_module="$here/envtest/components"
containerd_module="$here/envtest/containerd"
gvisor_module="$here/envtest/gvisor"
prometheus_module="$here/envtest/prometheus"
node=false prometheus=false
for arg in "$@"; do
  case "$arg" in
    --node) node=true ;;
    --prometheus) prometheus=true ;;
    *) echo "envtest: unknown argument $arg (see the header of $0)" >&2; exit 2 ;;
  esac
done

log_prefix=envtest
# module_version, sum_hash, lock_out, build: shared with hack/peers.sh.
source "$here/lib/gobuild.sh"

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
lock_out

export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

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
  github.com/gardener-extension-node/hack/envtest/components/reconcile-osc=reconcile-osc \
  github.com/gardener/machine-controller-manager/cmd/machine-controller-manager=machine-controller-manager \
  github.com/gardener/gardener/cmd/machine-controller-manager-provider-local=machine-controller-manager-provider-local \
  github.com/gardener-extension-node/hack/envtest/components/machine-provider-nspawn=machine-provider-nspawn \
  github.com/gardener-extension-node/hack/envtest/components/machine-state=machine-state \
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
  # A second runsc build (another version string, so other bytes): the upgrade that make e2e
  # rolls out under a running gVisor pod (test/node_e2e.rs). Only the link step is new.
  build gvisor-next "$gvisor_version-next $(sum_hash "$gvisor_module")" "$gvisor_module" \
    "-X gvisor.dev/gvisor/runsc/version.version=$gvisor_version-next" "" \
    gvisor.dev/gvisor/runsc=runsc-next
fi

if $prometheus; then
  prometheus_version="$(module_version "$prometheus_module/go.mod" github.com/prometheus/prometheus)"
  if [[ -z "$prometheus_version" ]]; then
    echo "envtest: cannot read the Prometheus version from hack/envtest/prometheus/go.mod" >&2
    exit 1
  fi
  # The module's v0.3MM.P is Prometheus 3.MM.P, the version its binaries report upstream.
  release="${prometheus_version#v0.}"
  minor="${release%%.*}"
  release="$((10#$minor / 100)).$((10#$minor % 100)).${release#*.}"
  # remove_all_sd leaves out every service discovery in Prometheus' plugins package but those
  # enabled one by one; no other package of this build reads these tags.
  tags="remove_all_sd enable_kubernetes_sd"
  build prometheus "$prometheus_version $tags $(sum_hash "$prometheus_module")" "$prometheus_module" \
    "-X github.com/prometheus/common/version.Version=$release" "$tags" \
    github.com/prometheus/prometheus/cmd/prometheus=prometheus \
    github.com/prometheus/prometheus/cmd/promtool=promtool
fi

echo "$out"
