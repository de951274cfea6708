"""The master-candidate pool with Ganeti's semantics (compat row 56): added and returning nodes
promote themselves while the pool is short; a demotion that would leave it short is refused
with Ganeti's message unless `auto_promote` lets other nodes fill it; removing a node and a
larger pool size fill it. The cluster: node1 (master) and node2 candidates, node3 and node4
not (node2 and node3 hold DRBD instances); the pool 10."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.masterd.lu.candidates import NOT_ENOUGH
from tests.unit.test_jobs import Master


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    m = Master(tmp_path)
    yield m
    m.queue.stop()


def candidates(master: Master) -> list[str]:
    return sorted(n.name for n in master.store.load().nodes.values() if n.master_candidate)


def add(master: Master, name: str, address: str, **extra: Any) -> dict[str, Any]:
    return master.run({"OP_ID": "OP_NODE_ADD", "node_name": name, "primary_ip": address,
                       "node_check": False, **extra})


def pool(master: Master, size: int) -> dict[str, Any]:
    return master.run({"OP_ID": "OP_CLUSTER_SET_PARAMS", "candidate_pool_size": size})


def modify(master: Master, name: str, **flags: Any) -> dict[str, Any]:
    return master.run({"OP_ID": "OP_NODE_SET_PARAMS", "node_name": name, **flags})


def test_added_nodes_join_the_candidates_while_the_pool_is_short(master: Master) -> None:
    assert pool(master, 5)["status"] == "success"  # node4 promoted by the larger pool
    assert candidates(master) == [f"node{i}.example.com" for i in (1, 2, 3, 4)]
    info = add(master, "node5.example.com", "192.0.2.55")
    assert info["status"] == "success", info
    assert "node5.example.com" in candidates(master)
    assert any("as a master candidate" in str(entry) for entry in info["oplog"][0])
    # the pool is full: the next node stays a regular node, as does one not master capable
    assert add(master, "node6.example.com", "192.0.2.56")["status"] == "success"
    assert add(master, "node7.example.com", "192.0.2.57",
               master_capable=False)["status"] == "success"
    assert len(candidates(master)) == 5
    assert "node6.example.com" not in candidates(master)


def test_a_demotion_that_leaves_the_pool_short_needs_auto_promote(master: Master) -> None:
    for flags in ({"offline": True, "force": True}, {"drained": True},
                  {"master_candidate": False}, {"master_capable": False}):
        info = modify(master, "node2", **flags)
        assert info["status"] == "error", (flags, info)
        assert NOT_ENOUGH in str(info["opresult"]) and "\n" not in NOT_ENOUGH
        assert candidates(master) == ["node1.example.com", "node2.example.com"]
    info = modify(master, "node2", offline=True, force=True, auto_promote=True)
    assert info["status"] == "success", info
    assert candidates(master) == [f"node{i}.example.com" for i in (1, 3, 4)]
    assert "Promoted nodes to master candidate role: node3.example.com, node4.example.com" \
        in str(info["oplog"])
    # back online, node2 promotes itself while the pool (10) is short
    assert modify(master, "node2", offline=False)["status"] == "success"
    assert candidates(master) == [f"node{i}.example.com" for i in (1, 2, 3, 4)]


def test_a_demotion_nobody_could_replace_needs_nothing(master: Master) -> None:
    """With node3 and node4 not master capable, no other node could fill the pool: Ganeti
    lets the demotion go."""
    for name in ("node3", "node4"):
        assert modify(master, name, master_capable=False)["status"] == "success"
    info = modify(master, "node2", drained=True)
    assert info["status"] == "success", info
    assert candidates(master) == ["node1.example.com"]


def test_the_pool_size_bounds_the_promotions(master: Master) -> None:
    assert pool(master, 1)["status"] == "success"  # a smaller pool demotes nobody (Ganeti)
    assert pool(master, 2)["status"] == "success"
    assert candidates(master) == ["node1.example.com", "node2.example.com"]
    assert add(master, "node5.example.com", "192.0.2.55")["status"] == "success"
    info = modify(master, "node2", offline=True, force=True, auto_promote=True)
    assert info["status"] == "success", info
    assert candidates(master) == ["node1.example.com", "node3.example.com"]
    assert modify(master, "node2", offline=False)["status"] == "success"
    assert candidates(master) == ["node1.example.com", "node3.example.com"]


def test_removing_a_candidate_fills_the_pool(master: Master) -> None:
    assert modify(master, "node4", master_candidate=True)["status"] == "success"
    info = master.run({"OP_ID": "OP_NODE_REMOVE", "node_name": "node4"})
    assert info["status"] == "success", info
    assert candidates(master) == [f"node{i}.example.com" for i in (1, 2, 3)]
