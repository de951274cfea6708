"""masterd's disk steps (`masterd.lu.disks`): the disk objects each node is sent
(`core.diskobjects`, Ganeti's shapes) and what happens when a node fails, recorded on a
stand-in RPC. The order of the RPCs of each operation is compared with Ganeti 3.0.2's own
cmdlib in tests/ganeti/test_cmdlib_rpc_order.py."""

from __future__ import annotations

from typing import Any

import pytest

from herder.core import diskobjects, model
from herder.core.diskobjects import decode_disk
from herder.core.errors import OpExecError, OpPrereqError, RpcError
from herder.core.noderpc import RpcTransport
from herder.masterd.lu import disks, replace
from tests.conftest import build_config
from tests.rpcfakes import nothing_answer


class Recorder(RpcTransport):
    """Records (node, method, what) per call; `fail` makes one (node, method, n-th) fail."""

    def __init__(self, fail: tuple[str, str] | None = None,
                 without_vg: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.fail = fail
        self.without_vg = without_vg  # nodes whose `vg_list` lacks the cluster's VG

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        disk = args.get("disk")
        what = (disk["dev_type"], tuple(disk["logical_id"][:2])) if disk else \
            args.get("file_storage_dir")
        self.calls.append((node.name.split(".")[0], method, what))
        if self.fail == (node.name.split(".")[0], method):
            raise RpcError(f"node {node.name}: {method} failed: boom")
        if method == "blockdev_assemble":
            return ["/dev/drbd0", None] if args["as_primary"] else True
        if method == "blockdev_find":
            return ["/dev/drbd0", 147, 0, None, None, False, 1]
        if method == "drbd_wait_sync":
            return [True, 100.0]
        if method == "vg_list":
            here = node.name.split(".")[0]
            return {"othervg": 1024} if here in self.without_vg else {"xenvg": 20480}
        return nothing_answer(method)


class Env:
    def __init__(self, rpc: Recorder) -> None:
        self.rpc = rpc


@pytest.fixture
def config() -> model.ConfigData:
    return build_config(nodes=3, drbd_instances=1, plain_instances=0)


def drbd(config: model.ConfigData) -> model.Instance:
    return config.find_instance("drbd0.example.com")


def test_drbd_disk_objects_carry_what_each_node_needs(config: model.ConfigData) -> None:
    inst = drbd(config)
    node1, node2 = (config.find_node(f"node{i}.example.com") for i in (1, 2))
    for here, peer in ((node1, node2), (node2, node1)):
        obj = diskobjects.encode_disk(diskobjects.disk_object(config, inst, inst.disks[0],
                                                              here.uuid))
        decoded = decode_disk(obj)  # what the node reads
        assert decoded.drbd_id.secret == "secret0" and decoded.drbd_id.port == 11000
        assert obj["dynamic_params"] == {"local-ip": here.secondary_ip,
                                         "remote-ip": peer.secondary_ip,
                                         "local-minor": 0, "remote-minor": 0}
        assert obj["params"]["protocol"] == "C" and obj["params"]["disabled-barriers"] == "n"
        assert [c["params"] for c in obj["children"]] == [{"stripes": 1}, {"stripes": 1}]
        assert [c["logical_id"] for c in obj["children"]] == [
            ["xenvg", "d0.disk0_data"], ["xenvg", "d0.disk0_meta"]]


def test_a_failed_create_removes_what_was_made(config: model.ConfigData) -> None:
    rpc = Recorder(fail=("node2", "blockdev_create"))
    with pytest.raises(OpExecError, match="creating disk/0 of drbd0.example.com on node2"):
        disks.create_disks(Env(rpc), config, drbd(config))
    made = [(n, w) for n, m, w in rpc.calls if m == "blockdev_create"][:-1]
    removed = [(n, w) for n, m, w in rpc.calls if m == "blockdev_remove"]
    # node1's complete DRBD device (its removal removes its LVs), nothing else
    assert [n for n, _ in made] == ["node1"] * 3 and removed == [made[-1]]


def test_file_disks_get_their_directory_first_and_last(config: model.ConfigData) -> None:
    node1 = config.find_node("node1.example.com")
    inst = model.Instance(uuid=model.new_uuid(), name="f1.example.com", primary_node=node1.uuid,
                          os="debootstrap", hypervisor="kvm", disks=[
                              model.Disk(uuid=model.new_uuid(), dev_type="file", size=64,
                                         iv_name=f"disk/{i}", logical_id=model.FileId(
                                             driver="loop", path=f"/srv/fs/f1/disk{i}"))
                              for i in range(2)])
    rpc = Recorder()
    disks.create_disks(Env(rpc), config, inst)
    assert disks.remove_disks(Env(rpc), config, inst)
    assert [(n, m) for n, m, _ in rpc.calls] == [
        ("node1", "file_storage_dir_create"), ("node1", "blockdev_create"),
        ("node1", "blockdev_create"), ("node1", "blockdev_remove"),
        ("node1", "blockdev_remove"), ("node1", "file_storage_dir_remove")]
    assert rpc.calls[0][2] == rpc.calls[-1][2] == "/srv/fs/f1"


def test_assemble_secondaries_then_the_primary(config: model.ConfigData) -> None:
    rpc = Recorder()
    assembled = disks.assemble_disks(Env(rpc), config, drbd(config))
    assert [n for n, m, _ in rpc.calls] == ["node1", "node2", "node1"]
    assert assembled == [("node1.example.com", "disk/0", "/dev/drbd0")]
    failing = Recorder(fail=("node1", "blockdev_assemble"))
    with pytest.raises(OpExecError, match="cannot activate the block devices"):
        disks.assemble_disks(Env(failing), config, drbd(config))
    assert [m for _, m, _ in failing.calls][-2:] == ["blockdev_shutdown", "blockdev_shutdown"]


def test_failover_targets(config: model.ConfigData) -> None:
    inst = drbd(config)
    node3 = config.find_node("node3.example.com")
    with pytest.raises(OpPrereqError, match="DRBD-mirrored to node2.example.com"):
        disks.check_failover_target(config, inst, node3)
    disks.check_failover_target(config, inst, config.find_node("node2.example.com"))
    local = model.Instance(uuid=model.new_uuid(), name="p1.example.com",
                           primary_node=inst.primary_node, os="debootstrap", hypervisor="kvm",
                           disks=[model.Disk(uuid=model.new_uuid(), dev_type="plain", size=1,
                                             logical_id=model.PlainId(vg="xenvg", lv="p"))])
    with pytest.raises(OpPrereqError, match="herder instance move p1.example.com"):
        disks.check_failover_target(config, local, node3)


def test_replace_disks_names_the_new_and_the_old_lvs(config: model.ConfigData) -> None:
    """The new LVs carry `.new-<time>` until they take the old names; the old ones end as
    `<lv>_replaced-<time>` and are removed (the order: test_cmdlib_rpc_order.py)."""
    rpc = Recorder()
    inst = drbd(config)
    node2 = config.find_node("node2.example.com")
    replace.replace_disks_only(Env(rpc), config, inst, node2)
    created = [w[1][1] for _, m, w in rpc.calls if m == "blockdev_create"]
    assert [lv.split(".new-")[0] for lv in created] == ["d0.disk0_data", "d0.disk0_meta"]
    removed = [w[1][1] for _, m, w in rpc.calls if m == "blockdev_remove"]
    assert [lv.split("_replaced-")[0] for lv in removed] == ["d0.disk0_data", "d0.disk0_meta"]



def test_replace_disks_refuses_a_node_without_the_volume_group(
        config: model.ConfigData) -> None:
    """-s: Ganeti's `vg_list` on the node rebuilt and its peer, after the devices are found
    and before anything is made; a missing VG refuses with Ganeti's message."""
    rpc = Recorder(without_vg=("node2",))
    inst = drbd(config)
    node2 = config.find_node("node2.example.com")
    with pytest.raises(OpExecError,
                       match="^Volume group 'xenvg' not found on node node2.example.com$"):
        replace.replace_disks_only(Env(rpc), config, inst, node2)
    assert [(n, m) for n, m, _ in rpc.calls] == [
        ("node1", "blockdev_find"), ("node2", "blockdev_find"), ("node2", "vg_list")]
    failing = Recorder(fail=("node1", "vg_list"))
    with pytest.raises(OpExecError, match="^Error checking node node1.example.com: node "):
        replace.replace_disks_only(Env(failing), config, inst, node2)
    assert not [m for _, m, _ in failing.calls if m == "blockdev_create"]


def test_new_secondary_refuses_before_anything_is_made_without_the_volume_group(
        config: model.ConfigData) -> None:
    """-n: as Ganeti's _ExecDrbd8Secondary, `vg_list` asks the primary only (the new
    secondary's own `blockdev_create` fails on a missing VG, and what was made is removed)."""
    rpc = Recorder(without_vg=("node1",))
    inst = drbd(config)
    node3 = config.find_node("node3.example.com")
    with pytest.raises(OpExecError,
                       match="^Volume group 'xenvg' not found on node node1.example.com$"):
        replace.change_secondary(Env(rpc), config, inst, node3, lambda text: None)
    assert [(n, m) for n, m, _ in rpc.calls] == [("node1", "blockdev_find"),
                                                 ("node1", "vg_list")]


class Mirrors(Recorder):
    """A node whose mirrors report the given (sync percent, degraded) answers in turn."""

    def __init__(self, answers: list[tuple[float | None, bool]]) -> None:
        super().__init__()
        self.answers = answers

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        answer = super().send(node, method, args, timeout)
        if method == "blockdev_getmirrorstatus":
            percent, degraded = self.answers.pop(0) if len(self.answers) > 1 else \
                self.answers[0]
            return [["/dev/drbd0", 147, 0, percent, None, degraded, 1]
                    for _ in args["disks"]]
        return answer


def test_no_storage_rpc_to_a_node_marked_offline(config: model.ConfigData) -> None:
    """Ganeti's RPC layer answers for an offline node itself: nothing is sent there, and an
    offline secondary does not make the removal fail."""
    inst = drbd(config)
    config.find_node("node2.example.com").offline = True
    rpc = Recorder()
    assert disks.remove_disks(Env(rpc), config, inst)
    assert [(n, m) for n, m, _ in rpc.calls] == [("node1", "blockdev_remove")]
    assert disks.assemble_disks(Env(rpc), config, inst)[0][2] == "/dev/drbd0"
    assert "node2" not in {n for n, _, _ in rpc.calls}


def test_wait_for_sync_asks_the_primary_until_in_sync(config: model.ConfigData,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    rpc = Mirrors([(40.0, True), (90.0, True), (None, False)])
    assert disks.wait_for_sync(Env(rpc), config, drbd(config))
    assert [(n, m) for n, m, _ in rpc.calls] == [("node1", "blockdev_getmirrorstatus")] * 3


def test_create_removes_disks_whose_mirrors_stay_degraded(
        config: model.ConfigData, monkeypatch: pytest.MonkeyPatch) -> None:
    """LUInstanceCreate's _RemoveDegradedDisks: degraded after the waits -> removed again."""
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    rpc = Mirrors([(None, True)])
    with pytest.raises(OpExecError, match="There are some degraded disks for this instance"):
        disks.create_and_sync(Env(rpc), config, drbd(config), wait=True)
    methods = [m for _, m, _ in rpc.calls]
    assert methods.count("blockdev_getmirrorstatus") == 11  # the first answer and 10 retries
    assert methods[-2:] == ["blockdev_remove", "blockdev_remove"]
