#!/usr/bin/env bash
# Builds the Go extensions the benchmarks measure side by side with the operator, in the same
# run and on the same kube-apiserver (docs/benchmarks.md), from the published source archives
# in ../shared/peers/ (next to the repository; the Go module proxy does not serve these
# modules, see the README there):
#
#   runtime-gvisor   gardener-extension-runtime-gvisor (ContainerRuntime, benches/containerruntime.rs)
#   os-gardenlinux   gardener-extension-os-gardenlinux (OperatingSystemConfig,
#                    benches/operatingsystemconfig.rs)
#
# and one the Go module proxy does serve, from gardener at the version hack/envtest/components
# pins:
#
#   provider-local   gardener-extension-provider-local (its Worker controller,
#                    benches/worker_side_by_side.rs)
#
# That one is built from a wrapper module in the cache made of the components module's go.mod
# and go.sum (its tools dropped), so it links the same dependency versions as
# gardener-resource-manager and provider-local's machine controller there, and the packages
# they share come out of the Go build cache.
#
# Each archive is extracted into a cache folder outside the repository named after the
# archive's hash (<cache>/<peer>-<16 hex>/src) and its cmd/ built there with the peer's own
# go.mod (dependencies through the Go module proxy), with the machine's Go toolchain; a stamp
# (archive hash and Go version) makes a second run instant. Nothing of the peers is copied
# into the repository. Prints the folder holding a link to each built binary
# (<cache>/bin/gardener-extension-<peer>).
#
#   hack/peers.sh                       build both (if needed) and print the folder
#   hack/peers.sh runtime-gvisor        only that one
#   PEERS_ARCHIVES=/some/dir            where the archives are (default: ../shared/peers)
#   PEERS_CACHE=/some/dir               override the cache root
#                                       (default: ~/.cache/gardener-extension-node/peers)
#
# A peer that cannot be built (no archive, a failed build) is reported on stderr with the
# reason; the others are still built and the folder printed; the exit status is then 1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# module_version, sum_hash, lock_out, built, build
source "$here/lib/gobuild.sh"
log_prefix=peers

archives="${PEERS_ARCHIVES:-$here/../../shared/peers}"
cache_root="${PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gardener-extension-node/peers}"
known=(runtime-gvisor os-gardenlinux provider-local)
# Peers built from a Go module the proxy serves: <peer> → its main package.
declare -A module_peers=([provider-local]=github.com/gardener/gardener/cmd/gardener-extension-provider-local)
peers=("$@")
if [[ ${#peers[@]} -eq 0 ]]; then peers=("${known[@]}"); fi

export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

if ! command -v go >/dev/null; then
  echo "peers: no Go toolchain on PATH (go); the peers cannot be built" >&2
  exit 1
fi
go_version="$(go env GOVERSION)"
mkdir -p "$cache_root/bin"

# build_peer <peer>: extracts and builds one peer; non-zero with the reason on stderr.
build_peer() {
  local peer="$1" binary="gardener-extension-$1"
  local archive="$archives/$peer.tar.gz"
  if [[ ! -f "$archive" ]]; then
    # The reason last and without the machine's paths: the benches quote it in docs.
    echo "peers: looked for $peer.tar.gz in $archives" >&2
    echo "peers: $peer: no source archive $peer.tar.gz (the shared/peers folder next to the checkout, or PEERS_ARCHIVES)" >&2
    return 1
  fi
  local hash
  hash="$(sha256sum "$archive" | cut -c1-16)"
  out="$cache_root/$peer-$hash"
  mkdir -p "$out"
  lock_out
  local stamp="$hash $go_version"
  if ! built "$peer" "$stamp" "$binary"; then
    rm -rf "$out/src" && mkdir -p "$out/src"
    if ! tar -xzf "$archive" -C "$out/src"; then
      echo "peers: $peer: $peer.tar.gz does not extract" >&2
      return 1
    fi
    local module
    module="$(find "$out/src" -maxdepth 2 -name go.mod -printf '%h\n' | head -n 1)"
    if [[ -z "$module" || ! -d "$module/cmd/$binary" ]]; then
      echo "peers: $peer: $peer.tar.gz has no Go module with cmd/$binary" >&2
      return 1
    fi
    local required
    required="$(awk '$1 == "go" { print $2; exit }' "$module/go.mod")"
    if ! build "$peer" "$stamp" "$module" "" "" "./cmd/$binary=$binary"; then
      echo "peers: $peer: go build ./cmd/$binary failed with $go_version (its go.mod asks for go $required; the Go error is above)" >&2
      return 1
    fi
  else
    echo "peers: $peer ($stamp) already built" >&2
  fi
  ln -sfn "$out/$binary" "$cache_root/bin/$binary"
  exec 9>&-
}

# build_module_peer <peer>: builds a peer of module_peers; non-zero with the reason on stderr.
build_module_peer() {
  local peer="$1" binary="gardener-extension-$1" package="${module_peers[$1]}"
  local components="$here/envtest/components" hash
  hash="$(cat "$components/go.mod" "$components/go.sum" | sha256sum | cut -c1-16)"
  out="$cache_root/$peer-$hash"
  mkdir -p "$out"
  lock_out
  local stamp="$hash $go_version" module="$out/module"
  if ! built "$peer" "$stamp" "$binary"; then
    rm -rf "$module" && mkdir -p "$module"
    cp "$components/go.mod" "$components/go.sum" "$module/"
    # The components' own packages are not in the copy: drop the tool directives naming them.
    awk '/^tool \($/ { skip = 1; next } skip && /^\)$/ { skip = 0; next } skip || /^tool / { next } { print }' \
      "$components/go.mod" >"$module/go.mod"
    if ! (cd "$module" && go mod edit -module "peers/$peer") ||
      ! build "$peer" "$stamp" "$module" "" "" "$package=$binary"; then
      echo "peers: $peer: go build $package failed with $go_version (the Go error is above)" >&2
      return 1
    fi
  else
    echo "peers: $peer ($stamp) already built" >&2
  fi
  ln -sfn "$out/$binary" "$cache_root/bin/$binary"
  exec 9>&-
}

failed=0
for peer in "${peers[@]}"; do
  if [[ " ${known[*]} " != *" $peer "* ]]; then
    echo "peers: unknown peer $peer (known: ${known[*]})" >&2
    failed=1
    continue
  fi
  if [[ -n "${module_peers[$peer]:-}" ]]; then
    build_module_peer "$peer" || failed=1
  else
    build_peer "$peer" || failed=1
  fi
done
echo "$cache_root/bin"
exit "$failed"
