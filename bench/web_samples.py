"""masterd's node samples (`masterd.web.samples.NodeSamples`): memory held after an hour.

    .venv/bin/python bench/web_samples.py [--nodes 1000] [--erroring 0.5]

NODES nodes, one sample each every INTERVAL seconds for KEEP seconds (a full ring); a share
ERRORING of them unreachable, their samples an error and a mond error made anew each round
(as masterd's rounds make them); the others with every figure (node_info's, mond's, the I/O
rates; `daemons_bad` a new dict each round). Reported: the memory the samples hold (tracemalloc:
what is allocated after the hour less before), kept as the dicts masterd kept before (a deque
of 361 dicts per node) and as `NodeSamples` keeps them, in MB per 1,000 nodes.
"""

from __future__ import annotations

import argparse
import random
import sys
import tracemalloc
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from herder.masterd.web.samples import INTERVAL, KEEP, NodeSamples, io_rates  # noqa: E402


def rounds(nodes: int, erroring: float) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """An hour of rounds: each round's (node, sample) pairs."""
    rng = random.Random(7)
    down = int(nodes * erroring)
    sectors = [[rng.randrange(2**40), rng.randrange(2**40)] for _ in range(nodes)]
    previous: dict[str, dict[str, Any]] = {}
    for step in range(int(KEEP / INTERVAL) + 1):
        when = 1.8e9 + step * INTERVAL + rng.random() / 100
        found = []
        for index in range(nodes):
            uuid = f"{index:08x}-0000-4000-8000-000000000000"
            sample: dict[str, Any]
            if index < down:
                sample = {"t": when, "error": f"node{index}.example.com: timed out after 5.0 s",
                          "mond_error": "mond cannot be asked: Cannot connect to host "
                                        f"10.0.{index // 256}.{index % 256}:1815"}
            else:
                sectors[index][0] += rng.randrange(10**6)
                sectors[index][1] += rng.randrange(10**6)
                sample = {"t": when, "mem_total": 257_000, "mem_used": 100_000 + rng.randrange(
                    10**5), "disk_total": 7_340_032, "disk_used": 3_000_000 + step,
                    "cpus": 64, "instances": 20, "daemons_bad": {}, "cpu_load": round(
                        rng.random() * 64, 3), "sectors_read": sectors[index][0],
                    "sectors_written": sectors[index][1], "drbd_minors": 12,
                    "drbd_syncing": 0, "drbd_sync_pct": None}
            sample.update(io_rates(previous.get(uuid), sample))
            previous[uuid] = sample
            found.append((uuid, sample))
        yield found


def held(keep: Callable[[str, dict[str, Any]], None], nodes: int, erroring: float) -> float:
    """MB allocated after an hour of samples kept by `keep`."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for found in rounds(nodes, erroring):
        for uuid, sample in found:
            keep(uuid, sample)
        del found
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--erroring", type=float, default=0.5)
    args = parser.parse_args()
    per_thousand = 1000 / args.nodes
    dicts: dict[str, deque[dict[str, Any]]] = {}

    def keep_dicts(uuid: str, sample: dict[str, Any]) -> None:
        dicts.setdefault(uuid, deque(maxlen=int(KEEP / INTERVAL) + 1)).append(sample)

    before = held(keep_dicts, args.nodes, args.erroring)
    dicts.clear()
    compact = NodeSamples()
    after = held(compact.add, args.nodes, args.erroring)
    print(f"{args.nodes} nodes x {KEEP:.0f} s, {args.erroring:.0%} erroring: "
          f"dicts {before * per_thousand:.1f} MB, NodeSamples {after * per_thousand:.1f} MB "
          "per 1,000 nodes")


if __name__ == "__main__":
    main()
