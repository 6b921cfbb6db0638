# Images of gardener-extension-node.
#
#   docker build --target operator -t gardener-extension-node/operator:v0.1.0 .
#   docker build --target gvisor-installation -t gardener-extension-node/gvisor-installation:v0.1.0 .
#
# Both carry the same static (musl) binary. The installation image adds runsc and
# containerd-shim-runsc-v1 from a gVisor release, checked against the release's sha512 files.

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

# --- gVisor release binaries -----------------------------------------------------------------
FROM debian:bookworm-slim AS gvisor
ARG GVISOR_VERSION=20260810.0
# Public gVisor release bucket (see https://gvisor.dev/docs/user_guide/install/).
ARG GVISOR_RELEASE_URL=https://storage.googleapis.com/gvisor/releases/release
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl && rm -rf /var/lib/apt/lists/*
WORKDIR /var/content
RUN set -eu; base="${GVISOR_RELEASE_URL}/${GVISOR_VERSION}/x86_64"; \
    for f in runsc containerd-shim-runsc-v1; do \
      curl -fsSLO "${base}/${f}"; curl -fsSLO "${base}/${f}.sha512"; \
      sha512sum -c "${f}.sha512"; rm "${f}.sha512"; chmod 0755 "${f}"; \
    done

# --- operator: static binary, non-root, nothing else ---------------------------------------
FROM scratch AS operator
COPY --from=builder /gardener-extension-node /usr/local/bin/gardener-extension-node
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gardener-extension-node"]

# --- gVisor installation image: our installer + runsc + shim -----------------------------------
# Runs privileged in the shoot (it edits the node's containerd config); the binary is the same.
FROM scratch AS gvisor-installation
COPY --from=builder /gardener-extension-node /usr/local/bin/gardener-extension-node
COPY --from=gvisor /var/content /var/content
ENTRYPOINT ["/usr/local/bin/gardener-extension-node", "gvisor-install"]
