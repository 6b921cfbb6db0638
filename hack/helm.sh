#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v3, pinned in hack/tools/helm/go.mod) with the machine's Go and the
# Go module proxy into a cache folder outside the repository, keyed by version, and prints the
# path of the binary. A second run rebuilds nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module="$here/tools/helm"
version="$(awk '($1 == "require" && $2 == "helm.sh/helm/v3") { print $3 } ($1 == "helm.sh/helm/v3") { print $2 }' "$module/go.mod" | head -n 1)"
[[ -n "$version" ]] || { echo "helm.sh: cannot read the helm version from $module/go.mod" >&2; exit 1; }

cache_root="${TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gardener-extension-node/tools}"
out="$cache_root/helm-$version"
if [[ ! -x "$out/helm" ]]; then
  echo "helm.sh: building helm $version (first time only)" >&2
  mkdir -p "$out"
  (cd "$module" && GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0 \
    go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" \
    -o "$out/helm.tmp" helm.sh/helm/v3/cmd/helm)
  mv -f "$out/helm.tmp" "$out/helm"
fi
echo "$out/helm"
