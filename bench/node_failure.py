"""A node dies; seconds until its guest heartbeats on another node (docs/ha.md "Node failure").

A simulated cluster of three nodes with real guests (`herder cluster simulate`); one sharedfile
guest on a node that is not the master. Each round kills that node and measures, from the
failure: maintd's detection (the node-failed incident), the confirmed fence, the failover job's
end (the domain started elsewhere: herder's part ends there) and the guest's first heartbeat
there (its boot under TCG). Two kinds of failure, alternating:

- power: the node's BMC cuts its power (`simulate --power-off`); the fence is OOB (ipmitool);
- cut: the node's network goes down inside its namespace, with no `oob_program` on it: it
  stops its guest when its lease runs out, its watchdog resets it, maintd waits lease +
  watchdog timeout before the failover.

Between rounds the node comes back (`--offline no`, `--master-candidate yes`) and the guest is
failed over back to it. The reference: the guest's own boot (an ordinary failover's start to
the first heartbeat) in the same rounds, which the recovery cannot beat. Proxmox VE's HA manager
takes about two minutes for the same (its lock timeout, then the watchdog, then the restart).

    PYTHONPATH=src python bench/node_failure.py [--rounds 3] [--dir /tmp/herder-bench-nodefail]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from herder.sim import cluster, guest
from rounds import sim_options, spread

NAME = "hb1"


def _herder(state: cluster.SimState, *args: str, timeout: float = 600) -> str:
    done = cluster.run_cli(state, *args, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"herder {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done.stdout


def _boots(state: cluster.SimState) -> dict[str, guest.Heartbeat]:
    """boot id -> its first acknowledged heartbeat, over every node's serial log."""
    found: dict[str, guest.Heartbeat] = {}
    for node in state.nodes:
        log = state.host(node.name).path(f"/var/log/herder/instances/{NAME}.serial.log")
        if log.exists():
            for beat in guest.parse_heartbeats(log.read_text(errors="replace")):
                if beat.seq is not None:
                    found.setdefault(beat.boot_id, beat)
    return found


def _wait_new_boot(state: cluster.SimState, old: set[str], timeout: float = 400) -> float:
    """Wall time (time.time()) when a heartbeat of a new boot was first seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if set(_boots(state)) - old:
            return time.time()
        time.sleep(0.25)
    raise SystemExit(f"no new boot of {NAME} within {timeout:.0f} s")


def _instance(state: cluster.SimState) -> dict[str, Any]:
    (found,) = json.loads(_herder(state, "instance", "info", NAME, "--json"))
    return dict(found)


def _incident(state: cluster.SimState, node_uuid: str, after: float) -> dict[str, Any]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for inc in json.loads(_herder(state, "maintd", "status", "--json")):
            if (inc["action"] == "node-failed" and inc["node"] == node_uuid
                    and inc["ctime"] >= after and inc["repair-status"] == "completed"):
                return dict(inc)
        time.sleep(1)
    raise SystemExit("no completed node-failed incident within 300 s")


def _place_on(state: cluster.SimState, node: str) -> float:
    """Fail the guest over to `node` (unless there); the seconds its boot took."""
    if _instance(state)["primary_node_name"] == node:
        return 0.0
    old = set(_boots(state))
    _herder(state, "instance", "failover", NAME, "--target-node", node)
    started = time.time()
    return _wait_new_boot(state, old) - started


def _round(state: cluster.SimState, kind: str, victim: str, uuid: str) -> dict[str, float]:
    old = set(_boots(state))
    began = time.time()
    if kind == "power":
        cluster.power(Path(state.directory), victim, on=False)
    else:
        _herder(state, "node", "modify", victim, "--node-parameters", "oob_program=")
        began = time.time()
        state.host(victim).run(["ip", "link", "set", "eth0", "down"], timeout=30)
    beat = _wait_new_boot(state, old)
    inc = _incident(state, uuid, began - 5)
    times = inc["original"]["times"]
    figures = {"detected": inc["ctime"] - began, "fenced": times["recover"] - began,
               "started": times["done"] - began, "heartbeat": beat - began}
    # the node back, as an operator brings it back
    if kind == "power":
        cluster.power(Path(state.directory), victim, on=True)
    deadline = time.monotonic() + 180
    while not state.host(victim).running or state.host(victim).run(
            ["true"], timeout=30).returncode != 0:
        if time.monotonic() > deadline:
            raise SystemExit(f"{victim} did not come back")
        time.sleep(1)
    time.sleep(8)  # its noded up and its first heartbeat refused
    _herder(state, "node", "modify", victim, "--offline", "no")
    _herder(state, "node", "modify", victim, "--master-candidate", "yes")
    oob = str(Path(sys.executable).parent / "herder-oob-ipmi")
    _herder(state, "node", "modify", victim, "--node-parameters", f"oob_program={oob}")
    figures["boot"] = _place_on(state, victim)
    return figures


def main() -> None:
    options = sim_options(__doc__ or "", rounds=3, directory="/tmp/herder-bench-nodefail",
                          first_ip=120, rounds_help="rounds of each kind")
    state = cluster.start(options.dir, 3, first_ip=options.first_ip, guests="qemu",
                          progress=print)
    try:
        victim = state.nodes[2].name
        uuid = {n["name"]: n["uuid"] for n in json.loads(
            _herder(state, "node", "list", "--json"))}[victim]
        _herder(state, "instance", "add", NAME, "--no-name-check", "-t", "sharedfile", "-o",
                "herder-guest", "--disk", "32M", "-n", victim)
        _wait_new_boot(state, set())
        runs: dict[str, list[dict[str, float]]] = {"power": [], "cut": []}
        for number in range(options.rounds):
            for kind in ("power", "cut"):
                figures = _round(state, kind, victim, uuid)
                runs[kind].append(figures)
                print(f"round {number + 1} {kind}: " + ", ".join(
                    f"{k} {v:.1f} s" for k, v in figures.items()), flush=True)
        print(f"\nmedian of {options.rounds} (min-max), seconds from the failure:")
        print(f"{'':8} {'detected':>15} {'fenced':>15} {'started':>15} {'heartbeat':>17} "
              f"{'guest boot':>17}")
        for kind, rows in runs.items():
            boots = [r["boot"] for r in rows if r["boot"] > 0]
            columns = [[r[key] for r in rows]
                       for key in ("detected", "fenced", "started", "heartbeat")]
            widths = (15, 15, 15, 17, 17)
            print(f"{kind:8} " + " ".join(
                f"{spread(values):>{width}}" for values, width in zip([*columns, boots], widths,
                                                                        strict=True)))
        print("Proxmox VE's HA manager: about 120 s to the restart (its documentation); herder's "
              f"to the restart: {statistics.median(r['started'] for r in runs['power']):.1f} s "
              f"(power), {statistics.median(r['started'] for r in runs['cut']):.1f} s (cut)")
    finally:
        cluster.stop(options.dir)


if __name__ == "__main__":
    main()
