"""cpu-avg-load: the /proc/stat parser, the sample window (injected clock and samples), Ganeti's
data format, and the live /proc/stat."""

from __future__ import annotations

import json
import re
from collections import deque
from pathlib import Path

import pytest

from herder.mond.collector import CollectContext, CollectorError
from herder.mond.collectors.cpu_load import (
    BUFFER_SIZE,
    CpuAvgLoadCollector,
    CpuTimes,
    StatSample,
    average,
    parse_proc_stat,
)
from herder.mond.runner import collect_once, render

STAT = """\
cpu  35370 0 6394 134824 481 0 101 217 0 0
cpu0 17045 0 2983 68480 74 0 13 94 0 0
cpu1 18325 0 3411 66343 406 0 87 122 0 0
intr 1 2 3
ctxt 99
btime 1700000000
"""


def stat_text(cpus: list[tuple[int, int]], guest: int = 0) -> str:
    """/proc/stat with per-CPU (busy as user ticks, idle ticks); the aggregate line sums them."""
    total_busy, total_idle = sum(c[0] for c in cpus), sum(c[1] for c in cpus)
    lines = [f"cpu  {total_busy} 0 0 {total_idle} 0 0 0 0 {guest * len(cpus)} 0"]
    lines += [f"cpu{i} {b} 0 0 {i_} 0 0 0 0 {guest} 0" for i, (b, i_) in enumerate(cpus)]
    return "\n".join(lines) + "\nintr 0\n"


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def rig(tmp_path: Path) -> tuple[CpuAvgLoadCollector, Path, Clock]:
    path = tmp_path / "stat"
    clock = Clock()
    collector = CpuAvgLoadCollector(CollectContext(inputs={"proc_stat": path}, clock=clock))
    collector.ticks_per_second = 100.0
    return collector, path, clock


def test_parse() -> None:
    cpus = parse_proc_stat(STAT)
    assert [c.name for c in cpus] == ["cpu", "cpu0", "cpu1"]
    # busy = user + nice + system + iowait + irq + softirq + steal; guest is inside user
    assert cpus[1] == CpuTimes("cpu0", 17045 + 2983 + 74 + 13 + 94, 17045 + 2983 + 68480 + 74
                               + 13 + 94)
    # older kernels print fewer fields
    old = parse_proc_stat("cpu 10 0 5 85\ncpu0 10 0 5 85\n")
    assert old[1] == CpuTimes("cpu0", 15, 100)


@pytest.mark.parametrize("garbage", ["", "garbage\n", "cpu0 1 2 3 4\n", "cpu 1 2 3 4\n",
                                     "cpu 1 2 x 4\ncpu0 1 2 3 4\n", "cpu 1 2\ncpu0 1 2\n",
                                     "cpu 1 2 3 4\ncpuX 1 2 3 4\n"])
def test_parse_garbage(garbage: str) -> None:
    with pytest.raises(CollectorError):
        parse_proc_stat(garbage)


def test_garbage_is_error_object(rig: tuple[CpuAvgLoadCollector, Path, Clock]) -> None:
    collector, path, _ = rig
    path.write_text("garbage\n")
    report = render(collector, collect_once(collector), verbose=False)
    assert report["category"] is None and report["kind"] == 0
    assert "no aggregate cpu line" in report["data"]["error"]


def test_first_sample_is_since_boot(rig: tuple[CpuAvgLoadCollector, Path, Clock]) -> None:
    collector, path, _ = rig
    path.write_text(stat_text([(250, 750), (500, 500)]))
    data = collector.collect()
    assert data == {"cpu_number": 2, "cpus": [0.25, 0.5], "cpu_total": 0.75}


def test_window_average(rig: tuple[CpuAvgLoadCollector, Path, Clock]) -> None:
    collector, path, clock = rig
    path.write_text(stat_text([(1000, 1000), (1000, 1000)]))
    collector.collect()
    clock.now += 10  # 1000 ticks per CPU pass
    path.write_text(stat_text([(1500, 1500), (1900, 1100)], guest=300))
    data = collector.collect()
    assert data["cpu_number"] == 2
    assert data["cpus"] == pytest.approx([0.5, 0.9])  # guest time is not counted twice
    assert data["cpu_total"] == pytest.approx(1.4)
    assert list(data) == ["cpu_number", "cpus", "cpu_total"]


def test_window_drops_old_samples(rig: tuple[CpuAvgLoadCollector, Path, Clock]) -> None:
    collector, path, clock = rig
    busy = 0
    for step in (0, 100, 700, 710):  # seconds since the first sample
        clock.now = 1000.0 + step
        busy = {0: 0, 100: 10000, 700: 10000, 710: 10100}[step]
        path.write_text(stat_text([(busy, 100000)]))
        data = collector.collect()
    # at 710 the window (600 s) holds the samples of 700 and 710 only: 100 ticks in 10 s
    assert data["cpus"] == pytest.approx([0.1])
    assert len(collector.samples) == 4


def test_buffer_size_and_average_over_buffer(
        rig: tuple[CpuAvgLoadCollector, Path, Clock]) -> None:
    collector, path, clock = rig
    for i in range(BUFFER_SIZE + 50):
        clock.now = 1000.0 + i
        path.write_text(stat_text([(i * 50, i * 50)]))
        data = collector.collect()
    assert len(collector.samples) == BUFFER_SIZE == 151
    assert collector.samples[0].time > collector.samples[-1].time  # newest first
    assert data["cpus"] == pytest.approx([0.5])


def test_average_with_injected_samples() -> None:
    def sample(t: float, busy: int) -> StatSample:
        return StatSample(t, (CpuTimes("cpu", 2 * busy, 0), CpuTimes("cpu0", busy, 0),
                              CpuTimes("cpu1", busy, 0)))

    samples = deque([sample(60, 3000), sample(30, 1500), sample(0, 0)])
    data = average(samples, 60, 100.0)
    assert data == {"cpu_number": 2, "cpus": [0.5, 0.5], "cpu_total": 1.0}
    with pytest.raises(CollectorError):
        average(deque(), 60, 100.0)


def test_hotplug_and_clock_jump_reset(rig: tuple[CpuAvgLoadCollector, Path, Clock]) -> None:
    collector, path, clock = rig
    path.write_text(stat_text([(100, 100)]))
    collector.collect()
    clock.now += 5
    path.write_text(stat_text([(200, 200), (50, 150)]))  # a CPU came online
    data = collector.collect()
    assert len(collector.samples) == 1 and data["cpus"] == [0.5, 0.25]
    clock.now -= 100  # the wall clock stepped back
    collector.collect()
    assert len(collector.samples) == 1


def test_live_proc_stat() -> None:
    path = Path("/proc/stat")
    if not path.is_file():
        pytest.skip("no /proc/stat")
    clock = Clock(2000.0)
    collector = CpuAvgLoadCollector(CollectContext(clock=clock))
    first = collect_once(collector)
    assert not first.failed, first.data
    cpus = len(re.findall(r"^cpu\d+ ", path.read_text(), re.M))
    assert first.data["cpu_number"] == cpus == len(first.data["cpus"])
    clock.now += 1.0  # whatever passed really, the load stays a fraction of the CPUs
    second = collect_once(collector)
    assert not second.failed
    assert all(x >= 0.0 for x in second.data["cpus"])
    assert 0.0 <= second.data["cpu_total"] <= cpus * 2
    report = render(collector, second, verbose=False)
    assert (report["name"], report["category"], report["kind"]) == ("cpu-avg-load", None, 0)
    json.dumps(report)
