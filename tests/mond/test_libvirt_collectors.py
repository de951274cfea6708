"""inst-status and hypervisor against real libvirt: the test driver in process
(`test:///default`) and a private libvirtd serving it on a unix socket, changed from another
process while the collector watches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

libvirt = pytest.importorskip("libvirt")

from herder.core import model  # noqa: E402
from herder.core.store import FileStore  # noqa: E402
from herder.mond import libvirt_conn, registry  # noqa: E402
from herder.mond.collector import CollectContext, MondSettings  # noqa: E402
from herder.mond.collectors import hypervisor, inst_status  # noqa: E402
from herder.mond.context import make_context  # noqa: E402
from herder.mond.runner import collect_once, render  # noqa: E402
from tests.conftest import build_config  # noqa: E402
from tests.mond.agent_fixture import running_mond  # noqa: E402
from tests.mond.libvirt_fixtures import (  # noqa: E402
    LibvirtdUnavailable,
    PrivateLibvirtd,
    start_libvirtd,
)

TEST_URI = "test:///default"
NODE = "node1.example.com"

libvirt.registerErrorHandler(lambda _c, _e: None, None)


def domain_xml(name: str, uuid: str | None = None) -> str:
    uuid_el = f"<uuid>{uuid}</uuid>" if uuid else ""
    return textwrap.dedent(f"""\
        <domain type='test'>
          <name>{name}</name>{uuid_el}
          <memory unit='KiB'>524288</memory><vcpu>1</vcpu>
          <os><type>hvm</type></os>
          <devices>
            <disk type='file' device='disk'>
              <source file='/srv/{name}.img'/><target dev='vda'/>
            </disk>
            <interface type='network'>
              <mac address='aa:00:00:00:00:01'/><source network='default'/>
            </interface>
          </devices>
        </domain>""")


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Domains:
    """Domains a test creates on a read-write connection; all removed afterwards."""

    counter = 0

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.names: list[str] = []

    def unique(self, stem: str) -> str:
        Domains.counter += 1
        return f"{stem}{Domains.counter}-{os.getpid()}.example.com"

    def define(self, name: str, *, start: bool = True, uuid: str | None = None) -> Any:
        dom = self.conn.defineXML(domain_xml(name, uuid))
        self.names.append(name)
        if start:
            dom.create()
        return dom

    def cleanup(self) -> None:
        for name in self.names:
            try:
                dom = self.conn.lookupByName(name)
            except libvirt.libvirtError:
                continue
            if dom.isActive():
                dom.destroy()
            dom.undefine()


@pytest.fixture
def domains() -> Iterator[Domains]:
    conn = libvirt.open(TEST_URI)
    doms = Domains(conn)
    try:
        yield doms
    finally:
        doms.cleanup()
        test = conn.lookupByName("test")  # the driver's own domain: back to running
        state = test.state()[0]
        if state == libvirt.VIR_DOMAIN_PAUSED:
            test.resume()
        elif not test.isActive():
            test.create()
        conn.close()


def make_config(*instances: tuple[str, str, int], uuids: dict[str, str] | None = None
                ) -> model.ConfigData:
    """build_config's nodes with the given (name, admin_state, primary node index) instances."""
    config = build_config(drbd_instances=0, plain_instances=0)
    nodes = sorted(config.nodes.values(), key=lambda n: n.name)
    for name, admin, primary in instances:
        inst = model.Instance(
            uuid=(uuids or {}).get(name) or model.new_uuid(), name=name,
            primary_node=nodes[primary].uuid, os="debootstrap", hypervisor="kvm",
            admin_state=admin, ctime=1_700_000_000.0, mtime=1_700_000_100.0)  # type: ignore[arg-type]
        config.instances[inst.uuid] = inst
    return config


def make_ctx(config: model.ConfigData | None, *, uri: str = TEST_URI, clock: Clock | None = None,
             run_dir: Path | None = None) -> CollectContext:
    return CollectContext(
        node_name=NODE,
        settings=MondSettings(libvirt_uri=uri, run_dir=run_dir or Path("/nonexistent-run")),
        config_loader=lambda: config, clock=clock or Clock())


def by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in data["instances"]}


# --- pure parts ------------------------------------------------------------------------------

@pytest.mark.parametrize(("admin", "actual", "dstate", "reason", "code"), [
    ("up", "up", "running", "booted", 0),
    ("up", "down", "shutoff", "destroyed", 4),
    ("up", "down", "absent", None, 4),
    ("down", "up", "running", "booted", 4),
    ("down", "down", "shutoff", "shutdown", 0),
    ("down", "up", "shutdown", "user", 1),
    ("offline", "down", "absent", None, 0),
    ("offline", "up", "running", "booted", 4),
    ("up", "hung", "running", "booted", 4),
    ("up", "paused", "paused", "user", 4),
    ("down", "paused", "paused", "user", 4),
    ("up", "paused", "paused", "migration", 1),
    ("up", "paused", "paused", "ioerror", 4),
    ("up", "unknown", "nostate", "unknown", 2),
    (None, "up", "running", "booted", 0),
    (None, "down", "shutoff", "destroyed", 0),
    (None, "paused", "paused", "user", 0),
    (None, "paused", "paused", "watchdog", 4),
    (None, "hung", "running", "booted", 4),
])
def test_instance_status_table(admin: str | None, actual: str, dstate: str,
                               reason: str | None, code: int) -> None:
    st = inst_status.instance_status("vm1", admin, actual, dstate, reason)
    assert st["code"] == code
    assert (st["message"] == "") == (code == 0)
    if code:
        assert "vm1" in st["message"]


def test_pure_helpers() -> None:
    assert libvirt_conn.version_string(9_000_000) == "9.0.0"
    assert libvirt_conn.version_string(8_002_017) == "8.2.17"
    assert libvirt_conn.state_name(3) == "paused" and libvirt_conn.reason_name(3, 5) == "ioerror"
    assert libvirt_conn.state_name(42) == "state-42"
    assert libvirt_conn.reason_name(1, 99) == "reason-99"
    devs = libvirt_conn.parse_domain_devices(domain_xml("a"))
    assert devs["disks"] == [{"target": "vda", "device": "disk", "source": "/srv/a.img"}]
    assert devs["nics"] == [{"target": None, "mac": "aa:00:00:00:00:01", "type": "network",
                             "source": "default"}]
    assert libvirt_conn.parse_domain_devices("<domain/>") == {"disks": [], "nics": []}
    with pytest.raises(libvirt_conn.CollectorError, match="unparsable domain XML"):
        libvirt_conn.parse_domain_devices("<domain>")
    node = hypervisor.node_info(["x86_64", 4096, 8, 2400, 1, 1, 4, 2], 1024 * 1024)
    assert node["memory_kib"] == 4096 * 1024 and node["memory_free_kib"] == 1024
    assert hypervisor.node_info([], None)["model"] is None


def test_reason_trail_file(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_text('[["gnt:client", "user shutdown", 1700000000000000000]]')
    assert inst_status.read_reason_trail(good) == [["gnt:client", "user shutdown",
                                                    1700000000000000000]]
    for bad in ('{"a": 1}', '[["x", "y"]]', '[[1, "y", 2]]', "not json", '[["a", "b", true]]'):
        good.write_text(bad)
        assert inst_status.read_reason_trail(good) is None
    assert inst_status.read_reason_trail(tmp_path / "absent") is None


def test_local_qemu_and_process_start(tmp_path: Path) -> None:
    assert inst_status.is_local_qemu("qemu:///system", "QEMU")
    assert not inst_status.is_local_qemu("qemu+ssh://host/system", "QEMU")
    assert not inst_status.is_local_qemu("test:///default", "TEST")
    pid_file = tmp_path / "x.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    assert inst_status.process_start(pid_file) == psutil.Process().create_time()
    pid_file.write_text("garbage")
    assert inst_status.process_start(pid_file) is None
    assert inst_status.process_start(tmp_path / "absent.pid") is None


def test_tracker_hung_needs_two_collections_and_time() -> None:
    tracker = inst_status.InstanceTracker(hung_after=1.0)
    snap = inst_status.DomainSnapshot("a", "u", 3, 1, 1, cpu_time=100)
    assert tracker.hung("k", snap, 10.0) == (False, 0.0)  # never seen
    tracker.observe("k", snap, "up", "running", 10.0, baseline=None, start_hint=lambda: None)
    assert tracker.hung("k", snap, 10.5)[0] is False  # too soon to tell
    assert tracker.hung("k", snap, 15.0) == (True, 5.0)
    moved = inst_status.DomainSnapshot("a", "u", 3, 1, 1, cpu_time=101)
    assert tracker.hung("k", moved, 15.0)[0] is False
    restarted = inst_status.DomainSnapshot("a", "u", 4, 1, 1, cpu_time=100)  # new domain id
    assert tracker.hung("k", restarted, 15.0)[0] is False


# --- inst-status on the in-process test driver ----------------------------------------------

def test_running_instance_matches_admin_up(domains: Domains) -> None:
    name = domains.unique("web")
    domains.define(name)
    config = make_config((name, "up", 0), ("elsewhere.example.com", "up", 1))
    clock = Clock()
    collector = inst_status.InstStatusCollector(make_ctx(config, clock=clock))
    assert collector.available()
    data = collector.collect()
    assert data["status"] == {"code": 0, "message": ""}
    [inst] = data["instances"]  # only the instances this node is primary for
    assert inst["name"] == name
    assert inst["uuid"] == next(i.uuid for i in config.instances.values() if i.name == name)
    assert inst["admin_state"] == "up" and inst["actual_state"] == "up"
    assert inst["domain_state"] == "running" and inst["domain_state_reason"] == "booted"
    assert inst["uptime"] == 0 and inst["uptime_source"] == "observed"
    assert inst["last_change"] == 1_700_000_100.0  # before any observed change: config mtime
    assert inst["reason"] == [] and inst["config_version"] == 1
    # the driver's own running domain "test" is not an instance of this node
    assert "test" in [d["name"] for d in data["other_domains"]]
    clock.now += 30
    again = by_name(collector.collect())[name]
    assert again["uptime"] == 30 and again["last_change"] == 1_700_000_100.0
    # non-verbose: the status only
    report = render(collector, collect_once(collector), verbose=False)
    assert report["data"] == {"status": {"code": 0, "message": ""}}
    assert report["category"] == "instance" and report["kind"] == 1


def test_a_copy_of_an_instance_whose_primary_is_another_node_is_flagged(
        domains: Domains) -> None:
    """Issue 18: the extra copy a failed move leaves used to be listed under other_domains with
    code 0; it is a stray (code 4, with the reason), a domain no instance owns stays 0."""
    stray = domains.unique("stray")
    domains.define(stray)
    config = make_config((stray, "up", 1))  # its primary is the second node
    primary = sorted(config.nodes.values(), key=lambda n: n.name)[1].name
    data = inst_status.InstStatusCollector(make_ctx(config)).collect()
    others = {d["name"]: d for d in data["other_domains"]}
    assert others[stray]["instance"] == stray and others[stray]["primary_node"] == primary
    assert others[stray]["status"]["code"] == 4
    assert others[stray]["status"]["message"] == (
        f"{stray} runs here (running), but its primary node is {primary}")
    assert data["status"]["code"] == 4 and stray in data["status"]["message"]
    assert others["test"]["instance"] is None and others["test"]["status"]["code"] == 0


def test_uptime_from_the_qemu_process(domains: Domains, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """On a local QEMU driver the uptime is the age of the domain's QEMU process."""
    name = domains.unique("qemu")
    domains.define(name)
    (tmp_path / f"{name}.pid").write_text(str(os.getpid()))
    monkeypatch.setattr(inst_status, "is_local_qemu", lambda uri, hv_type: True)
    monkeypatch.setattr(inst_status.InstStatusCollector, "qemu_pid_dir", tmp_path)
    clock = Clock()
    started = psutil.Process().create_time()
    inst = by_name(inst_status.InstStatusCollector(make_ctx(None, clock=clock)).collect())[name]
    assert inst["uptime_source"] == "process"
    assert inst["uptime"] == int(clock.now - started)
    assert inst["last_change"] == started  # no config: the process start is the last change


def test_destroyed_domain_is_reported_down(domains: Domains) -> None:
    name = domains.unique("db")
    dom = domains.define(name)
    clock = Clock()
    collector = inst_status.InstStatusCollector(make_ctx(make_config((name, "up", 0)), clock=clock))
    assert collector.collect()["status"]["code"] == 0
    dom.destroy()
    clock.now += 7
    data = collector.collect()
    assert data["status"]["code"] == 4
    assert name in data["status"]["message"] and "down" in data["status"]["message"]
    inst = by_name(data)[name]
    assert inst["actual_state"] == "down" and inst["domain_state"] == "shutoff"
    assert inst["domain_state_reason"] == "destroyed"
    assert inst["uptime"] is None and inst["last_change"] == clock.now
    [[source, reason, stamp]] = inst["reason"]
    assert source == "herder:mond" and "up (running) -> down (shutoff)" in reason
    assert stamp == int(clock.now * 1e9)
    dom.undefine()  # no domain at all: still down
    absent = by_name(collector.collect())[name]
    assert absent["domain_state"] == "absent" and absent["status"]["code"] == 4


def test_a_guest_ganeti_started_is_not_reported_down(domains: Domains, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """After import-ganeti a guest Ganeti started runs in its own QEMU (`-name NAME`), with no
    libvirt domain: on a QEMU node it is `unknown` ("foreign"), never `down`, so maintd's
    watcher does not start it a second time. The process is a real QEMU; the test driver
    stands in for the node's local QEMU driver (whose domains are the same libvirt calls)."""
    import shutil
    import time

    from herder.maintd.rounds import Node, Plan
    from herder.maintd.watcher import plan_watcher, states_of

    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        pytest.fail("needs qemu-system-x86_64 (scripts/sysdeps.sh)")
    name = domains.unique("ganeti")
    monkeypatch.setattr(inst_status, "is_local_qemu", lambda uri, hv_type: True)
    collector = inst_status.InstStatusCollector(make_ctx(make_config((name, "up", 0))))
    assert by_name(collector.collect())[name]["actual_state"] == "down"  # nothing runs it
    proc = subprocess.Popen([qemu, "-name", name, "-machine", "none", "-S", "-nodefaults",
                             "-no-user-config", "-display", "none", "-monitor", "none"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and \
                by_name(collector.collect())[name]["domain_state"] != "foreign":
            time.sleep(0.1)
        data = collector.collect()
        inst = by_name(data)[name]
        assert (inst["actual_state"], inst["domain_state"]) == ("unknown", "foreign")
        assert inst["status"] == {"code": 2, "message": (
            f"{name}: state unknown (a QEMU that libvirt does not manage runs it (pid "
            f"{proc.pid}; a guest Ganeti started?))")}
        # maintd's watcher plans no restart of it (it would, were it "down")
        inst_view = watched(name)
        states = states_of({NODE: data}, [inst_view])
        assert states == {name: "unknown"}
        assert plan_watcher([Node(NODE, "u1")], [inst_view], Plan(), states, {}).jobs == []
        assert [j.step for j in plan_watcher([Node(NODE, "u1")], [inst_view], Plan(),
                                             {name: "down"}, {}).jobs] == ["restart"]
    finally:
        proc.kill()
        proc.wait(30)
    assert by_name(collector.collect())[name]["actual_state"] == "down"


def watched(name: str) -> Any:
    """The watcher's view of an admin-up instance on NODE."""
    from herder.maintd.rounds import Instance

    return Instance(name=name, pnode=NODE, snodes=(), admin_state="up", disks_active=True,
                    disk_template="plain")


def test_admin_down_and_offline(domains: Domains) -> None:
    running, stopped, offline, offline_running = (
        domains.unique(s) for s in ("rd", "sd", "off", "offr"))
    domains.define(running)
    domains.define(stopped, start=False)
    domains.define(offline_running)
    config = make_config((running, "down", 0), (stopped, "down", 0), (offline, "offline", 0),
                         (offline_running, "offline", 0))
    data = inst_status.InstStatusCollector(make_ctx(config)).collect()
    insts = by_name(data)
    assert insts[running]["status"]["code"] == 4
    assert "admin state is down" in insts[running]["status"]["message"]
    assert insts[stopped]["status"]["code"] == 0 and insts[stopped]["actual_state"] == "down"
    assert insts[offline]["status"]["code"] == 0
    assert insts[offline_running]["status"]["code"] == 4
    assert data["status"]["code"] == 4
    assert running in data["status"]["message"] and offline_running in data["status"]["message"]
    assert stopped not in data["status"]["message"]


def test_paused_domain(domains: Domains) -> None:
    name = domains.unique("pz")
    dom = domains.define(name)
    collector = inst_status.InstStatusCollector(make_ctx(make_config((name, "up", 0))))
    collector.collect()
    dom.suspend()
    data = collector.collect()
    inst = by_name(data)[name]
    assert inst["actual_state"] == "paused" and inst["domain_state_reason"] == "user"
    assert inst["uptime"] is not None  # still active: it holds its memory
    assert data["status"]["code"] == 4 and "paused" in data["status"]["message"]
    dom.resume()
    assert collector.collect()["status"]["code"] == 0


def test_hung_domain(domains: Domains, monkeypatch: pytest.MonkeyPatch) -> None:
    name = domains.unique("hang")
    domains.define(name)
    clock = Clock()
    collector = inst_status.InstStatusCollector(make_ctx(make_config((name, "up", 0)), clock=clock))
    # The test driver's CPU time is the wall clock: it always advances, never hung by itself.
    collector.collect()
    clock.now += 5
    assert by_name(collector.collect())[name]["actual_state"] == "up"
    real = inst_status.cpu_time
    monkeypatch.setattr(inst_status, "cpu_time",
                        lambda dom: 42 if dom.name() == name else real(dom))
    collector.collect()  # the frozen value is new here: not hung yet
    clock.now += 5
    data = collector.collect()
    inst = by_name(data)[name]
    assert inst["actual_state"] == "hung" and inst["domain_state"] == "running"
    assert data["status"]["code"] == 4
    assert "appears to be hung" in data["status"]["message"] and "5s" in data["status"]["message"]
    monkeypatch.setattr(inst_status, "cpu_time", real)
    clock.now += 5
    back = by_name(collector.collect())[name]
    assert back["actual_state"] == "up" and back["reason"][0][1].endswith("-> up (running)")


def test_no_config_reports_every_domain(domains: Domains) -> None:
    up, down = domains.unique("any"), domains.unique("anydown")
    domains.define(up)
    domains.define(down, start=False)
    data = inst_status.InstStatusCollector(make_ctx(None)).collect()
    insts = by_name(data)
    assert {up, down, "test"} <= set(insts)
    assert insts[up]["admin_state"] is None and insts[up]["actual_state"] == "up"
    assert insts[up]["uuid"] == libvirt.open(TEST_URI).lookupByName(up).UUIDString()
    assert insts[down]["actual_state"] == "down" and insts[down]["status"]["code"] == 0
    assert insts[up]["config_version"] is None
    assert data["status"]["code"] == 0 and data["other_domains"] == []


def test_match_by_uuid_and_recorded_reason(domains: Domains, tmp_path: Path) -> None:
    name = domains.unique("renamed")
    inst_uuid = str(uuidlib.uuid4())
    domains.define("libvirt-" + name, uuid=inst_uuid)
    config = make_config((name, "up", 0), uuids={name: inst_uuid})
    (tmp_path / "instance-reason").mkdir()
    trail = [["gnt:opcode:startup", "started by admin", 1_700_000_000_000_000_000]]
    (tmp_path / "instance-reason" / name).write_text(json.dumps(trail))
    collector = inst_status.InstStatusCollector(make_ctx(config, run_dir=tmp_path))
    inst = by_name(collector.collect())[name]
    assert inst["actual_state"] == "up" and inst["uuid"] == inst_uuid
    assert inst["reason"] == trail


def test_node_missing_from_config() -> None:
    collector = inst_status.InstStatusCollector(make_ctx(make_config()))
    collector.ctx.node_name = "stranger.example.com"
    sample = collect_once(collector)
    assert sample.failed
    assert sample.data["status"]["code"] == 4
    assert "stranger.example.com is not in the cluster configuration" in \
        sample.data["status"]["message"]


def test_unreachable_libvirt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = f"test+unix:///default?socket={tmp_path}/no-such-sock"
    inst = inst_status.InstStatusCollector(make_ctx(None, uri=uri))
    hyp = hypervisor.HypervisorCollector(make_ctx(None, uri=uri))
    opened: list[str | None] = []
    real_open = libvirt.openReadOnly
    monkeypatch.setattr(libvirt, "openReadOnly", lambda u: (opened.append(u), real_open(u))[1])
    assert not inst.available() and not hyp.available()
    assert not inst.available()  # cached: not asked again
    assert opened == [uri, uri]
    rep = render(inst, collect_once(inst), verbose=False)
    assert rep["data"]["status"]["code"] == 4
    assert rep["data"]["status"]["message"].startswith(f"libvirt unreachable at {uri}: ")
    assert "no-such-sock" in rep["data"]["status"]["message"]
    rep = render(hyp, collect_once(hyp), verbose=True)
    assert rep["kind"] == 0 and set(rep["data"]) == {"error"}
    assert rep["data"]["error"].startswith("libvirt unreachable")


def test_connection_is_cached_and_reopened(domains: Domains) -> None:
    collector = inst_status.InstStatusCollector(make_ctx(None))
    uri = collector.ctx.libvirt_uri()
    collector.collect()
    first = collector.libvirt.get(uri)
    collector.collect()
    assert collector.libvirt.get(uri) is first
    collector.libvirt.reset()
    collector.collect()
    assert collector.libvirt.get(uri) is not first


# --- hypervisor -------------------------------------------------------------------------------

def test_hypervisor_report(domains: Domains) -> None:
    running, stopped = domains.unique("hv"), domains.unique("hvoff")
    domains.define(running)
    domains.define(stopped, start=False)
    collector = hypervisor.HypervisorCollector(make_ctx(None))
    assert collector.available()
    report = render(collector, collect_once(collector), verbose=False)
    assert report["category"] == "hypervisor" and report["kind"] == 0
    data = report["data"]
    assert data["uri"] == TEST_URI and data["hypervisor"]["type"] == "TEST"
    assert data["libvirt_version"].count(".") == 2
    assert data["libvirt_client_version"] == libvirt_conn.version_string(libvirt.getVersion())
    node = data["node"]
    conn = libvirt.open(TEST_URI)
    info = conn.getInfo()
    assert node["model"] == info[0] and node["memory_kib"] == info[1] * 1024
    assert (node["cpus"], node["mhz"], node["numa_nodes"], node["sockets"], node["cores"],
            node["threads"]) == tuple(info[2:8])
    assert node["memory_free_kib"] == conn.getFreeMemory() // 1024
    assert set(node["cpu_stats"]) >= {"kernel", "user", "idle"}
    doms = {d["name"]: d for d in data["domains"]}
    assert [d["name"] for d in data["domains"]] == sorted(doms)
    run = doms[running]
    assert run["state"] == "running" and run["active"] and run["id"] > 0
    assert run["memory_kib"] == 524288 and run["max_memory_kib"] == 524288 and run["vcpus"] == 1
    assert run["cpu_time_ns"] > 0
    [disk] = run["disks"]
    assert disk["target"] == "vda" and disk["source"] == f"/srv/{running}.img"
    assert set(disk["stats"]) == set(hypervisor.BLOCK_FIELDS)
    [nic] = run["nics"]
    assert nic["mac"] == "aa:00:00:00:00:01" and set(nic["stats"]) == set(hypervisor.NIC_FIELDS)
    assert run["memory_stats"] == {}  # no balloon device
    assert "rss" in doms["test"]["memory_stats"]  # the driver's own domain has one
    off = doms[stopped]
    assert off["state"] == "shutoff" and not off["active"] and off["id"] == -1
    assert off["cpu_time_ns"] == 0 and off["disks"][0]["stats"] is None
    assert off["memory_stats"] is None
    conn.close()


def test_hypervisor_one_bad_domain_does_not_break_the_report(
        domains: Domains, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = domains.unique("bad")
    domains.define(bad)
    real = hypervisor.read_domain

    def flaky(dom: Any) -> dict[str, Any]:
        if dom.name() == bad:
            raise libvirt.libvirtError("simulated per-domain failure")
        return real(dom)

    monkeypatch.setattr(hypervisor, "read_domain", flaky)
    data = hypervisor.HypervisorCollector(make_ctx(None)).collect()
    doms = {d["name"]: d for d in data["domains"]}
    assert doms[bad] == {"name": bad, "uuid": doms[bad]["uuid"],
                         "error": "simulated per-domain failure"}
    assert doms["test"]["state"] == "running"


def test_registered_and_listed() -> None:
    collectors = registry.builtin_collectors()
    assert collectors["inst-status"] is inst_status.InstStatusCollector
    assert collectors["hypervisor"] is hypervisor.HypervisorCollector
    names = list(collectors)
    assert names.index("inst-status") < names.index("hypervisor")


# --- a private libvirtd, changed by another process -------------------------------------------

@pytest.fixture(scope="module")
def libvirtd() -> Iterator[PrivateLibvirtd]:
    try:
        daemon = start_libvirtd()
    except LibvirtdUnavailable as err:
        pytest.skip(f"no private libvirtd: {err}")
    try:
        yield daemon
    finally:
        daemon.stop()


def other_process(uri: str, code: str) -> None:
    """Run libvirt calls in another process, on its own read-write connection."""
    script = (f"import libvirt\nlibvirt.registerErrorHandler(lambda c, e: None, None)\n"
              f"conn = libvirt.open({uri!r})\n" + textwrap.dedent(code))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr


def test_collector_watches_changes_made_by_another_process(libvirtd: PrivateLibvirtd) -> None:
    libvirtd.restart()  # a clean test driver: only "test", running
    name = "ext1.example.com"
    clock = Clock()
    config = make_config((name, "up", 0), ("test", "up", 0))
    collector = inst_status.InstStatusCollector(make_ctx(config, uri=libvirtd.uri, clock=clock))
    assert collector.available()
    data = collector.collect()
    assert by_name(data)[name]["domain_state"] == "absent" and data["status"]["code"] == 4
    # The collector's connection keeps the driver's state alive between the other processes.
    other_process(libvirtd.uri, f"""
        conn.defineXML({domain_xml(name)!r}).create()
        conn.lookupByName("test").suspend()
    """)
    clock.now += 5
    data = collector.collect()
    insts = by_name(data)
    assert insts[name]["actual_state"] == "up" and insts[name]["status"]["code"] == 0
    assert insts["test"]["actual_state"] == "paused" and data["status"]["code"] == 4
    other_process(libvirtd.uri, f"""
        conn.lookupByName({name!r}).destroy()
        conn.lookupByName("test").resume()
    """)
    clock.now += 5
    insts = by_name(collector.collect())
    assert insts[name]["actual_state"] == "down" and insts["test"]["actual_state"] == "up"
    assert insts[name]["last_change"] == clock.now


def test_reconnects_after_libvirtd_restart(libvirtd: PrivateLibvirtd) -> None:
    libvirtd.restart()
    collector = inst_status.InstStatusCollector(make_ctx(None, uri=libvirtd.uri))
    rw = libvirt.open(libvirtd.uri)
    rw.defineXML(domain_xml("gone.example.com"))
    assert "gone.example.com" in by_name(collector.collect())
    rw.close()
    first = collector.libvirt.get(libvirtd.uri)
    libvirtd.restart()  # the old connection is dead, and the driver is back to its default
    data = collector.collect()
    assert set(by_name(data)) == {"test"}
    assert collector.libvirt.get(libvirtd.uri) is not first
    hyp = hypervisor.HypervisorCollector(make_ctx(None, uri=libvirtd.uri))
    assert [d["name"] for d in hyp.collect()["domains"]] == ["test"]
    libvirtd.kill()
    try:
        failed = collect_once(collector)
        assert failed.failed and failed.data["status"]["code"] == 4
        assert "libvirt" in failed.data["status"]["message"]
    finally:
        libvirtd.start()


def _normalise(report: dict[str, Any]) -> dict[str, Any]:
    report = json.loads(json.dumps(report))
    report.pop("timestamp")
    for inst in report["data"].get("instances", []):
        inst.pop("last_change")
        inst.pop("uptime")
    for dom in report["data"].get("domains", []):
        dom.pop("cpu_time_ns", None)
        for dev in dom.get("disks", []) + dom.get("nics", []):
            dev.pop("stats", None)
        dom.pop("memory_stats", None)
    report["data"].get("node", {}).pop("cpu_stats", None)
    return report


def test_standalone_cli_equals_the_daemon_path(libvirtd: PrivateLibvirtd,
                                                     tmp_path: Path) -> None:
    """`herder collect NAME --libvirt-uri URI` prints what make_context + collect_once + render
    give, and what the daemon serves, for the same libvirt and config (volatile numbers
    aside)."""
    libvirtd.restart()
    keeper = libvirt.open(libvirtd.uri)  # keeps the driver's state between the processes
    try:
        name = "cli1.example.com"
        keeper.defineXML(domain_xml(name))
        keeper.lookupByName("test").suspend()
        config = make_config((name, "up", 0), ("test", "up", 0))
        path = tmp_path / "config.json"
        FileStore(path).create(config)
        settings = MondSettings(libvirt_uri=libvirtd.uri)  # what the CLI builds
        env = {**os.environ, "HERDER_CONFIG": str(path)}
        for cname, verbose in (("inst-status", True), ("inst-status", False),
                               ("hypervisor", False)):
            ctx = make_context(path, node_name=NODE, settings=settings)
            collector = registry.get(cname)(ctx)
            ours = render(collector, collect_once(collector), verbose=verbose)
            argv = [sys.executable, "-m", "herder.cli.main", "collect", cname, "--node", NODE,
                    "--libvirt-uri", libvirtd.uri, *(["--verbose"] if verbose else [])]
            done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
            assert done.returncode == 0, done.stderr
            assert _normalise(json.loads(done.stdout)) == _normalise(ours)
            if cname == "inst-status" and verbose:
                insts = by_name(ours["data"])
                assert insts[name]["actual_state"] == "down"
                assert insts["test"]["actual_state"] == "paused"
                assert ours["data"]["status"]["code"] == 4
        # and the daemon serves the same
        ctx = make_context(path, node_name=NODE, settings=settings)
        cls = registry.get("inst-status")
        with running_mond(ctx, {"inst-status": cls}) as mond:
            mond.wait_for(lambda: "inst-status" in mond.agent.units
                          and mond.agent.units["inst-status"].runs > 0)
            served = mond.get("/1/report/instance/inst-status?verbose=1")[1]
        collector = cls(make_context(path, node_name=NODE, settings=settings))
        ours = render(collector, collect_once(collector), verbose=True)
        assert _normalise(served) == _normalise(ours)
    finally:
        keeper.close()
