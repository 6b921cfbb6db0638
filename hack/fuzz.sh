#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for a fixed time (`make fuzz`).
#
#   hack/fuzz.sh [seconds per target]      default: $FUZZ_SECONDS or 60
#
# Needs a nightly toolchain (cargo-fuzz builds with sanitizer flags); installs cargo-fuzz
# from crates.io when missing. libFuzzer writes new inputs to a scratch corpus, so the
# committed seeds in fuzz/corpus/<target>/ stay small. A crash fails the run and leaves the
# input in fuzz/artifacts/<target>/; replay it with
#   cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>
# and add a regression test next to the code it found. An input that runs longer than 10 s
# (e.g. blocks on a FIFO) is a failure too (libFuzzer's -timeout).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-${FUZZ_SECONDS:-60}}"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz: a nightly toolchain is required (rustup toolchain install nightly)" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi

targets=$(cargo +nightly fuzz list --fuzz-dir fuzz)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# Rust code only (the crate forbids unsafe): no sanitizer, but debug assertions (overflow
# checks) on; one build for all targets.
flags=(--fuzz-dir fuzz --sanitizer none --debug-assertions)
cargo +nightly fuzz build "${flags[@]}"
for target in $targets; do
  mkdir -p "$scratch/$target"
  echo "fuzz: $target for ${seconds}s"
  cargo +nightly fuzz run "${flags[@]}" "$target" "$scratch/$target" "fuzz/corpus/$target" -- \
    -max_total_time="$seconds" -max_len=65536 -timeout=10 -print_final_stats=1 2>&1 |
    grep -E '^stat::(number_of_executed_runs|new_units_added)|DONE|panicked|ERROR|SUMMARY|Test unit written' || true
  # grep swallows the exit status; a crash leaves an artifact.
  if compgen -G "fuzz/artifacts/$target/*" >/dev/null; then
    echo "fuzz: $target found a failing input:" fuzz/artifacts/"$target"/* >&2
    exit 1
  fi
done
echo "fuzz: all targets ran ${seconds}s without a failure"
