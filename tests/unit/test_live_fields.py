"""Instance status and the live fields of nodes and instances, as Ganeti 3.0's query code
computes them (masterd/livefields.py), and the iallocator input built from live figures."""

from __future__ import annotations

import time
from typing import Any

import pytest

from herder.core import livefigures, model
from herder.masterd import iallocator, livefields, views
from herder.masterd.livecache import EMPTY, NodeAnswer, Snapshot
from herder.masterd.livefields import (
    ADMIN_DOWN,
    ADMIN_OFFLINE,
    ELSEWHERE,
    ERROR_DOWN,
    ERROR_NODEDOWN,
    ERROR_NODEOFFLINE,
    ERROR_UP,
    ERROR_WRONGNODE,
    ON_PRIMARY,
    RS_NODATA,
    RS_NORMAL,
    RS_OFFLINE,
    RS_UNAVAIL,
    RUNNING,
    USER_DOWN,
    instance_status,
)
from tests.conftest import build_config

# Ganeti 3.0's rules (Ganeti.Query.Instance: determineInstanceStatus, liveInstanceStatus,
# deadInstanceStatus): (admin state, admin state source, primary offline, primary answered,
# where it runs, hypervisor-reported shutdown, user shutdown allowed) -> status. The rows
# marked "vcluster" were seen on the real Ganeti 3.0.2 cluster (../shared/peers/vcluster).
STATUS_TABLE = [
    # running where it should
    ("up", "admin", False, True, ON_PRIMARY, False, False, RUNNING),  # vcluster
    ("down", "admin", False, True, ON_PRIMARY, False, False, ERROR_UP),  # vcluster
    ("offline", "admin", False, True, ON_PRIMARY, False, False, ERROR_UP),
    # not running
    ("up", "admin", False, True, None, False, False, ERROR_DOWN),  # vcluster
    ("down", "admin", False, True, None, False, False, ADMIN_DOWN),  # vcluster
    ("offline", "admin", False, True, None, False, False, ADMIN_OFFLINE),  # vcluster
    ("down", "user", False, True, None, False, False, ADMIN_DOWN),  # user shutdown off
    ("down", "user", False, True, None, False, True, USER_DOWN),
    ("down", "admin", False, True, None, False, True, ADMIN_DOWN),
    ("up", "user", False, True, None, False, True, ERROR_DOWN),
    # the guest shut itself down (its hypervisor process is still there)
    ("up", "admin", False, True, ON_PRIMARY, True, True, USER_DOWN),
    ("up", "admin", False, True, ON_PRIMARY, True, False, ERROR_DOWN),
    ("down", "admin", False, True, ON_PRIMARY, True, True, ADMIN_DOWN),
    # on another node
    ("up", "admin", False, True, ELSEWHERE, False, False, ERROR_WRONGNODE),
    ("down", "admin", False, True, ELSEWHERE, False, False, ERROR_WRONGNODE),
    ("up", "admin", False, False, ELSEWHERE, False, False, ERROR_WRONGNODE),
    # the primary's daemon did not answer
    ("up", "admin", False, False, None, False, False, ERROR_NODEDOWN),  # vcluster
    ("down", "admin", False, False, None, False, False, ERROR_NODEDOWN),  # vcluster
    ("offline", "admin", False, False, None, False, False, ERROR_NODEDOWN),
    # the primary is marked offline: nothing else counts
    ("up", "admin", True, False, None, False, False, ERROR_NODEOFFLINE),  # vcluster
    ("offline", "admin", True, False, None, False, False, ERROR_NODEOFFLINE),  # vcluster
    ("up", "admin", True, False, ELSEWHERE, False, False, ERROR_NODEOFFLINE),
    ("down", "admin", True, True, ON_PRIMARY, False, False, ERROR_NODEOFFLINE),
]


@pytest.mark.parametrize(("admin", "source", "offline", "answered", "found", "shut_down",
                          "user_shutdown", "expected"), STATUS_TABLE)
def test_instance_status_follows_ganeti(admin: str, source: str, offline: bool,
                                        answered: bool, found: str | None, shut_down: bool,
                                        user_shutdown: bool, expected: str) -> None:
    assert instance_status(admin_state=admin, admin_state_source=source,
                           primary_offline=offline, primary_answered=answered, found=found,
                           shut_down=shut_down, user_shutdown=user_shutdown) == expected


def test_every_ganeti_status_value_is_reachable() -> None:
    assert {row[-1] for row in STATUS_TABLE} == livefields.STATUSES


# ---- fields from a snapshot ----


def info(memory_free: int = 3000, runs: dict[str, livefigures.InstanceRun] | None = None,
         units: tuple[livefigures.StorageUnit, ...] | None = None,
         memory_total: int = 4096,
         kvm: livefigures.KvmVerdict | None = None,
         herder_version: str | None = None) -> livefigures.NodeInfo:
    return livefigures.NodeInfo(
        bootid="b0", memory_total=memory_total, memory_free=memory_free, memory_dom0=200,
        cpu_total=8, cpu_dom0=8, cpu_nodes=2, cpu_sockets=2,
        storage=units if units is not None else (
            livefigures.StorageUnit("file", "/var/lib/herder/noded/disks", 50_000, 40_000),),
        instances=runs or {}, kvm=kvm, herder_version=herder_version)


def snapshot(config: model.ConfigData, answers: dict[str, livefigures.NodeInfo | None],
             asked: set[str] | None = None) -> Snapshot:
    now = time.monotonic()
    by_uuid = {config.find_node(name).uuid: NodeAnswer(now, now, value,
                                                       None if value else "unreachable")
               for name, value in answers.items()}
    return Snapshot(frozenset(config.find_node(n).uuid for n in (asked or answers)), by_uuid)


def run(memory: int = 1024, vcpus: int = 2) -> livefigures.InstanceRun:
    return livefigures.InstanceRun(state="running", memory=memory, vcpus=vcpus, uptime=5.0)


@pytest.fixture
def config() -> model.ConfigData:
    # drbd0 (node1 -> node2, up), drbd1 (node2 -> node3, up), plain0 (node1, down)
    return build_config(nodes=3)


def test_instance_fields(config: model.ConfigData) -> None:
    drbd0, drbd1 = config.find_instance("drbd0"), config.find_instance("drbd1")
    plain0 = config.find_instance("plain0")
    live = snapshot(config, {"node1.example.com": info(runs={"drbd0.example.com": run(768)}),
                             "node2.example.com": None,
                             "node3.example.com": info()})
    assert livefields.instance_fields(config, drbd0, live) == {
        "status": (RS_NORMAL, RUNNING), "oper_state": (RS_NORMAL, True),
        "oper_ram": (RS_NORMAL, 768), "oper_vcpus": (RS_NORMAL, 2)}
    # the primary's daemon did not answer (vcluster: oper_state and oper_ram no data)
    assert livefields.instance_fields(config, drbd1, live) == {
        "status": (RS_NORMAL, ERROR_NODEDOWN), "oper_state": (RS_NODATA, None),
        "oper_ram": (RS_NODATA, None), "oper_vcpus": (RS_NODATA, None)}
    # answered, not running (vcluster: oper_state false, oper_ram unavailable)
    assert livefields.instance_fields(config, plain0, live)["status"] == (RS_NORMAL, ADMIN_DOWN)
    assert livefields.instance_fields(config, plain0, live)["oper_state"] == (RS_NORMAL, False)
    assert livefields.instance_fields(config, plain0, live)["oper_ram"] == (RS_UNAVAIL, None)
    # running on its secondary only: the wrong node, with that node's figures
    moved = snapshot(config, {"node1.example.com": info(),
                              "node2.example.com": info(runs={"drbd0.example.com": run(512)}),
                              "node3.example.com": info()})
    assert livefields.instance_fields(config, drbd0, moved) == {
        "status": (RS_NORMAL, ERROR_WRONGNODE), "oper_state": (RS_NORMAL, True),
        "oper_ram": (RS_NORMAL, 512), "oper_vcpus": (RS_NORMAL, 2)}
    # primary marked offline (vcluster: oper_state no data, oper_ram offline)
    config.find_node("node1").offline = True
    assert livefields.instance_fields(config, drbd0, EMPTY) == {
        "status": (RS_NORMAL, ERROR_NODEOFFLINE), "oper_state": (RS_NODATA, None),
        "oper_ram": (RS_OFFLINE, None), "oper_vcpus": (RS_OFFLINE, None)}


def test_node_fields(config: model.ConfigData) -> None:
    units = (livefigures.StorageUnit("lvm-pv", "xenvg", 4, 2),
             livefigures.StorageUnit("file", "/srv/disks", 100, 60),
             livefigures.StorageUnit("lvm-vg", "xenvg", 900, 700))
    config.cluster.enabled_disk_templates = ["drbd", "file"]
    config.find_node("node3").offline = True
    emulated = livefigures.KvmVerdict(usable=False, reason="/dev/kvm is missing", seconds=0.0)
    live = snapshot(config, {"node1.example.com": info(units=units, kvm=emulated,
                                                       herder_version="1.2.dev3+gabc"),
                             "node2.example.com": None})
    node1 = livefields.values(livefields.node_fields(config, config.find_node("node1"), live))
    assert node1 == {"mtotal": 4096, "mnode": 200, "mfree": 3000, "ctotal": 8, "cnos": 8,
                     "cnodes": 2, "csockets": 2, "bootid": "b0",
                     # the first enabled template's unit (drbd: the volume group)
                     "dtotal": 900, "dfree": 700, "sptotal": 4, "spfree": 2,
                     # herder's: the KVM probe's verdict
                     "kvm_accel": "tcg", "kvm_reason": "/dev/kvm is missing",
                     # herder's: the build the node's noded runs
                     "herder_version": "1.2.dev3+gabc"}
    # Ganeti's result statuses: no answer, marked offline; no spindles without an lvm-pv unit
    assert set(livefields.node_fields(config, config.find_node("node2"), live).values()) == {
        (RS_NODATA, None)}
    assert set(livefields.node_fields(config, config.find_node("node3"), live).values()) == {
        (RS_OFFLINE, None)}
    only_file = snapshot(config, {"node1.example.com": info()})
    fields = livefields.node_fields(config, config.find_node("node1"), only_file)
    assert fields["dtotal"] == (RS_NORMAL, 50_000) and fields["spfree"] == (RS_NODATA, None)
    # a node that does not say (libvirt's test driver, an older noded): no verdict
    assert fields["kvm_accel"] == fields["kvm_reason"] == (RS_NODATA, None)
    # a noded from before build versions does not say which build it runs
    assert fields["herder_version"] == (RS_NODATA, None)


def test_bulk_views_carry_ganetis_fields(config: model.ConfigData) -> None:
    kvm = livefigures.KvmVerdict(usable=True, reason="a KVM guest reached its kernel in 0.4s",
                                 seconds=0.4)
    live = snapshot(config, {"node1.example.com": info(runs={"drbd0.example.com": run()},
                                                       kvm=kvm),
                             "node2.example.com": info(), "node3.example.com": info()})
    node = views.node_view(config, config.find_node("node1"), live)
    assert (node["mtotal"], node["mfree"], node["dtotal"], node["ctotal"]) == (
        4096, 3000, 50_000, 8)
    assert (node["kvm_accel"], node["kvm_reason"]) == ("kvm", kvm.reason)  # herder's fields
    assert "bootid" not in node  # a /2/query field; Ganeti's bulk answer has none
    inst = views.instance_view(config, config.find_instance("drbd0"), live)
    assert (inst["status"], inst["oper_state"], inst["oper_ram"]) == (RUNNING, True, 1024)
    assert inst["beparams"]["memory"] == inst["beparams"]["maxmem"] == 1024
    # without node daemons: no figures, and no status made up from the admin state
    assert views.node_view(config, config.find_node("node1"))["mfree"] is None
    assert views.instance_view(config, config.find_instance("drbd0"))["status"] == \
        ERROR_NODEDOWN


# ---- the iallocator input ----


def test_iallocator_input_carries_live_figures_and_run_states(config: model.ConfigData) -> None:
    """Ganeti's masterd: free memory less what admin-up primaries may still take, the request
    template's storage unit, the node OS's memory and CPUs reserved; a node without figures
    is offline for the allocator."""
    units = (livefigures.StorageUnit("file", "/srv/disks", 100_000, 80_000),
             livefigures.StorageUnit("lvm-vg", "xenvg", 900_000, 700_000))
    # node1: drbd0 (up, maxmem 1024) runs with 768; plain0 is admin down
    live = snapshot(config, {
        "node1.example.com": info(memory_free=8000, units=units, memory_total=16384,
                                  runs={"drbd0.example.com": run(768)}),
        # drbd1 (up) does not run
        "node2.example.com": info(memory_free=6000, memory_total=16384),
        "node3.example.com": None})
    request: dict[str, Any] = {"type": "allocate", "name": "new", "disk_template": "drbd",
                               "required_nodes": 2}
    message = iallocator.build_message(config, request, live)
    node1 = message["nodes"]["node1.example.com"]
    assert (node1["total_memory"], node1["reserved_memory"], node1["free_memory"]) == (
        16384, 200, 8000 - (1024 - 768))
    assert (node1["total_disk"], node1["free_disk"]) == (900_000, 700_000)  # drbd: the VG
    assert (node1["total_cpus"], node1["reserved_cpus"]) == (8, 8)
    assert node1["offline"] is False
    node2 = message["nodes"]["node2.example.com"]
    assert node2["free_memory"] == 6000 - 1024  # admin up, not running: its maxmem reserved
    # node2 reports no volume group: no room for a drbd disk there (no made-up pool)
    assert (node2["total_disk"], node2["free_disk"]) == (0, 0)
    assert message["nodes"]["node3.example.com"]["offline"] is True
    assert "free_memory" not in message["nodes"]["node3.example.com"]
    file_request = {**request, "disk_template": "file"}
    file_node1 = iallocator.build_message(config, file_request, live)["nodes"][
        "node1.example.com"]
    assert (file_node1["total_disk"], file_node1["free_disk"]) == (100_000, 80_000)
    diskless = iallocator.build_message(config, {**request, "disk_template": "diskless"},
                                        live)["nodes"]["node1.example.com"]
    assert (diskless["total_disk"], diskless["free_disk"]) == (0, 0)  # no space reported
    # the allocator takes such input, and places only on nodes with figures
    empty = build_config(nodes=3, drbd_instances=0, plain_instances=0)
    figures = snapshot(empty, {"node1.example.com": info(memory_total=16384),
                               "node2.example.com": None,
                               "node3.example.com": info(memory_total=16384)})
    message = iallocator.build_message(empty, file_request, figures)
    reply = iallocator.run(iallocator.BUILTIN, {**message, "request": {
        **file_request, "required_nodes": 1, "os": "debootstrap", "memory": 512, "vcpus": 1,
        "spindle_use": 1, "disks": [{"size": 1024, "mode": "rw", "spindles": 1}],
        "disk_space_total": 1024, "nics": [], "tags": [], "hypervisor": "kvm"}})
    assert reply["success"], reply["info"]
    assert reply["result"] in (["node1.example.com"], ["node3.example.com"])


def test_free_memory_for_allocation() -> None:
    # (maxmem, admin up, in use)
    assert livefigures.free_memory_for_allocation(5000, [
        (1024, True, 1024), (1024, True, 512), (2048, True, None), (4096, False, None),
        (512, False, 512)]) == 5000 - 512 - 2048
    # an instance using more than its maxmem (ballooning) frees nothing
    assert livefigures.free_memory_for_allocation(100, [(512, True, 600)]) == 100


def test_node_info_wire_format() -> None:
    decoded = livefigures.decode_node_info({
        "bootid": "x", "memory_total": 1, "memory_free": 1, "memory_dom0": 0, "cpu_total": 1,
        "cpu_dom0": 1, "cpu_nodes": 1, "cpu_sockets": 1,
        "storage": [{"type": "file", "name": "/d", "storage_size": 9, "storage_free": 3}],
        "instances": {"i": {"state": "paused", "memory": 64, "vcpus": 1, "uptime": None}}})
    assert decoded.storage[0].storage_free == 3 and decoded.instances["i"].state == "paused"
    assert decoded.kvm is None  # a node that does not say
    with pytest.raises(ValueError, match="malformed node_info answer"):
        livefigures.decode_node_info({"total_memory": 1})
    with_kvm = livefigures.decode_node_info({
        "bootid": "x", "memory_total": 1, "memory_free": 1, "memory_dom0": 0, "cpu_total": 1,
        "cpu_dom0": 1, "cpu_nodes": 1, "cpu_sockets": 1,
        "kvm": {"usable": False, "reason": "no kernel in /boot", "seconds": 0.0}})
    assert with_kvm.kvm == livefigures.KvmVerdict(usable=False, reason="no kernel in /boot",
                                                  seconds=0.0)
