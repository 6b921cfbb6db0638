#!/usr/bin/env bash
# Prints the path of helm (helm.sh/helm/v4, pinned in hack/envtest/components/go.mod). It is
# built by hack/envtest.sh in the same `go build` as the other components that link the
# Kubernetes libraries, into the same cache folder; a second run rebuilds nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
assets="$("$here/envtest.sh")"
echo "$assets/helm"
