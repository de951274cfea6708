"""`modify --disk add/remove`, plain <-> drbd conversion and rename (masterd's
LUInstanceSetParams / LUInstanceRename) end to end through noded's own disk RPCs on stand-in
nodes (`standin_cluster`: LVM and DRBD answers shaped like the real captures), and with the
primary's LVs on a real VG (loop device, LVM metadata, activation off): the node RPCs in
Ganeti 3.0's order (cmdlib/instance_set_params.py _CreateNewDisk, _PostAddDisk, _RemoveDisk,
_ConvertPlainToDrbd, _ConvertDrbdToPlain; cmdlib/instance.py LUInstanceRename), the devices
each node holds afterwards, and a failure leaving the config and the devices as they were."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from herder.core import model
from herder.core.errors import OpExecError, OpPrereqError
from herder.masterd.jobs import opcodes
from herder.masterd.lu.instance import InstanceRename, InstanceSetParams
from herder.noded.bdev.base import Host, SubprocessRunner
from tests.conftest import build_config
from tests.noded.bdev import world
from tests.noded.bdev.test_lvm_real import LoopVg, loop_vg  # noqa: F401  (the fixture)
from tests.unit.standin_cluster import StandInRpc, stand_in_env

DRBD0, PLAIN0 = "drbd0.example.com", "plain0.example.com"


def run(env: Any, op: opcodes.OpCode, lu_class: Any = InstanceSetParams) -> tuple[Any, list[str]]:
    said: list[str] = []
    lu = lu_class(op, env, said.append)
    lu.check(env.store.load())
    return lu.execute(), said


def modify(env: Any, name: str, **fields: Any) -> tuple[Any, list[str]]:
    return run(env, opcodes.OpInstanceSetParams(instance_name=name, **fields))


def created(rpc: StandInRpc) -> list[tuple[str, str]]:
    """(node, device type) of each blockdev_create, in order."""
    return [(n, w[0]) for n, m, w in rpc.calls if m == "blockdev_create"]


@pytest.fixture
def drbd_cluster(tmp_path: Path) -> tuple[Any, StandInRpc]:
    return stand_in_env(tmp_path, build_config(nodes=3, drbd_instances=2, plain_instances=0))


@pytest.fixture
def plain_cluster(tmp_path: Path) -> tuple[Any, StandInRpc]:
    config = build_config(nodes=3, drbd_instances=0, plain_instances=1)
    config.find_instance(PLAIN0).admin_state = "down"
    env, rpc = stand_in_env(tmp_path, config)
    world.add_lv(rpc.nodes["node1"].world.state, "xenvg", "p0.disk0", 2048)
    return env, rpc


# --- modify --disk add / remove ----------------------------------------------------------------


def test_added_drbd_disk_is_made_on_both_nodes_in_ganetis_order(drbd_cluster) -> None:
    env, rpc = drbd_cluster
    changes, _ = modify(env, DRBD0, disks=[["add", {"size": "1G"}]])
    assert changes == [["disk/1", "add:size=1024,mode=rw"]]
    # CreateDisks: the primary first, children first; _PostAddDisk: the new disk's sync, then
    # (disks not active) the new disk shut down again
    assert rpc.methods() == [("node1", "blockdev_create")] * 3 + \
        [("node2", "blockdev_create")] * 3 + [("node1", "blockdev_getmirrorstatus"),  # WaitForSync
                                              ("node1", "blockdev_shutdown"),
                                              ("node2", "blockdev_shutdown")]
    assert created(rpc) == [("node1", "plain"), ("node1", "plain"), ("node1", "drbd")] * 1 + \
        [("node2", "plain"), ("node2", "plain"), ("node2", "drbd")]
    inst = env.store.load().find_instance(DRBD0)
    assert [d.iv_name for d in inst.disks] == ["disk/0", "disk/1"]
    new = inst.disks[1].logical_id
    assert isinstance(new, model.DrbdId) and new.port not in (11000, 11001)
    assert new.minors == [1, 2]  # node1 has minor 0 (drbd0), node2 0 and 1 (drbd0, drbd1)
    data, meta = (c.logical_id.lv for c in inst.disks[1].children)  # type: ignore[union-attr]
    for node in ("node1", "node2"):
        assert rpc.nodes[node].lvs() == {f"xenvg/{data}", f"xenvg/{meta}"}


def test_a_failed_add_leaves_config_and_nodes_as_they_were(drbd_cluster) -> None:
    env, rpc = drbd_cluster
    before = env.store.load().find_instance(DRBD0)
    rpc.fail = ("node2", "blockdev_create", 2)  # the secondary's metadata LV
    with pytest.raises(OpExecError, match="creating disk/1 of drbd0.example.com on node2"):
        modify(env, DRBD0, disks=[["add", {"size": "1G"}]])
    assert env.store.load().find_instance(DRBD0).disks == before.disks
    assert rpc.nodes["node1"].lvs() == set() and rpc.nodes["node2"].lvs() == set()
    assert rpc.nodes["node1"].minors() == {}


def test_bad_input_on_a_node_leaves_nothing_half_created(drbd_cluster) -> None:
    """Issue 16's bad input through the whole operation: a disk bigger than the VG, a VG
    the secondary lacks — one clear error, what was made removed, the config unchanged."""
    env, rpc = drbd_cluster
    with pytest.raises(OpExecError, match="not enough free space in volume group 'xenvg'"):
        modify(env, DRBD0, disks=[["add", {"size": "100G"}]])
    for pv in rpc.nodes["node2"].world.state["pvs"]:
        pv["vg"] = "othervg"
    with pytest.raises(OpExecError, match="volume group 'xenvg' not found"):
        modify(env, DRBD0, disks=[["add", {"size": "1G"}]])
    assert created(rpc)[-4:] == [("node1", "plain"), ("node1", "plain"), ("node1", "drbd"),
                                 ("node2", "plain")]
    assert rpc.nodes["node1"].lvs() == set() == rpc.nodes["node2"].lvs()
    assert rpc.nodes["node1"].minors() == {}
    assert len(env.store.load().find_instance(DRBD0).disks) == 1


def test_remove_is_refused_while_the_instance_runs_then_removes_everywhere(drbd_cluster
                                                                          ) -> None:
    env, rpc = drbd_cluster
    modify(env, DRBD0, disks=[["add", {"size": "512M", "name": "scratch"}]],
           ignore_ipolicy=True)
    with pytest.raises(OpPrereqError, match="Instance 'drbd0.example.com' is marked to be up, "
                       "can't remove volume from a running instance without using hotplug"):
        modify(env, DRBD0, disks=[["remove", -1, {}]])
    with env.store.update() as config:
        config.find_instance(DRBD0).admin_state = "down"
    rpc.nodes["node1"].domains = {DRBD0: "running"}  # down in the config, but it runs
    with pytest.raises(OpPrereqError, match="Instance drbd0.example.com is running, can't "
                       "remove volume"):
        modify(env, DRBD0, disks=[["remove", "scratch", {}]])
    rpc.nodes["node1"].domains = {}
    rpc.calls.clear()
    changes, _ = modify(env, DRBD0, disks=[["remove", "scratch", {}]])
    assert changes == [["disk/1", "remove"]]
    assert rpc.methods() == [("node1", "blockdev_remove"), ("node2", "blockdev_remove")]
    assert rpc.nodes["node1"].lvs() == set() == rpc.nodes["node2"].lvs()
    assert [d.iv_name for d in env.store.load().find_instance(DRBD0).disks] == ["disk/0"]


def test_a_remove_a_node_refuses_keeps_the_disk_in_the_config(drbd_cluster) -> None:
    env, rpc = drbd_cluster
    modify(env, DRBD0, disks=[["add", {"size": "512M"}]],
           ignore_ipolicy=True)
    with env.store.update() as config:
        config.find_instance(DRBD0).admin_state = "down"
    rpc.fail = ("node2", "blockdev_remove", 1)
    with pytest.raises(OpExecError, match="could not remove disk/1 of drbd0.example.com"):
        modify(env, DRBD0, disks=[["remove", 1, {}]])
    assert len(env.store.load().find_instance(DRBD0).disks) == 2
    rpc.fail = None
    modify(env, DRBD0, disks=[["remove", 1, {}]])  # again: node1's part is gone already
    assert rpc.nodes["node2"].lvs() == set()


@pytest.mark.parametrize(("mods", "message"), [
    ([["add", {}]], "Required disk parameter 'size' missing"),
    ([["add", {"size": "1G"}], ["remove", {}]], "Only one disk add/attach/remove/detach"),
    ([[0, {"size": "2G"}]], "Disk size change not possible, use grow-disk"),
    ([["add", {"size": "1G", "mode": "rx"}]], "Invalid disk access mode 'rx'"),
    ([["remove", 5, {}]], "Not accepting disk index 5"),
    ([["modify", "nosuch", {"mode": "ro"}]], "Lookup of disk 'nosuch' failed"),
])
def test_bad_disk_changes_are_refused_before_anything_runs(drbd_cluster, mods, message
                                                           ) -> None:
    env, rpc = drbd_cluster
    with pytest.raises(OpPrereqError, match=message):
        modify(env, DRBD0, disks=mods)
    assert rpc.methods() == []


def test_hotplug_is_refused_where_the_primary_cannot_and_a_disk_can_be_renamed(
        drbd_cluster) -> None:
    """The primary answers `hotplug_supported` with an error (Ganeti's _CheckHotplug: the
    instance does not run there): --hotplug is refused before anything is created."""
    env, rpc = drbd_cluster
    config = env.store.load()
    primary = config.nodes[config.find_instance(DRBD0).primary_node].name.split(".")[0]
    rpc.fail = (primary, "hotplug_supported", 1)
    with pytest.raises(OpPrereqError, match="Hotplug is not possible: .*injected"):
        modify(env, DRBD0, disks=[["add", {"size": "1G"}]], hotplug=True)
    assert [m for _, m in rpc.methods()] == ["hotplug_supported"]
    assert len(env.store.load().find_instance(DRBD0).disks) == 1
    rpc.fail = None
    changes, _ = modify(env, DRBD0, disks=[["modify", 0, {"name": "root", "mode": "ro"}]])
    assert sorted(changes) == [["disk.mode/0", "ro"], ["disk.name/0", "root"]]
    disk = env.store.load().find_instance(DRBD0).disks[0]
    assert (disk.name, disk.mode) == ("root", "ro")


# --- plain <-> drbd ------------------------------------------------------------------------------


def test_plain_to_drbd_and_back_in_ganetis_order(plain_cluster) -> None:
    env, rpc = plain_cluster
    changes, said = modify(env, PLAIN0, disk_template="drbd", remote_node="node2.example.com")
    assert changes == [["disk_template", "drbd"]]
    assert said == ["Converting disk template from 'plain' to 'drbd'",
                    "Creating additional volumes...", "Renaming original volumes...",
                    "Initializing DRBD devices..."]
    assert rpc.methods() == [
        ("node1", "blockdev_shutdown"),  # Exec: ShutdownInstanceDisks
        ("node1", "blockdev_create"),  # the primary's metadata LV
        ("node2", "blockdev_create"), ("node2", "blockdev_create"),  # the secondary's LVs
        ("node1", "blockdev_rename"),  # the original LV becomes DRBD's data LV
        ("node1", "blockdev_create"), ("node2", "blockdev_create"),  # the DRBD devices
        ("node1", "blockdev_getmirrorstatus")]  # WaitForSync asks the primary
    inst = env.store.load().find_instance(PLAIN0)
    data, meta = (c.logical_id.lv for c in inst.disks[0].children)  # type: ignore[union-attr]
    assert inst.disk_template == "drbd" and inst.disks[0].size == 2048
    assert inst.secondary_nodes == [env.store.load().find_node("node2.example.com").uuid]
    for node in ("node1", "node2"):
        assert rpc.nodes[node].lvs() == {f"xenvg/{data}", f"xenvg/{meta}"}
    assert rpc.nodes["node1"].world.state["lvs"][f"xenvg/{data}"]["size"] == 2048

    rpc.calls.clear()
    changes, said = modify(env, PLAIN0, disk_template="plain")
    assert said == ["Converting disk template from 'drbd' to 'plain'",
                    "Removing volumes on the secondary node...",
                    "Removing unneeded volumes on the primary node..."]
    assert rpc.methods() == [("node1", "blockdev_shutdown"), ("node2", "blockdev_shutdown"),
                             ("node2", "blockdev_remove"), ("node1", "blockdev_remove")]
    assert rpc.nodes["node1"].lvs() == {f"xenvg/{data}"}  # the data stays where it was
    assert rpc.nodes["node2"].lvs() == set() and rpc.nodes["node2"].minors() == {}
    inst = env.store.load().find_instance(PLAIN0)
    assert inst.disk_template == "plain" and inst.disks[0].logical_id == model.PlainId(
        vg="xenvg", lv=data) and inst.disks[0].iv_name == "disk/0"


def test_a_failed_drbd_setup_puts_back_the_original_volumes(plain_cluster) -> None:
    env, rpc = plain_cluster
    rpc.fail = ("node2", "blockdev_create", 3)  # the secondary's DRBD device
    with pytest.raises(OpExecError, match="initializing the DRBD devices of plain0"):
        modify(env, PLAIN0, disk_template="drbd", remote_node="node2")
    inst = env.store.load().find_instance(PLAIN0)
    assert inst.disk_template == "plain" and inst.disks[0].logical_id == model.PlainId(
        vg="xenvg", lv="p0.disk0")
    assert rpc.nodes["node1"].lvs() == {"xenvg/p0.disk0"}  # renamed back, new LVs gone
    assert rpc.nodes["node2"].lvs() == set()
    assert rpc.nodes["node1"].minors() == {}  # the primary's DRBD device shut down


@pytest.mark.parametrize(("fields", "message"), [
    ({"disk_template": "drbd"}, "neither an iallocator nor a secondary node"),
    ({"disk_template": "drbd", "remote_node": "node1"}, "is the same as the primary node"),
    ({"disk_template": "plain"}, "Instance already has disk template plain"),
    ({"disk_template": "file"}, "Conversion from the 'plain' disk template to 'file'"),
    ({"disk_template": "drbd", "remote_node": "node2", "disks": [["add", {"size": 1}]]},
     "Disk template conversion and other disk changes not supported at the same time"),
])
def test_bad_conversions_are_refused(plain_cluster, fields, message) -> None:
    env, rpc = plain_cluster
    with pytest.raises(OpPrereqError, match=message):
        modify(env, PLAIN0, **fields)
    assert [m for _, m in rpc.methods()] == []


def test_conversion_needs_the_instance_down(plain_cluster) -> None:
    env, _ = plain_cluster
    with env.store.update() as config:
        config.find_instance(PLAIN0).admin_state = "up"
    with pytest.raises(OpPrereqError, match="marked to be up, cannot change disk template"):
        modify(env, PLAIN0, disk_template="drbd", remote_node="node2")


# --- rename ------------------------------------------------------------------------------------


def test_rename_sets_the_new_owner_on_every_node_and_keeps_the_lv_names(drbd_cluster) -> None:
    env, rpc = drbd_cluster
    modify(env, DRBD0, disks=[["add", {"size": "512M"}]],
           ignore_ipolicy=True)
    with pytest.raises(OpPrereqError, match="is marked to be up, cannot rename"):
        run(env, opcodes.OpInstanceRename(instance_name=DRBD0, new_name="web9",
                                          name_check=False, ip_check=False), InstanceRename)
    with env.store.update() as config:
        config.find_instance(DRBD0).admin_state = "down"
        config.find_instance(DRBD0).disks.pop(0)  # the one the stand-ins never held
    lvs = rpc.nodes["node1"].lvs()
    rpc.calls.clear()
    run(env, opcodes.OpInstanceRename(instance_name=DRBD0, new_name="web9", name_check=False,
                                      ip_check=False), InstanceRename)
    methods = [m for _, m in rpc.methods()]
    # StartInstanceDisks (both nodes as secondary, the primary as primary), setinfo on
    # every node, the OS rename script, ShutdownInstanceDisks
    assert methods[:3] == ["blockdev_assemble"] * 3
    assert methods[3:5] == ["blockdev_setinfo"] * 2
    assert methods[5] == "instance_run_rename" and methods[6:] == ["blockdev_shutdown"] * 2
    assert rpc.nodes["node1"].lvs() == lvs
    tags = {lv["tags"][0] for lv in rpc.nodes["node1"].world.state["lvs"].values()}
    assert tags == {"originstname+web9"}


# --- the primary's LVs on a real VG (LVM metadata, activation off) -----------------------------


def lvs_with_tags(vg: LoopVg) -> dict[str, str]:
    return {name: tags for name, (_, tags) in vg.lvs().items()}


@pytest.mark.slow
def test_on_real_lvm_add_remove_and_a_refused_drbd_leave_only_the_original_lv(
        tmp_path: Path, loop_vg: LoopVg) -> None:  # noqa: F811
    config = build_config(nodes=2, drbd_instances=0, plain_instances=1)
    config.cluster.volume_group_name = loop_vg.vg
    inst = config.find_instance(PLAIN0)
    inst.admin_state = "down"
    inst.disks[0].logical_id = model.PlainId(vg=loop_vg.vg, lv="p0.disk0")
    env, rpc = stand_in_env(tmp_path, config)
    subprocess.run(["lvcreate", "-L", "32m", "-n", "p0.disk0", loop_vg.vg], check=True,
                   capture_output=True, env={**os.environ, **loop_vg.env})
    rpc.nodes["node1"].bdev = Host(runner=SubprocessRunner(extra_env=loop_vg.env),
                                   lv_device_nodes_required=False)
    for pv in rpc.nodes["node2"].world.state["pvs"]:  # the stand-in secondary: the same VG
        pv["vg"] = loop_vg.vg
    modify(env, PLAIN0, disks=[["add", {"size": "16M"}]],
           ignore_ipolicy=True)
    added = env.store.load().find_instance(PLAIN0).disks[1].logical_id
    assert isinstance(added, model.PlainId)
    assert lvs_with_tags(loop_vg) == {"p0.disk0": "",
                                      added.lv: "originstname+plain0.example.com"}
    run(env, opcodes.OpInstanceRename(instance_name=PLAIN0, new_name="p9", name_check=False,
                                      ip_check=False), InstanceRename)
    assert lvs_with_tags(loop_vg)[added.lv] == "originstname+p9"
    modify(env, "p9", disks=[["remove", 1, {}]])
    assert lvs_with_tags(loop_vg) == {"p0.disk0": "originstname+p9"}
    # plain -> drbd: the metadata LV and the rename run for real; no DRBD here, so the
    # device cannot be made and everything goes back
    with pytest.raises(OpExecError, match="initializing the DRBD devices of p9"):
        modify(env, "p9", disk_template="drbd", remote_node="node2")
    assert set(loop_vg.lvs()) == {"p0.disk0"}
    assert rpc.nodes["node2"].lvs() == set()
    assert env.store.load().find_instance("p9").disk_template == "plain"


@pytest.mark.parametrize(("text", "mod"), [
    ("add:size=1G", ["add", -1, {"size": "1G"}]),
    ("add:size=1G,mode=ro,name=data", ["add", -1, {"size": "1G", "mode": "ro", "name": "data"}]),
    ("remove", ["remove", -1, {}]),
    ("2:add,size=512M", ["add", 2, {"size": "512M"}]),
    ("1:remove", ["remove", 1, {}]),
    ("0:name=root,mode=ro", ["modify", 0, {"name": "root", "mode": "ro"}]),
    ("data:mode=ro", ["modify", "data", {"mode": "ro"}]),
])
def test_the_cli_reads_ganetis_disk_modifications(text: str, mod: list[Any]) -> None:
    from herder.cli.instance import disk_modification

    assert disk_modification(text) == mod


@pytest.mark.parametrize("text", ["1:remove,size=1G", "1:add,remove", "foo", "1:size"])
def test_the_cli_refuses_bad_disk_modifications(text: str) -> None:
    import click

    from herder.cli.instance import disk_modification

    with pytest.raises(click.BadParameter):
        disk_modification(text)


def test_paths_outside_the_allowed_ones_are_refused_and_nothing_is_made(tmp_path: Path) -> None:
    """Issue 16's bad input through `modify --disk add`: a file disk under a directory the
    node's allowed-paths file does not name, a device adopted from outside /dev/disk/."""
    config = build_config(nodes=2, drbd_instances=0, plain_instances=0)
    node1 = config.find_node("node1.example.com")
    config.cluster.file_storage_dir = str(tmp_path / "not-allowed")
    for name, template, path in (("f1", "file", f"{tmp_path}/not-allowed/f1/disk0"),
                                 ("b1", "blockdev", "/dev/disk/by-id/lun0")):
        inst = model.Instance(uuid=model.new_uuid(), name=name, primary_node=node1.uuid,
                              os="x", hypervisor="kvm", disks=[model.Disk(
                                  uuid=model.new_uuid(), dev_type=template, size=64,
                                  iv_name="disk/0", logical_id=model.FileId(
                                      driver="loop" if template == "file" else "manual",
                                      path=path))])
        config.instances[inst.uuid] = inst
    env, rpc = stand_in_env(tmp_path, config)
    allowed = tmp_path / "file-storage-paths"
    allowed.write_text(f"{tmp_path}/allowed\n")
    rpc.nodes["node1"].bdev.file_storage_paths_file = allowed
    with pytest.raises(OpExecError, match="Failed to create directory .*not-allowed/f1"):
        modify(env, "f1", disks=[["add", {"size": "16M"}]],
           ignore_ipolicy=True)
    with pytest.raises(OpExecError, match="/dev/loop0 lies outside /dev/disk/ and cannot be "
                       "adopted"):
        modify(env, "b1", disks=[["add", {"size": "16M", "adopt": "/dev/loop0"}]],
           ignore_ipolicy=True)
    assert not (tmp_path / "not-allowed").exists()
    assert [len(i.disks) for i in env.store.load().instances.values()] == [1, 1]
