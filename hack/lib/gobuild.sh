# Helpers of the scripts that build Go components into a cache folder outside the repository
# (hack/envtest.sh, hack/peers.sh). Sourced, not run. The caller sets:
#
#   out          the cache folder the binaries and their stamps go to
#   log_prefix   the word messages on stderr start with (default: envtest)
#
# and exports GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0 for reproducible static builds.

module_version() { # <go.mod> <module path>
  awk -v m="$2" '$1 == "require" && $2 == m { print $3 } $1 == m && $2 ~ /^v/ { print $2 }' "$1" | head -n 1
}
sum_hash() { # <module dir>: its dependency graph and its own Go files, in 16 hex digits
  (cd "$1" && find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort | xargs sha256sum) |
    sha256sum | cut -c1-16
}

# lock_out: takes an exclusive lock on $out (waiting, with a message, while another run builds
# into it) on file descriptor 9, held until the script exits.
lock_out() {
  exec 9>"$out/.lock"
  if ! flock -n 9; then
    echo "${log_prefix:-envtest}: another build into $out is running; waiting for it" >&2
    flock 9
  fi
}

built() { # <stamp name> <stamp> <binary>...: whether every binary exists and the stamp matches
  local stamp_file="$out/.$1.stamp" stamp="$2"
  shift 2
  [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp" ]] || return 1
  local name
  for name in "$@"; do [[ -x "$out/$name" ]] || return 1; done
}

# build <set> <stamp> <module dir> <ldflags> <tags> <package=binary>...: one `go build` of
# every package into a scratch folder, then each binary moved into place under its name.
# Returns non-zero (stamp untouched) when the build fails, also where `set -e` is off (a
# caller testing the result).
build() {
  local set="$1" stamp="$2" dir="$3" ldflags="$4" tags="$5" prefix="${log_prefix:-envtest}"
  shift 5
  local names=() pkgs=() pair
  for pair in "$@"; do pkgs+=("${pair%%=*}"); names+=("${pair##*=}"); done
  if built "$set" "$stamp" "${names[@]}"; then
    echo "$prefix: $set ($stamp) already built" >&2
    return
  fi
  echo "$prefix: building $set: ${names[*]} (this takes several minutes the first time)" >&2
  local started=$SECONDS scratch="$out/.build-$set"
  rm -rf "$scratch" && mkdir -p "$scratch" || return 1
  (cd "$dir" && go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$scratch/" "${pkgs[@]}") || return 1
  local i
  for i in "${!pkgs[@]}"; do
    # `go build -o DIR/` names a binary after its package path, the element before a /vN.
    local produced="${pkgs[$i]}"
    if [[ "$produced" =~ /v[0-9]+$ ]]; then produced="${produced%/*}"; fi
    mv -f "$scratch/${produced##*/}" "$out/${names[$i]}" || return 1
  done
  rm -rf "$scratch"
  echo "$stamp" >"$out/.$set.stamp" || return 1
  echo "$prefix: built $set in $((SECONDS - started)) s" >&2
}
