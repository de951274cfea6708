"""The drbd collector: /proc/drbd of DRBD 8.0-8.4, DRBD 9 JSON, the state-to-code table, the
minor -> instance mapping, stand-alone output, and the comparison with Ganeti's mon-collector."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from herder.cli.main import main
from herder.core.store import FileStore
from herder.mond.collector import CollectContext, CollectorError
from herder.mond.collectors import drbd
from herder.mond.collectors.drbd import (
    DrbdCollector,
    build_data,
    connection_code,
    device_status,
    disk_code,
    instance_minors,
    parse_drbd9_status,
    parse_pairing,
    parse_proc_drbd,
)
from herder.mond.context import make_context
from herder.mond.report import Kind, Status
from herder.mond.runner import collect_once, render
from tests.conftest import build_config

SHARED = Path(__file__).resolve().parents[3] / "shared"
GANETI = SHARED / "conformance" / "ganeti"
DRBD9_JSON = SHARED / "conformance" / "drbd9" / "status-json-two-resources.json"
PAIRING = GANETI / "instance-minor-pairing.txt"
MON_COLLECTOR = Path("/tmp/groot/usr/lib/ganeti/3.0/usr/lib/ganeti/mon-collector")

PROC_FILES = sorted(GANETI.glob("proc_drbd*.txt")) if GANETI.is_dir() else []
PROC_NAMES = [p.name for p in PROC_FILES] or ["<shared absent>"]

# Files on which Ganeti is wrong, so the peer comparison expects a difference: none of the
# conformance files; a Disconnecting line (Ganeti misspells the state) is checked separately.
GANETI_WRONG: dict[str, str] = {}

DISCONNECTING = """\
version: 8.4.2 (api:1/proto:86-101)
 0: cs:Disconnecting ro:Primary/Unknown ds:UpToDate/DUnknown C r-----
    ns:0 nr:0 dw:0 dr:0 al:0 bm:0 lo:0 pe:0 ua:0 ap:0 ep:1 wo:f oos:0
"""


def conformance(name: str) -> Path:
    path = GANETI / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


def device(data: Any, minor: int) -> dict[str, Any]:
    return next(d for d in data["deviceInfos"] if d["minor"] == minor)


def context(tmp_path: Path, **inputs: Path) -> CollectContext:
    # proc_drbd defaults to a file that does not exist, so the test machine's DRBD never leaks
    return CollectContext(node_name="node1.example.com",
                          inputs={"proc_drbd": tmp_path / "no-proc-drbd", **inputs})


# --- every conformance file parses -----------------------------------------------------------


@pytest.mark.parametrize("name", PROC_NAMES)
def test_conformance_file_parses(name: str) -> None:
    path = conformance(name)
    text = path.read_text()
    parsed = parse_proc_drbd(text)
    assert parsed.unparsed == [] and parsed.problems == {}
    # Every minor line of the file, with its connection state, in order.
    lines = re.findall(r"^\s*(\d+): cs:(\w+)", text, re.M)
    assert [(d["minor"], d["connectionState"]) for d in parsed.devices] == [
        (int(m), cs) for m, cs in lines
    ]
    perf_lines = re.findall(r"^\s*ns:.*$", text, re.M)
    configured = [d for d in parsed.devices if d["connectionState"] != "Unconfigured"]
    assert len(perf_lines) == len(configured)
    for dev, line in zip(configured, perf_lines, strict=True):
        counters = dict(re.findall(r"(\w+):(\S+)", line))
        assert dev["perfIndicators"]["networkSend"] == int(counters["ns"])
        assert dev["perfIndicators"]["diskRead"] == int(counters["dr"])
        assert dev["perfIndicators"]["applicationPending"] == int(counters["ap"])
        assert ("outOfSync" in dev["perfIndicators"]) == ("oos" in counters)
        assert dev["instance"] is None
    for dev in parsed.devices:
        if dev["connectionState"] == "Unconfigured":
            assert dev == {"minor": dev["minor"], "connectionState": "Unconfigured"}
    # the sync status is present exactly where the file shows a progress line
    assert sum("syncStatus" in d for d in parsed.devices) == text.count("sync'ed:")


def test_drbd8_fields() -> None:
    parsed = parse_proc_drbd(conformance("proc_drbd8.txt").read_text())
    assert parsed.version_info == {
        "version": "8.0.12", "api": "86", "proto": "86",
        "gitHash": "5c9f89594553e32adb87d9638dce591782f947e3", "buildBy": "XXX",
    }
    data = {"deviceInfos": parsed.devices}
    assert device(data, 0) == {
        "minor": 0, "connectionState": "Connected", "localRole": "Primary",
        "remoteRole": "Secondary", "localState": "UpToDate", "remoteState": "UpToDate",
        "replicationProtocol": "C", "ioFlags": "r---",
        "perfIndicators": {
            "networkSend": 4375577, "networkReceive": 0, "diskWrite": 4446279, "diskRead": 674,
            "activityLog": 1067, "bitMap": 69, "localCount": 0, "pending": 0,
            "unacknowledged": 0, "applicationPending": 0,
        },
        "instance": None,
    }
    assert device(data, 8)["connectionState"] == "StandAlone"
    assert device(data, 8)["replicationProtocol"] == " "
    assert device(data, 6)["localState"] == "Diskless"


def test_emptyline_and_emptyversion() -> None:
    full = parse_proc_drbd(conformance("proc_drbd80-emptyline.txt").read_text())
    assert full.version_info["buildBy"] == "root@node1.example.com, 2009-05-22 12:47:52"
    assert [d["minor"] for d in full.devices] == [0, 1, 2, 5, 6]
    bare = parse_proc_drbd(conformance("proc_drbd80-emptyversion.txt").read_text())
    assert bare.version_info == {
        "gitHash": "5c9f89594553e32adb87d9638dce591782f947e3",
        "buildBy": "root@node1.example.com, 2009-05-22 12:47:52",
    }
    assert bare.devices == full.devices


def test_drbd83_nul_and_sync() -> None:
    parsed = parse_proc_drbd(conformance("proc_drbd83_sync.txt").read_text())
    data = {"deviceInfos": parsed.devices}
    assert device(data, 1)["ioFlags"] == "r---"  # "r---\0"
    assert device(data, 3)["syncStatus"] == {
        "percentage": 34.9, "progress": "346112/524288", "progressUnit": "MegaByte",
        "timeToFinish": "00:00:05", "speed": 59392, "speedUnit": "KiloByte/Second",
    }
    assert device(data, 3)["perfIndicators"]["writeOrder"] == "b"


def test_sync_on_one_line_and_want() -> None:
    krnl = parse_proc_drbd(conformance("proc_drbd83_sync_krnl2.6.39.txt").read_text())
    dev = device({"deviceInfos": krnl.devices}, 3)
    assert dev["replicationProtocol"] == "A"
    assert dev["syncStatus"]["progress"] == "14996/15360"
    assert dev["syncStatus"]["timeToFinish"] == "00:04:08"
    assert dev["syncStatus"]["speed"] == 61736
    want = parse_proc_drbd(conformance("proc_drbd83_sync_want.txt").read_text())
    assert want.version_info == {"version": "8.3.11", "api": "88", "proto": "86-96",
                                 "srcversion": "2D876214BAAD53B31ADC1D6"}
    sync = want.devices[0]["syncStatus"]
    assert sync["want"] == 61440 and sync["progressUnit"] == "KiloByte"
    assert list(sync) == ["percentage", "progress", "progressUnit", "timeToFinish", "speed",
                          "want", "speedUnit"]


def test_drbd84_sync() -> None:
    parsed = parse_proc_drbd(conformance("proc_drbd84_sync.txt").read_text())
    data = {"deviceInfos": parsed.devices}
    assert device(data, 0)["perfIndicators"]["writeOrder"] == "d"
    assert device(data, 0)["perfIndicators"]["outOfSync"] == 1048320
    assert device(data, 5)["ioFlags"] == "r---n-"
    assert device(data, 5)["syncStatus"]["percentage"] == 68.5


# --- odd input ---------------------------------------------------------------------------------


def test_disconnecting_parses() -> None:
    parsed = parse_proc_drbd(DISCONNECTING)
    assert parsed.devices[0]["connectionState"] == "Disconnecting"
    st = build_data(parsed.version_info, parsed.devices)["status"]
    assert st["code"] == Status.BAD and "minor 0: connection Disconnecting" in st["message"]


@pytest.mark.parametrize("text", ["", "\n\n", "hello world\nthis is not drbd\n", "\0" * 100])
def test_garbage_is_refused(text: str) -> None:
    with pytest.raises(CollectorError, match="empty|not a DRBD status"):
        parse_proc_drbd(text)


def test_odd_lines_are_recorded_not_fatal() -> None:
    text = DISCONNECTING.replace("Disconnecting", "Connected") + (
        " 1: cs:Connected garbage here\n"
        "    something strange\n"
        " 2: cs:Ahead ro:Primary/Secondary ds:UpToDate/Outdated C r-----\n"
        "    ns:1 nr:2 dw:3 dr:4 al:5 bm:6 lo:7 pe:8 ua:9 ap:10 ep:1 wo:f oos:12\n"
    )
    parsed = parse_proc_drbd("noise before\n" + text)
    assert parsed.unparsed == ["noise before"]
    assert set(parsed.problems) == {1}
    data = build_data(parsed.version_info, parsed.devices, parsed.problems, parsed.unparsed)
    assert data["status"]["code"] == Status.UNKNOWN
    assert "minor 1:" in data["status"]["message"]
    assert "minor 2: connection Ahead" in data["status"]["message"]
    assert "noise before" in data["unparsedLines"]
    assert device(data, 2)["perfIndicators"]["applicationPending"] == 10


def test_paused_sync_and_commas() -> None:
    text = (
        "version: 8.4.2 (api:1/proto:86-101)\n"
        " 0: cs:PausedSyncT ro:Secondary/Primary ds:Inconsistent/UpToDate C r-----\n"
        "    ns:0 nr:0 dw:0 dr:0 al:0 bm:0 lo:0 pe:0 ua:0 ap:0 ep:1 wo:f oos:0\n"
        "        [===>......] sync'ed: 100% (1/2)K\n"
        "        finish: 123:04:05 speed: 1,234,567 (12) K/sec\n"
    )
    parsed = parse_proc_drbd(text)
    assert parsed.problems == {}
    sync = parsed.devices[0]["syncStatus"]
    assert sync["percentage"] == 100.0
    assert sync["timeToFinish"] == "123:04:05"
    assert sync["speed"] == 1234567
    assert build_data(parsed.version_info, parsed.devices)["status"]["code"] == Status.TEMP_BAD


def test_drbd9_version_only() -> None:
    parsed = parse_proc_drbd(
        "version: 9.2.4 (api:2/proto:86-122)\nGIT-hash: abc build by me, 2023-01-01\n"
        "Transports (api:18): tcp (9.2.4)\n"
    )
    assert parsed.devices == [] and parsed.unparsed == []
    assert parsed.version_info["version"] == "9.2.4"
    assert parsed.version_info["transports"] == "tcp (9.2.4)"


# --- DRBD 9 ------------------------------------------------------------------------------------


def drbd9_text() -> str:
    if not DRBD9_JSON.is_file():
        pytest.skip(f"{DRBD9_JSON} is absent")
    return DRBD9_JSON.read_text()


def test_drbd9_json() -> None:
    devices = parse_drbd9_status(drbd9_text())
    assert [d["minor"] for d in devices] == [2, 3]
    dev = devices[0]
    assert dev["connectionState"] == "Connected"
    assert (dev["localRole"], dev["remoteRole"]) == ("Secondary", "Primary")
    assert (dev["localState"], dev["remoteState"]) == ("UpToDate", "UpToDate")
    assert dev["perfIndicators"] == {
        "networkSend": 654, "networkReceive": 456, "diskWrite": 123456, "diskRead": 654321,
        "activityLog": 123, "bitMap": 321, "localCount": 2, "pending": 3, "unacknowledged": 4,
        "applicationPending": 1, "writeOrder": "f", "outOfSync": 0,
    }
    assert dev["resource"] == "1-single-0" and dev["volume"] == 0
    assert dev["peers"][0]["name"] == "SLE15-sp1-gm-drbd1145296-node1"
    assert "syncStatus" not in dev and "replicationProtocol" not in dev
    assert build_data({}, devices)["status"] == {"code": 0, "message": ""}


def test_drbd9_resync_and_peers() -> None:
    resources = json.loads(drbd9_text())
    conn = resources[0]["connections"][0]
    conn["peer_devices"][0].update({"replication-state": "SyncSource",
                                     "peer-disk-state": "Inconsistent", "percent-in-sync": 40.5})
    second = json.loads(json.dumps(conn))
    second.update({"name": "third", "connection-state": "Connecting"})
    second["peer_devices"][0].update({"replication-state": "Off", "peer-disk-state": "DUnknown"})
    resources[0]["connections"].append(second)
    resources[1]["connections"] = []
    devices = parse_drbd9_status(json.dumps(resources))
    dev = devices[0]
    assert dev["connectionState"] == "SyncSource"
    assert dev["syncStatus"] == {"percentage": 40.5}
    assert dev["perfIndicators"]["networkSend"] == 2 * 654
    assert devices[1]["connectionState"] == "StandAlone"
    st = build_data({}, devices)["status"]
    assert st["code"] == Status.BAD
    assert "minor 2: peer disk Inconsistent: being resynchronised; peer third connection " \
           "Connecting" in st["message"]
    assert "minor 3: connection StandAlone" in st["message"]


@pytest.mark.parametrize("text", ["not json", "{}", "[1]", '[{"devices": [{"volume": 0}]}]'])
def test_drbd9_garbage(text: str) -> None:
    with pytest.raises(CollectorError, match="drbdsetup"):
        parse_drbd9_status(text)


# --- the state-to-code table -----------------------------------------------------------------


@pytest.mark.parametrize(("state", "code"), [
    ("StandAlone", 4), ("Disconnecting", 4), ("TearDown", 4),
    ("Unconnected", 1), ("WFConnection", 1), ("WFReportParams", 1), ("Timeout", 1),
    ("BrokenPipe", 1), ("NetworkFailure", 1), ("ProtocolError", 1), ("Ahead", 1),
    ("Connecting", 1),
    ("Connected", 0), ("SyncSource", 0), ("SyncTarget", 0), ("PausedSyncT", 0),
    ("VerifyS", 0), ("WFBitMapT", 0), ("StartingSyncS", 0), ("Unconfigured", 0),
    ("Bogus", 2),
])
def test_connection_codes(state: str, code: int) -> None:
    assert connection_code(state)[0] == code


@pytest.mark.parametrize(("state", "cs", "local", "code"), [
    ("UpToDate", "Connected", True, 0),
    ("Inconsistent", "SyncTarget", True, 1),
    ("Inconsistent", "PausedSyncT", True, 1),
    ("Inconsistent", "SyncSource", True, 4),  # not the one being synced
    ("Inconsistent", "Connected", True, 4),
    ("Inconsistent", "SyncSource", False, 1),
    ("Inconsistent", "StandAlone", False, 4),
    ("Outdated", "Connected", True, 4),
    ("Outdated", "Behind", True, 1),
    ("Outdated", "Ahead", False, 1),
    ("Diskless", "Connected", True, 4),
    ("Diskless", "Connected", False, 4),
    ("Failed", "Connected", True, 4),
    ("DUnknown", "WFConnection", False, 0),
    ("DUnknown", "Connected", True, 2),
    ("Attaching", "Connected", True, 1),
    ("Consistent", "StandAlone", True, 1),
    ("Weird", "Connected", True, 2),
])
def test_disk_codes(state: str, cs: str, local: bool, code: int) -> None:
    assert disk_code(state, cs, local=local)[0] == code


def test_device_status_message() -> None:
    dev = {"minor": 3, "connectionState": "StandAlone", "localState": "Diskless",
           "remoteState": "DUnknown", "instance": "inst1.example.com"}
    assert device_status(dev) == {
        "code": 4,
        "message": "minor 3 (inst1.example.com): connection StandAlone: no network "
                   "configuration available; local disk Diskless: no disk attached",
    }
    assert device_status({"minor": 1, "connectionState": "Unconfigured"}) == {
        "code": 0, "message": ""}


def test_status_is_worst_over_minors() -> None:
    parsed = parse_proc_drbd(conformance("proc_drbd83_sync.txt").read_text())
    st = build_data(parsed.version_info, parsed.devices)["status"]
    assert st["code"] == Status.TEMP_BAD
    assert st["message"].splitlines() == [
        "minor 3: local disk Inconsistent: being resynchronised",
        "minor 4: connection WFConnection: trying to establish a network connection",
    ]


# --- minor -> instance -------------------------------------------------------------------------


def test_instance_minors_from_config() -> None:
    config = build_config()
    by_name = {n.name: n.uuid for n in config.nodes.values()}
    # drbd0: node1 (minor 0) <-> node2 (minor 0); drbd1: node2 (1) <-> node3 (1)
    assert instance_minors(config, by_name["node1.example.com"]) == {0: "drbd0.example.com"}
    assert instance_minors(config, by_name["node2.example.com"]) == {
        0: "drbd0.example.com", 1: "drbd1.example.com"}
    assert instance_minors(config, by_name["node3.example.com"]) == {1: "drbd1.example.com"}


def test_instance_minors_uses_the_nodes_own_index() -> None:
    config = build_config()
    inst = next(i for i in config.instances.values() if i.name == "drbd1.example.com")
    lid = inst.disks[0].logical_id
    lid.minors = [5, 7]  # type: ignore[union-attr]
    node2, node3 = lid.nodes  # type: ignore[union-attr]
    assert instance_minors(config, node2)[5] == "drbd1.example.com"
    assert instance_minors(config, node3) == {7: "drbd1.example.com"}


def test_pairing_file() -> None:
    assert parse_pairing(conformance("instance-minor-pairing.txt").read_text()) == {
        0: "instance1.example.com"}
    assert parse_pairing('[{"minor": 4, "instance": "x"}]') == {4: "x"}
    for bad in ("", "{}", '[["n", "zero", "i"]]', "[3]"):
        with pytest.raises(CollectorError):
            parse_pairing(bad)


# --- the collector -----------------------------------------------------------------------------


def test_collector_declaration(tmp_path: Path) -> None:
    assert (DrbdCollector.name, DrbdCollector.category, DrbdCollector.kind) == (
        "drbd", "storage", Kind.STATUS)
    assert set(DrbdCollector.inputs) == {"proc_drbd", "drbd_status_json", "pairing"}
    assert not DrbdCollector(CollectContext(inputs={})).available() or Path("/proc/drbd").exists()
    assert DrbdCollector(context(tmp_path)).available()  # input overridden


def test_collect_with_config(tmp_path: Path) -> None:
    config = build_config()
    ctx = CollectContext(node_name="node2.example.com",
                         inputs={"proc_drbd": conformance("proc_drbd84.txt")},
                         config_loader=lambda: config)
    collector = DrbdCollector(ctx)
    data = collector.collect()
    assert list(data) == ["status", "versionInfo", "deviceInfos"]
    assert device(data, 0)["instance"] == "drbd0.example.com"
    assert device(data, 1)["instance"] == "drbd1.example.com"
    assert device(data, 4)["instance"] is None
    assert "instance" not in device(data, 2)  # Unconfigured
    assert data["status"]["code"] == Status.BAD
    assert collector.summary(data) == {"status": data["status"]}


def test_collect_with_pairing_input(tmp_path: Path) -> None:
    ctx = context(tmp_path, proc_drbd=conformance("proc_drbd83.txt"), pairing=PAIRING)
    data = DrbdCollector(ctx).collect()
    assert device(data, 0)["instance"] == "instance1.example.com"


def test_collect_drbd9_input(tmp_path: Path) -> None:
    drbd9_text()
    ctx = context(tmp_path, drbd_status_json=DRBD9_JSON)
    data = DrbdCollector(ctx).collect()
    assert data["versionInfo"] == {}
    assert [d["minor"] for d in data["deviceInfos"]] == [2, 3]
    proc = tmp_path / "proc_drbd"
    proc.write_text("version: 9.2.4 (api:2/proto:86-122)\n")
    ctx = context(tmp_path, proc_drbd=proc, drbd_status_json=DRBD9_JSON)
    data = DrbdCollector(ctx).collect()
    assert data["versionInfo"]["version"] == "9.2.4"
    assert len(data["deviceInfos"]) == 2


def test_drbdsetup_only_for_drbd9(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []

    def fake_run(self: CollectContext, argv: Any, **_: Any) -> str:
        calls.append(tuple(argv))
        return drbd9_text()

    monkeypatch.setattr(CollectContext, "run", fake_run)
    monkeypatch.setattr(drbd.shutil, "which", lambda name: f"/usr/sbin/{name}")
    proc = tmp_path / "proc_drbd"
    proc.write_text("version: 8.4.11 (api:1/proto:86-101)\n")
    assert DrbdCollector(context(tmp_path, proc_drbd=proc)).collect()["deviceInfos"] == []
    assert calls == []
    proc.write_text("version: 9.2.4 (api:2/proto:86-122)\n")
    assert len(DrbdCollector(context(tmp_path, proc_drbd=proc)).collect()["deviceInfos"]) == 2
    assert calls == [drbd.DRBDSETUP_STATUS]


def test_garbage_proc_drbd_is_status_4(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x00\x01 not drbd at all\n" * 3)
    collector = DrbdCollector(context(tmp_path, proc_drbd=garbage))
    with pytest.raises(CollectorError):
        collector.collect()
    sample = collect_once(collector)
    assert sample.failed
    st = render(collector, sample, verbose=False)["data"]["status"]
    assert st["code"] == 4 and "not a DRBD status" in st["message"]
    missing = DrbdCollector(context(tmp_path))
    assert "does not exist" in render(missing, collect_once(missing),
                                      verbose=True)["data"]["status"]["message"]


@pytest.mark.parametrize("with_config", [False, True])
def test_standalone_equals_runner(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  with_config: bool) -> None:
    proc = conformance("proc_drbd84_sync.txt")
    config_path = tmp_path / "config.json"
    if with_config:
        FileStore(config_path).create(build_config())
    rc = main(["--config", str(config_path), "collect", "drbd", "--verbose",
               "--node", "node1.example.com", "--input", f"proc_drbd={proc}"])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    ctx = make_context(config_path, node_name="node1.example.com", inputs={"proc_drbd": proc})
    collector = DrbdCollector(ctx)
    expected = render(collector, collect_once(collector), verbose=True)
    printed.pop("timestamp")
    expected.pop("timestamp")
    assert printed == json.loads(json.dumps(expected))
    assert device(printed["data"], 0)["instance"] == (
        "drbd0.example.com" if with_config else None)


# --- the peer: Ganeti's mon-collector drbd -----------------------------------------------------


def mon_collector(proc: Path, pairing: Path) -> dict[str, Any]:
    if not MON_COLLECTOR.is_file():
        pytest.skip("Ganeti's mon-collector is absent (run ../shared/peers/setup.sh)")
    out = subprocess.run(
        [str(MON_COLLECTOR), "drbd", f"--drbd-status={proc}", f"--drbd-pairing={pairing}"],
        capture_output=True, text=True, timeout=30, check=False,
    )
    if out.returncode != 0:
        raise AssertionError(f"mon-collector failed: {out.stderr.strip()}")
    value = json.loads(out.stdout)
    return value["data"] if isinstance(value, dict) and "data" in value else value


@pytest.mark.peer
@pytest.mark.parametrize("name", PROC_NAMES)
def test_same_as_mon_collector(name: str, tmp_path: Path) -> None:
    proc = conformance(name)
    theirs = mon_collector(proc, PAIRING)
    ctx = context(tmp_path, proc_drbd=proc, pairing=PAIRING)
    collector = DrbdCollector(ctx)
    ours = json.loads(json.dumps(render(collector, collect_once(collector), verbose=True)))
    assert ours["name"] == "drbd" and ours["category"] == "storage" and ours["kind"] == 1
    ours_data = ours["data"]
    # `status` may differ: herder rates disk states too (docs/drbd-status.md)
    assert ours_data.pop("status")["code"] >= theirs.pop("status")["code"]
    if name in GANETI_WRONG:
        assert ours_data != theirs, GANETI_WRONG[name]
    else:
        assert ours_data == theirs
        assert json.dumps(ours_data) == json.dumps(theirs)  # key order too


@pytest.mark.peer
def test_disconnecting_where_ganeti_fails(tmp_path: Path) -> None:
    """Ganeti spells the state `Disconnectiog`: a real Disconnecting line fails there."""
    proc = tmp_path / "proc_drbd"
    proc.write_text(DISCONNECTING)
    with pytest.raises(AssertionError, match="mon-collector failed"):
        mon_collector(proc, conformance("instance-minor-pairing.txt"))
    misspelt = tmp_path / "misspelt"
    misspelt.write_text(DISCONNECTING.replace("Disconnecting", "Disconnectiog"))
    theirs = mon_collector(misspelt, PAIRING)
    data = DrbdCollector(context(tmp_path, proc_drbd=proc, pairing=PAIRING)).collect()
    data.pop("status")
    theirs.pop("status")
    theirs["deviceInfos"][0]["connectionState"] = "Disconnecting"
    assert data == theirs


def test_proc_details_lines_are_skipped() -> None:
    text = DISCONNECTING.replace("Disconnecting", "SyncSource").replace(
        "DUnknown", "Inconsistent") + (
        "\t[>....................] sync'ed:  0.1% (1048020/1048576)K\n"
        "\tfinish: 0:20:49 speed: 836 (836) want: 0 K/sec (stalled)\n"
        "\t  0% sector pos: 1024/2097152\n"
        "\tresync: used:0/61 hits:0 misses:0 starving:0 locked:0 changed:0\n"
        "\tact_log: used:0/1237 hits:0 misses:0 starving:0 locked:0 changed:0\n"
        "\tblocked on activity log: 0\n"
    )
    parsed = parse_proc_drbd(text)
    assert parsed.problems == {} and parsed.unparsed == []
    assert parsed.devices[0]["syncStatus"]["want"] == 0
    assert parsed.devices[0]["syncStatus"]["timeToFinish"] == "00:20:49"
