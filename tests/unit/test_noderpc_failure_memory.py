"""A failed node call frees its request at once (`core.noderpc.release`): issue 36 goal 6,
masterd on etcd at 50,000 instances grew by GBs in seconds pushing 3.9 MB ssconf bodies to
5,000 nodes that refused, each failure's body kept in a reference cycle (httpx's exception
frames) until a full cyclic collection. Real sockets: a port that refuses, and one that accepts
and never answers (a timeout). The cyclic GC is off while measuring: what reference counting
does not free is what the failures leave."""

from __future__ import annotations

import gc
import socket
import tracemalloc
from collections.abc import Iterator

import msgspec
import pytest

from herder.core import gcpause
from herder.core.noderpc import HttpNodeRpc, NoAnswerError, UnreachableError, call_many
from herder.core.reachability import Reachability, ReachabilityRpc
from herder.core.rpcdefs import file_calls
from tests.conftest import build_config

BODY = 1_000_000  # characters of ssconf in each call


@pytest.fixture
def refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed: connections are refused


@pytest.fixture
def silent_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)  # the kernel accepts; nobody ever answers
        yield int(sock.getsockname()[1])


@pytest.fixture
def no_gc() -> Iterator[None]:
    gc.collect()
    with gcpause.paused():
        yield


def retained_mib(port: int, calls: int, *, timeout: float, error: type[Exception]) -> float:
    """MiB still allocated after `calls` failed ssconf pushes through masterd's stack (the
    reachability record over the HTTP transport, `call_many`), their answers dropped."""
    config = build_config()
    node = next(iter(config.nodes.values()))
    nodes = [msgspec.structs.replace(node, uuid=f"uuid{n}", name=f"node{n}.example.com",
                                     primary_ip="127.0.0.1") for n in range(calls)]
    values = {"instance_list": "i" * BODY}
    transport = HttpNodeRpc(b"k" * 32, None, port=port, connect_timeout=2.0, timeout=timeout)
    rpc = ReachabilityRpc(transport, Reachability())
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        answers = call_many(rpc, nodes, lambda _node: file_calls.WriteSsconf(
            values=dict(values)), timeout=timeout, workers=8)
        assert all(isinstance(a, error) for a in answers.values()), answers
        del answers
        return (tracemalloc.get_traced_memory()[0] - before) / 2**20
    finally:
        tracemalloc.stop()
        transport.close()


def test_refused_calls_leave_no_request_behind(refused_port: int, no_gc: None) -> None:
    # before the fix: ~1.45 MiB a call (the body and its signed message), 29 MiB here
    assert retained_mib(refused_port, 20, timeout=5.0, error=UnreachableError) < 2.0


def test_timed_out_calls_leave_no_request_behind(silent_port: int, no_gc: None) -> None:
    assert retained_mib(silent_port, 8, timeout=0.3, error=NoAnswerError) < 2.0
