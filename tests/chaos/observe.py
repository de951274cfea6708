"""During the faults, the operator's round (nodes maintd fenced brought back, as an operator
does once the incident is over); after them: every node brought back, the jobs left to end, then
the cluster's state read for the checker (`history.Final`): job statuses, `cluster verify`, each
instance's heartbeats (every node's serial log), the write sequence on its disk and where it
runs, and every instance volume on the shared storage and the nodes' file storage."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from herder.core.rapi import RapiError
from herder.sim import cluster, guest
from herder.sim.host import FILE_STORAGE, SHARED_FILE_STORAGE, SimHost
from tests.chaos.history import (
    FINAL_JOB_STATUSES,
    Beat,
    Final,
    GuestState,
    Operation,
    Volume,
)
from tests.simhelpers import masterd_logs

SEQUENCE_MIB = 8  # the disk read for the write sequence: 1 MiB, then a record a sector
Say = Callable[[str], None]


def _cli(state: cluster.SimState, *args: str, timeout: float = 300) -> Any:
    done = cluster.run_cli(state, *args, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"herder {' '.join(args)}: {(done.stderr or done.stdout).strip()}"
                             + masterd_logs(state))
    return json.loads(done.stdout) if "--json" in args else done.stdout


def _until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (RapiError, OSError, AssertionError):
            pass
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _leases_fresh(state: cluster.SimState) -> bool:
    with state.rapi(timeout=30) as api:
        found = api.request("GET", "/2/herder/leases")
    return all(float(age) < float(found["lease"]) for age in found["nodes"].values())


def _queue_idle(state: cluster.SimState) -> bool:
    with state.rapi(timeout=30) as api:
        return all(j.get("status") in FINAL_JOB_STATUSES for j in api.get_jobs(bulk=True))


def _incidents_open(state: cluster.SimState) -> bool:
    """Whether maintd is still handling a node failure (it may fence a node yet)."""
    return any(i.get("action") == "node-failed" and i.get("repair-status") in ("noted", "pending")
               for i in _cli(state, "maintd", "status", "--json"))


NODED_LOG = "/var/log/herder/noded.log"
# what a node's noded logs once it runs again while the config has it offline
STANDING_DOWN = ("lease: refused: the master has this node offline",
                 "this node is no longer online")


# noded's output on a Debian host since the host booted: its unit's journal of this boot
NODED_JOURNAL = ("journalctl --sync; journalctl -q --no-pager -o cat -b "
                 "-u herder-noded.service")


def _log_size(state: cluster.SimState, node: str) -> int:
    host = state.host(node)
    if host.debian:  # its journal is read from the host's boot on (`_standing_down`)
        return 0
    log = host.path(NODED_LOG)
    return log.stat().st_size if log.exists() else 0


def _standing_down(state: cluster.SimState, node: str, since: int) -> bool:
    """Whether the node's noded, since that offset of its log (on a Debian host: since the
    host booted), heard it is offline: it runs and heartbeats, so setting it online now lets
    it hold its lease at once (set online while it still boots, maintd would find it failed
    and fence it again)."""
    host = state.host(node)
    if host.debian:
        text = host.run(["sh", "-c", NODED_JOURNAL], timeout=60, check=True).stdout
    else:
        with host.path(NODED_LOG).open("rb") as log:
            log.seek(since)
            text = log.read().decode(errors="replace")
    return any(phrase in text for phrase in STANDING_DOWN)


def restore_nodes(state: cluster.SimState, say: Say, booted: dict[str, int], *,
                  settled: bool = True, held: Callable[[], set[str]] = set) -> bool:
    """One pass of the operator's round: power on what is off, set online (and master
    candidate) what is offline and runs again; True once nothing was left to do and every
    lease is held. A node maintd fences meanwhile is found off on the next pass. `booted`:
    node -> its noded log's size when this round powered it on. `settled`: only once the job
    queue is idle (at the end); during the run (False) jobs go on meanwhile, and the nodes
    `held` names (the nemesis keeps them off or cut) are left alone."""
    if _incidents_open(state) or (settled and not _queue_idle(state)):
        return False
    off = [n.name for n in state.nodes
           if not state.host(n.name).running and n.name not in held()]
    for name in off:
        say(f"powering {name} on")
        booted[name] = _log_size(state, name)
        cluster.power(Path(state.directory), name, True)
    offline = [n["name"] for n in _cli(state, "node", "list", "--json") if n["offline"]]
    for name in offline:
        if name in off or name in held() or not state.host(name).running \
                or not _standing_down(state, name, booted.get(name, 0)):
            continue
        say(f"{name}: --offline no, --master-candidate yes")
        _cli(state, "node", "modify", name, "--offline", "no")
        _cli(state, "node", "modify", name, "--master-candidate", "yes")
    return not off and not offline and _leases_fresh(state)


def bring_back(state: cluster.SimState, say: Say, timeout: float = 600) -> list[Operation]:
    """Every node powered, online and a master candidate again, its lease held, maintd done
    with its incidents and the queue idle; then every admin-up instance started (the
    operator's starts: returned as operations of the history) and every running guest past
    its first acknowledged record (so that each disk is read after its guest wrote to it)."""
    booted: dict[str, int] = {}
    _until(lambda: restore_nodes(state, say, booted), timeout, "every node back with its lease")
    starts = []
    for inst in _cli(state, "instance", "list", "-o", "name,admin_state,oper_state", "--json"):
        if inst.get("admin_state") == "up" and not inst.get("oper_state"):
            say(f"starting {inst['name']}")
            began = time.time()
            done = cluster.run_cli(state, "instance", "start", inst["name"], timeout=timeout)
            starts.append(Operation("start", inst["name"], began, time.time(),
                                    status="success" if done.returncode == 0 else "error",
                                    detail="the operator's start after the faults",
                                    refused="" if done.returncode == 0 else
                                    (done.stderr or done.stdout).strip()[:200]))
    running = [i["name"] for i in _cli(state, "instance", "list", "-o", "name,oper_state",
                                       "--json") if i.get("oper_state")]
    _until(lambda: all(beats(state, name) for name in running), timeout,
           "an acknowledged record of every running instance")
    return starts


def beats(state: cluster.SimState, name: str) -> list[Beat]:
    found = []
    for node in state.nodes:
        log = state.host(node.name).path(f"/var/log/herder/instances/{name}.serial.log")
        if log.exists():
            found += [Beat(b.boot_id, b.seq, node.name) for b in
                      guest.parse_heartbeats(log.read_text(errors="replace")) if b.seq is not None]
    return found


def disk_records(state: cluster.SimState, path: str, primary: str) -> list[tuple[str, int]]:
    """The write sequence on the instance's first disk (a shared file, or a file on its node)."""
    host = state.host(primary)
    done = host.run(["sh", "-c", f"dd if={path} bs=1M count={SEQUENCE_MIB} 2>/dev/null | base64"],
                    timeout=120, check=True)
    return guest.read_sequence(base64.b64decode(done.stdout))


def running_on(state: cluster.SimState, name: str) -> list[str]:
    where = []
    for node in state.nodes:
        done = state.host(node.name).run(["virsh", "-q", "-c", "qemu:///system", "list",
                                          "--name"], timeout=60, check=True)
        if name in done.stdout.split():
            where.append(node.name)
    return where


def _files(host: SimHost, directory: str) -> list[str]:
    done = host.run(["find", directory, "-type", "f", "-not", "-path", "*/lost+found/*"],
                    timeout=60, check=True)
    return sorted(done.stdout.split())


def volumes(state: cluster.SimState) -> list[Volume]:
    """Every disk file on the shared storage and in every node's file storage."""
    master = state.host(state.nodes[0].name)
    found = [Volume("", path) for path in _files(master, SHARED_FILE_STORAGE)]
    for node in state.nodes:
        found += [Volume(node.name, path) for path in _files(state.host(node.name), FILE_STORAGE)]
    return found


def _owned(info: dict[str, Any]) -> list[Volume]:
    node = "" if info["disk_template"] == "sharedfile" else info["primary_node_name"]
    return [Volume(node, disk["logical_id"]["path"]) for disk in info["disks"]]


def final_state(state: cluster.SimState, job_ids: Iterable[int]) -> Final:
    with state.rapi(timeout=60) as api:
        jobs = {job_id: str(api.get_job_status(job_id).get("status", "missing"))
                for job_id in job_ids}
    # exit 1 when it found an error: its findings are on stdout all the same
    findings = json.loads(cluster.run_cli(state, "cluster", "verify", "--json",
                                          timeout=300).stdout)
    verify = [f"{f['object']}: {f['message']}" for f in findings
              if f["severity"] == "error" or f["code"] == "nodes-not-checked"]
    names = [i["name"] for i in _cli(state, "instance", "list", "-o", "name", "--json")]
    infos = _cli(state, "instance", "info", *names, "--json") if names else []
    guests, owned = [], []
    for info in infos:
        name, disk = info["name"], info["disks"][0]["logical_id"]["path"]
        guests.append(GuestState(name, beats(state, name),
                                 disk_records(state, disk, info["primary_node_name"]),
                                 running_on(state, name)))
        owned += _owned(info)
    return Final(jobs, verify, guests, volumes(state), owned)
