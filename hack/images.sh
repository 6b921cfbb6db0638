#!/usr/bin/env bash
# Builds the extension's three images without a container daemon, and pushes them with crane
# (built by hack/envtest.sh). `make images` and `make push-images` call it
# (docs/operations.md#install).
#
#   hack/images.sh build   writes an OCI image layout (oci-layout, index.json, blobs/sha256/) per
#                          image into $IMAGES_DIR/<image>/ and prints each image's digest and size
#   hack/images.sh push    pushes every layout to $REGISTRY/<image>:$TAG and prints the pushed
#                          digests (also written to $IMAGES_DIR/pushed.txt)
#
# The images hold what the Dockerfile's targets of the same names hold, from the same static
# binary and the same gVisor pin (hack/envtest/gvisor/go.mod); keep the two in step
# (test/images.rs compares them):
#
#   operator              /usr/local/bin/gardener-extension-node, user 65532:65532,
#                         entrypoint the binary, command `operator` (the chart passes
#                         `operator …` as args)
#   gvisor-installation   the same binary and /var/content/{runsc,containerd-shim-runsc-v1},
#                         entrypoint `gardener-extension-node gvisor-install`
#   node-agent            /gardener-node-agent (the binary under gardener-node-agent's name,
#                         docs/operations.md#the-node-agent-image), entrypoint that file
#
# Every layer is a tar with fixed owner, times and order, gzip without a name or time: the same
# inputs give the same digests. The binary's layer is the same blob in both images that carry
# it, so a registry stores it once.
#
# Environment:
#   REGISTRY    repository prefix (default gardener-extension-node, the chart's and the image
#               vector's default): images are $REGISTRY/operator, $REGISTRY/gvisor-installation
#               and $REGISTRY/node-agent
#   TAG         image tag (default v<version in Cargo.toml>)
#   IMAGES_DIR  where the layouts go (default target/images)
#   BINARY      (build) the static (musl) gardener-extension-node binary
#   GVISOR_DIR  (build) folder holding runsc and containerd-shim-runsc-v1 (default: the folder
#               `hack/envtest.sh --node` prints, which builds them from the pinned module)
#   CRANE       (push) the crane binary (default: crane in the folder hack/envtest.sh prints)
#   GZIP_LEVEL  (build) gzip level of the layers, 1-9 (default 9; the test packs faster)
#   INSECURE    (push) 1: the registry speaks plain HTTP (crane push --insecure)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="${1:-}"
registry="${REGISTRY:-gardener-extension-node}"
tag="${TAG:-v$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)}"
images_dir="${IMAGES_DIR:-$root/target/images}"
images=(operator gvisor-installation node-agent)
gzip_level="${GZIP_LEVEL:-9}"

die() {
  echo "images: $*" >&2
  exit 1
}

# A repository prefix and a tag as the OCI distribution spec allows them (lower-case path
# components; a host may carry a port), so nothing else can end up in a reference or a JSON file.
[[ "$registry" =~ ^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$ ]] ||
  die "REGISTRY '$registry' is not a repository prefix (host[:port]/path, lower case)"
[[ "$tag" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "TAG '$tag' is not an image tag"
[[ "$gzip_level" =~ ^[1-9]$ ]] || die "GZIP_LEVEL '$gzip_level' is not 1-9"

sha256() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }

# blob <file>: moves <file> into the layout's blobs as sha256:<hex>, prints that digest.
blob() {
  local hex
  hex="$(sha256 "$1")"
  mv -f "$1" "$layout/blobs/sha256/$hex"
  echo "sha256:$hex"
}

# layer <staging dir> <file>: a deterministic gzip'ed tar of everything below the staging dir
# (paths without a leading ./, root-owned, time 0, sorted), the uncompressed digest (the
# config's diff_id) on stdout.
layer() {
  local stage="$1" out="$2"
  (cd "$stage" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort) |
    tar -C "$stage" --no-recursion --verbatim-files-from -T - --mtime=@0 --owner=0 --group=0 \
      --numeric-owner --format=gnu -cf "$out.tar"
  echo "sha256:$(sha256 "$out.tar")"
  gzip -n "-$gzip_level" -c "$out.tar" >"$out"
  rm -f "$out.tar"
}

# stage_file <staging dir> <path in the image> <host file>: an executable (0755) and its folders.
stage_file() {
  local path="$1/$2"
  mkdir -p "$(dirname "$path")"
  cp "$3" "$path"
  chmod 0755 "$path"
  find "$1" -type d -exec chmod 0755 {} +
}

# json_strings <word>...: a JSON array of the words (no quoting needed: fixed words only).
json_strings() {
  local IFS=,
  local quoted=()
  local word
  for word in "$@"; do quoted+=("\"$word\""); done
  echo "[${quoted[*]}]"
}

# image <name> <user> <entrypoint> <cmd> <layer name>...: writes $images_dir/<name>/.
# <entrypoint> and <cmd> are space-separated words; layers come from $work/layers/<layer name>.
image() {
  local name="$1" user="$2" entrypoint="$3" cmd="$4"
  shift 4
  layout="$images_dir/$name"
  rm -rf "$layout"
  mkdir -p "$layout/blobs/sha256"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  local layers="" diff_ids="" l digest
  for l in "$@"; do
    cp "$work/layers/$l" "$work/blob"
    digest="$(blob "$work/blob")"
    layers+="${layers:+,}{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"$digest\",\"size\":$(size "$layout/blobs/sha256/${digest#sha256:}")}"
    diff_ids+="${diff_ids:+,}\"$(cat "$work/layers/$l.diff_id")\""
  done
  # The process: as the Dockerfile's stage (no USER or CMD there leaves the field out).
  local process=""
  [[ -n "$user" ]] && process+="\"User\":\"$user\","
  # shellcheck disable=SC2086 # entrypoint and cmd are word lists on purpose
  process+="\"Entrypoint\":$(json_strings $entrypoint),"
  # shellcheck disable=SC2086
  [[ -n "$cmd" ]] && process+="\"Cmd\":$(json_strings $cmd),"
  local config_json="{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{${process}\"Env\":[\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"],\"WorkingDir\":\"/\",\"Labels\":{\"org.opencontainers.image.title\":\"gardener-extension-node/$name\",\"org.opencontainers.image.version\":\"$tag\"}},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[$diff_ids]}}"
  printf '%s' "$config_json" >"$work/blob"
  local config_size config
  config_size="$(size "$work/blob")"
  config="$(blob "$work/blob")"
  printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"$config\",\"size\":$config_size},\"layers\":[$layers]}" >"$work/blob"
  local manifest_size manifest
  manifest_size="$(size "$work/blob")"
  manifest="$(blob "$work/blob")"
  printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"$manifest\",\"size\":$manifest_size,\"annotations\":{\"org.opencontainers.image.ref.name\":\"$tag\"}}]}" >"$layout/index.json"
  local total
  total="$(du -sb "$layout/blobs" | cut -f1)"
  printf '%-20s %s  %s bytes (compressed)\n' "$name" "$manifest" "$total"
}

build() {
  [[ -n "${BINARY:-}" ]] || die "BINARY: the static gardener-extension-node binary is required"
  [[ -x "$BINARY" ]] || die "BINARY $BINARY is not an executable file"
  # A binary that needs a dynamic loader would not start in a FROM-scratch image (the test of
  # this script packs the test build, with ALLOW_DYNAMIC=1).
  if [[ "${ALLOW_DYNAMIC:-}" != 1 ]] && command -v readelf >/dev/null &&
    readelf -l "$BINARY" | grep -q 'Requesting program interpreter'; then
    die "BINARY $BINARY is dynamically linked; the images need the static (musl) build"
  fi
  local gvisor_dir="${GVISOR_DIR:-}"
  if [[ -z "$gvisor_dir" ]]; then
    gvisor_dir="$("$root/hack/envtest.sh" --node | tail -n 1)"
  fi
  for f in runsc containerd-shim-runsc-v1; do
    [[ -x "$gvisor_dir/$f" ]] || die "$gvisor_dir/$f missing (GVISOR_DIR)"
  done

  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/layers" "$images_dir"

  stage_file "$work/stage-binary" usr/local/bin/gardener-extension-node "$BINARY"
  layer "$work/stage-binary" "$work/layers/binary" >"$work/layers/binary.diff_id"
  stage_file "$work/stage-gvisor" var/content/runsc "$gvisor_dir/runsc"
  stage_file "$work/stage-gvisor" var/content/containerd-shim-runsc-v1 "$gvisor_dir/containerd-shim-runsc-v1"
  layer "$work/stage-gvisor" "$work/layers/gvisor" >"$work/layers/gvisor.diff_id"
  stage_file "$work/stage-node-agent" gardener-node-agent "$BINARY"
  layer "$work/stage-node-agent" "$work/layers/node-agent" >"$work/layers/node-agent.diff_id"

  image operator 65532:65532 /usr/local/bin/gardener-extension-node operator binary
  image gvisor-installation "" "/usr/local/bin/gardener-extension-node gvisor-install" "" binary gvisor
  image node-agent "" /gardener-node-agent "" node-agent
  echo "images: OCI layouts in $images_dir (tag $tag); push them with: make push-images REGISTRY=<registry>/<path> TAG=$tag"
}

push() {
  local crane="${CRANE:-}"
  if [[ -z "$crane" ]]; then
    crane="$("$root/hack/envtest.sh" | tail -n 1)/crane"
  fi
  [[ -x "$crane" ]] || die "crane missing: $crane"
  local flags=()
  [[ "${INSECURE:-}" == 1 ]] && flags+=(--insecure)
  local name reference digest pushed=()
  for name in "${images[@]}"; do
    [[ -f "$images_dir/$name/index.json" ]] || die "no layout $images_dir/$name: run hack/images.sh build (make images)"
    reference="$registry/$name:$tag"
    digest="$("$crane" push "${flags[@]}" "$images_dir/$name" "$reference")"
    pushed+=("$reference $digest")
    echo "$reference  $digest"
  done
  printf '%s\n' "${pushed[@]}" >"$images_dir/pushed.txt"
}

case "$mode" in
  build) build ;;
  push) push ;;
  *) die "usage: hack/images.sh build|push (environment: see the script's header)" ;;
esac
