#!/usr/bin/env bash
# Fails if a process started by this test run is still running after the tests: the control
# planes, gardener-resource-manager, operators, agents and nspawn machines the tests start all
# inherit GARDENER_EXTENSION_NODE_TEST_RUN from `make test`, so they are found by that
# variable and nothing else (a `make start` in another terminal or another project's
# kube-apiserver has a different value or none). The test harness's watchdogs kill
# everything right after each test binary exits; allow them a few seconds. The cgroup
# folders of shoot nodes must be gone as well.
#
#   hack/check-orphans.sh <run id>
set -uo pipefail
run_id="${1:-${GARDENER_EXTENSION_NODE_TEST_RUN:-}}"
if [[ -z "$run_id" ]]; then
  echo "check-orphans: usage: $0 <run id> (the GARDENER_EXTENSION_NODE_TEST_RUN of the test run)" >&2
  exit 2
fi
marker="GARDENER_EXTENSION_NODE_TEST_RUN=$run_id"

leftovers() {
  local pid
  for environ in /proc/[0-9]*/environ; do
    pid="${environ#/proc/}"
    pid="${pid%/environ}"
    [[ "$pid" == "$$" || "$pid" == "$BASHPID" ]] && continue
    # Kernel threads and processes that just exited have no readable environment.
    if { tr '\0' '\n' <"$environ"; } 2>/dev/null | grep -qxF -- "$marker"; then
      echo "$pid"
    fi
  done
}

# Cgroup folders of test machines and shoot nodes (test/support/nspawn.rs) whose test
# process is gone: gen-machine-<pid>-<n>.
stale_node_cgroups() {
  local dir owner
  for dir in $(find /sys/fs/cgroup -maxdepth 6 -type d -name 'gen-machine-*' 2>/dev/null); do
    owner="${dir##*/gen-machine-}"
    owner="${owner%%-*}"
    [[ -e "/proc/$owner" ]] || echo "$dir"
  done
}

# What a left folder still holds: processes (with their state) and charged memory.
describe_cgroup() {
  local dir="$1" procs pid
  procs="$(find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | tr '\n' ' ')"
  echo "$dir (processes: ${procs:-none}; memory: $(cat "$dir/memory.usage_in_bytes" 2>/dev/null || echo -) bytes)"
  for pid in $procs; do
    echo "  $(ps -o pid=,stat=,args= -p "$pid" 2>/dev/null)"
  done
}

# Processes get 10 s; a machine's watchdog retries its cgroup folders for 30 s
# (test/support/nspawn.rs, CGROUP_REMOVAL_PATIENCE).
SECONDS=0
while true; do
  pids="$(leftovers)"
  cgroups="$(stale_node_cgroups)"
  if [[ -z "$pids" && -z "$cgroups" ]]; then
    echo "check-orphans: nothing this test run started is left running"
    exit 0
  fi
  if [[ -n "$pids" && $SECONDS -ge 10 ]] || [[ $SECONDS -ge 35 ]]; then
    break
  fi
  sleep 0.2
done
if [[ -n "$cgroups" ]]; then
  echo "check-orphans: cgroup folders of finished machines are left:" >&2
  for dir in $cgroups; do
    describe_cgroup "$dir" >&2
  done
fi
if [[ -n "$pids" ]]; then
  echo "check-orphans: processes of this test run outlived the tests:" >&2
  for pid in $pids; do
    ps -o pid=,args= -p "$pid" >&2
  done
fi
exit 1
