"""maintd on a real Ganeti cluster: the `Cluster` interface over Ganeti 3.0's RAPI.

herder's masterd takes whole jobs of opcodes (`POST /2/herder/jobs`); Ganeti's RAPI has one
route per operation and one opcode per job. So each opcode of a maintd job becomes its RAPI
call (below), a job of several opcodes runs them one after another — the next only when the
previous job succeeded — and maintd tracks the last job submitted (a failed step's job when one
fails). Every write carries Ganeti's `reason` query parameter `gnt:daemon:maintd <event>` (plus
the instmon event when there is one), which Ganeti records as `["gnt:user", text, ts]` in the
job's reason trail; `maintd_jobs()` reads it back to adopt jobs after a crash.

| maintd opcode | Ganeti RAPI |
|---|---|
| OP_NODE_SET_PARAMS | POST /2/nodes/N/modify |
| OP_INSTANCE_MIGRATE | PUT /2/instances/I/migrate |
| OP_INSTANCE_FAILOVER | PUT /2/instances/I/failover |
| OP_INSTANCE_REPLACE_DISKS | POST /2/instances/I/replace-disks |
| OP_INSTANCE_STARTUP / _SHUTDOWN | PUT /2/instances/I/startup, /shutdown |
| OP_INSTANCE_ACTIVATE_DISKS | PUT /2/instances/I/activate-disks |
| OP_INSTANCE_REINSTALL (harep) | POST /2/instances/I/reinstall |
| OP_TAGS_SET / OP_TAGS_DEL | PUT / DELETE /2/{nodes,instances,groups}/N/tags, /2/tags |
| OP_REPAIR_COMMAND | herder mond's signed `POST /1/repair` on the node (no Ganeti opcode) |

A repair command has no Ganeti job: it gets a local job id (negative) whose status this adapter
keeps. Ganeti refuses some operations when the job is submitted (a 4xx answer): that raises, and
maintd fails the incident. `calls` counts RAPI requests (the benchmark reports it per round).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from herder.core import reason
from herder.maintd.daemon import RapiCluster
from herder.maintd.instances import JobInfo
from herder.maintd.rounds import Node

log = logging.getLogger("herder.maintd.ganeti")

REASON_PREFIX = f"{reason.MAINTD} "  # gnt:daemon:maintd <event>
FINAL = ("success", "error", "canceled")
UNSUPPORTED = "unsupported"


class UnsupportedOp(Exception):
    """An opcode this adapter cannot express through Ganeti's RAPI."""


def reason_text(op: Mapping[str, Any]) -> str:
    """The `reason` query text for an opcode: maintd's event, then instmon's when present."""
    parts: list[str] = []
    for entry in op.get("reason") or []:
        if isinstance(entry, list | tuple) and len(entry) >= 2:
            if entry[0] == reason.MAINTD:
                parts.insert(0, f"{reason.MAINTD} {entry[1]}")
            elif entry[0] == reason.INSTMON:
                parts.append(f"{reason.INSTMON} {entry[1]}")
    return "; ".join(parts)


def events_of(job: Mapping[str, Any]) -> set[str]:
    """maintd events named in a Ganeti job's reason trails (herder's own entries too)."""
    found = set()
    for op in job.get("ops") or []:
        for entry in (op or {}).get("reason") or []:
            if not isinstance(entry, list | tuple) or len(entry) < 2:
                continue
            if entry[0] == reason.MAINTD:
                found.add(str(entry[1]))
            elif isinstance(entry[1], str) and entry[1].startswith(REASON_PREFIX):
                found.add(entry[1][len(REASON_PREFIX):].split(";")[0].split()[0])
    return found


def route(op: Mapping[str, Any]) -> tuple[str, str, Any, Any]:
    """(method, path, query, body) of the RAPI call for one opcode (UnsupportedOp if none)."""
    from herder.core.rapi import _seg

    kind = op.get("OP_ID")
    fields = {k: v for k, v in op.items() if k not in ("OP_ID", "reason", "comment",
                                                        "depends", "priority", "debug_level")}
    inst = fields.pop("instance_name", None)
    if kind == "OP_NODE_SET_PARAMS":
        node = fields.pop("node_name")
        return "POST", f"/2/nodes/{_seg(node)}/modify", None, fields
    if kind in ("OP_INSTANCE_MIGRATE", "OP_INSTANCE_FAILOVER"):
        verb = "migrate" if kind == "OP_INSTANCE_MIGRATE" else "failover"
        body = {k: v for k, v in fields.items() if v is not None}
        return "PUT", f"/2/instances/{_seg(inst)}/{verb}", None, body
    if kind == "OP_INSTANCE_REPLACE_DISKS":
        body = {k: v for k, v in fields.items() if v is not None}
        return "POST", f"/2/instances/{_seg(inst)}/replace-disks", None, body
    if kind == "OP_INSTANCE_STARTUP":
        force = {"force": 1} if fields.get("force") else None
        return "PUT", f"/2/instances/{_seg(inst)}/startup", force, None
    if kind == "OP_INSTANCE_SHUTDOWN":
        return "PUT", f"/2/instances/{_seg(inst)}/shutdown", None, None
    if kind == "OP_INSTANCE_REINSTALL":  # harep's "reinstall" (RAPI body version 1)
        body = {"__version__": 1, **{k: v for k, v in fields.items() if v is not None}}
        return "POST", f"/2/instances/{_seg(inst)}/reinstall", None, body
    if kind == "OP_INSTANCE_ACTIVATE_DISKS":
        return "PUT", f"/2/instances/{_seg(inst)}/activate-disks", None, None
    if kind in ("OP_TAGS_SET", "OP_TAGS_DEL"):
        method = "PUT" if kind == "OP_TAGS_SET" else "DELETE"
        target = fields.get("kind")
        query = [("tag", str(t)) for t in fields.get("tags") or []]  # repeated, as Ganeti
        if target == "cluster":
            return method, "/2/tags", query, None
        plural = {"node": "nodes", "instance": "instances", "nodegroup": "groups",
                  "group": "groups"}.get(str(target))
        if plural is None:
            raise UnsupportedOp(f"tags of kind {target!r}")
        return method, f"/2/{plural}/{_seg(str(fields.get('name')))}/tags", query, None
    raise UnsupportedOp(f"{kind} has no Ganeti RAPI route")


class GanetiCluster(RapiCluster):
    """`Cluster` (see `herder.maintd.daemon`) for a Ganeti cluster, through its RAPI: reads
    as herder's `RapiCluster` does (the same RAPI v2 routes), writes one route per opcode."""

    # Ganeti checks every operation itself: maintd submits a migration of, say, a file-based
    # instance, Ganeti refuses it, and the incident fails visibly (tagged repairfailed).
    delegates_checks = True

    def __init__(self, client: Any, repair: Callable[[Node, Mapping[str, Any]], Any] | None
                 = None, wait_timeout: float = 900.0) -> None:
        super().__init__(client)
        self.repair = repair  # runs OP_REPAIR_COMMAND on the node (herder mond's route)
        self.wait_timeout = wait_timeout
        self.calls = 0
        self._local: dict[int, str] = {}  # local (negative) job id -> status
        self._ids = itertools.count(-1, -1)
        self._lock = threading.Lock()
        original = client.request

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls += 1
            return original(*args, **kwargs)

        client.request = counted

    # --- reading (nodes, instances, node_figures, policy_tags, job_status: as herder's) ------

    def maintenance(self) -> dict[str, Any]:
        return {}  # Ganeti's config has no maintenance section: maintd's flags decide

    def job_status(self, job_id: int) -> str | None:
        if job_id < 0:
            return self._local.get(job_id)
        return super().job_status(job_id)

    def _jobs(self) -> list[dict[str, Any]]:
        return list(self.client.get_jobs(bulk=True))

    def maintd_jobs(self) -> dict[int, set[str]]:
        return {int(j["id"]): ev for j in self._jobs() if (ev := events_of(j))}

    def jobs(self) -> list[JobInfo]:
        return [JobInfo.from_rapi(j) for j in self._jobs()]

    # --- writing -------------------------------------------------------------------------------

    def submit(self, ops: list[dict[str, Any]]) -> int:
        """Run a maintd job's opcodes as Ganeti jobs, in order; the id to follow."""
        last: int | None = None
        for index, op in enumerate(ops):
            if op.get("OP_ID") == "OP_REPAIR_COMMAND":
                last = self._repair(op)
                status = self._local[last]
            else:
                method, path, query, body = route(op)
                query = list((query.items() if isinstance(query, Mapping) else query) or [])
                text = reason_text(op)
                if text:
                    query.append(("reason", text))
                last = int(self.client.request(method, path, query, body))
                if index == len(ops) - 1:
                    break
                status = str(self.client.wait_for_job(last, timeout=self.wait_timeout)
                             .get("status"))
            if status != "success":
                log.warning("step %d (%s) of a maintd job ended %s: the rest is not run",
                            index + 1, op.get("OP_ID"), status)
                break
        if last is None:
            raise UnsupportedOp("an empty job")
        return last

    def _repair(self, op: Mapping[str, Any]) -> int:
        job_id = next(self._ids)
        if self.repair is None:
            log.error("no repair route configured: %s not run", op.get("command"))
            self._local[job_id] = "error"
            return job_id
        node = next((n for n in self.nodes() if n.name == op.get("node_name")), None)
        if node is None:
            self._local[job_id] = "error"
            return job_id
        try:
            answer = self.repair(node, op)
        except Exception as err:
            log.error("repair %s on %s failed: %s", op.get("command"), node.name, err)
            self._local[job_id] = "error"
            return job_id
        ok = isinstance(answer, Mapping) and answer.get("exit_code") == 0 \
            and not answer.get("timed_out")
        self._local[job_id] = "success" if ok else "error"
        log.info("repair %s on %s: %s", op.get("command"), node.name,
                 answer if not ok else "exit 0")
        return job_id


def master_name(client: Any) -> str | None:
    """The master node according to Ganeti's RAPI (`/2/info`)."""
    info = client.get_info()
    return str(info.get("master")) if isinstance(info, Mapping) and info.get("master") else None


def repair_via_mond(key_loader: Callable[[], bytes | None], port: int,
                    address: Callable[[Node], str] | None = None
                    ) -> Callable[[Node, Mapping[str, Any]], Any]:
    """OP_REPAIR_COMMAND through herder mond's signed `POST /1/repair` on the node."""
    from herder.maintd.repair_client import run_repair

    def run(node: Node, op: Mapping[str, Any]) -> Any:
        key = key_loader()
        if key is None:
            raise RuntimeError("no cluster HMAC key to sign the repair request")
        host = (address or (lambda n: n.ip or n.name))(node)
        if ":" in host:
            host = f"[{host}]"
        event = next((str(e[1]) for e in op.get("reason") or []
                      if isinstance(e, list | tuple) and e and e[0] == reason.MAINTD), "")
        return run_repair(f"http://{host}:{port}", key, str(op.get("command")),
                          op.get("input"), event, node=node.name)

    return run


def split_steps(ops: Sequence[Mapping[str, Any]]) -> list[str]:
    """The RAPI routes a job's opcodes take (for the docs and tests)."""
    out = []
    for op in ops:
        if op.get("OP_ID") == "OP_REPAIR_COMMAND":
            out.append("mond POST /1/repair")
        else:
            method, path, _query, _body = route(op)
            out.append(f"{method} {path}")
    return out
