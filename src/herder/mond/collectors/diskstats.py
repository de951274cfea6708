"""`diskstats`: the block device I/O counters of /proc/diskstats (category storage, kind 0).

As Ganeti's collector: `data` is a list with one object per device line, keys `major`, `minor`,
`name`, then Ganeti's names for the 11 classic counters: `readsNum`, `mergedReads`, `secRead`,
`timeRead`, `writes`, `mergedWrites`, `secWritten`, `timeWrite`, `ios` (I/Os in progress),
`timeIO`, `wIOmillis` (weighted ms doing I/O). Newer kernels print more fields, which herder
adds (Ganeti's parser accepts only the 14-field format and fails on current kernels):

- 18 fields (Linux >= 4.18): `discards`, `mergedDiscards`, `secDiscarded`, `timeDiscard`;
- 20 fields (Linux >= 5.5): also `flushes`, `timeFlush`.

A line with fewer fields or a non-number raises CollectorError naming the line; fields beyond
the 20 known ones (a future kernel) are ignored. The keys of a line are exactly those its format
has, so a 14-field file gives Ganeti's output unchanged.
"""

from __future__ import annotations

from typing import Any

from herder.mond.collector import Collector, CollectorError
from herder.mond.report import Kind

GANETI_FIELDS = ("readsNum", "mergedReads", "secRead", "timeRead", "writes", "mergedWrites",
                 "secWritten", "timeWrite", "ios", "timeIO", "wIOmillis")
DISCARD_FIELDS = ("discards", "mergedDiscards", "secDiscarded", "timeDiscard")
FLUSH_FIELDS = ("flushes", "timeFlush")
# number of whitespace-separated fields -> counter names after major, minor, name
FORMATS: dict[int, tuple[str, ...]] = {
    14: GANETI_FIELDS,
    18: GANETI_FIELDS + DISCARD_FIELDS,
    20: GANETI_FIELDS + DISCARD_FIELDS + FLUSH_FIELDS,
}


def parse_diskstats(text: str) -> list[dict[str, Any]]:
    devices: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        count = len(words)
        if count > 20:
            count = 20
        if count not in FORMATS:
            raise CollectorError(
                f"diskstats line {number} has {len(words)} fields (expected 14, 18 or 20): "
                f"{line.strip()[:80]!r}")
        try:
            entry: dict[str, Any] = {"major": int(words[0]), "minor": int(words[1]),
                                     "name": words[2]}
            for key, value in zip(FORMATS[count], words[3:count], strict=True):
                entry[key] = int(value)
        except ValueError:
            raise CollectorError(
                f"diskstats line {number} has a non-numeric counter: {line.strip()[:80]!r}"
            ) from None
        devices.append(entry)
    return devices


class DiskstatsCollector(Collector):
    name = "diskstats"
    category = "storage"
    kind = Kind.PERFORMANCE
    inputs = {"proc_diskstats": "/proc/diskstats"}

    def collect(self) -> list[dict[str, Any]]:
        return parse_diskstats(self.ctx.read_input("proc_diskstats", "/proc/diskstats"))


COLLECTORS = [DiskstatsCollector]
