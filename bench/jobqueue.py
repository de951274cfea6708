"""The job queue at scale (issue 32 item 4): a queue of `--archived` archived and `--live`
finished jobs seeded in its storage (tests/system/queue_seed.py: no job is submitted), served by
a real masterd on 127.0.0.1.

    .venv/bin/python bench/jobqueue.py [--archived 100000] [--live 1000] [--repeats 5]

Prints, with the load average (the machine is shared):
- masterd's start (to serving RAPI) with the archive and without it, and their ratio;
- `GET /2/jobs` and `GET /2/jobs?bulk=1` (median of `--repeats`), the same against the queue
  without an archive, and the ratios: the archive must not slow the lists (goal: ratio ~1 and
  under docs/scale.md's 0.5 s list target);
- the CLI's `herder job list` through masterd, and `herder job list --help` (the CLI's own
  start) beside it;
- an archived job by id; `GET /2/jobs?archived=1` (every id, read from the archive);
- archiving: `herder job autoarchive all` of the live jobs (herder's storage: a rename each,
  one directory fsync a batch) against the bare tool, a loop of os.replace of as many files
  with the same fsyncs, and the ratio.
There is no peer to run: Ganeti's queue (luxid) cannot run here without a Ganeti cluster.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from herder.core.store import fsync_directory  # noqa: E402
from tests.system.masterd_fixture import make_cluster, start_masterd  # noqa: E402
from tests.system.queue_seed import seed_queue  # noqa: E402


def median(repeats: int, run: Callable[[], Any]) -> float:
    taken = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        taken.append(time.perf_counter() - started)
    return statistics.median(taken)


def cli(config: Path, url: str, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HERDER_OFFLINE"}
    env.update(HERDER_CONFIG=str(config), HERDER_MASTERD=url)
    done = subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"herder {' '.join(args)}: {done.stderr.strip()}")


def measure(directory: Path, archived: int, live: int, repeats: int) -> dict[str, float]:
    make_cluster(directory / "cluster")
    seed_queue(directory / "cluster" / "queue", archived=archived, live=live)
    figures: dict[str, float] = {}
    started = time.perf_counter()
    with start_masterd(directory) as master:
        figures["start"] = time.perf_counter() - started
        api = master.client
        assert len(api.get_jobs()) == live
        figures["list"] = median(repeats, api.get_jobs)
        figures["bulk"] = median(repeats, lambda: api.get_jobs(bulk=True))
        figures["cli"] = median(3, lambda: cli(master.config_path, master.url, "job", "list"))
        figures["cli_help"] = median(3, lambda: cli(master.config_path, master.url, "job",
                                                    "list", "--help"))
        if archived:
            figures["by_id"] = median(repeats, lambda: api.get_job_status(1))
            figures["archived_ids"] = median(1, lambda: api.get_jobs(archived=True))
        started = time.perf_counter()
        cli(master.config_path, master.url, "job", "autoarchive", "all")
        figures["autoarchive"] = time.perf_counter() - started
        assert api.get_jobs() == []
    return figures


def bare_renames(directory: Path, count: int, batch: int = 100) -> float:
    """os.replace of `count` files into another directory, one fsync of both a batch."""
    source, target = directory / "source", directory / "target"
    source.mkdir(parents=True)
    target.mkdir()
    for n in range(count):
        (source / f"job-{n}.json").write_bytes(b"{}" * 300)
    started = time.perf_counter()
    for n in range(count):
        os.replace(source / f"job-{n}.json", target / f"job-{n}.json")
        if n % batch == batch - 1:
            fsync_directory(target)
            fsync_directory(source)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archived", type=int, default=100_000)
    parser.add_argument("--live", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-jobqueue-") as tmp:
        big = measure(Path(tmp) / "big", args.archived, args.live, args.repeats)
        small = measure(Path(tmp) / "small", 0, args.live, args.repeats)
        bare = bare_renames(Path(tmp) / "bare", args.live)
    print(f"queue of {args.live} jobs with {args.archived} archived / without an archive "
          "(s; ratio):")
    for key, what in (("start", "masterd start to serving RAPI"), ("list", "GET /2/jobs"),
                      ("bulk", "GET /2/jobs?bulk=1"), ("cli", "herder job list"),
                      ("cli_help", "herder job list --help (the CLI's start)")):
        print(f"  {what:42} {big[key]:8.3f} / {small[key]:8.3f}  "
              f"x{big[key] / small[key]:.2f}")
    print(f"  an archived job by id                      {big['by_id']:8.4f}")
    print(f"  GET /2/jobs?archived=1 ({args.archived + args.live} ids)"
          f"{'':10}{big['archived_ids']:8.3f}")
    print(f"archiving {args.live} jobs: herder {big['autoarchive']:.3f} s (the CLI's call), "
          f"bare os.replace + fsync {bare:.3f} s, x{big['autoarchive'] / bare:.1f}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
