#!/usr/bin/env bash
# Installs what `make test` needs on a fresh machine: Debian packages (as root), the Rust
# components for fmt/clippy, and checks that Go and kubectl are present. Idempotent.
set -euo pipefail
# A phase marker that hack/ci-cold.sh times (stderr; one line each).
phase() { echo "ci-phase $1 $(date +%s)" >&2; }

phase apt

# Debian packages the tests use (procps: pgrep for the orphan check; systemd-container,
# dbus, containerd, runsc: the gVisor installer's e2e test boots a real systemd with
# systemd-nspawn and runs Debian's containerd and runsc in it; the host's /usr is the
# container's, so installing them here puts them there). For `make e2e`'s shoot node:
# runc (containerd 2.x's runc shim drives it), containernetworking-plugins (the pod bridge),
# iproute2, busybox-static (the test images) and musl-tools (our static binary, which the
# node and the installation image run); logrotate, which gardenlet's containerd component runs
# on a node (`containerd-logrotate.service` of the reconcile OSC `make e2e-machines` applies).
packages=(procps systemd-container dbus containerd runsc runc containernetworking-plugins iproute2
  busybox-static musl-tools logrotate)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing packages ${missing[*]} and not root; install them first" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

phase rust-toolchain
for tool in go cargo; do
  command -v "$tool" >/dev/null || { echo "install-deps: $tool is required but not on PATH" >&2; exit 1; }
done
if command -v rustup >/dev/null; then
  for component in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$component" || rustup component add "$component"
  done
fi

# The static target for the node's binary (make e2e).
if command -v rustup >/dev/null && ! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
  rustup target add x86_64-unknown-linux-musl
fi
# The node fixture mounts its binaries here (test/support/node.rs); an FHS folder some
# images lack.
if [[ $(id -u) -eq 0 ]]; then mkdir -p /usr/local/sbin; fi

# cargo-deny for `make lint` (licences, duplicate versions, sources). Pinned so a fresh
# machine gets the version deny.toml was written for. It is built from crates.io (no
# prebuilt binary is reachable) and runs once per CI run over a few hundred crates, so its
# release profile's fat LTO, single codegen unit and optimisation (8 minutes on 2 cores) buy
# nothing: without them it builds in a fraction of that, and checks our crates in seconds.
phase cargo-deny
CARGO_DENY_VERSION=0.20.2
if ! cargo deny --version 2>/dev/null | grep -q " ${CARGO_DENY_VERSION}$"; then
  echo "install-deps: installing cargo-deny ${CARGO_DENY_VERSION}" >&2
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
    cargo install cargo-deny --version "${CARGO_DENY_VERSION}" --locked --quiet
fi
