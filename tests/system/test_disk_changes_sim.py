"""`herder instance modify --disk add/remove` and `herder instance rename` on a simulated
cluster with real data: a disk added to a sharedfile instance is a real file on the shared
storage, holds a pattern across a failover (and the first disk's data is untouched); a
removal is refused while the instance runs (Ganeti's message) and then removes the file; a
renamed file instance's directory moves on its node with the data in it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tests.simhelpers import LIBVIRT_URI, config, herder, running_sim
from tests.system.test_disk_data_sim import READ, WRITE, add, on_node, primary

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    yield from running_sim(tmp_path_factory.mktemp("diskchanges"), 3, first_ip=40)


def domain_disks(sim, node: str, name: str) -> int:
    """How many disks the instance's domain on `node` has (libvirt's definition)."""
    uri = getattr(sim, "libvirt_uri", LIBVIRT_URI)
    done = sim.host(node).run(["virsh", "-c", uri, "dumpxml", name], timeout=60)
    assert done.returncode == 0, done.stderr
    return len(ET.fromstring(done.stdout).findall("./devices/disk"))


def devices(sim, name: str) -> dict[str, tuple[str, str]]:
    """iv_name -> (node, device path), as activate-disks prints them."""
    found = {}
    for line in herder(sim, "instance", "activate-disks", name).stdout.splitlines():
        node, iv_name, path = line.split(":", 2)
        found[iv_name] = (node, path)
    return found


def test_an_added_sharedfile_disk_holds_its_data_over_a_failover(sim) -> None:
    add(sim, "sfadd", "sharedfile", "32M")
    node, first = devices(sim, "sfadd")["disk/0"]
    first_written = on_node(sim, node, WRITE, first)
    added = herder(sim, "instance", "modify", "sfadd", "--disk", "add:size=48M")
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
        job = api.wait_for_job(api.modify_instance("sfadd", disks=[["remove", 1, {}]]),
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
