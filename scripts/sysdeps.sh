#!/usr/bin/env bash
# Install the Debian packages herder needs (when run as root and they are missing):
# - libvirt-dev, pkg-config, gcc: to build libvirt-python
# - libvirt-daemon: a real libvirtd (test driver) for system tests
# - lvm2: real LVM on loop devices for the storage collectors' tests
# - chromium: the browser maintd's status page and masterd's web console are tested in (driven
#   by Playwright)
# - firefox-esr, and nodejs + npm when there is no node: the web console's Firefox checks
#   (tests/web/firefox: Puppeteer over WebDriver BiDi; its npm packages: scripts/webdeps.sh)
# - novnc: the source of the noVNC files vendored in src/herder/masterd/web/static/novnc
# - etcd-server: a real etcd 3.4 cluster for the etcd backend's tests (tests/ha)
# - qemu-system-x86, libvirt-clients: real QEMU guests under libvirtd's QEMU driver (noded.kvm),
#   virsh for the by-hand migration beside bench/migrate.py. QEMU 9.0 or later: an older one
#   loses guest writes when it live-migrates a TCG guest (this machine's guests run under TCG;
#   see herder.noded.kvm.migration.tcg_live_migration_hazard), so on Debian 12 QEMU (with
#   qemu-block-extra, which must match it) comes from bookworm-backports (QEMU 10.0)
# - linux-image-amd64, busybox-static: the simulated cluster's tiny guest (herder.sim.guest)
# - iproute2, e2fsprogs, iputils-arping: the simulator's namespaced hosts (ip, mkfs.ext4) and
#   daemon-util's master IP (arping: duplicate address check, gratuitous ARP)
# - systemd: `systemd-analyze verify` of herder's units (tests/supervise/test_units.py)
# - ceph-mon, ceph-osd, ceph-common: a real local Ceph for the rbd template (herder.sim.ceph,
#   `cluster simulate --ceph`); qemu-block-extra: QEMU's rbd driver (librbd)
# - openvswitch-switch: openvswitch NICs on the simulated hosts (herder.sim.ovs: a userspace
#   datapath bridge per host; no kernel module needed)
# - openipmi, ipmitool: each simulated host's BMC (ipmi_sim: IPMI over LAN, its chassis power
#   switching the host; herder.sim.bmc) and the IPMI out-of-band program herder ships
#   (herder-oob-ipmi runs ipmitool; docs/ha.md)
# - debootstrap, systemd-container: the Debian-rooted simulated hosts (`cluster simulate --hosts
#   debian`, `make run`): the root built with debootstrap, each host booted by systemd-nspawn
set -euo pipefail
PKGS=(libvirt-dev pkg-config gcc libvirt-daemon lvm2 curl chromium etcd-server
      libvirt-clients linux-image-amd64 busybox-static
      iproute2 e2fsprogs iputils-arping systemd novnc firefox-esr
      ceph-mon ceph-osd ceph-common openvswitch-switch openipmi ipmitool
      debootstrap systemd-container)
QEMU_PKGS=(qemu-system-x86 qemu-block-extra)
QEMU_MIN=1:9.0
[ "$(id -u)" = 0 ] || { echo "sysdeps: not root; assuming ${PKGS[*]} are installed"; exit 0; }
command -v dpkg-query >/dev/null || exit 0
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then missing+=(python3-venv); fi
# node may come from elsewhere than Debian (its npm then is not Debian's package)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then missing+=(nodejs npm); fi
export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -gt 0 ]; then
  echo "sysdeps: apt-get install ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

qemu_recent() {
  local p v
  for p in "${QEMU_PKGS[@]}"; do
    v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null) || return 1
    dpkg --compare-versions "$v" ge "$QEMU_MIN" || return 1
  done
}
if ! qemu_recent; then
  from=()
  if [ "$(. /etc/os-release && echo "${VERSION_CODENAME:-}")" = bookworm ]; then
    if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
      printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" \
        "Suites: bookworm-backports" "Components: main" \
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
        > /etc/apt/sources.list.d/bookworm-backports.sources
    fi
    from=(-t bookworm-backports)
  fi
  echo "sysdeps: apt-get install ${from[*]} ${QEMU_PKGS[*]} (QEMU >= 9.0)"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${from[@]}" "${QEMU_PKGS[@]}" >/dev/null
  qemu_recent || echo "sysdeps: warning: QEMU older than 9.0: herder migrates TCG guests" \
    "paused, not live (docs/compat.md K22)" >&2
fi
