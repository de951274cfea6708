"""masterd's record of unreachable nodes (`core.reachability`): the back-off's growth and
cap, what ends it (an answer to any call, the node announcing itself), the order of outcomes,
and threads reporting at once. A fake clock drives the schedule."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from herder.core import model
from herder.core.errors import RpcError
from herder.core.noderpc import NoAnswerError, RpcTransport, UnreachableError
from herder.core.reachability import Reachability, ReachabilityRpc, backoff
from herder.core.rpcdefs import node_calls
from tests.conftest import build_config
from tests.rpcfakes import nothing_answer


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def record(clock: Clock) -> Reachability:
    return Reachability(base=1.0, cap=60.0, clock=clock, wall=lambda: 1_790_000_000.0)


def fail_retry(record: Reachability, clock: Clock, uuid: str = "n1") -> float:
    """Wait out the back-off, fail the retry; the new back-off."""
    down = record.down(uuid)
    assert down is not None
    clock.now = down.retry_at
    record.failed(uuid, "refused")
    after = record.down(uuid)
    assert after is not None
    return after.retry_at - clock.now


def test_backoff_doubles_from_one_second_up_to_its_cap() -> None:
    assert [backoff(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff(10_000) == 60  # no overflow after a very long outage


def test_a_failed_node_is_avoided_until_its_backoff_has_passed(record, clock) -> None:
    assert record.avoid("n1") is None and record.down("n1") is None
    record.failed("n1", "connection refused")
    down = record.avoid("n1")
    assert down is not None and down.failures == 1 and down.retry_at == clock.now + 1
    clock.now += 0.99
    assert record.avoid("n1") is not None
    clock.now += 0.01
    # due again, but still known down (readers are not made to wait for it)
    assert record.avoid("n1") is None and record.down("n1") is not None
    assert [fail_retry(record, clock) for _ in range(8)] == [2, 4, 8, 16, 32, 60, 60, 60]
    assert record.down("n1").failures == 9
    assert record.avoid("n2") is None  # per node


def test_failures_within_the_backoff_do_not_grow_it(record, clock) -> None:
    record.failed("n1", "refused")
    clock.now += 0.5
    record.failed("n1", "timed out")  # a call under way together with the first
    down = record.down("n1")
    assert down.failures == 1 and down.retry_at == 501.0 and down.error == "timed out"


def test_an_answer_ends_the_streak_at_once(record, clock) -> None:
    record.failed("n1", "refused")
    for _ in range(5):
        fail_retry(record, clock)
    assert record.avoid("n1") is not None
    record.answered("n1")
    assert record.down("n1") is None and record.avoid("n1") is None
    record.failed("n1", "refused")  # a new outage starts from the shortest back-off
    assert record.down("n1").failures == 1 and record.down("n1").retry_at == clock.now + 1


def test_a_node_announcing_itself_is_seen_again(record, clock) -> None:
    record.failed("n1", "refused")
    fail_retry(record, clock)
    seen_at = clock.now
    record.seen("n1")
    assert record.avoid("n1") is None and record.down("n1") is None
    assert record.answered_since("n1", seen_at) and not record.answered_since("n1", seen_at + 1)


def test_outcomes_count_in_the_order_their_calls_started(record, clock) -> None:
    record.answered("n1", started=510.0)
    record.failed("n1", "refused", started=505.0)  # older news than the answer
    assert record.down("n1") is None
    record.failed("n1", "refused", started=520.0)
    record.answered("n1", started=515.0)  # started before the failure on record
    assert record.down("n1") is not None
    record.answered("n1", started=521.0)
    assert record.down("n1") is None


def test_describe_says_since_when_and_the_next_try(record, clock) -> None:
    record.failed("n1", "cannot reach its node daemon at 10.0.0.1:1811")
    text = record.down("n1").describe(clock.now + 0.2)
    assert text.startswith("node unreachable (since 2026-09-21 ") and "1 failed try" in text
    assert "next in 1 s" in text and text.endswith("at 10.0.0.1:1811")


def test_threads_reporting_at_once_grow_the_backoff_once_per_retry(record, clock) -> None:
    record.failed("n1", "refused")
    clock.now = 501.0  # the retry is due: 16 callers try and fail together

    def report(index: int) -> None:
        for _ in range(200):
            record.failed("n1", f"refused {index}")
            record.avoid("n1")

    threads = [threading.Thread(target=report, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    down = record.down("n1")
    assert down.failures == 2 and down.retry_at == 503.0


class Transport(RpcTransport):
    """Each node: answers, answers with an error, or gives none."""

    def __init__(self) -> None:
        self.behaviour: dict[str, str] = {}

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        what = self.behaviour.get(node.name, "answer")
        if what == "refused":
            raise UnreachableError(f"node {node.name}: connection refused")
        if what == "timeout":
            raise NoAnswerError(f"node {node.name}: timed out")
        if what == "error":
            raise RpcError(f"node {node.name}: {method} failed: no such instance")
        answer = nothing_answer(method)
        assert isinstance(answer, dict)
        return {**answer, "node": node.name}


def test_the_transport_reports_every_calls_outcome(record) -> None:
    config = build_config(nodes=3)
    node1, node2, node3 = (config.find_node(f"node{i}") for i in (1, 2, 3))
    transport = Transport()
    transport.behaviour = {node2.name: "refused", node3.name: "timeout"}
    rpc = ReachabilityRpc(transport, record)
    assert rpc.call(node1, node_calls.Ping()).node == node1.name
    for node in (node2, node3):
        with pytest.raises(NoAnswerError):
            rpc.call(node, node_calls.Ping())
    assert record.down(node1.uuid) is None
    assert record.down(node2.uuid).error.endswith("connection refused")
    assert record.down(node3.uuid).error.endswith("timed out")
    transport.behaviour[node3.name] = "error"  # the daemon answered (with an error): up
    with pytest.raises(RpcError):
        rpc.call(node3, node_calls.MasterEpoch())
    assert record.down(node3.uuid) is None
