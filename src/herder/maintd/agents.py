"""One poll of every node's mond per maintd tick, shared by everything that needs the agents:
the self-diagnose source (`sources`), the watcher's instance states (`watcher`) and balancing's
CPU load (`balance`, hbal --mond).

One `GET http://<node ip>:<port>/1/report/all?verbose=1&only=...` per node (`only`: herder
mond's selection of the reports used), all nodes at once (drained and offline ones too: an
evacuated node is offline but still observed), over aiohttp; an agent that does not answer
is left in back-off (`AgentPoller`).
The answer is split into reports by (category, name) as mond's report paths name them
(`default` for a report without a category). Each user picks its report: `AgentRound.report`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import yarl

from herder.core import ports, untrusted
from herder.core.reachability import Down, Reachability
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
KEEPALIVE = 60.0  # seconds an idle connection to an agent is kept (mond's server keeps 75)


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
    """Polls every node's mond once (`poll`) over one aiohttp session per event loop, its
    connections kept alive per agent (a round of 1,000 agents: ~0.3 s of CPU, where a kept
    httpx client per agent took 2.1-2.3 s).

    At most `concurrency` agents are asked at once (1,000 nodes: no burst of 1,000 connections
    and parsers), and each answer, retry included, must arrive within `timeout` seconds.
    An agent that gave no answer is in back-off (`core.reachability`, as masterd's record of
    its node daemons): no round asks or waits for it again until it answers; once its back-off
    has passed it is asked in the background (a dead agent costs one round its timeout, once,
    and then a background try per back-off: 1 s doubling to 60 s), and its reports in the
    round say since when it is unreachable and how old its last reports are."""

    def __init__(self, port: int = ports.MOND, timeout: float = 5.0,
                 address: Callable[[Node], str] | None = None, concurrency: int = 64,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.port = port
        self.timeout = timeout
        self.concurrency = concurrency
        self.address = address or (lambda n: n.ip or n.name)
        self.reachability = Reachability(clock=clock)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last: dict[str, float] = {}  # node UUID -> when its agent last answered
        self._urls: dict[str, tuple[str, yarl.URL]] = {}  # node UUID -> (address, its URL)
        self._retries: dict[str, asyncio.Task[AgentReports]] = {}

    def base_url(self, node: Node) -> str:
        host = self.address(node)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def url(self, node: Node) -> str:
        return self.base_url(node) + REPORTS_PATH

    async def _one(self, node: Node, limit: asyncio.Semaphore) -> AgentReports:
        async with limit:
            started = self.reachability.clock()
            try:
                return await asyncio.wait_for(self._ask(node, started), self.timeout)
            except TimeoutError:
                log.info("no reports from %s: no answer within %g s", node.name, self.timeout)
                why = f"no answer within {self.timeout:g} s"
                self.reachability.failed(node.uuid, why, started)
                return AgentReports(node.uuid, error=f"unreachable: {why}")

    async def _ask(self, node: Node, started: float) -> AgentReports:
        assert self._session is not None
        url = self._urls.get(node.uuid)
        if url is None or url[0] != self.address(node):  # parsed once per agent address
            url = self._urls[node.uuid] = (self.address(node),
                                           yarl.URL(self.url(node), encoded=True))
        try:
            try:
                response = await self._session.get(url[1])
            except aiohttp.ServerDisconnectedError:  # the agent closed the kept connection
                response = await self._session.get(url[1])
            async with response:
                body = await response.read()
        except (aiohttp.ClientError, OSError) as err:
            log.info("no reports from %s: %s", node.name, err)
            self.reachability.failed(node.uuid, f"{type(err).__name__} {err}", started)
            return AgentReports(node.uuid, error=f"unreachable: {type(err).__name__} {err}")
        self.reachability.answered(node.uuid, started)  # an error answer too: it was reached
        if response.status != 200:
            text = body.decode(errors="replace")[:200]
            return AgentReports(node.uuid, error=f"mond answered {response.status}: {text}")
        try:
            reports = split_reports(untrusted.decode(body, what="mond's reports"))
        except ValueError as err:
            log.info("no reports from %s: %s", node.name, err)
            return AgentReports(node.uuid, error=f"unreachable: {type(err).__name__} {err}")
        self._last[node.uuid] = self.reachability.clock()
        return AgentReports(node.uuid, reports)

    def _resting(self, node: Node, down: Down) -> AgentReports:
        """An agent with a failure streak: not asked in the round; why, and its reports' age."""
        now = self.reachability.clock()
        last = self._last.get(node.uuid)
        age = ("no reports from it yet" if last is None
               else f"its last reports are {now - last:.0f} s old")
        return AgentReports(node.uuid, error=f"unreachable: {down.describe(now, 'mond')}; {age}")

    def _retry_due(self, node: Node, limit: asyncio.Semaphore) -> None:
        """Ask an agent in the background once its back-off has passed (no round waits)."""
        if node.uuid in self._retries or self.reachability.avoid(node.uuid) is not None:
            return
        task = asyncio.ensure_future(self._one(node, limit))
        self._retries[node.uuid] = task
        task.add_done_callback(lambda _: self._retries.pop(node.uuid, None))

    async def poll(self, nodes: Sequence[Node]) -> AgentRound:
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._session is None:
            # connections belong to the loop that opened them
            self._retries = {}
            self._loop = loop
            self._session = aiohttp.ClientSession(
                # kept connections outlive the pause between rounds (`--poll-interval`)
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=1,
                                               keepalive_timeout=KEEPALIVE),
                trust_env=False)  # no proxy from the environment: nodes talk directly
        limit = asyncio.Semaphore(self.concurrency)
        asked: list[Node] = []
        resting: list[AgentReports] = []
        for node in nodes:
            down = self.reachability.down(node.uuid)
            if down is None:
                asked.append(node)
            else:
                resting.append(self._resting(node, down))
                self._retry_due(node, limit)
        results = await asyncio.gather(*(self._one(n, limit) for n in asked))
        current = {n.uuid for n in nodes}
        for uuid in self._last.keys() - current:  # left the cluster
            del self._last[uuid]
        for uuid in self._urls.keys() - current:
            del self._urls[uuid]
        return AgentRound({r.node: r for r in (*results, *resting)})

    async def close(self) -> None:
        retries, self._retries = self._retries, {}
        for task in retries.values():
            task.cancel()
        session, self._session = self._session, None
        if session is not None:
            await session.close()
