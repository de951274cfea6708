"""The diskstats collector: the 14-, 18- and 20-field formats of /proc/diskstats, Ganeti's field
names, stand-alone output, and the comparison with Ganeti's mon-collector."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from herder.cli.main import main
from herder.mond.collector import CollectContext, CollectorError
from herder.mond.collectors.diskstats import (
    DISCARD_FIELDS,
    FLUSH_FIELDS,
    GANETI_FIELDS,
    DiskstatsCollector,
    parse_diskstats,
)
from herder.mond.context import make_context
from herder.mond.runner import collect_once, render

SHARED = Path(__file__).resolve().parents[3] / "shared"
OLD = SHARED / "conformance" / "ganeti" / "proc_diskstats.txt"
NEW = SHARED / "conformance" / "proc_diskstats_kernel6_20fields.txt"
MON_COLLECTOR = Path("/tmp/groot/usr/lib/ganeti/3.0/usr/lib/ganeti/mon-collector")

LINE14 = "   8       0 sda 89502 4833 4433387 89244 519115 62738 16059726 465120 0 149148 554564"
LINE20 = (" 254       0 vda 58500 9460 3080498 35255 12074 37182 3314256 13286 0 6744 50141 "
          "6887 5 1262152 1569 1166 29")
BASE_KEYS = ["major", "minor", "name", *GANETI_FIELDS]


def need(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared not mounted)")
    return path


def trim(text: str, fields: int) -> str:
    return "".join(" ".join(line.split()[:fields]) + "\n" for line in text.splitlines())


def test_14_fields() -> None:
    (sda,) = parse_diskstats(LINE14)
    assert list(sda) == BASE_KEYS
    assert sda == {"major": 8, "minor": 0, "name": "sda", "readsNum": 89502, "mergedReads": 4833,
                   "secRead": 4433387, "timeRead": 89244, "writes": 519115,
                   "mergedWrites": 62738, "secWritten": 16059726, "timeWrite": 465120,
                   "ios": 0, "timeIO": 149148, "wIOmillis": 554564}


def test_20_and_18_fields() -> None:
    (vda,) = parse_diskstats(LINE20)
    assert list(vda) == [*BASE_KEYS, *DISCARD_FIELDS, *FLUSH_FIELDS]
    assert vda["wIOmillis"] == 50141
    assert (vda["discards"], vda["mergedDiscards"], vda["secDiscarded"],
            vda["timeDiscard"]) == (6887, 5, 1262152, 1569)
    assert (vda["flushes"], vda["timeFlush"]) == (1166, 29)
    (vda18,) = parse_diskstats(trim(LINE20, 18))
    assert list(vda18) == [*BASE_KEYS, *DISCARD_FIELDS]
    assert vda18 == {k: v for k, v in vda.items() if k not in FLUSH_FIELDS}
    # a future kernel's extra fields are ignored
    (more,) = parse_diskstats(LINE20 + " 7 8")
    assert more == vda


def test_ganeti_sample() -> None:
    devices = parse_diskstats(need(OLD).read_text())
    assert len(devices) == 32
    names = [d["name"] for d in devices]
    assert names[:16] == [f"ram{i}" for i in range(16)]
    assert names[16:24] == [f"loop{i}" for i in range(8)]
    assert {"sda", "sda1", "sda2", "sda5", "dm-0", "dm-1", "dm-2", "sdb"} <= set(names)
    sda = devices[names.index("sda")]
    assert [sda[k] for k in GANETI_FIELDS] == [89502, 4833, 4433387, 89244, 519115, 62738,
                                               16059726, 465120, 0, 149148, 554564]
    assert all(list(d) == BASE_KEYS for d in devices)


def test_kernel6_sample_all_formats() -> None:
    text = need(NEW).read_text()
    full = parse_diskstats(text)
    assert full and all(len(d) == 20 for d in full)
    assert [d["name"] for d in parse_diskstats(trim(text, 18))] == [d["name"] for d in full]
    assert all(len(d) == 18 for d in parse_diskstats(trim(text, 18)))
    assert all(len(d) == 14 for d in parse_diskstats(trim(text, 14)))


def test_live() -> None:
    path = Path("/proc/diskstats")
    if not path.is_file():
        pytest.skip("no /proc/diskstats")
    collector = DiskstatsCollector(CollectContext())
    got = collect_once(collector)
    assert not got.failed, got.data
    assert isinstance(got.data, list)
    assert all(d["readsNum"] >= 0 and isinstance(d["name"], str) for d in got.data)


@pytest.mark.parametrize("garbage", [
    "garbage\n", "8 0 sda 1 2 3\n", LINE14.replace("4833", "many"), "8 0 sda" + " 1" * 13,
])
def test_garbage(garbage: str, tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match="diskstats line 1"):
        parse_diskstats(garbage)
    path = tmp_path / "diskstats"
    path.write_text(garbage)
    collector = DiskstatsCollector(CollectContext(inputs={"proc_diskstats": path}))
    report = render(collector, collect_once(collector), verbose=False)
    assert report["kind"] == 0 and report["category"] == "storage"
    assert "diskstats line 1" in report["data"]["error"]


def test_standalone_equals_runner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "diskstats"
    path.write_text(LINE14 + "\n" + LINE20 + "\n")
    config_path = tmp_path / "config.json"
    rc = main(["--config", str(config_path), "collect", "diskstats", "--verbose",
               "--input", f"proc_diskstats={path}"])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    collector = DiskstatsCollector(make_context(config_path, inputs={"proc_diskstats": path}))
    expected = render(collector, collect_once(collector), verbose=True)
    printed.pop("timestamp")
    expected.pop("timestamp")
    assert printed == json.loads(json.dumps(expected))
    assert [d["name"] for d in printed["data"]] == ["sda", "vda"]


def mon_collector(path: Path) -> subprocess.CompletedProcess[str]:
    if not MON_COLLECTOR.is_file():
        pytest.skip("Ganeti's mon-collector is absent (run ../shared/peers/setup.sh)")
    return subprocess.run([str(MON_COLLECTOR), "diskstats", "-f", str(path)],
                          capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.peer
def test_matches_mon_collector_on_14_fields() -> None:
    path = need(OLD)
    proc = mon_collector(path)
    assert proc.returncode == 0, proc.stderr
    theirs = json.loads(proc.stdout)
    collector = DiskstatsCollector(CollectContext(inputs={"proc_diskstats": path}))
    ours = json.loads(json.dumps(render(collector, collect_once(collector), verbose=True)))
    for key in ("name", "version", "format_version", "category", "kind"):
        assert ours[key] == theirs[key]
    assert ours["data"] == theirs["data"]  # same keys, same order, same values


@pytest.mark.peer
def test_mon_collector_fails_on_20_fields() -> None:
    """Ganeti's parser needs exactly 14 fields; herder reads the current kernels' format."""
    path = need(NEW)
    proc = mon_collector(path)
    assert proc.returncode != 0
    assert parse_diskstats(path.read_text())
