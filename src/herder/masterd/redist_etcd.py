"""Redistribution on the etcd backend (docs/ha.md "The etcd backend"): the config and the job
queue live in etcd, replicated by it, so masterd pushes the nodes' ssconf only (the file
backend's `redist.watch` pushes it with the config and queue copies): at its takeover, so the
nodes learn the new master and its master IP (where their liveness heartbeats go,
`noded.fence`), and after every config change that moves one of its values (not the config
serial alone, compat D30), to every online node (the master too); a node whose push failed is
tried again `RETRY` seconds later or at the next change of the values. A node in back-off in
masterd's reachability record (`core.reachability`, shared with the live cache) is not tried
until its back-off ends or it is heard from, as the file backend's redistribution does: each
push signs and sends the whole ssconf (3.9 MB at 50,000 instances), and 5,000 nodes that refuse
were sent one every `RETRY` seconds (issue 36 goal 6, docs/scale.md "Goal 6, round 5")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

from herder.core import model
from herder.core.errors import HerderError
from herder.core.noderpc import NodeRpc, call_many
from herder.core.reachability import Reachability
from herder.core.rpcdefs import file_calls
from herder.core.store import ConfigStore
from herder.masterd.redist import PlanMemo, ssconf_values, values_digest

log = logging.getLogger("herder.masterd")
RETRY = 10.0  # seconds before a failed node is pushed to again (unless the config changes)


@dataclass
class SsconfRecord:
    """Which ssconf values each node holds (a digest, but of the config serial: a change
    that moves no other value is pushed to no node, as with the file backend, compat D30),
    and when a failed one is due again."""

    retry: float = RETRY
    sent: dict[str, str] = field(default_factory=dict)  # node UUID -> values' digest
    retry_at: dict[str, tuple[str, float]] = field(default_factory=dict)  # -> (digest, when)
    # the values over the tables, kept from one config to the next (`redist.PlanMemo`)
    memo: PlanMemo = field(default_factory=PlanMemo)
    last: tuple[int, dict[str, str], str] | None = None  # (serial, values, digest)

    def values(self, config: model.ConfigData) -> tuple[dict[str, str], str]:
        """The config's ssconf values and their digest (made once per config serial)."""
        if self.last is None or self.last[0] != config.serial_no:
            values = ssconf_values(config, memo=self.memo)
            self.last = (config.serial_no, values, values_digest(values))
        return self.last[1], self.last[2]

    def due(self, config: model.ConfigData, now: float,
            reachability: Reachability | None = None) -> list[model.Node]:
        """The online nodes whose ssconf values differ from the config's, but those whose
        push of these very values failed less than `retry` seconds ago and those in back-off
        in `reachability` (tried once it ends: they are not recorded as sent)."""
        _, digest = self.values(config)
        due = []
        for node in sorted(config.nodes.values(), key=lambda n: n.name):
            if node.offline or self.sent.get(node.uuid) == digest:
                continue
            if reachability is not None and reachability.avoid(node.uuid) is not None:
                continue
            failed = self.retry_at.get(node.uuid)
            if failed is not None and failed[0] == digest and now < failed[1]:
                continue
            due.append(node)
        return due

    def record(self, uuid: str, digest: str, ok: bool, now: float) -> None:
        if ok:
            self.sent[uuid] = digest
            self.retry_at.pop(uuid, None)
        else:
            self.retry_at[uuid] = (digest, now + self.retry)


def push_ssconf(rpc: NodeRpc, config: model.ConfigData, record: SsconfRecord,
                now: float, reachability: Reachability | None = None) -> dict[str, str]:
    """Push the config's ssconf to the nodes `record` says are due (none in back-off in
    `reachability`, the record `rpc` reports to), all at once; node name -> the error of
    those that failed."""
    nodes = record.due(config, now, reachability)
    if not nodes:
        return {}
    values, digest = record.values(config)
    answers = call_many(rpc, nodes, lambda node: file_calls.WriteSsconf(values=dict(values)))
    failed = {}
    for node in nodes:
        answer = answers[node.uuid]
        ok = not isinstance(answer, HerderError)
        record.record(node.uuid, digest, ok, now)
        if not ok:
            failed[node.name] = str(answer)
    return failed


class Pusher(Protocol):
    """What the watch asks of masterd (`MasterDaemon`)."""

    store: ConfigStore
    deposed: str | None


async def watch(daemon: Pusher, rpc: NodeRpc, stop: asyncio.Event, interval: float,
                reachability: Reachability | None = None) -> None:
    """masterd's trigger on etcd: every `interval` seconds, the due nodes' ssconf (nodes in
    back-off in `reachability` skipped). Errors are logged, never raised."""
    record = SsconfRecord()
    while not stop.is_set():
        if daemon.deposed is None:
            try:
                config = await asyncio.to_thread(daemon.store.snapshot)
                failed = await asyncio.to_thread(push_ssconf, rpc, config, record,
                                                 time.monotonic(), reachability)
                if failed:
                    log.warning("ssconf of config serial %d not pushed to %s",
                                config.serial_no,
                                "; ".join(f"{n}: {e}" for n, e in sorted(failed.items())[:10]))
            except Exception as err:  # never let the trigger stop masterd
                log.warning("ssconf redistribution failed: %s", err)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
