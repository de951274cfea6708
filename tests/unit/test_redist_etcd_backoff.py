"""masterd's ssconf push on etcd (`masterd.redist_etcd`) skips nodes in back-off in masterd's
reachability record, as the file backend's redistribution does (issue 36 goal 6: at 50,000
instances each push is a 3.9 MB signed body, and 5,000 nodes that refuse were each sent one
every RETRY seconds). A node's back-off ending, or any answer of it, makes it due again."""

from __future__ import annotations

from typing import Any

from herder.core import model
from herder.core.noderpc import RpcTransport, UnreachableError
from herder.core.reachability import Reachability, ReachabilityRpc
from herder.masterd import redist_etcd
from tests.conftest import build_config
from tests.rpcfakes import nothing_answer


class Nodes(RpcTransport):
    """Nodes that refuse connections (`down`) or accept the push; the calls each got."""

    def __init__(self, down: set[str]) -> None:
        self.down = down
        self.calls: list[str] = []

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        assert method == "write_ssconf"
        self.calls.append(node.name)
        if node.name in self.down:
            raise UnreachableError(f"node {node.name}: refused")
        return nothing_answer(method)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_nodes_in_backoff_are_not_pushed_to_until_it_ends_or_they_answer() -> None:
    config = build_config()
    names = sorted(n.name for n in config.nodes.values() if not n.offline)
    assert len(names) >= 2
    dead = names[0]
    clock = Clock()
    reachability = Reachability(base=30.0, cap=60.0, clock=clock)
    nodes = Nodes({dead})
    rpc = ReachabilityRpc(nodes, reachability)
    record = redist_etcd.SsconfRecord()

    failed = redist_etcd.push_ssconf(rpc, config, record, 0.0, reachability)
    assert list(failed) == [dead] and sorted(nodes.calls) == names
    # the record's own retry is due (RETRY passed), the reachability back-off (30 s) is not
    nodes.calls.clear()
    assert redist_etcd.push_ssconf(rpc, config, record, redist_etcd.RETRY + 1,
                                   reachability) == {}
    assert nodes.calls == []
    # without the reachability record the push would have tried it: what masterd did before
    assert [n.name for n in record.due(config, redist_etcd.RETRY + 1)] == [dead]
    clock.now += 30.0  # its back-off over: tried again, fails, in back-off again
    assert list(redist_etcd.push_ssconf(rpc, config, record, redist_etcd.RETRY * 5,
                                        reachability)) == [dead]
    assert nodes.calls == [dead]
    nodes.calls.clear()
    clock.now += 1.0
    reachability.seen(config.nodes[next(u for u, n in config.nodes.items()
                                        if n.name == dead)].uuid)  # it announced itself
    nodes.down.clear()
    assert redist_etcd.push_ssconf(rpc, config, record, redist_etcd.RETRY * 10,
                                   reachability) == {}
    assert nodes.calls == [dead]
    assert record.due(config, redist_etcd.RETRY * 10, reachability) == []
