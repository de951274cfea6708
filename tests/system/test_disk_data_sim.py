"""No data lost by any move (issue "Real disks"), end to end on a simulated cluster: a known
pattern is written to an instance's disk on its node (at the device `activate-disks` names),
the instance fails over / migrates / is moved / its node is evacuated / its disk grows, and the
same pattern is read back on its new node, for every template that holds data here:
sharedfile (the shared directory), ext (the sharedimg provider: each node its own loop device
on the shared image), file (copied by `instance move`), blockdev (a loop device adopted under
/dev/disk/by-id on every node, as a SAN's LUN)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.simhelpers import config, herder, running_sim, worker_offset

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
                           first_ip=120 + worker_offset(10, 6))


def device(sim, name: str) -> tuple[str, str]:
    """(node, device path) of the instance's first disk, as activate-disks prints them."""
    line = herder(sim, "instance", "activate-disks", name).stdout.splitlines()[0]
    node, iv_name, path = line.split(":", 2)
    assert iv_name == "disk/0"
    return node, path


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
           "debootstrap+default", "--disk", disk, "-n", f"{node}.sim.herder.test")


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
    old, new = write_then_check(sim, "file1", ["instance", "move", "file1", "-n", "node2"])
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
    herder(sim, "instance", "move", "file3", "-n", "node2")
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
