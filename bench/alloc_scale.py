"""The allocator at 10,000 nodes: `herder alloc` on `gen_cluster.py` requests, hail beside it.

    .venv/bin/python bench/alloc_scale.py [--sizes 1000,10000] [--requests allocate,relocate]
                                           [--runs 5] [--peer-max 1000] [--peer-timeout 120]
                                           [--before 'COMMAND']

The requests are Ganeti's own synthetic ones (`../shared/peers/gen_cluster.py -n N`: N nodes,
10 instances each, DRBD, one group; a 48 MB message at 10,000 nodes), made once per size into
a temporary directory. Each run is a separate process (`herder alloc FILE`, as an operator or
a script runs it); its wall time, CPU time (user + system) and peak RSS come from the process's
own resource usage (`os.wait4`). Prints the median of `--runs` runs with the range, the load
average before and after (the machine is shared: CPU time is the steadier figure), and hail's
figures where it finishes: it holds the whole cluster's scores in memory (3-4 GB at 1,000 nodes,
killed at 14 GB at 5,000; `../shared/peers/README.md`), so it runs only up to `--peer-max`
nodes, once per size (a minute at 1,000 nodes). Every herder answer of a size and request is
checked to be the same.

`--before` names another herder (e.g. a checkout of an older commit: 'env PYTHONPATH=OLD/src
.venv/bin/python -m herder.cli.main'): its runs alternate with this one's (the machine's load
falls on both alike), its answers must be the same bytes, and each row adds its figures and
the ratios before/after of the medians.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HERDER = str(REPO / ".venv" / "bin" / "herder")
PEERS = Path(os.environ.get("HERDER_SHARED", REPO.parent / "shared")) / "peers"
HAIL = Path(os.environ.get("GROOT", "/tmp/groot")) / "bin" / "hail"


def run(cmd: list[str], timeout: float) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MB, stdout) of one process; a run past `timeout` is killed."""
    with tempfile.TemporaryFile() as out:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                return float("inf"), usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, ""
            time.sleep(0.005)
        wall = time.monotonic() - start
        out.seek(0)
        text = out.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[0]} failed: {text[:200]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, text


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """median [min-max]"""
    return (fmt.format(statistics.median(values)) + " [" + fmt.format(min(values)) + "-"
            + fmt.format(max(values)) + "]")


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000", help="node counts (10 instances each)")
    ap.add_argument("--requests", default="allocate,relocate",
                    help="gen_cluster.py request types (allocate, relocate, multi-allocate)")
    ap.add_argument("--runs", type=int, default=5, help="herder runs per case (median, range)")
    ap.add_argument("--peer-max", type=int, default=1000, help="largest size hail is run at")
    ap.add_argument("--peer-timeout", type=float, default=180.0)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--before", help="another herder command to compare with, run alternately")
    ap.add_argument("--herder", default=HERDER,
                    help="the command that is `herder` (e.g. another checkout's, for a before/after"
                         " pair: 'env PYTHONPATH=OTHER/src .venv/bin/python -m herder.cli.main')")
    args = ap.parse_args()
    gen = PEERS / "gen_cluster.py"
    if not gen.exists():
        raise SystemExit(f"{gen} is absent (../shared/peers)")
    peer = not args.no_peer and HAIL.exists()
    work = Path(tempfile.mkdtemp(prefix="herder-alloc-scale-"))
    print(f"load average before: {load()}", flush=True)
    before_cols = ("before wall s | before CPU s | before MB | before/after wall | CPU | MB | "
                   if args.before else "")
    print("request | nodes | herder wall s | herder CPU s | herder MB | " + before_cols
          + "hail wall s | hail CPU s | hail MB | hail/herder (wall)", flush=True)
    for n in (int(x) for x in args.sizes.split(",")):
        for kind in args.requests.split(","):
            path = work / f"{kind}-{n}.json"
            subprocess.run([sys.executable, str(gen), "-n", str(n), "--request", kind,
                            "-o", str(path)], check=True)
            herders = [args.herder, *([args.before] if args.before else [])]
            figures: list[list[list[float]]] = [[[], [], []] for _ in herders]
            answers = set()
            for _ in range(args.runs):
                for cmd, (walls, cpus, rss) in zip(herders, figures, strict=True):
                    wall, cpu, mb, text = run([*shlex.split(cmd), "alloc", str(path)], 600)
                    walls.append(wall)
                    cpus.append(cpu)
                    rss.append(mb)
                    answers.add(text)
            if len(answers) != 1:
                raise SystemExit(f"the answers to {path} differ between runs or herders")
            walls, cpus, rss = figures[0]
            row = [kind, str(n), spread(walls), spread(cpus), spread(rss, "{:.0f}")]
            if args.before:
                old = figures[1]
                row += [spread(old[0]), spread(old[1]), spread(old[2], "{:.0f}")]
                row += [f"{statistics.median(o) / statistics.median(v):.2f}x"
                        for o, v in zip(old, figures[0], strict=True)]
            if peer and n <= args.peer_max:
                wall, cpu, mb, _ = run([str(HAIL), str(path)], args.peer_timeout)
                if wall == float("inf"):  # killed at the timeout: at least that
                    row += [f"> {args.peer_timeout:.0f} (killed)", f"{cpu:.2f}", f"{mb:.0f}",
                            f"> {args.peer_timeout / statistics.median(walls):.0f}x"]
                else:
                    row += [f"{wall:.2f}", f"{cpu:.2f}", f"{mb:.0f}",
                            f"{wall / statistics.median(walls):.1f}x"]
            else:
                row += ["-", "-", "-", "- (hail cannot run at this size)" if peer else "-"]
            print(" | ".join(row), flush=True)
            path.unlink()
    print(f"load average after: {load()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
