#!/usr/bin/env bash
# Downloads the modules of every Go module the builds use (hack/envtest/{components,
# containerd,gvisor,prometheus}) into the module cache, in that order, so the builds after it
# compile instead of waiting on the module proxy. `make test` runs it at the lowest priority
# beside lint, whose CPU time it barely touches: on a fresh machine the downloads took about
# 5 of go-builds' 15 minutes (docs/operations.md#continuous-integration). A failed download
# is not fatal here: the build fetches what is missing and reports what it cannot get.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
status=0
for module in components containerd gvisor prometheus; do
  started=$SECONDS
  if (cd "$here/envtest/$module" && go mod download); then
    echo "go-download: $module in $((SECONDS - started)) s"
  else
    echo "go-download: $module failed after $((SECONDS - started)) s; its build will fetch what it needs" >&2
    status=1
  fi
done
exit "$status"
