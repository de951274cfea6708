"""No data lost by any move (issue "Real disks"), end to end on a simulated cluster: a known
pattern is written to an instance's disk on its node (at the device `activate-disks` names),
the instance fails over / migrates / is moved / its node is evacuated / its disk grows, and the
same pattern is read back on its new node, for every template that holds data here:
sharedfile (the shared directory), ext (the sharedimg provider: each node its own loop device
on the shared image), file (copied by `instance move`), blockdev (a loop device adopted under
/dev/disk/by-id on every node, as a SAN's LUN). `instance modify --disk add/remove` and
`instance rename` on the same cluster: a disk added to a sharedfile instance is a real file on
the shared storage and holds a pattern across a failover (the first disk's data untouched); a
removal is refused while the instance runs (Ganeti's message) and then removes the file; a
renamed file instance's directory moves on its node with the data in it. An export whose
target's noded, or masterd, is killed while a disk streams leaves no partial export and the
instance running with its data (and, exported without a shutdown, no snapshot). One cluster
for the module (a start costs ~15 s: the disk changes share it)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import simaddresses
from tests.simhelpers import (
    LIBVIRT_URI,
    client_env,
    config,
    domains,
    herder,
    running_sim,
    wait_for,
)

pytestmark = pytest.mark.slow

# The pattern: 256 KiB from a fixed seed, written 1 MiB into the disk (after the OS's header).
WRITE = """
import hashlib, random, sys
data = random.Random(16).randbytes(256 * 1024)
with open(sys.argv[1], "r+b") as disk:
    disk.seek(1 << 20)
    disk.write(data)
    disk.flush()
print(hashlib.sha256(data).hexdigest())
"""
READ = """
import hashlib, sys
with open(sys.argv[1], "rb") as disk:
    disk.seek(1 << 20)
    print(hashlib.sha256(disk.read(256 * 1024)).hexdigest())
"""
LUN = "/dev/disk/by-id/herder-test-lun0"


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    yield from running_sim(tmp_path_factory.mktemp("disks"), 3,
                           first_ip=simaddresses.first_ip("disk_data"))


def devices(sim, name: str) -> dict[str, tuple[str, str]]:
    """iv_name -> (node, device path), as activate-disks prints them."""
    found = {}
    for line in herder(sim, "instance", "activate-disks", name).stdout.splitlines():
        node, iv_name, path = line.split(":", 2)
        found[iv_name] = (node, path)
    return found


def device(sim, name: str) -> tuple[str, str]:
    """(node, device path) of the instance's first disk, as activate-disks prints them."""
    return devices(sim, name)["disk/0"]


def domain_disks(sim, node: str, name: str) -> int:
    """How many disks the instance's domain on `node` has (libvirt's definition)."""
    uri = getattr(sim, "libvirt_uri", LIBVIRT_URI)
    done = sim.host(node).run(["virsh", "-c", uri, "dumpxml", name], timeout=60)
    assert done.returncode == 0, done.stderr
    return len(ET.fromstring(done.stdout).findall("./devices/disk"))


def on_node(sim, node: str, code: str, path: str) -> str:
    done = sim.host(node).run(["python3", "-c", code, path], timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def primary(sim, name: str) -> str:
    cfg = config(sim)
    return cfg.node_name(cfg.find_instance(name).primary_node)


def write_then_check(sim, name: str, move: list[str]) -> tuple[str, str]:
    """Write the pattern where the instance is, run `herder MOVE...`, read it where it is
    then; (old node, new node)."""
    node, path = device(sim, name)
    written = on_node(sim, node, WRITE, path)
    herder(sim, *move)
    new_node, new_path = device(sim, name)
    assert new_node == primary(sim, name) != node
    assert on_node(sim, new_node, READ, new_path) == written
    return node, new_node


def add(sim, name: str, template: str, disk: str, node: str = "node1") -> None:
    herder(sim, "instance", "add", name, "--no-name-check", "-t", template, "-o",
           "debootstrap+default", "--disk", disk, "-n", f"{node}.sim.herder.test",
           "--ignore-ipolicy")  # the simulation's disks are smaller than the policy's minimum


def test_sharedfile_keeps_its_data_over_failover_and_migration(sim) -> None:
    add(sim, "sf1", "sharedfile", "64M")
    write_then_check(sim, "sf1", ["instance", "failover", "sf1"])
    write_then_check(sim, "sf1", ["instance", "migrate", "sf1"])
    node, path = device(sim, "sf1")
    written = on_node(sim, node, READ, path)
    grown = herder(sim, "instance", "grow-disk", "sf1", "0", "32M")
    assert grown.stdout.strip() == "Grew disk/0 of sf1 to 96 MiB"
    assert sim.host(node).path(path).stat().st_size == 96 << 20
    assert config(sim).find_instance("sf1").disks[0].size == 96
    assert on_node(sim, node, READ, path) == written
    with sim.rapi() as api:  # RAPI's instance info (Ganeti's OP_INSTANCE_QUERY_DATA)
        job = api.wait_for_job(api.get_instance_info("sf1"), timeout=60, raise_on_error=True)
    status = job["opresult"][0]["sf1"]["disks"][0]["pstatus"]  # the primary's BlockDevStatus
    assert status["dev_path"] == path and status["is_degraded"] is False
    assert status["ldisk_status"] == 1  # okay
    smaller = herder(sim, "instance", "grow-disk", "sf1", "0", "64M", "--absolute",
                     check=False)
    assert smaller.returncode == 1 and "smaller than the current disk size" in smaller.stderr


def test_ext_keeps_its_data_and_each_node_has_its_own_device(sim) -> None:
    add(sim, "ext1", "ext", "0:size=64M,provider=sharedimg")
    write_then_check(sim, "ext1", ["instance", "failover", "ext1"])
    new_path = device(sim, "ext1")[1]
    image = next(Path(sim.directory, "shared", "sharedimg").glob("*.img"))
    loops = subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(image)],
                           capture_output=True, text=True, check=True).stdout.split()
    assert new_path in loops  # the new node's own loop device on the shared image
    herder(sim, "instance", "remove", "ext1")
    assert not image.exists()


def test_file_is_copied_by_move_and_refused_by_failover(sim) -> None:
    add(sim, "file1", "file", "32M")
    refused = herder(sim, "instance", "failover", "file1", check=False)
    assert refused.returncode == 1 and "file" in refused.stderr
    assert "cannot move between nodes" in refused.stderr or "cannot fail over" in refused.stderr
    old, new = write_then_check(sim, "file1", ["instance", "move", "file1", "-n", "node2",
                                                      "--ignore-ipolicy"])
    assert new == "node2.sim.herder.test"
    assert not sim.host(old).path("/srv/herder/file-storage/file1").exists()
    assert config(sim).find_instance("file1").admin_state == "up"
    # the disk lost on its node: recreate-disks makes it again (refused while it runs)
    running = herder(sim, "instance", "recreate-disks", "file1", check=False)
    assert running.returncode == 1 and "shut it down before" in running.stderr
    herder(sim, "instance", "shutdown", "file1")
    disk = sim.host(new).path("/srv/herder/file-storage/file1/disk0")
    disk.unlink()
    herder(sim, "instance", "recreate-disks", "file1")
    assert disk.stat().st_size == 32 << 20
    herder(sim, "instance", "start", "file1")


def test_evacuation_moves_shared_disks_and_refuses_local_ones(sim) -> None:
    add(sim, "sf3", "sharedfile", "32M", node="node3")
    add(sim, "file3", "file", "32M", node="node3")
    refused = herder(sim, "node", "evacuate", "node3.sim.herder.test", check=False)
    assert refused.returncode == 1
    assert "cannot be evacuated without copying them: file3" in refused.stderr
    herder(sim, "instance", "move", "file3", "-n", "node2", "--ignore-ipolicy")
    write_then_check(sim, "sf3", ["node", "evacuate", "node3.sim.herder.test"])


def test_blockdev_adopted_on_every_node_keeps_its_data(sim, tmp_path: Path) -> None:
    image = tmp_path / "lun0.img"
    with open(image, "wb") as lun:
        lun.truncate(64 << 20)
    loop = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True,
                          text=True, check=True).stdout.strip()
    try:
        for node in sim.nodes:  # the LUN as every node of a SAN sees it
            link = sim.host(node.name).path(LUN)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(loop)
        add(sim, "blk1", "blockdev", f"0:adopt={LUN},size=64M")
        assert device(sim, "blk1")[1] == LUN
        write_then_check(sim, "blk1", ["instance", "failover", "blk1"])
        herder(sim, "instance", "remove", "blk1")
        assert image.stat().st_size == 64 << 20  # adopted: the operator's, never removed
    finally:
        subprocess.run(["losetup", "-d", loop], check=False)


def test_an_added_sharedfile_disk_holds_its_data_over_a_failover(sim) -> None:
    add(sim, "sfadd", "sharedfile", "32M")
    node, first = devices(sim, "sfadd")["disk/0"]
    first_written = on_node(sim, node, WRITE, first)
    added = herder(sim, "instance", "modify", "sfadd", "--disk", "add:size=48M",
                   "--ignore-ipolicy")
    assert " - disk/1 -> add:size=48,mode=rw" in added.stdout.splitlines()
    cfg = config(sim)
    assert [d.iv_name for d in cfg.find_instance("sfadd").disks] == ["disk/0", "disk/1"]
    node, second = devices(sim, "sfadd")["disk/1"]
    assert sim.host(node).path(second).stat().st_size == 48 << 20
    written = on_node(sim, node, WRITE.replace("Random(16)", "Random(17)"), second)
    assert written != first_written
    assert domain_disks(sim, node, "sfadd") == 1  # no hotplug: the running domain is as it was
    herder(sim, "instance", "failover", "sfadd")
    moved = devices(sim, "sfadd")
    new_node = primary(sim, "sfadd")
    assert moved["disk/1"][0] == new_node != node
    assert domain_disks(sim, new_node, "sfadd") == 2  # started again: with the new disk
    assert on_node(sim, new_node, READ, moved["disk/1"][1]) == written
    assert on_node(sim, new_node, READ, moved["disk/0"][1]) == first_written

    refused = herder(sim, "instance", "modify", "sfadd", "--disk", "1:remove", check=False)
    assert refused.returncode == 1
    assert "can't remove volume from a running instance without using hotplug" in \
        refused.stderr
    herder(sim, "instance", "shutdown", "sfadd")
    with sim.rapi() as api:  # Ganeti's RAPI route, as Ganeti's client sends it
        job = api.wait_for_job(api.modify_instance("sfadd", disks=[["remove", 1, {}]],
                                                   ignore_ipolicy=True),
                               timeout=120, raise_on_error=True)
    assert job["opresult"][0] == [["disk/1", "remove"]]
    assert not sim.host(new_node).path(moved["disk/1"][1]).exists()
    assert [d.iv_name for d in config(sim).find_instance("sfadd").disks] == ["disk/0"]
    assert on_node(sim, new_node, READ, devices(sim, "sfadd")["disk/0"][1]) == first_written


def test_renaming_a_file_instance_moves_its_directory_with_the_data(sim) -> None:
    add(sim, "fren", "file", "32M", node="node2")
    node, path = devices(sim, "fren")["disk/0"]
    written = on_node(sim, node, WRITE, path)
    refused = herder(sim, "instance", "rename", "fren", "fren2", "--no-name-check",
                     check=False)
    assert refused.returncode == 1 and "is marked to be up, cannot rename" in refused.stderr
    herder(sim, "instance", "shutdown", "fren")
    herder(sim, "instance", "rename", "fren", "fren2", "--no-name-check")
    host = sim.host(node)
    assert not host.path("/srv/herder/file-storage/fren").exists()
    disk = config(sim).find_instance("fren2").disks[0]
    assert disk.logical_id.path == "/srv/herder/file-storage/fren2/disk0"
    herder(sim, "instance", "start", "fren2")
    new_node, new_path = devices(sim, "fren2")["disk/0"]
    assert (new_node, new_path) == (node, "/srv/herder/file-storage/fren2/disk0")
    assert on_node(sim, node, READ, new_path) == written


def test_a_move_masterd_dies_in_rolls_back_to_one_copy_and_a_retry_works(sim) -> None:
    """Issue 35 item 12: masterd killed (-9) while `instance move` copies a file disk. Before,
    the target kept a full copy nothing mentioned, the instance stayed down (admin up) and a
    retry failed on "File exists". Now masterd, started again by the node's supervisor, fails
    the job (never run twice) and follows it up with a cleanup move: one copy (the source's,
    the config's), the instance running there with its data; then a retry moves it."""
    add(sim, "killmv", "file", "1G")  # 1 GiB: the copy takes seconds, long enough to die in
    source, path = device(sim, "killmv")
    target = next(n.name for n in sim.nodes if n.name != source)
    written = on_node(sim, source, WRITE, path)
    copy = sim.host(target).path(path)  # the same path on the target
    master = sim.host(sim.nodes[0].name)
    pid_file = master.path("/run/herder/masterd.pid")
    dead = pid_file.read_text().strip()
    moving = subprocess.Popen([sys.executable, "-m", "herder.cli.main", "instance", "move",
                               "killmv", "-n", target], env=client_env(sim),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: copy.exists() and copy.stat().st_size > 0, 180,
                 "the copy under way on the target")
        killed = master.run(["kill", f"-{int(signal.SIGKILL)}", dead], timeout=30)
        assert killed.returncode == 0, killed.stderr
        moving.communicate(timeout=300)  # the CLI sees masterd go (or the job fail)
    finally:
        if moving.poll() is None:
            moving.kill()
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() not in ("", dead),
             180, "masterd started again by the supervisor")

    def settled() -> bool:  # the cleanup job ran: the target's copy gone, the instance up
        try:
            return not copy.exists() and domains(sim, source).get("killmv") is True
        except AssertionError:
            return False

    wait_for(settled, 300, "the cleanup of the interrupted move")
    cfg = config(sim)
    assert cfg.node_name(cfg.find_instance("killmv").primary_node) == source
    assert cfg.find_instance("killmv").admin_state == "up"
    assert on_node(sim, source, READ, path) == written
    assert not sim.host(target).path(str(Path(path).parent)).exists()
    jobs = json.loads(herder(sim, "job", "list", "--json").stdout)
    moves = [j for j in jobs if j["summary"] == ["INSTANCE_MOVE(killmv)"]]
    assert [j["status"] for j in moves[-2:]] == ["error", "success"], moves[-2:]
    # and a retry moves it, with its data
    herder(sim, "instance", "move", "killmv", "-n", target, timeout=600)
    new_node, new_path = device(sim, "killmv")
    assert new_node == target and on_node(sim, target, READ, new_path) == written
    assert not sim.host(source).path(path).exists()
    herder(sim, "instance", "remove", "killmv", timeout=300)


def test_a_move_whose_disks_cannot_be_made_on_the_target_leaves_it_running_on_the_source(
        sim) -> None:
    """Issue 35 item 12: the disks were made on the target before the move's cleanup block,
    so a failure there left the instance shut down, admin up, on no node. A file stands where
    the target's instance directory must be: the move fails in one line, and the instance runs
    on its source again with its data."""
    add(sim, "mkfail", "file", "32M")
    source, path = device(sim, "mkfail")
    target = next(n.name for n in sim.nodes if n.name != source)
    written = on_node(sim, source, WRITE, path)
    blocker = sim.host(target).path(str(Path(path).parent))
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory\n")
    try:
        refused = herder(sim, "instance", "move", "mkfail", "-n", target, "--ignore-ipolicy",
                         check=False, timeout=300)
    finally:
        blocker.unlink()
    assert refused.returncode == 1 and f"it stays on {source}" in refused.stderr, \
        refused.stderr
    assert domains(sim, source).get("mkfail") is True
    assert config(sim).find_instance("mkfail").admin_state == "up"
    assert on_node(sim, source, READ, path) == written
    herder(sim, "instance", "remove", "mkfail", timeout=300)


# the source's OS export script in the next test: 64 KiB at a time, slowly after the first MiB,
# so that the target's noded is killed while the disk streams
TRICKLE = """#!/bin/sh
i=0
while [ $i -lt 512 ]; do
  dd if="$EXPORT_DEVICE" bs=65536 skip=$i count=1 status=none || exit 1
  i=$((i + 1))
  [ $i -lt 16 ] || sleep 0.2
done
"""
EXPORTS = "/srv/herder/export"


@dataclass
class Streaming:
    """An export under way (`export_streaming`)."""

    source: str
    target: str
    path: str  # the instance's disk on `source`
    written: str  # the pattern's hash
    dump: Path  # the disk's dump in the partial export on `target`
    export: subprocess.Popen[str]  # `herder backup export`


@contextmanager
def export_streaming(sim, name: str, template: str = "file", disk: str = "32M",
                     *options: str) -> Iterator[Streaming]:
    """A new 32 MiB instance `name` (file, or `template` with `disk`) with the pattern, being
    exported (with `options`) to another node through the source's slow OS export script
    (TRICKLE), once its first MiB is there; the script is put back and the command ended
    afterwards."""
    from herder.sim import cluster

    add(sim, name, template, disk)
    source, path = device(sim, name)
    target = next(n.name for n in sim.nodes if n.name != source)
    written = on_node(sim, source, WRITE, path)
    disk = config(sim).find_instance(name).disks[0].uuid
    dump = sim.host(target).path(f"{EXPORTS}/{name}.new/{disk}")
    script = sim.host(source).path(f"{cluster.OS_DIR}/{cluster.DEMO_OS}/export")
    kept = script.read_text()
    script.write_text(TRICKLE)
    export = None
    try:
        export = subprocess.Popen([sys.executable, "-m", "herder.cli.main", "backup", "export",
                                   "-n", target, *options, name], env=client_env(sim),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: dump.exists() and dump.stat().st_size >= 1 << 20, 180,
                 "the first MiB of the disk on the target")
        yield Streaming(source, target, path, written, dump, export)
    finally:
        if export is not None and export.poll() is None:
            export.kill()
            export.communicate()
        script.write_text(kept)


def test_an_export_whose_target_node_dies_mid_stream_leaves_nothing_behind(sim) -> None:
    """Issue 30 item 7: the target's noded killed (-9) while a disk streams to it. The export
    fails in one line; the partial export is gone from the target once its noded is back
    (the master tries its removal again meanwhile; a noded removes what a dead stream left
    as it starts); the instance runs again on its node with its data."""
    with export_streaming(sim, "killex") as streaming:
        target = sim.host(streaming.target)
        (noded,) = [d for d in target.supervisor("status", ["noded"]).daemons
                    if d.name == "noded"]
        killed = target.run(["kill", "-9", str(noded.pid)], timeout=30)
        assert killed.returncode == 0, killed.stderr
        _out, err = streaming.export.communicate(timeout=600)
    assert streaming.export.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert f"export of killex to {streaming.target} failed" in last, err
    assert "the partial export was removed" in last, err
    wait_for(lambda: not streaming.dump.parent.exists(), 120, "no partial export on the target")
    wait_for(lambda: domains(sim, streaming.source).get("killex") is True, 120,
             "killex running again")
    assert config(sim).find_instance("killex").admin_state == "up"
    assert on_node(sim, streaming.source, READ, streaming.path) == streaming.written
    herder(sim, "instance", "remove", "killex", timeout=300)


def test_an_export_masterd_dies_in_is_failed_and_cleaned_up(sim) -> None:
    """Issue 30 item 7: masterd killed (-9) while a disk streams to the export's target.
    masterd, started again by the node's supervisor, fails the job (never runs it twice) and
    follows it with the export's cleanup: no partial export on the target, the instance
    running again on its node with its data."""
    master = sim.host(sim.nodes[0].name)
    pid_file = master.path("/run/herder/masterd.pid")
    dead = pid_file.read_text().strip()
    with export_streaming(sim, "killmx") as streaming:
        killed = master.run(["kill", f"-{int(signal.SIGKILL)}", dead], timeout=30)
        assert killed.returncode == 0, killed.stderr
        streaming.export.communicate(timeout=300)  # the CLI sees masterd go (or the job fail)
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() not in ("", dead),
             180, "masterd started again by the supervisor")

    def settled() -> bool:  # the cleanup ran: no partial export, the instance up
        try:
            return not streaming.dump.parent.exists() and \
                domains(sim, streaming.source).get("killmx") is True
        except AssertionError:
            return False

    wait_for(settled, 300, "the cleanup of the interrupted export")
    assert config(sim).find_instance("killmx").admin_state == "up"
    assert on_node(sim, streaming.source, READ, streaming.path) == streaming.written
    jobs = json.loads(herder(sim, "job", "list", "--json").stdout)
    exports = [j for j in jobs if j["summary"] == ["BACKUP_EXPORT(killmx)"]]
    assert [j["status"] for j in exports[-2:]] == ["error", "success"], exports[-2:]
    assert not sim.host(streaming.target).path(f"{EXPORTS}/killmx").exists()
    herder(sim, "instance", "remove", "killmx", timeout=300)


def test_a_running_export_masterd_dies_in_leaves_no_snapshot(sim) -> None:
    """Issue 30 item 7 for an export without a shutdown (`--noshutdown`): masterd killed (-9)
    while the snapshot of the running ext instance's disk (the sharedimg provider's
    `snapshot`) streams to the target. masterd, started again by the node's supervisor,
    fails the job and follows it with the export's cleanup: the snapshot's volume is
    removed, no partial export is left on the target, and the instance, never stopped, runs
    on with its data."""
    images = Path(sim.directory, "shared", "sharedimg")
    master = sim.host(sim.nodes[0].name)
    pid_file = master.path("/run/herder/masterd.pid")
    dead = pid_file.read_text().strip()
    with export_streaming(sim, "killsnap", "ext", "0:size=32M,provider=sharedimg",
                          "--noshutdown") as streaming:
        snapshots = sorted(p.name for p in images.glob("*.snap-_export*"))
        assert snapshots, "the export reads no snapshot"
        killed = master.run(["kill", f"-{int(signal.SIGKILL)}", dead], timeout=30)
        assert killed.returncode == 0, killed.stderr
        streaming.export.communicate(timeout=300)
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() not in ("", dead),
             180, "masterd started again by the supervisor")

    def settled() -> bool:  # the cleanup ran: no snapshot, no partial export
        return not streaming.dump.parent.exists() and not list(images.glob("*.snap-_export*"))

    wait_for(settled, 300, "the cleanup of the interrupted export")
    jobs = json.loads(herder(sim, "job", "list", "--json").stdout)
    exports = [j for j in jobs if j["summary"] == ["BACKUP_EXPORT(killsnap)"]]
    assert [j["status"] for j in exports[-2:]] == ["error", "success"], exports[-2:]
    assert domains(sim, streaming.source).get("killsnap") is True
    assert config(sim).find_instance("killsnap").admin_state == "up"
    assert on_node(sim, streaming.source, READ, streaming.path) == streaming.written
    assert not sim.host(streaming.target).path(f"{EXPORTS}/killsnap").exists()
    herder(sim, "instance", "remove", "killsnap", timeout=300)
