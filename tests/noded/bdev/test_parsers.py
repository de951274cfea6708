"""The DRBD and LVM parsers noded uses, on the real captures (../shared/conformance/ganeti/)
and, where Ganeti 3.0.2 is at hand, against Ganeti's own parsers on the same files."""

from __future__ import annotations

import json
import subprocess

import pytest

from herder.core import drbd_status
from herder.noded.bdev.base import BlockDevError
from herder.noded.bdev.plain import LvInfo, parse_lvs_line
from tests.conftest import SHARED
from tests.noded.bdev import harness

CAPTURES = SHARED / "conformance" / "ganeti"


def capture(name: str) -> str:
    path = CAPTURES / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path.read_text()


SHOW_EXPECTED = {
    "bdev-drbd-8.0.txt": drbd_status.ShowInfo(
        "/dev/xenvg/test.data", "/dev/xenvg/test.meta", 0, ("192.0.2.1", 11000),
        ("192.0.2.2", 11000)),
    "bdev-drbd-8.3.txt": drbd_status.ShowInfo(
        "/dev/xenvg/test.data", "/dev/xenvg/test.meta", 0, ("192.0.2.1", 11000),
        ("192.0.2.2", 11000)),
    "bdev-drbd-8.4.txt": drbd_status.ShowInfo(
        "/dev/xenvg/test.data", "/dev/xenvg/test.meta", 0, ("192.0.2.1", 11000),
        ("192.0.2.2", 11000)),
    "bdev-drbd-8.4-no-disk-params.txt": drbd_status.ShowInfo(
        "/dev/xenvg/test.data", "/dev/xenvg/test.meta", None, ("192.0.2.1", 11000),
        ("192.0.2.2", 11000)),
    "bdev-drbd-disk.txt": drbd_status.ShowInfo("/dev/xenvg/test.data",
                                               "/dev/xenvg/test.meta", 0),
    "bdev-drbd-net-ip4.txt": drbd_status.ShowInfo(
        local_addr=("192.0.2.1", 11002), remote_addr=("192.0.2.2", 11002)),
    "bdev-drbd-net-ip6.txt": drbd_status.ShowInfo(
        local_addr=("2001:db8:65::1", 11048), remote_addr=("2001:db8:66::1", 11048)),
}


@pytest.mark.parametrize("name", sorted(SHOW_EXPECTED))
def test_drbdsetup_show_captures(name: str) -> None:
    assert drbd_status.parse_drbdsetup_show(capture(name)) == SHOW_EXPECTED[name]


def test_drbdsetup_show_empty_and_broken() -> None:
    assert drbd_status.parse_drbdsetup_show("") == drbd_status.ShowInfo()
    with pytest.raises(drbd_status.DrbdStatusError, match="unbalanced|truncated"):
        drbd_status.parse_drbdsetup_show("_this_host {\n disk \"/dev/x\";\n")
    with pytest.raises(drbd_status.DrbdStatusError, match="address"):
        drbd_status.parse_drbdsetup_show("_this_host {\n address ipv4 nowhere;\n}\n")


def test_proc_drbd_84_states() -> None:
    info = drbd_status.parse_kernel_info(capture("proc_drbd84.txt"))
    assert (info.version.major, info.version.minor, info.version.point) == (8, 4, 2)
    assert list(info.minor_lines) == [0, 1, 2, 4, 6, 8]
    assert info.used_minors() == [0, 1, 4, 6, 8]
    primary = info.state(0)
    assert (primary.connection, primary.local_role, primary.remote_role) == (
        "Connected", "Primary", "Secondary")
    assert primary.is_connected and primary.is_disk_uptodate and primary.sync_percent is None
    assert info.state(2).is_unconfigured
    assert info.state(6).is_diskless
    assert info.state(8).is_standalone


def test_proc_drbd_83_resync() -> None:
    info = drbd_status.parse_kernel_info(capture("proc_drbd83_sync.txt"))
    syncing = info.state(3)
    assert syncing.is_in_resync and syncing.local_disk == "Inconsistent"
    assert (syncing.sync_percent, syncing.est_time) == (34.9, 5)
    assert info.state(4).connection == "WFConnection"


def test_proc_drbd_without_version_refused() -> None:
    with pytest.raises(drbd_status.DrbdStatusError, match="Can't parse DRBD version"):
        drbd_status.parse_kernel_info(" 0: cs:Unconfigured\n")
    with pytest.raises(drbd_status.DrbdStatusError, match="Can't read any data"):
        drbd_status.parse_kernel_info("")


_GANETI_PROC = """
import json, sys
from ganeti.storage import drbd_info
out = {}
for path in sys.argv[1:]:
    try:
        info = drbd_info.DRBD8Info.CreateFromLines(open(path).read().splitlines())
        v = info.GetVersion()
        minors = {}
        for m in info.GetMinors():
            try:
                s = info.GetMinorStatus(m)
                minors[m] = [s.cstatus, s.lrole, s.rrole, s.ldisk, s.rdisk, s.sync_percent,
                             s.est_time, s.is_in_resync, s.is_in_use]
            except Exception as err:
                minors[m] = "error"
        out[path] = [[v["k_major"], v["k_minor"], v["k_point"]], minors]
    except Exception as err:
        out[path] = "error"
print(json.dumps(out))
"""


def test_proc_drbd_captures_read_as_ganeti_reads_them() -> None:
    if not harness.ganeti_available():
        pytest.skip("Ganeti 3.0.2 (/tmp/groot) is absent")
    files = sorted(CAPTURES.glob("proc_drbd*.txt"))
    if not files:
        pytest.skip("no proc_drbd captures")
    proc = subprocess.run([str(harness.DEBIAN_PYTHON), "-c", _GANETI_PROC, *map(str, files)],
                          env={"PYTHONPATH": str(harness.GROOT)}, capture_output=True,
                          text=True, timeout=60, check=True)
    theirs = json.loads(proc.stdout)
    for path in files:
        expected = theirs[str(path)]
        try:
            info = drbd_status.parse_kernel_info(path.read_text())
        except drbd_status.DrbdStatusError:
            assert expected == "error", path.name
            continue
        version = info.version
        mine: dict[str, object] = {}
        for minor in info.minor_lines:
            try:
                s = info.state(minor)
            except drbd_status.DrbdStatusError:
                mine[str(minor)] = "error"
                continue
            mine[str(minor)] = [s.connection, s.local_role, s.remote_role, s.local_disk,
                                s.remote_disk, s.sync_percent, s.est_time, s.is_in_resync,
                                s.is_in_use]
        assert [[version.major, version.minor, version.point], mine] == expected, path.name


def test_lvs_lines() -> None:
    path, lv = parse_lvs_line("  xenvg|inst.disk0_data|-wi-ao----|253|7|4096.00|2|"
                              "/dev/sda5(0),/dev/sdb1(12)")
    assert path == "/dev/xenvg/inst.disk0_data"
    assert lv == LvInfo("-wi-ao----", 253, 7, 4096, 2, ("/dev/sda5", "/dev/sdb1"))
    # activation off (this machine): no kernel device, no PV list for a virtual LV
    _, inactive = parse_lvs_line("  vg|lv|vwi-------|-1|-1|4096.00|1||")
    assert (inactive.major, inactive.minor, inactive.pv_names) == (-1, -1, ())
    for bad in ("  vg|lv|-wi|253|0|4096.00|1|", "  vg|lv|-wi-ao|x|0|4096.00|1|",
                "  vg|lv|-wi-ao|253|0|4096.00|1|/dev/sda5", "  too|few|fields"):
        with pytest.raises(BlockDevError):
            parse_lvs_line(bad)

