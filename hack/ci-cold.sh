#!/usr/bin/env bash
# Runs `.ci/run` the way a new machine would: in a fresh clone of a commit, with an empty
# cargo registry, empty Go module and build caches, an empty envtest cache, and
# prints how long each phase took (the phases are the `ci-phase NAME SECONDS` lines that
# .ci/run, the Makefile and hack/install-deps.sh print on stderr). The Rust toolchain is
# kept (RUSTUP_HOME and the rustup proxies on PATH), as are Debian packages already
# installed: remove them by hand to time the apt phase of a really new machine.
#
#   hack/ci-cold.sh [--keep] [--workdir DIR] [REV]
#
#   REV        the commit to clone (default: HEAD of this checkout)
#   --workdir  where the clone and the empty caches go (default: a new folder under /var/tmp)
#   --keep     leave the work folder (clone, caches, log) in place instead of removing it
#
# Exits non-zero when any phase fails, naming that phase. docs/operations.md ("Continuous
# integration") has the figures of the last run.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
keep=false
workdir=""
rev=HEAD
while (($#)); do
  case "$1" in
    --keep) keep=true ;;
    --workdir) workdir="${2:?--workdir takes a folder}"; shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "ci-cold: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) rev="$1" ;;
  esac
  shift
done
commit="$(git -C "$repo" rev-parse --verify "$rev^{commit}")"

if [[ -z "$workdir" ]]; then
  workdir="$(mktemp -d /var/tmp/ci-cold.XXXXXX)"
elif [[ -e "$workdir" && -n "$(ls -A "$workdir")" ]]; then
  echo "ci-cold: $workdir is not empty; name a new or empty folder" >&2
  exit 2
fi
mkdir -p "$workdir"
workdir="$(cd "$workdir" && pwd)"

clean_up() {
  if $keep; then
    echo "ci-cold: kept $workdir (clone, caches, log)" >&2
  else
    # The Go module cache is read-only by design.
    chmod -R u+w "$workdir" 2>/dev/null || true
    rm -rf "$workdir"
  fi
}
trap clean_up EXIT

# CI lays the shared data next to the clone (tests read ../shared/gardener-crds).
if [[ -d "$repo/../shared" ]]; then
  ln -s "$(cd "$repo/../shared" && pwd)" "$workdir/shared"
fi
git clone --quiet --no-local "$repo" "$workdir/main"
git -C "$workdir/main" checkout --quiet --detach "$commit"

# Empty caches; the toolchain stays as it is: RUSTUP_HOME, and the rustup proxies linked into
# a folder of their own, so that nothing else installed next to them (a cargo-deny, say) is
# found on PATH.
rustup_home="${RUSTUP_HOME:-$HOME/.rustup}"
rustup_bin="$(dirname "$(command -v rustup)")"
mkdir -p "$workdir"/{toolchain,cargo-home/bin,go/cache,go/path,cache}
for proxy in rustup cargo rustc rustdoc rustfmt cargo-fmt cargo-clippy clippy-driver rust-gdb rust-lldb; do
  if [[ -x "$rustup_bin/$proxy" ]]; then ln -s "$rustup_bin/$proxy" "$workdir/toolchain/$proxy"; fi
done
path="$(tr ':' '\n' <<<"$PATH" | grep -vxF -e "$rustup_bin" -e "${CARGO_HOME:-$HOME/.cargo}/bin" | paste -sd:)"
log="$workdir/ci.log"
started=$(date +%s)
echo "ci-cold: .ci/run of ${commit:0:12} in $workdir/main (log: $log)" >&2

set +e
(
  cd "$workdir/main"
  env -u CARGO_TARGET_DIR -u CARGO_BUILD_TARGET_DIR -u RUSTC_WRAPPER -u ENVTEST_ASSETS \
    CI=true PATH="$workdir/cargo-home/bin:$workdir/toolchain:$path" \
    RUSTUP_HOME="$rustup_home" CARGO_HOME="$workdir/cargo-home" \
    GOPATH="$workdir/go/path" GOMODCACHE="$workdir/go/path/pkg/mod" GOCACHE="$workdir/go/cache" \
    XDG_CACHE_HOME="$workdir/cache" ENVTEST_CACHE="$workdir/cache/envtest" \
    bash .ci/run </dev/null
) 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
ended=$(date +%s)

# The phase table: each phase lasts from its marker to the next one (or the end); a phase
# that occurs more than once (deps before each make target) is summed.
awk -v end="$ended" -v start="$started" '
  $1 == "ci-phase" && NF == 3 && $3 ~ /^[0-9]+$/ {
    if (name != "") { total[name] += $3 - at }
    else { lead = $3 - start }
    if (!(($2) in total)) { order[++n] = $2; total[$2] = 0 }
    name = $2; at = $3
  }
  END {
    if (name != "") total[name] += end - at
    printf "\n| phase | seconds | minutes |\n|---|---:|---:|\n"
    if (lead > 0) printf "| clone and start | %d | %.1f |\n", lead, lead / 60
    for (i = 1; i <= n; i++) printf "| %s | %d | %.1f |\n", order[i], total[order[i]], total[order[i]] / 60
    printf "| **total** | %d | %.1f |\n", end - start, (end - start) / 60
  }' "$log"

# Test counts over every test binary of the run.
awk '/^test result:/ {
    for (i = 1; i <= NF; i++) {
      if ($(i + 1) ~ /^passed/) p += $i
      if ($(i + 1) ~ /^failed/) f += $i
      if ($(i + 1) ~ /^ignored/) g += $i
    }
    b++
  }
  END { printf "\ntests: %d binaries, %d passed, %d failed, %d ignored\n", b, p, f, g }' "$log"

if ((rc != 0)); then
  failed="$(awk '$1 == "ci-phase" && NF == 3 { p = $2 } END { print (p == "" ? "before the first phase" : p) }' "$log")"
  echo "ci-cold: FAILED in phase $failed (exit $rc) after $(((ended - started) / 60)) min; see $log" >&2
  keep=true
  exit "$rc"
fi
echo "ci-cold: passed in $(((ended - started) / 60)) min $(((ended - started) % 60)) s" >&2
