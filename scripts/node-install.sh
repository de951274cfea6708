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
#                                           (`herder node libvirt-tls` does it all)
#   node-install.sh ceph-client CONF KEYRING USER [POOL]
#                                           rbd disks: the Ceph cluster's client configuration
#                                           and USER's key in /etc/ceph, USER in the daemons'
#                                           environment (CEPH_ARGS); with POOL, checks that the
#                                           user reaches it
#   node-install.sh etcd-client LOCATION DIR [USER]
#                                           the etcd backend (docs/ha.md): the client's files
#                                           from DIR (ca.pem, client.pem, client.key, password)
#                                           under /etc/herder/etcd, its settings file, and
#                                           HERDER_CONFIG=LOCATION in /etc/herder/environment
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

# libvirtd on TLS only, trusting the cluster's nodes: herder does it (`herder node libvirt-tls`:
# libvirtd.conf and the node's libvirt PKI; on this systemd host also the drop-ins of Debian's
# socket units, TLS on the primary IP only and root-only unix sockets, the TLS socket enabled,
# the sockets and libvirtd restarted). `cluster verify` checks all of it afterwards.
step_libvirt_tls() {
  herder node libvirt-tls "$@"
}

# rbd disks: the node's Ceph client, as the rbd tool looks for it (herder reads the same files:
# noded.bdev.cephclient). The configuration (`ceph config generate-minimal-conf` on the Ceph
# side) as /etc/ceph/ceph.conf, the restricted user's keyring (`ceph auth get client.USER`)
# 0600 where the tool's default keyring search finds it, and `CEPH_ARGS=--id USER` in
# /etc/herder/environment, which every herder unit reads (noded's rbd, mond's rbd collector);
# herder puts the key into libvirt itself (a private libvirt secret, noded.ceph_secret).
step_ceph_client() {
  local usage="usage: node-install.sh ceph-client CONF KEYRING USER [POOL]"
  local conf=${1:?$usage} keyring=${2:?$usage} user=${3:?$usage} pool=${4:-}
  install -d -m 0755 /etc/ceph /etc/herder
  install -m 0644 "$conf" /etc/ceph/ceph.conf
  install -m 0600 "$keyring" "/etc/ceph/ceph.client.$user.keyring"
  # one CEPH_ARGS line, the file's other settings (HERDER_CONFIG, ...) kept
  touch /etc/herder/environment
  sed -i '/^CEPH_ARGS=/d' /etc/herder/environment
  echo "CEPH_ARGS=--id $user" >> /etc/herder/environment
  if [ -n "$pool" ]; then  # the monitors answer and the key opens the pool
    timeout 60 rbd --id "$user" ls -p "$pool" > /dev/null
  fi
  # daemons already running read the environment at their next start
  if [ -d /run/systemd/system ]; then
    systemctl try-restart herder-noded.service herder-mond.service
  fi
}

# The etcd backend on this node (docs/ha.md "etcd with TLS and authentication"): the CA of
# etcd's members, herder's client certificate and key (no CommonName) and herder's etcd
# password, copied from DIR; the client settings file naming them; and the config location
# in /etc/herder/environment, which every unit reads (EnvironmentFile=), so masterd campaigns
# and maintd follows the lease. Run it before the node's daemons start with the cluster (before
# `cluster init` on the first node, before `node add` on the others); running it again
# replaces the files and the HERDER_CONFIG line, other lines of the environment file stay.
step_etcd_client() {
  local location=${1:?usage: node-install.sh etcd-client LOCATION DIR [USER]}
  local dir=${2:?usage: node-install.sh etcd-client LOCATION DIR [USER]}
  local user=${3:-herder}
  case "$location" in
    etcds://*|etcd://*) ;;
    *) echo "node-install.sh etcd-client: $location is no etcd location" \
            "(etcds://HOST:PORT[,HOST:PORT...]/CLUSTER)" >&2; exit 2 ;;
  esac
  local name
  for name in ca.pem client.pem client.key password; do
    [ -f "$dir/$name" ] || { echo "node-install.sh etcd-client: $dir/$name is missing" >&2; exit 2; }
  done
  install -d -m 0700 /etc/herder/etcd
  install -m 0644 "$dir/ca.pem" "$dir/client.pem" /etc/herder/etcd/
  install -m 0600 "$dir/client.key" "$dir/password" /etc/herder/etcd/
  printf '%s\n' 'ca = "/etc/herder/etcd/ca.pem"' 'cert = "/etc/herder/etcd/client.pem"' \
    'key = "/etc/herder/etcd/client.key"' "user = \"$user\"" \
    'password_file = "/etc/herder/etcd/password"' > /etc/herder/etcd-client.toml
  chmod 0644 /etc/herder/etcd-client.toml
  local env=/etc/herder/environment
  touch "$env"
  { grep -v '^HERDER_CONFIG=' "$env" || true; echo "HERDER_CONFIG=$location"; } > "$env.new"
  chmod 0644 "$env.new"
  mv "$env.new" "$env"
}

case "${1:-}" in
  packages) shift; step_packages "$@" ;;
  herder) shift; step_herder "$@" ;;
  units) shift; step_units "$@" ;;
  libvirt-tls) shift; step_libvirt_tls "$@" ;;
  ceph-client) shift; step_ceph_client "$@" ;;
  etcd-client) shift; step_etcd_client "$@" ;;
  *) echo "usage: node-install.sh packages [--emulated] | herder WHEEL | units UNIT_DIR" \
          "| libvirt-tls | ceph-client CONF KEYRING USER [POOL]" \
          "| etcd-client LOCATION DIR [USER]" >&2
     exit 2 ;;
esac
