"""An `rbd` instance on a simulated cluster of Debian hosts with a real Ceph and real guests
(`herder cluster simulate --hosts debian --guests qemu --ceph`): the Ceph (one monitor, one
BlueStore OSD, cephx) runs in the cluster's network outside the hosts, every node has its
client configuration and the restricted user's key from the operator's guide's own step
(`scripts/node-install.sh ceph-client`, docs/install.md section 6: /etc/ceph, `CEPH_ARGS` in
/etc/herder/environment for herder's units), and QEMU (bookworm-backports', as `libvirt-qemu`)
reads the image through librbd (a libvirt network disk whose cephx key is a libvirt secret
noded defined on the node; no rbd kernel module here).

The `herder-guest` OS writes its pattern over the image's first MiB (through a staging file and
`rbd import`); the guest prints the SHA-256 of its disk's first MiB every second, so the image's
bytes are seen by the guest itself on every node: after the install, a live migration (same
boot, growing uptime) and a failover (a new boot) away from the node it migrated to, which lost
power with the guest running. An export without a shutdown (`backup export --noshutdown`)
reads a snapshot of the running guest's image: the same boot goes on, the export holds the
image's pattern, the snapshot is gone; the instance removed, `backup import` streams the
export into `rbd import` (the image has no device on the node) and the new guest boots on the
first try with the same bytes. Removing the instance removes the image.
One cluster and one guest for the module, the tests in order. (A clean failover of a real
guest keeping its bytes is tests/system/test_real_guests_sim.py's; its RPCs for an externally
mirrored disk are compared with Ganeti's in tests/ganeti/test_cmdlib_rpc_order.py; the
rbd-specific part, the target's QEMU opening the image, is the power-loss case's, where the
dead client still holds the image's lock; the source's shutdown of an rbd guest is the
removal's.)

The nodes are Debian 12 hosts (issue 34: systemd runs herder's units, herder from the wheel;
docs/compat.md N5a), so the node's Ceph client is checked as the guide leaves it: the files'
modes and the user noded runs `rbd` as.
"""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import pytest

from tests import simaddresses
from tests.simhelpers import config, herder, running_sim, wait_for, where

pytestmark = [pytest.mark.slow, pytest.mark.guests]

NAME = "r1"
BOOT = 180.0  # a TCG guest boots in ~10 s idle; the machine is a loaded 2-core one
NODE1, NODE2 = "node1.sim.herder.test", "node2.sim.herder.test"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("libvirt")
    from herder.sim import ceph, debroot, guest

    reason = debroot.unsupported()
    if reason:
        pytest.skip(reason)
    missing = ceph.missing_packages()
    if missing:
        pytest.skip(f"Ceph is not installed (apt-get install {' '.join(missing)})")
    try:
        guest.ensure_guest()
    except guest.GuestBuildError as err:
        pytest.skip(str(err))
    yield from running_sim(tmp_path_factory.mktemp("rbd"), 2, guests="qemu", ceph=True,
                           hosts="debian", first_ip=simaddresses.first_ip("rbd_guests"))


def serial(state: Any, node: str) -> str:
    done = state.host(node).run(["cat", f"/var/log/herder/instances/{NAME}.serial.log"],
                                timeout=30)
    return done.stdout if done.returncode == 0 else ""


def beats(state: Any, node: str) -> list[Any]:
    from herder.sim import guest

    return list(guest.parse_heartbeats(serial(state, node)))


def beat(state: Any, node: str, *, after: float = -1.0, boot_id: str | None = None,
         other_than: str | None = None) -> Any:
    def newest() -> Any:
        found = [b for b in beats(state, node) if b.uptime > after
                 and (boot_id is None or b.boot_id == boot_id)
                 and (other_than is None or b.boot_id != other_than)]
        return found[-1] if found else None

    return wait_for(newest, BOOT, f"a heartbeat of {NAME} on {node}", interval=1.0)


def rbd_disk(state: Any, node: str) -> ET.Element:
    done = state.host(node).run(["virsh", "-c", "qemu:///system", "dumpxml", NAME], timeout=60)
    assert done.returncode == 0, done.stderr
    disk = ET.fromstring(done.stdout).find("devices/disk")
    assert disk is not None
    return disk


def libvirt_answers(state: Any, node: str) -> bool:
    return state.host(node).run(["virsh", "-c", "qemu:///system", "list"],
                                timeout=30).returncode == 0


def images(state: Any) -> list[str]:
    return [name for name in state.ceph_admin().images() if ".rbd.disk" in name]


def sh(state: Any, node: str, script: str) -> str:
    done = state.host(node).run(["sh", "-c", script], timeout=60)
    assert done.returncode == 0, (script, done.stderr)
    return done.stdout.strip()


def test_every_node_has_the_guides_ceph_client(sim: Any) -> None:
    """What `node-install.sh ceph-client` leaves on a node: the configuration readable, the
    key root's only, the copied files gone, and herder's noded running `rbd` as the
    restricted user (its environment from /etc/herder/environment)."""
    key = sim.ceph_admin().client_key
    for node in (NODE1, NODE2):
        assert sim.host(node).debian
        assert sh(sim, node, "stat -c '%a %U' /etc/ceph/ceph.conf "
                             "/etc/ceph/ceph.client.herder.keyring").splitlines() == [
            "644 root", "600 root"]
        assert key in sh(sim, node, "cat /etc/ceph/ceph.client.herder.keyring")
        assert sh(sim, node, "grep ^CEPH_ARGS= /etc/herder/environment") == \
            "CEPH_ARGS=--id herder"
        assert sh(sim, node, "test -e /root/ceph-client && echo left || echo gone") == "gone"
        pid = sh(sim, node, "systemctl show -P MainPID herder-noded")
        assert "CEPH_ARGS=--id herder" in sh(sim, node, f"tr '\\0' '\\n' </proc/{pid}/environ")


def test_rbd_is_enabled_and_verify_finds_no_error(sim: Any) -> None:
    """The Debian cluster with a Ceph enables rbd besides the templates its hosts can run
    (userspace access: no rbd kernel module in them), and `cluster verify` passes on it."""
    with sim.rapi() as api:
        info = api.get_info()
    assert sorted(info["enabled_disk_templates"]) == [
        "diskless", "ext", "file", "rbd", "sharedfile"]
    assert info["diskparams"]["rbd"]["access"] == "userspace"
    verify = herder(sim, "cluster", "verify", "--json", check=False, timeout=180)
    found = json.loads(verify.stdout)
    assert [f for f in found if f["severity"] == "error"] == [], found


def test_an_rbd_instance_boots_from_its_image(sim: Any) -> None:
    from herder.sim import guest

    began = time.monotonic()
    herder(sim, "instance", "add", NAME, "--no-name-check", "-t", "rbd", "-o", "herder-guest",
           "--disk", "64M", "--ignore-ipolicy", "-n", NODE1, timeout=600)
    print(f"rbd instance add (create, OS install by rbd import, start): "
          f"{time.monotonic() - began:.1f} s")
    [image] = images(sim)
    # the OS's pattern is in the image (read back by the Ceph administrator) ...
    pattern = guest.disk_pattern(NAME)
    assert sim.ceph_admin().read_image(image, len(pattern)) == pattern
    # ... and the guest reads the same bytes through librbd
    assert beat(sim, NODE1).disk == guest.disk_pattern_hash(NAME)

    disk = rbd_disk(sim, NODE1)
    assert disk.get("type") == "network"
    source = disk.find("source")
    assert source is not None
    assert (source.get("protocol"), source.get("name")) == ("rbd", f"herder/{image}")
    host = source.find("host")
    assert host is not None and host.get("port") == "6789"
    auth = disk.find("auth")
    assert auth is not None and auth.get("username") == "herder"
    secret = auth.find("secret")
    assert secret is not None and secret.get("type") == "ceph"
    listed = sim.host(NODE1).run(["virsh", "-c", "qemu:///system", "secret-list"], timeout=60)
    assert secret.get("uuid") in listed.stdout
    # the key stays in libvirt: the domain holds only the secret's UUID
    assert sim.ceph_admin().client_key not in ET.tostring(disk, encoding="unicode")
    # the running QEMU opens the image itself through librbd (Ganeti's `-drive
    # file=rbd:herder/IMAGE`, here a -blockdev of libvirt's), with cephx and no key in argv
    argv = sim.host(NODE1).run(["pgrep", "-a", "qemu-system"], timeout=30).stdout
    blockdev = next(json.loads(word) for word in argv.split()
                    if word.startswith("{") and '"driver":"rbd"' in word)
    assert (blockdev["pool"], blockdev["image"], blockdev["user"]) == ("herder", image, "herder")
    assert blockdev["server"] == [{"host": host.get("name"), "port": "6789"}]
    assert "cephx" in blockdev["auth-client-required"] and blockdev["key-secret"]
    assert sim.ceph_admin().client_key not in argv
    # as Debian's libvirt runs it: not root, so the key can only have come through libvirt's
    # secret (the keyring in /etc/ceph is root's only)
    assert sh(sim, NODE1, "ps -o user= -C qemu-system-x86_64") == "libvirt-qemu"


def test_an_export_without_a_shutdown_reads_a_snapshot_and_the_guest_runs_on(sim: Any
                                                                            ) -> None:
    """Issue 30 item 1: the running guest's image snapshotted (`rbd snap create` under the
    QEMU that has it open), the snapshot read (`rbd export IMAGE@snap-_export -`) through the
    OS export script to the other node, then removed; the guest never stops."""
    from herder.sim import guest
    from tests.noded.bdev.test_rbd_ceph import snapshots_of

    before = beat(sim, NODE1)
    done = herder(sim, "backup", "export", "-n", NODE2, "--noshutdown", NAME, timeout=600)
    assert f"Exported {NAME} to {NODE2}" in done.stdout
    assert "snapshot _export of disk/0 taken" in done.stderr, done.stderr
    assert "shutting down" not in done.stderr
    beat(sim, NODE1, after=before.uptime, boot_id=before.boot_id)  # the same boot goes on
    assert beats(sim, NODE1)[-1].boot_id == before.boot_id
    dump = f"/srv/herder/export/{NAME}/{config(sim).find_instance(NAME).disks[0].uuid}"
    hashed = sim.host(NODE2).run(["sh", "-c", f"head -c {len(guest.disk_pattern(NAME))} "
                                  f"{dump} | sha256sum"], timeout=60)
    assert hashed.stdout.split()[0] == guest.disk_pattern_hash(NAME), hashed
    [image] = images(sim)
    assert snapshots_of(sim.ceph_admin(), image) == []


def test_the_export_imported_boots_with_the_same_bytes(sim: Any) -> None:
    """Issue 30 items 1-2 for rbd: the export the running guest made (above) is imported
    after the instance and its image are gone. This node has no rbd kernel module, so the
    image has no device to write: the dump goes through the OS `import` script into `rbd
    import` (Ganeti's RADOSBlockDevice.Import). No OS install runs for an import, so the
    pattern the new guest reads can only have come through the export; it boots once, on
    the first try. The instance then goes on as the original (the tests below)."""
    from herder.sim import guest

    before = beat(sim, NODE1)
    assert before.disk == guest.disk_pattern_hash(NAME)
    herder(sim, "instance", "remove", NAME, timeout=300)
    assert images(sim) == []
    began = time.monotonic()
    done = herder(sim, "backup", "import", NAME, "--src-node", NODE2, "--src-dir", NAME,
                  "-n", NODE1, "--no-name-check", timeout=600)
    assert f"Imported instance {NAME} on {NODE1}" in done.stdout
    after = beat(sim, NODE1, other_than=before.boot_id)
    print(f"rbd import (create, rbd import through the OS script, start) to a heartbeat: "
          f"{time.monotonic() - began:.1f} s")
    assert after.disk == before.disk
    new_boots = {b.boot_id for b in beats(sim, NODE1) if b.boot_id != before.boot_id}
    assert new_boots == {after.boot_id}  # one boot: the first try
    [image] = images(sim)
    assert ".import-" not in image
    restored = config(sim).find_instance(NAME)
    assert (restored.disk_template, [d.size for d in restored.disks]) == ("rbd", [64])
    herder(sim, "backup", "remove", NAME)


def test_live_migration_keeps_the_guest_and_its_bytes(sim: Any) -> None:
    before = beat(sim, NODE1)
    began = time.monotonic()
    herder(sim, "instance", "migrate", NAME, "--target-node", NODE2, timeout=600)
    print(f"rbd live migration: {time.monotonic() - began:.1f} s")
    assert where(sim, NAME) == [NODE2]
    after = beat(sim, NODE2, after=before.uptime, boot_id=before.boot_id)
    assert after.uptime > before.uptime  # the same boot: its memory travelled
    assert after.disk == before.disk


def test_failover_from_a_dead_node_boots_the_same_bytes(sim: Any) -> None:
    """The primary's host loses power with the guest running (its librbd client, which held
    the image's exclusive lock, dies with it); the failover starts it on the other node."""
    assert where(sim, NAME) == [NODE2]  # where the live migration took it
    before = beat(sim, NODE2)
    sim.host(NODE2).power_off(grace=0)
    began = time.monotonic()
    herder(sim, "instance", "failover", NAME, "--target-node", NODE1, "--ignore-consistency",
           timeout=600)
    after = beat(sim, NODE1, other_than=before.boot_id)
    print(f"rbd failover from a dead node to a heartbeat: {time.monotonic() - began:.1f} s")
    assert after.disk == before.disk
    sim.host(NODE2).power_on()
    # the node that comes back does not run it again: once its libvirtd answers (which is
    # after libvirt's autostart), the guest runs on the other node only
    wait_for(lambda: libvirt_answers(sim, NODE2), BOOT, f"libvirtd on {NODE2} after power-on")
    assert where(sim, NAME) == [NODE1]


def test_grow_disk_resizes_the_image(sim: Any) -> None:
    [image] = images(sim)
    herder(sim, "instance", "grow-disk", NAME, "0", "32M", timeout=300)
    info = sim.ceph_admin().run(["rbd", "info", "-p", "herder", image, "--format", "json"],
                                what="rbd info")
    assert json.loads(info)["size"] == 96 * 2**20


def test_remove_deletes_the_image(sim: Any) -> None:
    assert len(images(sim)) == 1
    began = time.monotonic()
    herder(sim, "instance", "remove", NAME, timeout=300)
    print(f"rbd instance remove: {time.monotonic() - began:.1f} s")
    assert images(sim) == []
    assert where(sim, NAME) == []
