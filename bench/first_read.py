"""The first reads after masterd starts among nodes that do not answer (issue 36, goal 5).

    .venv/bin/python bench/first_read.py [--instances 10000] [--repeats 5] [--reads 4]

One file cluster of `--instances` instances on a tenth as many nodes (`bench/scaleconfig.py`,
imported once), whose nodes run no node daemon (their addresses refuse connections). A real
`herder masterd` is started `--repeats` times on it; each time, right after it serves, the
client (herder's RAPI client, a kept connection) reads `/2/nodes?bulk=1` `--reads` times in a
row. Printed: each start's read times and whether the first answer's live fields are all
null (no node answers), then per read the median and range over the starts,
with the load average (the machine is shared). There is no peer figure: Ganeti's RAPI asks
every node on each read and waits for each (its node RPC timeout), a start or not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import herder, spawn_masterd
from scaleconfig import scaled_ganeti

LIVE_FIELDS = ("mfree", "mtotal", "dfree", "dtotal", "ctotal")


def one_start(location: str, secrets: Path, run_dir: Path, reads: int) -> dict[str, Any]:
    from herder.core.rapi import RapiClient

    proc, url = spawn_masterd(location, run_dir, [])
    try:
        client = RapiClient.for_herder_cluster(secrets, url, timeout=300)
        times: list[float] = []
        first: list[Any] = []
        for _ in range(reads):
            started = time.perf_counter()
            answer = client.get_nodes(bulk=True)
            times.append(round(time.perf_counter() - started, 3))
            first = first or answer
        null = all(node.get(field) is None for node in first for field in LIVE_FIELDS)
        return {"reads_s": times, "nodes": len(first), "live_fields_null": null}
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reads", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="herder-first-read-") as tmp:
        base = Path(tmp)
        source = base / "ganeti.json"
        source.write_text(json.dumps(scaled_ganeti(args.instances)))
        files = base / "file"
        files.mkdir()
        location = str(files / "config.json")
        herder(location, "cluster", "import-ganeti", str(source))
        print(f"load average before: {os.getloadavg()}", flush=True)
        starts = []
        for number in range(args.repeats):
            figures = one_start(location, files, base / f"run{number}", args.reads)
            print(json.dumps(figures), flush=True)
            starts.append(figures)
    summary: dict[str, Any] = {}
    for read in range(args.reads):
        times = [s["reads_s"][read] for s in starts]
        summary[f"read_{read + 1}_s"] = {"median": round(statistics.median(times), 3),
                                         "min": min(times), "max": max(times)}
    summary["load_average_after"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
