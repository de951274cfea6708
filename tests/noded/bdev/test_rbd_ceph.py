"""The `rbd` device type against a real Ceph (herder.sim.ceph: one monitor and one BlueStore
OSD on 127.0.0.38, cephx, the pool `herder`, the restricted user client.herder): create, find,
grow and remove images with the node's `rbd` tool as Ganeti's RADOSBlockDevice does, the
`kernelspace` map refused on a machine without the rbd module, the OS install path (`rbd
import` of a staging file) and the node's client facts for QEMU (monitors, user, key).

The Ceph is the one this module shares with tests/system/test_snapshots_rbd.py
(tests/cephshare.py: 7-15 s to start, once for both); skipped with the reason when Ceph's
packages are missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import msgspec
import pytest

from herder.core.diskobjects import Disk, decode_disk
from herder.core.rpcdefs.payload import InstancePayload
from herder.noded.bdev import cephclient, operations, rbd
from herder.noded.bdev.base import BlockDevError, Host, SubprocessRunner
from herder.noded.bdev.rbd import RBD_SYSFS, RadosBlockDevice
from herder.noded.hypervisor import Hypervisor
from herder.noded.node_disks import NodeDisks
from herder.sim import ceph
from tests import cephshare

ADDRESS = cephshare.ADDRESS
PATTERN = b"herder-rbd-" * 372  # 4 KiB
OFFSET = 3 * 2**20 + 512


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> ceph.CephCluster:
    """The shared Ceph (stopped by the conftest after the last module that shares it)."""
    return cephshare.shared(tmp_path_factory)


@pytest.fixture
def node(cluster: ceph.CephCluster) -> Host:
    """A node whose `rbd` runs as client.herder with the cluster's client configuration."""
    return Host(runner=SubprocessRunner(extra_env=cluster.client_env))


def rbd_disk(name: str, size: int = 64, *, access: str = "userspace",
             pool: str = "herder") -> Disk:
    return decode_disk({"dev_type": "rbd", "logical_id": ["rbd", name], "size": size,
                        "params": {"pool": pool, "access": access}, "children": [],
                        "iv_name": "disk/0", "uuid": f"uuid-{name}"})


def image_size_mib(cluster: ceph.CephCluster, name: str) -> int:
    info = json.loads(cluster.run(["rbd", "info", "-p", cluster.pool, name, "--format",
                                   "json"], what="rbd info"))
    return int(info["size"]) // 2**20


def test_create_grow_remove(cluster: ceph.CephCluster, node: Host) -> None:
    """The node RPCs' operations on one image, as noded runs them."""
    disk = rbd_disk("inst1.rbd.disk0")
    assert operations.blockdev_create(node, disk, "inst1", True, "inst1") == \
        ["rbd", "inst1.rbd.disk0"]
    assert "inst1.rbd.disk0" in cluster.images()
    assert image_size_mib(cluster, "inst1.rbd.disk0") == 64

    assembled = operations.blockdev_assemble(node, disk, True, "kvm")
    # userspace: nothing mapped, QEMU gets Ganeti's URI
    assert assembled == operations.Assembled(None, "rbd:herder/inst1.rbd.disk0")
    status = operations.blockdev_find(node, disk)
    assert status is not None and not status.is_degraded
    with pytest.raises(BlockDevError, match="doesn't support RBD userspace"):
        RadosBlockDevice(disk, [], node).userspace_uri("xen-pvm")

    operations.blockdev_grow(node, disk, 32, True, True, False)  # dry run: nothing changes
    assert image_size_mib(cluster, "inst1.rbd.disk0") == 64
    operations.blockdev_grow(node, disk, 32, False, True, False)
    assert image_size_mib(cluster, "inst1.rbd.disk0") == 96

    operations.blockdev_remove(node, disk)
    assert "inst1.rbd.disk0" not in cluster.images()
    assert operations.blockdev_find(node, disk) is None
    operations.blockdev_remove(node, disk)  # a missing image is not an error (Ganeti's)


def test_kernelspace_without_the_module_is_refused_and_leaves_nothing(
        cluster: ceph.CephCluster, node: Host) -> None:
    if os.path.exists(RBD_SYSFS):
        pytest.skip("this machine has the rbd kernel module")
    before = cluster.images()
    with pytest.raises(BlockDevError) as refused:
        RadosBlockDevice.create(rbd_disk("kernel.rbd.disk0", access="kernelspace"), [], node)
    message = str(refused.value)
    assert "rbd kernel module is not available" in message and "access=userspace" in message
    assert "\n" not in message
    assert cluster.images() == before  # the image rbd create made is removed again


def test_unreachable_cluster_is_an_error_not_a_missing_image(
        cluster: ceph.CephCluster, tmp_path: Path) -> None:
    conf = tmp_path / "ceph.conf"
    conf.write_text("[global]\nmon host = 127.0.0.37:6789\nauth client required = cephx\n"
                    "client mount timeout = 3\nrados mon op timeout = 3\n")
    lost = Host(runner=SubprocessRunner(extra_env={"CEPH_CONF": str(conf),
                                                   "CEPH_ARGS": "--id herder"},
                                        default_timeout=30))
    with pytest.raises(BlockDevError, match="rbd info of herder/x failed"):
        RadosBlockDevice(rbd_disk("x"), [], lost)


def test_os_install_from_a_staging_file(cluster: ceph.CephCluster, node: Host,
                                        tmp_path: Path) -> None:
    disk = rbd_disk("inst2.rbd.disk0", size=16)
    device = RadosBlockDevice.create(disk, [], node)
    staging = tmp_path / "disk0"
    with open(staging, "wb") as image:
        image.truncate(16 * 2**20)
        image.seek(OFFSET)
        image.write(PATTERN)
    device.install_from(str(staging))
    data = cluster.read_image("inst2.rbd.disk0", OFFSET + len(PATTERN))
    assert data[OFFSET:] == PATTERN and data[:OFFSET] == bytes(OFFSET)
    assert image_size_mib(cluster, "inst2.rbd.disk0") == 16
    assert [name for name in cluster.images() if "import" in name] == []

    # an import that fails (no such file) leaves the image as it was
    with pytest.raises(BlockDevError, match="rbd import into herder/inst2.rbd.disk0 failed"):
        device.install_from(str(tmp_path / "missing"))
    assert cluster.read_image("inst2.rbd.disk0", OFFSET + len(PATTERN))[OFFSET:] == PATTERN
    assert [name for name in cluster.images() if "import" in name] == []
    device.remove()


def test_node_client_facts(cluster: ceph.CephCluster, node: Host) -> None:
    client = cephclient.load(node)
    assert client.entity == "client.herder" and client.user == "herder"
    assert client.monitors == ((ADDRESS, ceph.MON_V1_PORT),)
    assert client.fsid == cluster.fsid
    assert client.key == cluster.client_key

    # the same key is what the cluster knows for the user
    done = subprocess.run(["ceph", "auth", "print-key", "client.herder"], env=cluster.admin_env,
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == client.key


def test_node_without_a_key_is_one_clear_line(cluster: ceph.CephCluster,
                                              tmp_path: Path) -> None:
    conf = tmp_path / "ceph.conf"
    conf.write_text(cluster.client_conf(str(tmp_path / "absent.keyring")))
    keyless = Host(runner=SubprocessRunner(extra_env={"CEPH_CONF": str(conf),
                                                      "CEPH_ARGS": "--id herder"}))
    with pytest.raises(BlockDevError, match="no cephx key for client.herder"):
        cephclient.load(keyless)


def test_a_second_ceph_on_the_same_address_is_refused_at_once(
        cluster: ceph.CephCluster, tmp_path: Path) -> None:
    with pytest.raises(ceph.CephError, match=f"{ADDRESS}:3300 is taken"):
        ceph.start(tmp_path / "second", ADDRESS)
    assert not (tmp_path / "second").exists()  # refused before anything was made


def test_os_install_seam_stages_and_imports_only_on_success(
        cluster: ceph.CephCluster, node: Host, tmp_path: Path) -> None:
    disk_data = {"dev_type": "rbd", "logical_id": ["rbd", "inst3.rbd.disk0"], "size": 8,
                 "params": {"pool": "herder", "access": "userspace"}, "children": [],
                 "iv_name": "disk/0", "uuid": "uuid-inst3", "mode": "rw"}
    RadosBlockDevice.create(decode_disk(disk_data), [], node)
    inst = InstancePayload(name="inst3", uuid="uuid-inst3", memory=128, vcpus=1,
                           disks=[decode_disk(disk_data)])
    # noded's disks on a node whose libvirt is the test driver (no secret defined)
    disks = NodeDisks(tmp_path / "disk-map.json", node,
                      Hypervisor("test:///default", tmp_path), threading.Lock())

    [spec] = disks.instance_disks(inst)
    assert spec.network is not None and spec.path == ""
    assert (spec.network.protocol, spec.network.name) == ("rbd", "herder/inst3.rbd.disk0")
    assert spec.network.hosts == ((ADDRESS, ceph.MON_V1_PORT),)

    # the OS script fails: nothing reaches the image, the staging file goes
    with pytest.raises(RuntimeError), disks.os_disk_paths(inst) as [(path, uri)]:
        assert uri == "rbd:herder/inst3.rbd.disk0"
        assert os.path.getsize(path) == 8 * 2**20
        Path(path).write_bytes(PATTERN)
        raise RuntimeError("the create script failed")
    assert not Path(path).exists()
    assert cluster.read_image("inst3.rbd.disk0", len(PATTERN)) == bytes(len(PATTERN))

    with disks.os_disk_paths(inst) as [(path, _)], open(path, "r+b") as staging:
        staging.write(PATTERN)
    assert not Path(path).exists()
    assert cluster.read_image("inst3.rbd.disk0", len(PATTERN)) == PATTERN
    assert image_size_mib(cluster, "inst3.rbd.disk0") == 8
    operations.blockdev_remove(node, decode_disk(disk_data))


def write_image(cluster: ceph.CephCluster, image: str, data: bytes, size_mib: int) -> None:
    """`data` written at OFFSET into the image, through Ceph's own writer (`rbd import-diff`
    of a one-extent diff in rbd's v1 diff format; this machine has no rbd kernel module)."""
    diff = (b"rbd diff v1\n" + b"s" + (size_mib * 2**20).to_bytes(8, "little")
            + b"w" + OFFSET.to_bytes(8, "little") + len(data).to_bytes(8, "little") + data
            + b"e")
    cluster.run(["rbd", "import-diff", "--no-progress", "-", f"{cluster.pool}/{image}"],
                what="rbd import-diff", stdin=diff)


def snapshots_of(cluster: ceph.CephCluster, image: str) -> list[str]:
    return [str(snap["name"]) for snap in json.loads(cluster.run(
        ["rbd", "snap", "ls", "--format", "json", f"{cluster.pool}/{image}"],
        what="rbd snap ls"))]


def test_snapshot_rollback_remove(cluster: ceph.CephCluster, node: Host) -> None:
    """The node calls' operations: `rbd snap create` answers the snapshot's own logical id,
    the image written after it rolls back to it, the snapshot is removed as a device of its
    own; a rollback while a client has the image open is refused and changes nothing."""
    disk = rbd_disk("inst4.rbd.disk0", size=16)
    operations.blockdev_create(node, disk, "inst4", True, "inst4")
    write_image(cluster, "inst4.rbd.disk0", PATTERN, 16)
    assert operations.blockdev_snapshot(node, disk, "snap-s1", None) == \
        ["rbd", "inst4.rbd.disk0@snap-s1"]
    assert snapshots_of(cluster, "inst4.rbd.disk0") == ["snap-s1"]
    with pytest.raises(BlockDevError, match="^rbd snapshots are copy-on-write: a snapshot size"):
        operations.blockdev_snapshot(node, disk, "snap-s2", 8)
    assert snapshots_of(cluster, "inst4.rbd.disk0") == ["snap-s1"]
    later = b"\xa5" * len(PATTERN)
    write_image(cluster, "inst4.rbd.disk0", later, 16)
    assert cluster.read_image("inst4.rbd.disk0", OFFSET + len(PATTERN))[OFFSET:] == later

    # a client with the image open (a `rbd watch`, as QEMU's librbd or a kernel map holds)
    watcher = subprocess.Popen([*cluster.prefix(), "rbd", "watch", "-p", cluster.pool,
                                "inst4.rbd.disk0"], env=cluster.admin_env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    try:
        assert watcher.stdout is not None and watcher.stdin is not None
        watcher.stdout.readline()  # "press enter to exit...": the watch is registered
        assert rbd.watchers(node, cluster.pool, "inst4.rbd.disk0") != []
        with pytest.raises(BlockDevError, match=r"^rbd image herder/inst4.rbd.disk0 is open by"
                           r" .*: it can be rolled back only while no node uses it$"):
            operations.blockdev_snapshot_rollback(node, disk, "snap-s1")
        assert cluster.read_image("inst4.rbd.disk0", OFFSET + len(PATTERN))[OFFSET:] == later
        watcher.stdin.write(b"\n")  # the client closes the image
        watcher.stdin.close()
        assert watcher.wait(60) == 0
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert rbd.watchers(node, cluster.pool, "inst4.rbd.disk0") == []
    operations.blockdev_snapshot_rollback(node, disk, "snap-s1")
    assert cluster.read_image("inst4.rbd.disk0", OFFSET + len(PATTERN))[OFFSET:] == PATTERN

    with pytest.raises(BlockDevError, match="rbd snap rollback of herder/inst4.rbd.disk0 to"
                       " snap-none failed"):
        operations.blockdev_snapshot_rollback(node, disk, "snap-none")
    snap = decode_disk({**msgspec.to_builtins(disk),
                        "logical_id": ["rbd", "inst4.rbd.disk0@snap-s1"]})
    assert operations.blockdev_find(node, snap) is not None
    operations.blockdev_remove(node, snap)
    assert snapshots_of(cluster, "inst4.rbd.disk0") == []
    operations.blockdev_remove(node, snap)  # gone: nothing to do, as for any device
    assert operations.blockdev_find(node, snap) is None
    operations.blockdev_remove(node, disk)
    assert "inst4.rbd.disk0" not in cluster.images()


def test_a_stream_imports_into_a_userspace_image(cluster: ceph.CephCluster, node: Host,
                                                 tmp_path: Path) -> None:
    """Ganeti's Import() for an image without a device on the node (`rbd import -p POOL -
    NAME`, here under a temporary name swapped in): a raw stream, and one through the
    herder-guest OS `import` script (its stdout, $IMPORT_DEVICE /dev/stdout, is what `rbd
    import` reads), each fill the image with the stream's bytes, at the disk's size when the
    script wrote less; a cut stream and a failing script leave the image as it was, and no
    temporary image is left either way."""
    from herder.noded import disk_transfer, osdef
    from herder.sim import guest

    disk = rbd_disk("inst5.rbd.disk0", size=8)
    RadosBlockDevice.create(disk, [], node)
    os_dir = guest.install_os_definition(tmp_path / "os")
    definition = osdef.find_os(guest.OS_NAME, os_dir.parent)
    script = disk_transfer.OsStream(definition, "import",
                                    {"IMPORT_DEVICE": "/dev/stdout", "IMPORT_INDEX": "0"},
                                    tmp_path / "import.log", 120.0)

    def leftovers() -> list[str]:
        return [name for name in cluster.images() if ".import-" in name]

    def streamed(payload: bytes, through: disk_transfer.OsStream | None = None,
                 cut: bool = False) -> dict[str, object]:
        sink = RadosBlockDevice(disk, [], node).import_sink()
        assert sink.argv[:5] == ["rbd", "import", "--no-progress", "-p", "herder"]
        assert sink.argv[5] == "-"
        writer = disk_transfer.open_writer(disk_transfer.PendingImport(
            sink.what, 8 * 2**20, 0.0, through, sink))
        try:
            for at in range(0, len(payload), disk_transfer.CHUNK):
                writer.write(payload[at:at + disk_transfer.CHUNK])
            if cut:
                writer.abort()
                return {}
            return writer.close()
        except BaseException:
            writer.abort()
            raise

    first = bytes(OFFSET) + PATTERN + bytes(8 * 2**20 - OFFSET - len(PATTERN))
    assert streamed(first)["bytes"] == len(first)
    assert cluster.read_image("inst5.rbd.disk0", 8 * 2**20) == first
    assert image_size_mib(cluster, "inst5.rbd.disk0") == 8 and leftovers() == []

    # through the OS script, 4 MiB only: the image is those bytes, grown to the disk's size
    second = os.urandom(4 * 2**20)
    assert streamed(second, script)["bytes"] == len(second)
    assert cluster.read_image("inst5.rbd.disk0", 8 * 2**20) == second + bytes(4 * 2**20)
    assert image_size_mib(cluster, "inst5.rbd.disk0") == 8 and leftovers() == []
    assert "# herder: running" in (tmp_path / "import.log").read_text()

    # a stream cut half-way: the image as it was, no temporary image left
    streamed(os.urandom(2 * 2**20), script, cut=True)
    assert cluster.read_image("inst5.rbd.disk0", 4 * 2**20) == second and leftovers() == []
    # an OS script that fails after reading some: one line naming it, the image as it was
    (os_dir / "import").write_text("#!/bin/sh\nhead -c 1000 >/dev/null\nexit 3\n")
    with pytest.raises(disk_transfer.TransferError, match="OS import script") as failed:
        streamed(os.urandom(8 * 2**20), script)
    assert "\n" not in str(failed.value)
    assert cluster.read_image("inst5.rbd.disk0", 4 * 2**20) == second and leftovers() == []
    # a raw stream larger than the disk is refused before it reaches the image
    with pytest.raises(disk_transfer.TransferError, match="larger than the disk"):
        streamed(os.urandom(9 * 2**20))
    assert cluster.read_image("inst5.rbd.disk0", 4 * 2**20) == second and leftovers() == []
    operations.blockdev_remove(node, disk)


def test_a_restarted_node_sweeps_the_temporary_images_a_dead_import_left(
        cluster: ceph.CephCluster, tmp_path: Path) -> None:
    """A noded that died mid-import leaves its temporary `IMAGE.import-NODETAG-XXXXXXXX` in
    the pool. The next import on the node after its restart (a new `Host`: the daemon's
    start) removes that one; it keeps the temporary image of an import that still runs (an
    `rbd import` with its image open, started before the restart), another node's (another
    tag), and what its own imports write."""
    from herder.noded import disk_transfer

    tag = rbd.node_tag()
    left = f"inst6.rbd.disk0.import-{tag}-0badc0de"  # the dead daemon's
    other = "inst6.rbd.disk0.import-0000ffff-0badc0de"  # another node's
    live = f"inst6.rbd.disk1.import-{tag}-1171e000"  # an `rbd import` still running
    for name in (left, other):
        cluster.run(["rbd", "create", "-p", cluster.pool, name, "--size", "4"],
                    what="rbd create")
    running = subprocess.Popen(["rbd", "import", "--no-progress", "--dest-pool", cluster.pool,
                                "-", live], stdin=subprocess.PIPE,
                               env={**os.environ, **cluster.client_env})
    assert running.stdin is not None
    try:
        running.stdin.write(PATTERN * 256)  # 1 MiB: the image made and open
        running.stdin.flush()
        node_image = rbd_disk("inst6.rbd.disk2", size=4)
        deadline = time.monotonic() + 30
        while not rbd.watchers(Host(runner=SubprocessRunner(extra_env=cluster.client_env)),
                               cluster.pool, live):
            assert time.monotonic() < deadline, "the running rbd import never opened its image"
            time.sleep(0.2)
        time.sleep(1.1)  # `rbd info` gives whole seconds: the restart comes after them
        restarted = Host(runner=SubprocessRunner(extra_env=cluster.client_env))
        RadosBlockDevice.create(node_image, [], restarted)
        sink = RadosBlockDevice(node_image, [], restarted).import_sink()
        images = cluster.images()
        assert left not in images  # swept by the next import after the restart
        assert other in images and live in images  # another node's; one still open
        staged = sink.argv[6]  # its own import's, written while the sweep runs again
        assert f"{cluster.pool}/{staged}" in restarted.imports_under_way
        writer = disk_transfer.open_writer(disk_transfer.PendingImport(
            sink.what, 4 * 2**20, 0.0, None, sink))
        writer.write(PATTERN)
        while staged not in cluster.images():  # (`rbd import` makes it as it starts)
            assert time.monotonic() < deadline + 30, "the import never made its image"
            time.sleep(0.2)
        second = RadosBlockDevice(node_image, [], restarted).import_sink()  # sweeps again
        assert staged in cluster.images()
        second.discard()
        writer.close()
        assert staged not in cluster.images() and not restarted.imports_under_way
        assert cluster.read_image("inst6.rbd.disk2", len(PATTERN)) == PATTERN
    finally:
        running.stdin.close()
        running.wait(timeout=60)
    for name in (other, live, "inst6.rbd.disk2"):
        cluster.run(["rbd", "rm", "--no-progress", "-p", cluster.pool, name], what="rbd rm")
