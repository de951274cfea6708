"""Namespaced simulated hosts: how long a set of hosts takes to come up and go away.

    sudo .venv/bin/python bench/sim_hosts.py [--hosts 3] [--runs 3]

Per run: a fresh simulation in a temporary directory, `--hosts` hosts booted in parallel
(directories, sparse images, mkfs, loop devices, namespaces, network, volume group, supervisor
answering), one command run on each (`hostname`, through nsenter), then a full teardown.
Prints the median of every phase.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from herder.sim.host import HostConfig, HostSimulation, unsupported  # noqa: E402


def one_run(hosts: int) -> dict[str, float]:
    directory = Path(tempfile.mkdtemp(prefix="hbench-", dir="/tmp"))
    times: dict[str, float] = {}
    started = time.perf_counter()
    sim = HostSimulation.create(directory)
    times["create"] = time.perf_counter() - started
    try:
        started = time.perf_counter()
        booted = sim.add_hosts([HostConfig(f"node{i}.sim.herder.test", sim.address(10 + i))
                                for i in range(1, hosts + 1)])
        times["boot"] = time.perf_counter() - started
        started = time.perf_counter()
        for host in booted:
            host.run(["hostname"], check=True)
        times["exec (each)"] = (time.perf_counter() - started) / hosts
    finally:
        started = time.perf_counter()
        sim.teardown()
        times["teardown"] = time.perf_counter() - started
        shutil.rmtree(directory, ignore_errors=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    reason = unsupported()
    if reason:
        raise SystemExit(f"cannot run: {reason}")
    runs = [one_run(args.hosts) for _ in range(args.runs)]
    print(f"{args.hosts} hosts, median of {args.runs} runs:")
    for phase in runs[0]:
        print(f"  {phase:<12} {statistics.median(r[phase] for r in runs):7.3f} s")


if __name__ == "__main__":
    main()
