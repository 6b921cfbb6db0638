# gardener-extension-node — developer entry points (Gardener's conventions).
#
#   make start           run the operator: against dev/kubeconfig if present, else a local control plane
#                        (its state in dev/local-env is kept across restarts)
#   make start-clean     the local control plane from an empty dev/local-env
#   make test            everything CI runs: dependencies, format, lint, unit + integration tests
#   make fmt | lint      format / check format, clippy and citations (hack/check-citations.sh)
#   make generate        regenerate crds/ from the Rust types and example/controller-registration*.yaml
#   make check-generate  fail if generated files are out of date
#   make images          the operator, gVisor installation and node-agent images as OCI layouts in
#                        target/images (static release binary, no container daemon: hack/images.sh)
#   make push-images     push them to $(REGISTRY)/<image>:$(TAG) with crane (INSECURE=1: plain HTTP)
#   make generate-registrations  the four registrations and gardenlet's node-agent overwrite for
#                        $(REGISTRY)/$(TAG) into $(OUT) (docs/operations.md#install)
#   make envtest         build (once) kube-apiserver, etcd, kube-controller-manager, kube-scheduler,
#                        kubelet, gardener-resource-manager and helm and print their folder
#   make peers           build (once) the Go extensions the benches measure beside ours
#                        (runtime-gvisor, os-gardenlinux from the shared/peers folder next to the checkout;
#                        provider-local from the Go module proxy) and print their folder
#   make test-resilience the fault-injection tests at full counts (docs/reliability.md)
#   make e2e             the whole path on a real shoot node: kubelet, containerd, runsc (test/node_e2e.rs)
#   make e2e-rollout     the disruptive rollout on four real nodes: budget, stop on failure, resume
#                        (test/rollout_e2e.rs)
#   make e2e-health      a hung kubelet restarted by the agent's health check, on a real node
#                        (test/rollout_e2e.rs)
#   make e2e-steering    four real nodes steered from the pool's Lease: the budget turns the
#                        rollout on, a pause holds it 60 s, a fleet-wide drift is repaired
#                        one node at a time (test/rollout_e2e.rs)
#   make e2e-takeover    nodes booted from gardenlet's provision content: our image pulled from a
#                        loopback registry, bootstrap, client certificates, kubelet's TLS
#                        bootstrap, self-healing, hand-over to and from real gardener-node-agent
#                        (test/node_takeover_e2e.rs)
#   make e2e-machines    the real machine-controller-manager drives the Worker: its machines boot
#                        as nodes (our nspawn machine provider), join and leave, a refused machine
#                        fails the Worker (test/machines_e2e.rs)
#   make e2e-machines-lifecycle  the longer run: a rolling update by a new node-agent key with MCM
#                        down mid-way, scale up and down, an in-place pool updated by MCM's real
#                        in-place flow, a driver crash mid-create, migrate + restore, a slow cloud
#                        with provider-local's blocking create (a delete mid-create); sampled every
#                        500 ms, surge and unavailability asserted
#   make bench-scale     ContainerRuntimes and OSCs at 200, 2,000 and 5,000: time, requests, memory, workers, restart
#   make bench-machines  a pool of 10 over 3 zones created and rolled by the real MCM into docs/benchmarks.md
#   make bench-rollout   GNA's rollout modes against the disruptive rollout on four nodes into docs/benchmarks.md
#   make bench-node      what one such node costs (boot, Ready, memory) into docs/benchmarks.md
#   make bench-agent-certificate  the agent's idle API requests with the client-certificate flow
#                        into docs/benchmarks.md (test/agent_certificate.rs)
#   make fuzz            every cargo-fuzz target for FUZZ_SECONDS (default 60) each
#   make advisories      cargo deny's RustSec check (needs GitHub for the advisory database)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
KUBECONFIG_DEV ?= dev/kubeconfig
# Where `make start` serves /healthz, /readyz and /metrics, and where its local control plane
# keeps its state (`make start START_ADDRESS=127.0.0.1:9090 START_STATE_DIR=dev/local-env-2`
# runs a second one beside the first).
START_ADDRESS ?= 127.0.0.1:8080
START_STATE_DIR ?= dev/local-env

.PHONY: start start-clean test fmt lint generate check-generate envtest peers deps unit integration check-orphans
.PHONY: test-resilience test-rules e2e-prometheus fuzz advisories e2e-prebuild e2e e2e-rollout e2e-health e2e-steering e2e-takeover e2e-machines e2e-machines-lifecycle bench-machines bench-rollout bench-node bench-gvisor
.PHONY: bench-agent-certificate bench-scale images push-images generate-registrations

# The fault-injection binaries; `make test` runs them at reduced counts.
RESILIENCE_TESTS := --test resilience_apiserver --test resilience_etcd \
  --test resilience_operator_kill --test resilience_conflicts --test resilience_agent \
  --test resilience_agent_limits
FUZZ_SECONDS ?= 60
# A phase marker on stderr that hack/ci-cold.sh times: $(call phase,NAME).
phase = echo "ci-phase $(1) $$(date +%s)" >&2

# `exec` hands the recipe's shell over to cargo, and `cargo run` execs the binary: a SIGTERM
# that make passes on to its child reaches the operator or local-env itself, which stop
# everything they started (a plain command would leave them running beside a dead make).
start:
	@if [[ -f $(KUBECONFIG_DEV) ]]; then \
	  echo "Using $(KUBECONFIG_DEV)"; \
	  exec $(CARGO) run -- operator --kubeconfig $(KUBECONFIG_DEV) --http-bind-address $(START_ADDRESS); \
	else \
	  echo "No $(KUBECONFIG_DEV): starting a local control plane with the example objects"; \
	  assets="$$(hack/envtest.sh)"; \
	  ENVTEST_ASSETS="$$assets" exec $(CARGO) run -- local-env --state-dir $(START_STATE_DIR) --http-bind-address $(START_ADDRESS); \
	fi

start-clean:
	@assets="$$(hack/envtest.sh)"; \
	  ENVTEST_ASSETS="$$assets" exec $(CARGO) run -- local-env --clean --state-dir $(START_STATE_DIR) --http-bind-address $(START_ADDRESS)

envtest:
	@hack/envtest.sh

peers:
	@hack/peers.sh

deps:
	@hack/install-deps.sh

fmt:
	$(CARGO) fmt --all

lint:
	hack/check-citations.sh
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --quiet
	@# cargo deny reads the metadata of every platform's crates; a Linux build never
	@# downloads the Windows or Android ones, so fetch them (from crates.io) first.
	$(CARGO) fetch --locked --quiet
	$(CARGO) deny --offline check licenses bans sources

# Separate from lint: the advisory database is fetched from GitHub, which CI machines
# without internet access cannot reach.
advisories:
	$(CARGO) deny check advisories

# GENERATE_BIN: a binary already built (make test passes the one its test build made, so
# check-generate does not compile the binary again for `cargo run`).
generate:
	$(or $(GENERATE_BIN),$(CARGO) run --quiet --) crds --output-dir crds
	hack/generate-controller-registration.sh

check-generate: generate
	@if [[ -n "$$(git status --porcelain -- crds example)" ]]; then \
	  git status --porcelain -- crds example; git diff --stat -- crds example; \
	  echo "generated files are out of date: run 'make generate' and commit"; exit 1; \
	fi

# Every process a test run starts inherits GARDENER_EXTENSION_NODE_TEST_RUN; check-orphans
# looks for that value only.
#
# Lint runs first, with the Go modules' downloads beside it (hack/go-download.sh, network more
# than CPU), so go-builds after it compile instead of waiting on the module proxy.
#
# Prometheus and promtool (hack/envtest.sh --prometheus, minutes on a cold machine) build beside
# the test phase at the lowest priority, in the CPU time the tests leave idle while they wait on
# their API servers (beside lint and the builds they cost those phases minutes); the promtool
# rule tests (test/monitoring_rules.rs, ignored in the main run) run once they are there.
# E2E_PREBUILD=1 (`.ci/run`) builds what the e2e targets need there too (make e2e-prebuild),
# after Prometheus: started earlier it raced go-builds for the envtest build lock or slowed lint
# and the test build (docs/operations.md#continuous-integration). check-generate runs after the
# test build with the binary it made (a `cargo run` would compile it again, the
# dev-dependencies' features aside: minutes on a cold machine).
test: deps
	@mkdir -p "$(TARGET_DIR)"; download_log="$(TARGET_DIR)/go-download.log"; \
	  nice -n 19 hack/go-download.sh >"$$download_log" 2>&1 & download=$$!; \
	  trap 'kill $$download 2>/dev/null || true' EXIT; \
	  $(call phase,lint); $(MAKE) --no-print-directory lint; \
	  $(call phase,go-builds); wait $$download || cat "$$download_log" >&2; \
	  assets="$$(hack/envtest.sh)"; \
	  export GARDENER_EXTENSION_NODE_TEST_RUN="test-$$$$-$$(date +%s%N)"; \
	  $(call phase,build-tests); $(CARGO) test --lib --bins --tests --no-run; \
	  $(call phase,check-generate); \
	  $(MAKE) --no-print-directory check-generate GENERATE_BIN="$(TARGET_DIR)/debug/gardener-extension-node"; \
	  mkdir -p "$(TARGET_DIR)"; prometheus_log="$(TARGET_DIR)/prometheus-build.log"; \
	  prebuild_log="$(TARGET_DIR)/e2e-prebuild.log"; \
	  setsid nice -n 19 bash -c 'hack/envtest.sh --prometheus >"$$1" 2>&1 || exit 10; \
	    [[ "$$2" != 1 ]] || $(MAKE) --no-print-directory e2e-prebuild >"$$3" 2>&1 || exit 11' \
	    background "$$prometheus_log" "$(E2E_PREBUILD)" "$$prebuild_log" & background=$$!; \
	  trap 'kill -- -$$background 2>/dev/null || true; kill $$download 2>/dev/null || true' EXIT; \
	  $(call phase,test); ENVTEST_ASSETS="$$assets" $(CARGO) test --lib --bins --tests; \
	  $(call phase,builds-beside); status=0; wait $$background || status=$$?; \
	  case $$status in \
	    0) ;; \
	    10) cat "$$prometheus_log"; exit 1 ;; \
	    11) echo "the e2e builds beside the tests failed:"; cat "$$prebuild_log"; exit 1 ;; \
	    *) echo "the builds beside the tests stopped ($$status)"; exit 1 ;; \
	  esac; \
	  $(call phase,rules); ENVTEST_ASSETS="$$assets" $(CARGO) test --test monitoring_rules -- --ignored; \
	  hack/check-orphans.sh "$$GARDENER_EXTENSION_NODE_TEST_RUN"

# The alerts' promtool tests alone (test/monitoring/*.test.yaml).
test-rules: deps
	@assets="$$(hack/envtest.sh --prometheus)"; \
	  ENVTEST_ASSETS="$$assets" $(CARGO) test --test monitoring_rules -- --ignored

check-orphans:
	@hack/check-orphans.sh "$(RUN)"

test-resilience: deps
	@$(call phase,resilience); assets="$$(hack/envtest.sh)"; \
	  export GARDENER_EXTENSION_NODE_TEST_RUN="resilience-$$$$-$$(date +%s%N)"; \
	  ENVTEST_ASSETS="$$assets" RESILIENCE_FULL=1 $(CARGO) test $(RESILIENCE_TESTS) -- --nocapture; \
	  hack/check-orphans.sh "$$GARDENER_EXTENSION_NODE_TEST_RUN"

# The node runs our binary statically linked (it also goes into the installation image).
STATIC_TARGET := x86_64-unknown-linux-musl
TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
# The static build has a target folder of its own, so it can be built while `cargo test` holds
# the main one (`make test E2E_PREBUILD=1` builds it during the test phase: e2e-prebuild).
STATIC_TARGET_DIR := $(TARGET_DIR)/static
STATIC_BINARY := $(STATIC_TARGET_DIR)/$(STATIC_TARGET)/debug/gardener-extension-node
# The images a landscape runs (docs/operations.md#install): `make images push-images
# generate-registrations REGISTRY=<registry>/<path> TAG=<tag>`. REGISTRY is the repository prefix
# (the images are $(REGISTRY)/operator, /gvisor-installation, /node-agent); the defaults are the
# chart's and the image vector's.
REGISTRY ?= gardener-extension-node
TAG ?= v$(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -n 1)
IMAGES_DIR ?= $(TARGET_DIR)/images
OUT ?= dev/registrations
STATIC_RELEASE_BINARY := $(STATIC_TARGET_DIR)/$(STATIC_TARGET)/release/gardener-extension-node

images: deps
	@CARGO_TARGET_DIR="$(STATIC_TARGET_DIR)" $(CARGO) build --release --locked --target $(STATIC_TARGET) --bin gardener-extension-node
	@BINARY="$(STATIC_RELEASE_BINARY)" REGISTRY="$(REGISTRY)" TAG="$(TAG)" IMAGES_DIR="$(IMAGES_DIR)" hack/images.sh build

push-images: images
	@REGISTRY="$(REGISTRY)" TAG="$(TAG)" IMAGES_DIR="$(IMAGES_DIR)" INSECURE="$(INSECURE)" hack/images.sh push

generate-registrations:
	@hack/generate-controller-registration.sh --registry "$(REGISTRY)" --tag "$(TAG)" "$(OUT)"
	@echo "registrations for $(REGISTRY)/<image>:$(TAG) in $(OUT)"

# Runs $(2) with the node components, our static binary and a test-run id starting with $(1),
# then checks that nothing the run started is left.
define node-run
$(call phase,$(1)-go-builds); assets="$$(hack/envtest.sh --node)"; \
	  $(call phase,$(1)-build); CARGO_TARGET_DIR="$(STATIC_TARGET_DIR)" $(CARGO) build --target $(STATIC_TARGET) --bin gardener-extension-node; \
	  export GARDENER_EXTENSION_NODE_TEST_RUN="$(1)-$$$$-$$(date +%s%N)"; \
	  $(call phase,$(1)); \
	  ENVTEST_ASSETS="$$assets" E2E_STATIC_BINARY="$(STATIC_BINARY)" \
	    $(2); \
	  hack/check-orphans.sh "$$GARDENER_EXTENSION_NODE_TEST_RUN"
endef

# What the node runs, built ahead: the node components (containerd, runsc) and our static
# binary. `make test E2E_PREBUILD=1` (`.ci/run`) runs it during its test phase at the lowest
# priority, in the CPU time the tests leave idle; the e2e targets then find both built.
e2e-prebuild: deps
	@hack/envtest.sh --node >/dev/null
	@CARGO_TARGET_DIR="$(STATIC_TARGET_DIR)" $(CARGO) build --quiet --target $(STATIC_TARGET) --bin gardener-extension-node

e2e: deps
	@$(call node-run,e2e,$(CARGO) test --test node_e2e -- --ignored --nocapture --skip bench_)

e2e-rollout: deps
	@$(call node-run,e2e-rollout,$(CARGO) test --test rollout_e2e disruptive_changes -- --ignored --nocapture)

e2e-health: deps
	@$(call node-run,e2e-health,$(CARGO) test --test rollout_e2e hung_kubelet -- --ignored --nocapture)

e2e-steering: deps
	@$(call node-run,e2e-steering,$(CARGO) test --test rollout_e2e the_seed_pauses -- --ignored --nocapture)

e2e-takeover: deps
	@$(call node-run,e2e-takeover,$(CARGO) test --test node_takeover_e2e -- --ignored --nocapture)

# A real Prometheus scrapes the operator and two agents through the API server's node proxy
# (test/prometheus_e2e.rs; root, for two node addresses on the loopback interface).
e2e-prometheus: deps
	@assets="$$(hack/envtest.sh --prometheus)"; \
	  export GARDENER_EXTENSION_NODE_TEST_RUN="e2e-prometheus-$$$$-$$(date +%s%N)"; \
	  $(call phase,e2e-prometheus); \
	  ENVTEST_ASSETS="$$assets" $(CARGO) test --test prometheus_e2e -- --ignored --nocapture; \
	  hack/check-orphans.sh "$$GARDENER_EXTENSION_NODE_TEST_RUN"

e2e-machines: deps
	@$(call node-run,e2e-machines,$(CARGO) test --test machines_e2e -- --ignored --nocapture --skip lifecycle --skip pool_at_scale)

e2e-machines-lifecycle: deps
	@$(call node-run,e2e-machines-lifecycle,$(CARGO) test --test machines_e2e lifecycle -- --ignored --nocapture)

# A pool of 10 over 3 zones created and rolled by the real MCM: docs/benchmarks.md.
bench-machines: deps
	@$(call node-run,bench-machines,$(CARGO) test --test machines_e2e pool_at_scale -- --ignored --nocapture)

# The scale curves: ContainerRuntimes and OSCs at 200, 2,000 and 5,000, workers 1/5/20, a
# restart at the largest point: docs/benchmarks.md (BENCH_SCALE_POINTS=200,2000 measures fewer
# points, BENCH_SCALE_KINDS=containerruntime one kind). The operator measured is the image's
# binary: the static (musl) release build.
bench-scale: deps
	@export ENVTEST_ASSETS="$$(hack/envtest.sh)"; \
	  $(CARGO) build --release --target $(STATIC_TARGET) --bin gardener-extension-node && \
	  OPERATOR_BINARY="$(TARGET_DIR)/$(STATIC_TARGET)/release/gardener-extension-node" \
	    $(CARGO) bench --bench scale

bench-rollout: deps
	@$(call node-run,bench-rollout,$(CARGO) test --test rollout_e2e compare_rollout_modes -- --ignored --nocapture)

# gVisor against runc on the e2e node: pod start and memory (the RuntimeClass overhead's
# measurement), into docs/benchmarks.md.
bench-gvisor: deps
	@$(call node-run,bench-gvisor,$(CARGO) test --test node_e2e bench_gvisor -- --ignored --nocapture)

# What one node of the e2e fixture costs (boot, Ready, memory): docs/benchmarks.md.
bench-node: deps
	@$(call node-run,bench-node,$(CARGO) bench --bench node)

# The agent's idle API requests with a certificate from the real CSR flow: docs/benchmarks.md.
bench-agent-certificate: deps
	@assets="$$(hack/envtest.sh)"; \
	  export GARDENER_EXTENSION_NODE_TEST_RUN="bench-agent-certificate-$$$$-$$(date +%s%N)"; \
	  ENVTEST_ASSETS="$$assets" $(CARGO) test --test agent_certificate idle_requests -- --ignored --nocapture; \
	  hack/check-orphans.sh "$$GARDENER_EXTENSION_NODE_TEST_RUN"

fuzz:
	@hack/fuzz.sh $(FUZZ_SECONDS)
