# Images of gardener-extension-node.
#
#   docker build --target operator -t gardener-extension-node/operator:v0.1.0 .
#   docker build --target gvisor-installation -t gardener-extension-node/gvisor-installation:v0.1.0 .
#   docker build --target node-agent -t gardener-extension-node/node-agent:v0.1.0 .
#
# Without a container daemon, `make images` builds the same three images (hack/images.sh, as
# OCI layouts from the static binary of `cargo build --release --target x86_64-unknown-linux-musl`)
# and `make push-images` pushes them. Keep the stages below and that script in step: files,
# user, entrypoint and command (test/images.rs compares them).
#
# All carry the same static (musl) binary. The installation image adds runsc and
# containerd-shim-runsc-v1, built from the gVisor Go module pinned in hack/envtest/gvisor/go.mod.
# That go.mod is the one pin for tests and images: the tests build the same files with
# hack/envtest.sh --node.

# --- build: one static binary --------------------------------------------------------------
FROM rust:1-bookworm AS builder
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY charts/internal charts/internal
COPY imagevector imagevector
# Declared test/bench targets must exist for cargo to read the manifest; they are not built.
COPY test test
COPY benches benches
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin gardener-extension-node \
 && cp target/x86_64-unknown-linux-musl/release/gardener-extension-node /gardener-extension-node

# --- gVisor: runsc and its shim from the pinned Go module -----------------------------------
# Same build as hack/envtest.sh --node: static, version read from go.mod and set by the linker.
FROM golang:1.26-bookworm AS gvisor
ENV GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
WORKDIR /src
COPY hack/envtest/gvisor/go.mod hack/envtest/gvisor/go.sum ./
RUN set -eu; \
    version="$(awk '$1 == "require" && $2 == "gvisor.dev/gvisor" { print $3 } $1 == "gvisor.dev/gvisor" && $2 ~ /^v/ { print $2 }' go.mod | head -n 1)"; \
    [ -n "$version" ] || { echo "gvisor: no gvisor.dev/gvisor version in go.mod" >&2; exit 1; }; \
    ldflags="-s -w -X gvisor.dev/gvisor/runsc/version.version=$version"; \
    mkdir -p /var/content; \
    go build -trimpath -ldflags "$ldflags" -o /var/content/runsc gvisor.dev/gvisor/runsc; \
    go build -trimpath -ldflags "$ldflags" -o /var/content/containerd-shim-runsc-v1 gvisor.dev/gvisor/shim; \
    chmod 0755 /var/content/runsc /var/content/containerd-shim-runsc-v1

# --- operator: static binary, non-root, nothing else ---------------------------------------
# The chart passes `operator …` as the container's args; `operator` alone is the default.
FROM scratch AS operator
COPY --from=builder /gardener-extension-node /usr/local/bin/gardener-extension-node
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gardener-extension-node"]
CMD ["operator"]

# --- gVisor installation image: our installer + runsc + shim -----------------------------------
# Runs privileged in the shoot (it edits the node's containerd config); the binary is the same.
FROM scratch AS gvisor-installation
COPY --from=builder /gardener-extension-node /usr/local/bin/gardener-extension-node
COPY --from=gvisor /var/content /var/content
ENTRYPOINT ["/usr/local/bin/gardener-extension-node", "gvisor-install"]

# --- node agent: what gardenlet's node-init pulls for `gardener-node-agent` ---------------------
# node-init copies /gardener-node-agent out of the image to /opt/bin and runs `bootstrap`; called
# by that name the binary takes gardener-node-agent's command line (docs/agent.md#bootstrap).
FROM scratch AS node-agent
COPY --from=builder /gardener-extension-node /gardener-node-agent
ENTRYPOINT ["/gardener-node-agent"]
