"""An in-memory cluster and incident source for maintd tests."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from herder.core import serve
from herder.core.cluster_secrets import self_signed_certificate
from herder.core.rapi_users import UsersFile
from herder.maintd.agents import CPU_LOAD, INST_STATUS, AgentReports, AgentRound
from herder.maintd.daemon import Maintd
from herder.maintd.rounds import Instance, Node
from herder.maintd.server import NotifySettings, make_app
from herder.maintd.sources import Observation


class FakeCluster:
    def __init__(self, n: int = 4, instances: Sequence[Instance] = ()) -> None:
        self._nodes = {f"node{i}": Node(name=f"node{i}", uuid=f"u{i}", ip=f"127.0.0.{i}",
                                        master=(i == 1)) for i in range(1, n + 1)}
        self._instances = {i.name: i for i in instances}
        self.submitted: list[tuple[int, list[dict[str, Any]]]] = []
        self.status: dict[int, str] = {}
        self.fail_ops: set[str] = set()  # OP_IDs whose jobs fail
        self.next_id = 100
        self.cluster_tags: list[str] = []
        self.group_tags: dict[str, list[str]] = {}
        self.settings: dict[str, Any] = {}  # GET /2/herder/maintenance
        self.actual: dict[str, str] = {}  # instance -> actual state on its primary's agent
        self.crashing: set[str] = set()  # instances that do not stay up when started
        self.starts: list[str] = []
        self.ends: dict[int, float] = {}  # job id -> when it finished
        self.other_jobs: list[Any] = []  # JobInfo of jobs not submitted by maintd

    def jobs(self) -> list[Any]:
        from herder.maintd.instances import JobInfo

        mine = [JobInfo.from_ops(jid, self.status[jid], self.ends.get(jid), ops)
                for jid, ops in self.submitted]
        return mine + list(self.other_jobs)

    def nodes(self) -> list[Node]:
        return list(self._nodes.values())

    def instances(self) -> list[Instance]:
        return list(self._instances.values())

    def submit(self, ops: list[dict[str, Any]]) -> int:
        self.next_id += 1
        self.submitted.append((self.next_id, ops))
        self.status[self.next_id] = "queued"
        return self.next_id

    def job_status(self, job_id: int) -> str | None:
        return self.status.get(job_id)

    def maintd_jobs(self) -> dict[int, set[str]]:
        return {jid: {r[1] for op in ops for r in op.get("reason", [])} for jid, ops in
                self.submitted}

    def policy_tags(self) -> tuple[list[str], dict[str, list[str]]]:
        return list(self.cluster_tags), dict(self.group_tags)

    def instance_tags(self, name: str) -> tuple[str, ...]:
        return self._instances[name].tags

    def node(self, name: str, **kw: Any) -> None:
        self._nodes[name] = dataclasses.replace(self._nodes[name], **kw)

    def run_all(self) -> None:
        """Finish every queued job, applying its effect (or failing it)."""
        for jid, ops in self.submitted:
            if self.status[jid] != "queued":
                continue
            if any(op["OP_ID"] in self.fail_ops for op in ops):
                for op in ops:  # the opcodes before the failing one ran
                    if op["OP_ID"] in self.fail_ops:
                        break
                    self.apply(op)
                self.status[jid] = "error"
                self.ends[jid] = time.time()
                continue
            for op in ops:
                self.apply(op)
            self.status[jid] = "success"
            self.ends[jid] = time.time()

    def apply(self, op: dict[str, Any]) -> None:
        kind = op["OP_ID"]
        if kind == "OP_NODE_SET_PARAMS":
            fields = {k: op[k] for k in ("drained", "offline") if k in op}
            self.node(op["node_name"], **fields)
        elif kind == "OP_TAGS_SET" and op["kind"] == "instance":
            inst = self._instances[op["name"]]
            self._instances[inst.name] = dataclasses.replace(inst, tags=inst.tags + tuple(
                op["tags"]))
        elif kind == "OP_TAGS_DEL" and op["kind"] == "instance":
            inst = self._instances[op["name"]]
            self._instances[inst.name] = dataclasses.replace(inst, tags=tuple(
                t for t in inst.tags if t not in op["tags"]))
        elif kind == "OP_TAGS_SET":
            n = self._nodes[op["name"]]
            self.node(op["name"], tags=n.tags + tuple(op["tags"]))
        elif kind in ("OP_INSTANCE_MIGRATE", "OP_INSTANCE_FAILOVER"):
            inst = self._instances[op["instance_name"]]
            if inst.snodes:
                new = dataclasses.replace(inst, pnode=inst.snodes[0], snodes=(inst.pnode,))
            elif op.get("target_node"):
                new = dataclasses.replace(inst, pnode=op["target_node"])
            else:  # the iallocator: the first other node that takes instances
                target = next(n.name for n in self._nodes.values() if n.name != inst.pnode
                              and not n.drained and not n.offline and not n.master)
                new = dataclasses.replace(inst, pnode=target)
            self._instances[inst.name] = new
        elif kind == "OP_INSTANCE_REPLACE_DISKS":
            inst = self._instances[op["instance_name"]]
            self._instances[inst.name] = dataclasses.replace(inst, snodes=(op["remote_node"],))
        elif kind == "OP_INSTANCE_REINSTALL":
            pass
        elif kind == "OP_INSTANCE_ACTIVATE_DISKS":
            inst = self._instances[op["instance_name"]]
            self._instances[inst.name] = dataclasses.replace(inst, disks_active=True)
        elif kind == "OP_INSTANCE_STARTUP":
            self.starts.append(op["instance_name"])
            if op["instance_name"] not in self.crashing:
                self.actual[op["instance_name"]] = "up"

    def maintenance(self) -> dict[str, Any]:
        return dict(self.settings)


class FakeAgents:
    """The nodes' agents, polled once per tick: inst-status reports from `FakeCluster.actual`
    (missing: up) and cpu-avg-load reports from `cpu_load` (a node missing there has none)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.cpu_load: dict[str, float] = {}  # node -> cpu_total of its cpu-avg-load report
        self.polls = 0

    async def poll(self, nodes: Sequence[Node]) -> AgentRound:
        self.polls += 1
        agents: dict[str, AgentReports] = {}
        for n in nodes:
            reports: dict[tuple[str, str], Any] = {INST_STATUS: {"data": {"instances": [
                {"name": i.name, "uuid": i.uuid, "admin_state": i.admin_state,
                 "actual_state": self.cluster.actual.get(i.name, "up"), "status": {}}
                for i in self.cluster.instances() if i.pnode == n.name]}}}
            if n.name in self.cpu_load:
                load = self.cpu_load[n.name]
                reports[CPU_LOAD] = {"name": "cpu-avg-load", "version": "B", "format_version": 1,
                                     "timestamp": 0, "category": None, "kind": 0,
                                     "data": {"cpu_number": 4, "cpus": [load / 4] * 4,
                                              "cpu_total": load}}
            agents[n.uuid] = AgentReports(n.uuid, reports)
        return AgentRound(agents)


class FakeSource:
    name = "fake"

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    async def poll(self, nodes: Sequence[Node], agents: AgentRound) -> dict[str, Observation]:
        return {n.uuid: Observation(n.uuid, self.data.get(n.uuid, {"status": "Ok"}))
                for n in nodes}


WRITER, READER = ("admin", "s3cret"), ("viewer", "l00k")  # of Server's users file


class Server:
    """maintd's HTTP app on a free port of 127.0.0.1, in a thread with its own loop. With
    `secrets` (a directory), also HTTPS (`https_port`) with a fresh certificate
    (`certificate`) and a users file with a write user (WRITER) and a read-only one (READER)."""

    def __init__(self, daemon: Maintd, secrets: Path | None = None) -> None:
        self.daemon = daemon
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0
        self.https_port = 0
        self.secrets = secrets
        self.certificate: Path | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        settings = tls = None
        if self.secrets is not None:
            self.certificate = self.secrets / "server.pem"
            self.certificate.write_bytes(self_signed_certificate("127.0.0.1"))
            users = self.secrets / "rapi_users"
            users.write_text(f"{WRITER[0]} {WRITER[1]} write\n{READER[0]} {READER[1]}\n")
            settings = NotifySettings(lambda: None, users=UsersFile(users))
            tls = serve.server_tls(self.certificate)
        self.runner = web.AppRunner(make_app(self.daemon, settings))
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = self.runner.addresses[0][1]
        if tls is not None and settings is not None:
            secure = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=tls)
            self.loop.run_until_complete(secure.start())
            self.https_port = settings.https_port = self.runner.addresses[1][1]
        self.ready.set()
        self.loop.run_forever()

    def call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def __enter__(self) -> Server:
        self.thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.call(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
