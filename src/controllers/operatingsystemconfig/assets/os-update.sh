#!/bin/sh
# In-place operating system update of a Debian or Ubuntu node (GEP-31), shipped by
# gardener-extension-node as an extension file of in-place worker pools. The node agent runs it
# with one argument, the machine image version the pool should run, once the node is ready for
# the update; the node agent then waits for the node to come back on that version.
#
# What it does: package updates within the running release (apt-get update, then full-upgrade
# keeping changed configuration files), then a reboot. It never changes the release: a new
# Debian major version or Ubuntu release is a new machine image, rolled out by replacing nodes.
#
# Exit codes and messages follow what gardener-node-agent classifies (osc_changes.go):
#   2 "invalid arguments: ..."  fatal, the node is marked failed;
#   1 "network problems: ..."   retried (the package archive could not be reached);
#   1 "system failure: ..."     fatal (apt failed to install, or the version is not reached).
set -u

fail() { code=$1; shift; printf '%s\n' "$*" >&2; exit "$code"; }
# Text from outside (the argument, os-release, debian_version) as a message quotes it: printable
# ASCII only (anything else becomes '?'), at most 64 characters. The node agent puts the last
# line into a Node annotation and its log; an escape sequence or a line break must not ride along.
shown() { printf '%s' "$1" | tr -c '[:print:]' '?' | cut -c1-64; }

want=${1-}
case $want in
  '' | *[!0-9.]* | .* | *. | *..*) fail 2 "invalid arguments: version '$(shown "$want")' is not of the form 12.7 or 24.04.2" ;;
esac
[ $# -eq 1 ] || fail 2 "invalid arguments: expected exactly one version, got $#"

os_release=/etc/os-release
[ -r "$os_release" ] || os_release=/usr/lib/os-release
# os-release is a shell-compatible KEY=value file written by the distribution. Checked before
# sourcing: a `.` of a missing file exits the shell (status 2) before any `|| fail` runs.
[ -r "$os_release" ] || fail 1 "system failure: cannot read $os_release"
ID= VERSION_ID=
. "$os_release"

case $ID in
  debian)
    # Debian's image version is <major>.<point> (12.7); os-release knows the major only.
    [ "${want%%.*}" = "$VERSION_ID" ] ||
      fail 2 "invalid arguments: $want is not a point release of Debian $(shown "$VERSION_ID"); a new major version needs new nodes"
    current() { cat /etc/debian_version; } ;;
  ubuntu)
    # Ubuntu's image version is <release>[.<point>] (24.04 or 24.04.2).
    release=$(echo "$want" | cut -d. -f1,2)
    [ "$release" = "$VERSION_ID" ] ||
      fail 2 "invalid arguments: $want is not a point release of Ubuntu $(shown "$VERSION_ID"); a new release needs new nodes"
    current() { . "$os_release"; echo "$VERSION" | sed -n 's/^\([0-9][0-9.]*\).*/\1/p'; } ;;
  *) fail 2 "invalid arguments: this update is for Debian and Ubuntu, the node runs '$(shown "$ID")'" ;;
esac

export DEBIAN_FRONTEND=noninteractive
apt-get -q update || fail 1 "network problems: apt-get update failed (see above)"
# Point releases may be published after the image version was chosen: the archive's current
# packages are installed, which is at least the wanted version.
apt-get -q -y -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold full-upgrade ||
  fail 1 "system failure: apt-get full-upgrade failed (see above)"

have=$(current)
lowest=$(printf '%s\n%s\n' "$have" "$want" | sort -t. -k1,1n -k2,2n -k3,3n | head -n1)
if [ "$lowest" != "$want" ]; then
  fail 1 "system failure: the archive offers $(shown "$have"), older than the wanted $want"
fi
echo "updated to $(shown "$have") (wanted $want); rebooting"
systemctl reboot --no-block || fail 1 "system failure: cannot ask systemd to reboot"
