#!/usr/bin/env bash
# Install the Debian packages herder needs (when run as root and they are missing):
# - libvirt-dev, pkg-config, gcc: to build libvirt-python
# - libvirt-daemon: a real libvirtd (test driver) for system tests
# - lvm2: real LVM on loop devices for the storage collectors' tests
# - chromium: the browser maintd's status page and masterd's web console are tested in (driven
#   by Playwright)
# - novnc: the source of the noVNC files vendored in src/herder/masterd/web/static/novnc
# - etcd-server: a real etcd 3.4 cluster for the etcd backend's tests (tests/ha)
# - qemu-system-x86, libvirt-clients: real QEMU guests under libvirtd's QEMU driver (noded.kvm),
#   virsh for the by-hand migration beside bench/migrate.py
# - linux-image-amd64, busybox-static: the simulated cluster's tiny guest (herder.sim.guest)
# - iproute2, e2fsprogs, iputils-arping: the simulator's namespaced hosts (ip, mkfs.ext4) and
#   daemon-util's master IP (arping: duplicate address check, gratuitous ARP)
# - systemd: `systemd-analyze verify` of herder's units (tests/supervise/test_units.py)
set -euo pipefail
PKGS=(libvirt-dev pkg-config gcc libvirt-daemon lvm2 curl chromium etcd-server
      qemu-system-x86 libvirt-clients linux-image-amd64 busybox-static
      iproute2 e2fsprogs iputils-arping systemd novnc)
[ "$(id -u)" = 0 ] || { echo "sysdeps: not root; assuming ${PKGS[*]} are installed"; exit 0; }
command -v dpkg-query >/dev/null || exit 0
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then missing+=(python3-venv); fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "sysdeps: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
