"""Benchmark of herder.noded.bdev: create + remove of many disks per device type that runs here,
and moving a disk between two simulated nodes.

    PYTHONPATH=src .venv/bin/python bench/storage.py [--count 100] [--size 64]
    PYTHONPATH=src .venv/bin/python bench/storage.py --move [--move-mib 1024]

For each type, `count` disks of `size` MiB are created (Ganeti's blockdev_create on the
primary: create, assemble, open, set info) and then removed (blockdev_remove), through
`bdev.operations` with the real runner. Types: file and sharedfile (sparse files in instance
directories), blockdev (adopting loop devices linked under a stand-in /dev/disk: create and
remove touch nothing, so this is the cost of the checks), ext with the `sharedimg` provider
(an image and a loop device per disk, one provider script per step), plain on LVM metadata
only (a VG on a loop device with activation off: `pvs`, `lvcreate`, `lvs`, `lvchange`,
`lvremove` per disk), rbd on a real local Ceph (`herder.sim.ceph` on 127.0.0.37: one
monitor, one BlueStore OSD; userspace access: `rbd create`, `rbd info`, `rbd rm` per disk; its
start time printed). Prints, per type, the total and the per-disk time of each phase.
Needs root, losetup and LVM for blockdev, ext and plain, Ceph's packages for rbd (skipped, with
the reason, otherwise).

`--move`: a simulated cluster of two nodes (`herder cluster simulate`), a `file` instance with
one disk of `--move-mib` MiB filled with random bytes on node 1, then `herder instance move` to
node 2 (the disk streamed from node 1's noded to node 2's over HTTPS, `noded.disk_transfer`),
timed; beside it the limits: `cp` of the same file from node 1's file storage to node 2's, and
`dd` of it to node 2's with 1 MiB blocks, on this machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from herder.core.diskobjects import Disk, decode_disk
from herder.noded.bdev import file as file_storage
from herder.noded.bdev import operations
from herder.noded.bdev.base import Host, SubprocessRunner

EXTSTORAGE = Path(__file__).resolve().parents[1] / "src/herder/sim/extstorage"
LVM_CONF = """devices {{ filter = [ "a|^{loop}$|", "r|.*|" ] global_filter = [ "a|^{loop}$|",
"r|.*|" ] obtain_device_list_from_udev = 0 use_devicesfile = 0 }}
global {{ activation = 0 }}
activation {{ udev_sync = 0 udev_rules = 0 monitoring = 0 }}
backup {{ backup = 0 archive = 0 }}
"""


def _disk(raw: dict[str, object]) -> Disk:
    return decode_disk({"params": {}, "iv_name": "disk/0", "mode": "rw", **raw})


def _loop(image: Path, size_mib: int) -> str:
    with image.open("wb") as handle:
        handle.truncate(size_mib * 1024 * 1024)
    return subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True,
                          text=True, check=True).stdout.strip()


def _detach(loop: str) -> None:
    subprocess.run(["losetup", "-d", loop], check=False)


Setup = Iterator[tuple[Host, list[Disk]]]


@contextmanager
def file_setup(work: Path, count: int, size: int, dev_type: str) -> Setup:
    work.mkdir(parents=True)
    root = work / dev_type
    root.mkdir()
    (work / "paths").write_text(f"{root}\n")
    host = Host(file_storage_paths_file=work / "paths")
    file_storage.create_storage_dir(host, str(root / "inst"))
    yield host, [_disk({"dev_type": dev_type, "logical_id": ["loop", f"{root}/inst/d{i}"],
                        "size": size, "uuid": f"u{i}"}) for i in range(count)]


@contextmanager
def blockdev_setup(work: Path, count: int, size: int) -> Setup:
    work.mkdir(parents=True)
    links = work / "dev-disk" / "by-id"
    links.mkdir(parents=True)
    loops = []
    try:
        for i in range(count):
            loops.append(_loop(work / f"adopt{i}.img", size))
            (links / f"disk{i}").symlink_to(loops[-1])
        yield Host(dev_disk_root=work / "dev-disk"), [
            _disk({"dev_type": "blockdev", "logical_id": ["manual", str(links / f"disk{i}")],
                   "size": size, "uuid": f"u{i}"}) for i in range(count)]
    finally:
        for loop in loops:
            _detach(loop)


@contextmanager
def ext_setup(work: Path, count: int, size: int) -> Setup:
    work.mkdir(parents=True)
    images = work / "images"
    images.mkdir()
    yield Host(es_search_path=(EXTSTORAGE,)), [
        _disk({"dev_type": "ext", "logical_id": ["sharedimg", f"vol{i}"], "size": size,
               "uuid": f"u{i}", "params": {"access": "kernelspace", "dir": str(images)}})
        for i in range(count)]


@contextmanager
def plain_setup(work: Path, count: int, size: int) -> Setup:
    work.mkdir(parents=True)
    loop = _loop(work / "pv.img", count * size + 256)
    conf = work / "lvm"
    conf.mkdir()
    (conf / "lvm.conf").write_text(LVM_CONF.format(loop=loop))
    env = {"LVM_SYSTEM_DIR": str(conf), "LVM_SUPPRESS_FD_WARNINGS": "1"}
    vg = f"herderbench{uuid.uuid4().hex[:6]}"
    full_env = {**os.environ, **env}
    try:
        subprocess.run(["vgcreate", vg, loop], env=full_env, capture_output=True, check=True)
        host = Host(runner=SubprocessRunner(extra_env=env), lv_device_nodes_required=False)
        yield host, [_disk({"dev_type": "plain", "logical_id": [vg, f"d{i}"], "size": size,
                            "uuid": f"u{i}", "params": {"stripes": 1}})
                     for i in range(count)]
    finally:
        subprocess.run(["vgremove", "-f", vg], env=full_env, capture_output=True, check=False)
        _detach(loop)


@contextmanager
def rbd_setup(work: Path, count: int, size: int) -> Setup:
    from herder.sim import ceph

    cluster = ceph.start(work, "127.0.0.37")
    print(f"{'  (Ceph started in':<22} {cluster.start_seconds:.1f} s)")
    try:
        yield Host(runner=SubprocessRunner(extra_env=cluster.client_env)), [
            _disk({"dev_type": "rbd", "logical_id": ["rbd", f"u{i}.rbd.disk0"], "size": size,
                   "uuid": f"u{i}", "params": {"pool": cluster.pool, "access": "userspace"}})
            for i in range(count)]
    finally:
        cluster.stop()


def measure(name: str, setup: Callable[[], object], on_primary: bool = True) -> None:
    with setup() as (host, disks):  # type: ignore[attr-defined]
        started = time.perf_counter()
        for disk in disks:
            operations.blockdev_create(host, disk, "inst", on_primary, "originstname+inst")
        created = time.perf_counter()
        for disk in disks:
            operations.blockdev_remove(host, disk)
        removed = time.perf_counter()
    count = len(disks)
    create, remove = created - started, removed - created
    print(f"{name:<22} {count:>5} {create:>9.2f} s {remove:>9.2f} s"
          f" {create / count * 1000:>9.1f} ms {remove / count * 1000:>9.1f} ms")


def timed(what: Callable[[], object]) -> float:
    started = time.perf_counter()
    what()
    return time.perf_counter() - started


def measure_move(mib: int) -> None:
    """`herder instance move` of a file disk of `mib` MiB between two simulated nodes, beside
    cp and dd of the same bytes."""
    from herder.sim import cluster

    directory = Path(tempfile.mkdtemp(prefix="herder-bench-move-", dir="/tmp"))
    state = cluster.start(directory, 2, first_ip=230)
    try:
        env = {**os.environ, **state.client_environment()}

        def herder(*args: str) -> None:
            subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                           check=True, capture_output=True, text=True, timeout=3600)

        node1, node2 = (state.host(n.name) for n in state.nodes)
        herder("instance", "add", "big1", "--no-name-check", "-t", "file", "--no-install",
               "--no-start", "-o", "debootstrap+default", "--disk", f"{mib}M",
               "--ignore-ipolicy", "-n", node1.name)
        source = node1.path("/srv/herder/file-storage/big1/disk0")
        with open(source, "r+b") as disk:
            for _ in range(mib):
                disk.write(os.urandom(1 << 20))
        copy = node2.path("/srv/herder/file-storage/bench-copy")
        cp = timed(lambda: subprocess.run(["cp", str(source), str(copy)], check=True))
        os.unlink(copy)
        dd = timed(lambda: subprocess.run(["dd", f"if={source}", f"of={copy}", "bs=1M",
                                           "conv=fsync", "status=none"], check=True))
        os.unlink(copy)
        move = timed(lambda: herder("instance", "move", "big1", "-n", node2.name,
                                         "--ignore-ipolicy"))
        print(f"moving {mib} MiB from {node1.name} to {node2.name}:")
        for name, seconds in (("herder instance move", move), ("cp (the limit)", cp),
                              ("dd bs=1M conv=fsync", dd)):
            print(f"  {name:<22} {seconds:>8.2f} s {mib / seconds:>9.1f} MiB/s")
    finally:
        cluster.stop(directory)
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--size", type=int, default=64, help="MiB per disk")
    parser.add_argument("--move", action="store_true",
                        help="time moving a disk between two simulated nodes instead")
    parser.add_argument("--move-mib", type=int, default=1024)
    args = parser.parse_args()
    if args.move:
        measure_move(args.move_mib)
        return
    count, size = args.count, args.size
    real = os.geteuid() == 0 and bool(shutil.which("losetup")) and bool(shutil.which("vgcreate"))
    print(f"{'type':<22} {'disks':>5} {'create':>11} {'remove':>11} {'per create':>12}"
          f" {'per remove':>12}")
    with tempfile.TemporaryDirectory(prefix="herder-bench-storage-") as tmp:
        work = Path(tmp)
        cases: list[tuple[str, Callable[[], object], bool]] = [
            ("file", lambda: file_setup(work / "f", count, size, "file"), False),
            ("sharedfile", lambda: file_setup(work / "s", count, size, "sharedfile"), False),
            ("blockdev (loop)", lambda: blockdev_setup(work / "b", count, size), True),
            ("ext sharedimg", lambda: ext_setup(work / "e", count, size), True),
            ("plain (metadata only)", lambda: plain_setup(work / "p", count, size), True),
            ("rbd (real Ceph)", lambda: rbd_setup(work / "r", count, size), True),
        ]
        from herder.sim import ceph

        for name, setup, needs_root in cases:
            if needs_root and not real:
                print(f"{name:<22} skipped: needs root, losetup and LVM")
                continue
            if name.startswith("rbd") and ceph.missing_packages():
                print(f"{name:<22} skipped: apt-get install {' '.join(ceph.missing_packages())}")
                continue
            measure(name, setup)


if __name__ == "__main__":
    main()
