#!/usr/bin/env bash
# Fails if a kube-apiserver or etcd started by the tests is still running. The test
# harness's watchdog kills them right after each test binary exits; allow it a few seconds.
set -uo pipefail
pattern='gardener-extension-node/envtest/.*/(kube-apiserver|etcd)( |$)'
for _ in $(seq 1 50); do
  if ! pgrep -f -- "$pattern" >/dev/null; then
    echo "check-orphans: no kube-apiserver or etcd left running"
    exit 0
  fi
  sleep 0.2
done
echo "check-orphans: processes outlived the tests:" >&2
pgrep -af -- "$pattern" >&2
exit 1
