#!/usr/bin/env bash
# Install a herder node on Debian 12, as root: the operator's guide's own steps
# (docs/install.md shows each step's commands; the simulated Debian hosts run this same script,
# so what works in the tests is what the guide does).
#
#   node-install.sh packages [--emulated]   Debian's packages of a node (apt)
#   node-install.sh herder WHEEL            the wheel into a venv at /opt/herder
#   node-install.sh units UNIT_DIR          herder's systemd units installed and enabled
#   node-install.sh libvirt-tls             once the node is in the cluster: libvirtd on TLS
#                                           (the primary IP only) and root-only local sockets
#
# `--emulated`: a node without KVM (TCG guests) takes QEMU from bookworm-backports (QEMU >= 9.0:
# an older QEMU loses guest writes when it live-migrates a TCG guest, docs/compat.md K22); a
# KVM node keeps Debian's own QEMU.
# `units` enables the units; it starts them too when systemd runs (a booted host), and only
# enables them in a root filesystem being prepared (no systemd running: `systemctl enable`
# works offline).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

# >>> root recipe: the simulator's cached Debian root is made by this part (herder.sim.debroot
# hashes the lines between the markers: a change here builds a new root)
# Every node: libvirt under systemd (Debian's sockets and units), QEMU, the storage and network
# tools herder's noded runs, DRBD's user space, Python to build libvirt-python in the venv.
NODE_PKGS=(libvirt-daemon-system libvirt-clients
           lvm2 e2fsprogs iproute2 iputils-arping bridge-utils
           python3-venv python3-dev libvirt-dev pkg-config gcc
           ca-certificates ipmitool ceph-common)
QEMU_PKGS=(qemu-system-x86 qemu-block-extra qemu-utils)

step_packages() {
  local from=()
  if [ "${1:-}" = --emulated ]; then
    # bookworm-backports' QEMU (10.x): TCG guests live-migrate without losing writes
    if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
      printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" \
        "Suites: bookworm-backports" "Components: main" \
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
        > /etc/apt/sources.list.d/bookworm-backports.sources
    fi
    from=(-t bookworm-backports)
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${NODE_PKGS[@]}"
  # DRBD's user space. Debian 12's drbd-utils 9.22.0-1 ships /var/lock, which base-files
  # (12.4+deb12u*) owns too: a plain install fails ("trying to overwrite '/var/lock', which is
  # also in package base-files"). Overwriting that one entry is safe: both want the same path
  # (the symlink to /run/lock stays)
  apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-overwrite drbd-utils
  apt-get install -y -qq --no-install-recommends "${from[@]}" "${QEMU_PKGS[@]}"
}
# <<< root recipe

step_herder() {
  local wheel=${1:?usage: node-install.sh herder WHEEL}
  # the build's own virtualenv under versions/ (the wheel's name carries its version),
  # current -> it, bin -> current/bin: docs/install.md, `herder cluster upgrade`
  local version
  version=$(basename "$wheel" | cut -d- -f2)
  python3 -m venv "/opt/herder/versions/$version"
  "/opt/herder/versions/$version/bin/pip" install --quiet "$wheel"
  ln -sfn "versions/$version" /opt/herder/current
  ln -sfn current/bin /opt/herder/bin
  ln -sfn /opt/herder/bin/herder /usr/local/sbin/herder   # the operator's PATH
}

step_units() {
  local dir=${1:?usage: node-install.sh units UNIT_DIR}
  # .path units too: herder-confd.path starts confd when a promotion brings the config
  cp "$dir"/herder*.service "$dir"/herder*.path "$dir"/herder.target /etc/systemd/system/
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl enable --now herder.target
  else
    systemctl enable herder.target
  fi
}

# Debian's libvirtd is socket-activated: libvirtd.conf's listen settings and socket modes are
# not used (and --listen is refused), the sockets' units decide. herder's TLS: the
# libvirtd-tls.socket (off by default) on the node's primary IP only; the read-write and
# read-only unix sockets root's alone (Debian's are 0666 and 0666+polkit: herder's
# libvirtd.conf has no polkit, so any local user could otherwise define a domain).
step_libvirt_tls() {
  local out address
  out=$(herder node libvirt-tls)   # libvirtd.conf (certificates, auth) and the node's PKI
  echo "$out"
  address=$(sed -n 's/^libvirtd: TLS on \([^ ,]*\).*/\1/p' <<<"$out")   # ADDRESS:PORT
  address=${address%:*}
  [ -n "$address" ] || { echo "node-install.sh: no TLS address in: $out" >&2; exit 1; }
  mkdir -p /etc/systemd/system/libvirtd-tls.socket.d /etc/systemd/system/libvirtd.socket.d \
           /etc/systemd/system/libvirtd-ro.socket.d
  printf '[Socket]\nListenStream=\nListenStream=%s:16514\n' "$address" \
    > /etc/systemd/system/libvirtd-tls.socket.d/herder.conf
  printf '[Socket]\nSocketMode=0600\n' > /etc/systemd/system/libvirtd.socket.d/herder.conf
  printf '[Socket]\nSocketMode=0600\n' > /etc/systemd/system/libvirtd-ro.socket.d/herder.conf
  systemctl daemon-reload
  systemctl enable libvirtd-tls.socket
  # sockets change only while their service is stopped (running guests go on); the sockets
  # first, in the same job: a client (noded polls libvirt) would otherwise activate the
  # service again between the two, and the sockets' restart would fail
  # a client that comes at the wrong moment can still make the start job fail (the
  # service activated by a socket of the old configuration): stopped and started again
  local units="libvirtd.socket libvirtd-ro.socket libvirtd-admin.socket libvirtd-tls.socket"
  local try
  for try in 1 2 3; do
    # shellcheck disable=SC2086
    systemctl stop $units libvirtd.service
    systemctl reset-failed $units libvirtd.service 2>/dev/null || true
    # shellcheck disable=SC2086
    if systemctl start $units libvirtd.service; then
      return 0
    fi
    echo "node-install.sh: libvirt's sockets did not start (try $try)" >&2
    sleep 2
  done
  # shellcheck disable=SC2086
  systemctl --no-pager status $units libvirtd.service >&2 || true
  journalctl --no-pager -n 30 -u libvirtd.service -u libvirtd-tls.socket >&2 || true
  return 1
}

case "${1:-}" in
  packages) shift; step_packages "$@" ;;
  herder) shift; step_herder "$@" ;;
  units) shift; step_units "$@" ;;
  libvirt-tls) shift; step_libvirt_tls "$@" ;;
  *) echo "usage: node-install.sh packages [--emulated] | herder WHEEL | units UNIT_DIR" \
          "| libvirt-tls" >&2
     exit 2 ;;
esac
