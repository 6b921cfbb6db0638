#!/usr/bin/env bash
# Fails when the repository points its readers at documents it does not contain:
#
# - `§`-style section citations (the contract the code follows is in docs/contract.md and
#   docs/agent.md; cite those, or a path in gardener/gardener);
# - names of notes that are not part of the repository;
# - `../shared` (a folder next to the checkout) outside the test support code that loads
#   Gardener's upstream CRDs from there when present.
#
#   hack/check-citations.sh        (run by `make lint`)
set -euo pipefail
cd "$(dirname "$0")/.."

self="hack/check-citations.sh"

# Files that may name `../shared`: they look for Gardener's upstream CRDs next to the checkout
# and skip their checks when the folder is absent.
# hack/ci-cold.sh lays the same folder next to its clone, as CI does; hack/peers.sh builds the
# benches' Go peers from the source archives there and says so when they are absent.
shared_allowed=(
  'test/support/*'
  'benches/bench_support/*'
  'test/crds_upstream.rs'
  'test/bad_input_operator.rs'
  'hack/ci-cold.sh'
  'hack/peers.sh'
)

# Every tracked or new (not ignored) file, without this script.
files=()
while IFS= read -r -d '' file; do
  [[ "$file" == "$self" ]] && continue
  [[ -f "$file" ]] || continue
  files+=("$file")
done < <(git ls-files -z --cached --others --exclude-standard)

allowed_for_shared() {
  local file="$1" pattern
  for pattern in "${shared_allowed[@]}"; do
    # shellcheck disable=SC2053 # the pattern is a glob on purpose
    [[ "$file" == $pattern ]] && return 0
  done
  return 1
}

findings=0
report() {
  local rule="$1"
  while IFS= read -r line; do
    echo "$line: $rule"
    findings=$((findings + 1))
  done
}

# -I skips binary files; -n prints file:line.
report "section citation (§); link docs/contract.md or docs/agent.md instead" \
  < <(grep -nI '§' -- "${files[@]}" || true)
report "names a note outside the repository; link docs/contract.md or docs/agent.md instead" \
  < <(grep -nIP 'extension-contract\.md|osc-worker-gvisor\.md|(?<![\w/])node-agent\.md|node-agent reference|reference notes' \
    -- "${files[@]}" || true)

shared_checked=()
for file in "${files[@]}"; do
  allowed_for_shared "$file" || shared_checked+=("$file")
done
report "../shared outside the test support code (allowed: ${shared_allowed[*]})" \
  < <(grep -nIF '../shared' -- "${shared_checked[@]}" || true)

if ((findings > 0)); then
  echo "check-citations: $findings finding(s)" >&2
  exit 1
fi
echo "check-citations: ok (${#files[@]} files)"
