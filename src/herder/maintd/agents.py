"""One poll of every node's mond per maintd tick, shared by everything that needs the agents:
the self-diagnose source (`sources`), the watcher's instance states (`watcher`) and balancing's
CPU load (`balance`, hbal --mond).

One `GET http://<node ip>:<port>/1/report/all?verbose=1&only=...` per node (`only`: herder
mond's selection of the reports used), all nodes at once (drained and offline ones too: an
evacuated node is offline but still observed), over httpx.
The answer is split into reports by (category, name) as mond's report paths name them
(`default` for a report without a category). Each user picks its report: `AgentRound.report`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from herder.core import ports, untrusted
from herder.maintd.rounds import Node

log = logging.getLogger("herder.maintd.agents")

DEFAULT_CATEGORY = "default"  # mond's path category of reports without one
DIAGNOSE = ("node", "diagnose")
INST_STATUS = ("instance", "inst-status")
CPU_LOAD = (DEFAULT_CATEGORY, "cpu-avg-load")
USED = (DIAGNOSE, INST_STATUS, CPU_LOAD)  # the reports maintd's users take
# herder mond sends only these; an agent without `only` (Ganeti's) sends all, split the same
REPORTS_PATH = f"/1/report/all?verbose=1&only={','.join(f'{c}/{n}' for c, n in USED)}"

ReportKey = tuple[str, str]  # (category, name)


@dataclass(frozen=True)
class AgentReports:
    """What one node's agent answered this tick: its reports, or why there are none."""

    node: str  # node UUID
    reports: Mapping[ReportKey, Any] = field(default_factory=dict)
    error: str = ""


@dataclass
class AgentRound:
    """Every polled node's `AgentReports`, by node UUID."""

    agents: dict[str, AgentReports] = field(default_factory=dict)

    def report(self, node: Node, key: ReportKey) -> tuple[Any, str]:
        """(the report, "") or (None, why not) for one node."""
        answer = self.agents.get(node.uuid)
        if answer is None:
            return None, "not polled"
        if answer.error:
            return None, answer.error
        found = answer.reports.get(key)
        if found is None:
            return None, f"mond has no {key[0]}/{key[1]} report"
        return found, ""

    def by_name(self, nodes: Sequence[Node], key: ReportKey) -> dict[str, Any]:
        """Node name -> its report `key`, for the nodes of `nodes` whose agent has one."""
        out = {}
        for node in nodes:
            found, _ = self.report(node, key)
            if found is not None:
                out[node.name] = found
        return out


def split_reports(body: Any) -> dict[ReportKey, Any]:
    """`/1/report/all`'s list -> reports by (category, name); entries without a name are left
    out (the first of two with the same key wins, as in mond)."""
    out: dict[ReportKey, Any] = {}
    if not isinstance(body, list):
        raise ValueError("the answer is not a list of reports")
    for report in body:
        if isinstance(report, Mapping) and isinstance(report.get("name"), str):
            category = report.get("category") or DEFAULT_CATEGORY
            out.setdefault((str(category), report["name"]), report)
    return out


class AgentPoller:
    """Polls every node's mond once (`poll`), over one kept-alive httpx client per agent: one
    client for all would keep every connection in one pool, whose bookkeeping grows with the
    square of the nodes (httpcore); one client per agent and poll would connect every time.

    At most `concurrency` agents are asked at once (1,000 nodes: no burst of 1,000 connections
    and parsers), and each answer, retry included, must arrive within `timeout` seconds: a
    dead or stalled agent costs its slot that long and nothing more."""

    def __init__(self, port: int = ports.MOND, timeout: float = 5.0,
                 address: Callable[[Node], str] | None = None, concurrency: int = 64) -> None:
        self.port = port
        self.timeout = timeout
        self.concurrency = concurrency
        self.address = address or (lambda n: n.ip or n.name)
        self._clients: dict[str, httpx.AsyncClient] = {}  # agent's base URL -> its client
        self._loop: asyncio.AbstractEventLoop | None = None
        # agents speak plain HTTP: an empty context spares each client loading the CA bundle
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)

    def base_url(self, node: Node) -> str:
        host = self.address(node)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def url(self, node: Node) -> str:
        return self.base_url(node) + REPORTS_PATH

    def _client(self, base: str) -> httpx.AsyncClient:
        client = self._clients.get(base)
        if client is None:  # no proxy from the environment: nodes talk to each other directly
            client = httpx.AsyncClient(base_url=base, timeout=self.timeout, trust_env=False,
                                       verify=self._tls)
            self._clients[base] = client
        return client

    async def _one(self, node: Node, limit: asyncio.Semaphore) -> AgentReports:
        async with limit:
            try:
                return await asyncio.wait_for(self._ask(node), self.timeout)
            except TimeoutError:
                log.info("no reports from %s: no answer within %g s", node.name, self.timeout)
                return AgentReports(node.uuid, error=f"unreachable: no answer within "
                                                     f"{self.timeout:g} s")

    async def _ask(self, node: Node) -> AgentReports:
        client = self._client(self.base_url(node))
        try:
            try:
                resp = await client.get(REPORTS_PATH)
            except httpx.RemoteProtocolError:  # the agent closed the kept-alive connection
                resp = await client.get(REPORTS_PATH)
            if resp.status_code != 200:
                return AgentReports(node.uuid, error=f"mond answered {resp.status_code}: "
                                                     f"{resp.text[:200]}")
            return AgentReports(node.uuid, split_reports(untrusted.loads(resp.content)))
        except (httpx.HTTPError, ValueError, OSError) as err:
            log.info("no reports from %s: %s", node.name, err)
            return AgentReports(node.uuid, error=f"unreachable: {type(err).__name__} {err}")

    async def poll(self, nodes: Sequence[Node]) -> AgentRound:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that opened them
            self._clients = {}
            self._loop = loop
        wanted = {self.base_url(n) for n in nodes}
        for base in set(self._clients) - wanted:  # nodes that left the cluster
            await self._clients.pop(base).aclose()
        limit = asyncio.Semaphore(self.concurrency)
        results = await asyncio.gather(*(self._one(n, limit) for n in nodes))
        return AgentRound({r.node: r for r in results})

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.aclose()
