"""The master's host dies; seconds until a candidate is the master and serves (issue 36 goal 1).

A simulated cluster of three nodes, file store (`herder cluster simulate --guests test`: the
master failover moves daemons, not guests). Each round cuts the master's power (its BMC: no
grace) and runs `herder cluster master-failover --yes` on the next master candidate, as the
operator does, with the vote; it measures from the command's start:

- vote: the command's report of the vote (printed as soon as the vote is done);
- command: the command's end (config written, epoch told, master IP up, masterd and maintd
  started through the node daemons);
- rapi: the first `GET /2/info` at the published master IP that names the new master;
- job: the first job submitted after that (a cluster tag) has succeeded.

Then the old master is powered on again (it rejoins as a candidate whose masterd exits "not my
role") and the round after fails over the new master, so every candidate takes its turn. The
peer: Ganeti's vcluster takes 10.7 s from `gnt-cluster master-failover` to a serving master
(issue 36).

    PYTHONPATH=src python bench/master_failover.py [--rounds 5] [--dir /tmp/herder-bench-mfo]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from herder.core.errors import HerderError
from herder.core.rapi import RapiError
from herder.core.store import FileStore
from herder.sim import cluster
from herder.sim.host import herder_argv
from rounds import sim_options, spread

GANETI_VCLUSTER = 10.7  # seconds, issue 36


def _until(check: Callable[[], bool], what: str, timeout: float = 300.0) -> float:
    """time.monotonic() when `check()` first held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(0.05)
    raise SystemExit(f"{what}: not within {timeout:.0f} s")


def _serves(state: cluster.SimState, master: str) -> bool:
    try:
        with state.rapi(timeout=2.0) as api:
            return bool(api.get_info().get("master") == master)
    except (RapiError, HerderError, OSError):
        return False


def _caught_up(state: cluster.SimState, master: str, node: str) -> bool:
    """`node`'s copy of the config is as new as the master's."""
    def serial(name: str) -> int:
        path = state.host(name).path("/var/lib/herder/config.json")
        return FileStore(path).serial_no() or -1
    return serial(node) >= serial(master)


def _retired(state: cluster.SimState, node: str) -> bool:
    """The old master is back: its noded runs (it votes again), its masterd says "not my
    role"."""
    try:
        states = {d.name: d.state for d in state.host(node).supervisor(
            "status", ["noded", "masterd"]).daemons}
    except (HerderError, OSError):
        return False
    return states == {"noded": "running", "masterd": "not-my-role"}


def _noded_listens(state: cluster.SimState, source: str, node: str) -> bool:
    """`node`'s noded accepts connections, seen from `source` (the cluster's network)."""
    address = next(n.address for n in state.nodes if n.name == node)
    probe = f"import socket; socket.create_connection(({address!r}, 1811), timeout=2).close()"
    return state.host(source).run([sys.executable, "-c", probe], timeout=30).returncode == 0


def _round(state: cluster.SimState, master: str, target: str, number: int) -> dict[str, float]:
    _until(lambda: _caught_up(state, master, target), f"{target}'s copy of the config")
    state.host(master).power_off(grace=0)
    host = state.host(target)
    began = time.monotonic()
    voted = 0.0
    with host.popen(herder_argv("cluster", "master-failover", "--yes"),
                    env={"PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        output = []
        for line in proc.stdout:
            output.append(line)
            if not voted and "Vote on whether" in line:
                voted = time.monotonic()
        code = proc.wait()
    ended = time.monotonic()
    if code != 0:
        raise SystemExit(f"master-failover on {target} failed: {''.join(output)}")
    serving = _until(lambda: _serves(state, target), f"RAPI of {target}")
    done = cluster.run_cli(state, "tags", "add", "cluster", f"bench:mfo{number}", timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"the first job after the failover failed: {done.stderr}")
    job = time.monotonic()
    print("".join(output), end="", flush=True)
    state.host(master).power_on()
    _until(lambda: _retired(state, master), f"{master} back as a candidate")
    _until(lambda: _noded_listens(state, target, master), f"{master}'s noded")
    return {"vote": voted - began, "command": ended - began, "rapi": serving - began,
            "job": job - began}


def main() -> None:
    options = sim_options(__doc__ or "", rounds=5, directory="/tmp/herder-bench-mfo",
                          first_ip=140)
    state = cluster.start(options.dir, 3, first_ip=options.first_ip, guests="test",
                          progress=print)
    try:
        names = [node.name for node in state.nodes]
        rows = []
        for number in range(options.rounds):
            master, target = names[number % 3], names[(number + 1) % 3]
            figures = _round(cluster.load_state(options.dir), master, target, number)
            rows.append(figures)
            print(f"round {number + 1} {master} -> {target}: " + ", ".join(
                f"{k} {v:.1f} s" for k, v in figures.items()), flush=True)
        print(f"\nmedian of {options.rounds} (min-max), seconds from `master-failover`:")
        for key in ("vote", "command", "rapi", "job"):
            print(f"  {key:8} {spread([r[key] for r in rows])}")
        rapi = statistics.median(r["rapi"] for r in rows)
        print(f"Ganeti's vcluster: {GANETI_VCLUSTER} s to a serving master; herder "
              f"{rapi:.1f} s (ratio {rapi / GANETI_VCLUSTER:.2f})")
    finally:
        cluster.stop(options.dir)


if __name__ == "__main__":
    main()
