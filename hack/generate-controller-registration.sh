#!/usr/bin/env bash
# Writes the registrations of the extension into example/: each file holds a ControllerDeployment
# that embeds the chart under charts/gardener-extension-node (packaged with helm, repacked
# deterministically so the files only change when the chart does) and a ControllerRegistration
# for the kinds/types it handles.
#
#   controller-registration.yaml          every controller (gvisor, OS, worker) in one installation
#   controller-registration-gvisor.yaml   ContainerRuntime gvisor only
#   controller-registration-os.yaml       OperatingSystemConfig only
#   controller-registration-worker.yaml   Worker only
#
# The per-component files enable only their controllers through the ControllerDeployment's
# chart values and carry distinct names, so a landscape installs just the part no other
# extension already serves.
#
#   hack/generate-controller-registration.sh [--registry <prefix>] [--tag <tag>] [output-dir]
#
# Without --registry/--tag (make generate, into example/) the values keep the chart's image
# defaults. With them (make generate-registrations REGISTRY=… TAG=… OUT=…) every image the
# registrations name follows <prefix>/<image>:<tag>, as `make images`/`make push-images` name
# them (docs/operations.md#install):
#
#   operator image                 chart values image.repository/image.tag
#   gVisor installation image      chart value imageVectorOverwrite (where the ContainerRuntime
#                                  controller runs), entry runtime-gvisor-installation
#   node-agent image               gardenlet-imagevector-overwrite.yaml, written beside them:
#                                  gardenlet's image vector entry gardener-node-agent
#                                  (docs/operations.md#the-node-agent-image)
#
# Either flag alone takes the default of the other (gardener-extension-node, v<Cargo.toml
# version>). test/registration_images.rs renders the result with helm and checks every image.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
registry="" tag="" out_dir=""
while (($#)); do
  case "$1" in
    --registry) registry="${2:?--registry needs a value}"; shift 2 ;;
    --registry=*) registry="${1#*=}"; shift ;;
    --tag) tag="${2:?--tag needs a value}"; shift 2 ;;
    --tag=*) tag="${1#*=}"; shift ;;
    -*) echo "generate-controller-registration: unknown flag $1" >&2; exit 1 ;;
    *) [[ -z "$out_dir" ]] || { echo "generate-controller-registration: one output folder only" >&2; exit 1; }
       out_dir="$1"; shift ;;
  esac
done
out_dir="${out_dir:-$root/example}"
custom_images=false
if [[ -n "$registry" || -n "$tag" ]]; then
  custom_images=true
  registry="${registry:-gardener-extension-node}"
  tag="${tag:-v$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)}"
  # The same rules as hack/images.sh: nothing but a reference can end up in the YAML.
  if ! [[ "$registry" =~ ^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$ ]]; then
    echo "generate-controller-registration: --registry '$registry' is not a repository prefix (host[:port]/path, lower case)" >&2
    exit 1
  fi
  if ! [[ "$tag" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]]; then
    echo "generate-controller-registration: --tag '$tag' is not an image tag" >&2
    exit 1
  fi
  mkdir -p "$out_dir"
fi
chart="$root/charts/gardener-extension-node"
# The types registered; keep them equal to the chart's defaults (a test checks).
os_types=(debian ubuntu)
worker_types=(local)

helm="$("$root/hack/helm.sh")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$helm" lint "$chart" >/dev/null
"$helm" package "$chart" --destination "$tmp/packaged" >/dev/null
mkdir -p "$tmp/unpacked"
tar -xzmf "$tmp"/packaged/*.tgz -C "$tmp/unpacked"
# helm stamps the current time into the archive; fix owner, order and times instead.
raw_chart="$(cd "$tmp/unpacked" && tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
  --format=gnu -cf - gardener-extension-node | gzip -n -9 | base64 -w0)"

# The resources of a component, as ControllerRegistration spec.resources entries.
resources() {
  local component="$1" t
  case "$component" in
    all | gvisor) printf '  - kind: ContainerRuntime\n    type: gvisor\n' ;;&
    all | os) for t in "${os_types[@]}"; do printf '  - kind: OperatingSystemConfig\n    type: %s\n' "$t"; done ;;&
    all | worker) for t in "${worker_types[@]}"; do printf '  - kind: Worker\n    type: %s\n' "$t"; done ;;
  esac
}

# The chart values of a component: the combined installation keeps the chart's defaults
# (every controller on), a component turns the other controllers off. With custom images,
# the operator image, and where the ContainerRuntime controller runs the installation image.
values() {
  local component="$1"
  if [[ "$component" == all ]] && ! $custom_images; then
    printf '  values: {}\n'
    return
  fi
  printf '  values:\n'
  if $custom_images; then
    printf '    image:\n      repository: "%s/operator"\n      tag: "%s"\n' "$registry" "$tag"
    if [[ "$component" == all || "$component" == gvisor ]]; then
      printf '    imageVectorOverwrite:\n      images:\n'
      printf '      - name: runtime-gvisor-installation\n        repository: "%s/gvisor-installation"\n        tag: "%s"\n' \
        "$registry" "$tag"
    fi
  fi
  [[ "$component" == all ]] && return
  local enabled
  printf '    controllers:\n'
  for controller in containerRuntime:gvisor operatingSystemConfig:os worker:worker; do
    enabled=false
    [[ "${controller#*:}" == "$component" ]] && enabled=true
    printf '      %s:\n        enabled: %s\n' "${controller%%:*}" "$enabled"
  done
}

# The first lines of every file: how it was made and how to make it for other images.
header() {
  if $custom_images; then
    printf '# Generated by hack/generate-controller-registration.sh --registry %s --tag %s; do not edit.\n' \
      "$registry" "$tag"
    printf '# Images: %s/{operator,gvisor-installation,node-agent}:%s (make images, make push-images).\n' \
      "$registry" "$tag"
  else
    printf '# Generated by hack/generate-controller-registration.sh (make generate); do not edit.\n'
  fi
  printf '# For other images: make generate-registrations REGISTRY=<registry>/<path> TAG=<tag> OUT=<dir>\n'
  printf '# (docs/operations.md#install).\n'
}

# write <component> <name> <file> <what it registers>
write() {
  local component="$1" name="$2" file="$3" what="$4"
  {
    header
    cat <<YAML
# ${what}
# Register it in a garden cluster: kubectl apply -f $(basename "$file")
---
apiVersion: core.gardener.cloud/v1
kind: ControllerDeployment
metadata:
  name: ${name}
helm:
  rawChart: ${raw_chart}
YAML
    values "$component"
    cat <<YAML
---
apiVersion: core.gardener.cloud/v1beta1
kind: ControllerRegistration
metadata:
  name: ${name}
  annotations:
    # The extension namespace only runs the operator, which meets the restricted profile
    # (non-root, read-only root filesystem, no privilege escalation, all capabilities dropped).
    # The privileged gVisor installation DaemonSet runs in the shoot, not in this namespace.
    security.gardener.cloud/pod-security-enforce: restricted
spec:
  deployment:
    policy: OnDemand
    deploymentRefs:
    - name: ${name}
  resources:
YAML
    resources "$component"
  } >"$tmp/registration.yaml"
  mv -f "$tmp/registration.yaml" "$file"
}

write all gardener-extension-node "$out_dir/controller-registration.yaml" \
  "Every controller (ContainerRuntime gvisor, OperatingSystemConfig, Worker) in one installation."
write gvisor gardener-extension-node-gvisor "$out_dir/controller-registration-gvisor.yaml" \
  "The gVisor ContainerRuntime controller only (next to any OS and provider extension)."
write os gardener-extension-node-os "$out_dir/controller-registration-os.yaml" \
  "The OperatingSystemConfig controller only (${os_types[*]})."
write worker gardener-extension-node-worker "$out_dir/controller-registration-worker.yaml" \
  "The Worker controller only (${worker_types[*]})."

# The node-agent image is gardenlet's to pull (its image vector entry gardener-node-agent), not
# the chart's: with custom images, the overwrite for gardenlet goes beside the registrations.
if $custom_images; then
  {
    header
    cat <<YAML
# gardenlet's image vector overwrite: new and running nodes take this extension's node agent
# (docs/operations.md#the-node-agent-image). Give it to gardenlet as its chart value
# imageVectorOverwrite, or in the field spec.deployment.imageVectorOverwrite of a
# seedmanagement.gardener.cloud Gardenlet (both a string: this file's text); remove it to
# switch the nodes back.
images:
- name: gardener-node-agent
  repository: "${registry}/node-agent"
  tag: "${tag}"
YAML
  } >"$tmp/overwrite.yaml"
  mv -f "$tmp/overwrite.yaml" "$out_dir/gardenlet-imagevector-overwrite.yaml"
fi
