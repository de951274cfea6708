from __future__ import annotations

import asyncio
import dataclasses
import itertools
from pathlib import Path

from herder.core import reason
from herder.maintd import watcher
from herder.maintd.daemon import Maintd
from herder.maintd.rounds import Instance, Job, Node, Plan
from herder.maintd.state import FileState

from .fakes import FakeAgents, FakeCluster, FakeSource


def nodes(n: int = 4, **kw: dict[str, bool]) -> list[Node]:
    out = []
    for i in range(1, n + 1):
        out.append(Node(f"node{i}", f"u{i}", f"127.0.0.{i}", master=i == 1,
                        **kw.get(f"node{i}", {})))
    return out


def uuids():
    counter = itertools.count()
    return lambda: f"ev{next(counter)}"


def plan(insts, states=None, restarts=None, ns=None, p=None, **kw) -> watcher.WatcherResult:
    return watcher.plan_watcher(ns or nodes(), insts, p or Plan(), states or {}, restarts or {},
                                now=10_000.0, new_uuid=uuids(), **kw)


def ids(res: watcher.WatcherResult) -> list[tuple[str, str]]:
    return [(j.ops[0]["OP_ID"], j.ops[0]["instance_name"]) for j in res.jobs]


def test_activate_disks_of_running_instances_only() -> None:
    insts = [Instance("a", "node2", ("node3",), disks_active=False),
             Instance("b", "node2", ("node3",), disks_active=False, admin_state="down"),
             Instance("c", "node3", ("node4",)),
             Instance("d", "node4", (), "diskless", disks_active=False)]
    res = plan(insts)
    assert ids(res) == [("OP_INSTANCE_ACTIVATE_DISKS", "a")]
    job = res.jobs[0]
    assert job.step == "activate-disks" and job.nodes == {"node2"}
    assert job.ops[0]["reason"][-1][:2] == [reason.MAINTD, "ev0"]


def test_restart_down_instances_of_admin_up() -> None:
    insts = [Instance("a", "node2", ("node3",)), Instance("b", "node3", ("node4",)),
             Instance("c", "node4", (), admin_state="down"), Instance("d", "node2")]
    states = {"a": "down", "b": "up", "c": "down", "d": "hung"}
    res = plan(insts, states)
    assert ids(res) == [("OP_INSTANCE_STARTUP", "a")]
    assert res.restarted == ["a"] and res.jobs[0].step == "restart"


def test_disks_first_then_restart() -> None:
    insts = [Instance("a", "node2", ("node3",), disks_active=False)]
    assert ids(plan(insts, {"a": "down"})) == [("OP_INSTANCE_ACTIVATE_DISKS", "a")]


def test_not_on_offline_drained_or_affected_nodes() -> None:
    insts = [Instance("a", "node2", ("node3",)), Instance("b", "node3", ("node4",)),
             Instance("c", "node4", ()), Instance("e", "node1", ("node2",))]
    states = dict.fromkeys("abce", "down")
    ns = nodes(node2={"offline": True}, node3={"drained": True})
    # a: primary offline; b: primary drained; e: its secondary offline; c: node4 affected
    assert ids(plan(insts, states, ns=ns, affected={"node4"})) == []
    assert ids(plan(insts, states, ns=ns)) == [("OP_INSTANCE_STARTUP", "c")]


def test_no_conflict_with_the_rounds_other_jobs() -> None:
    insts = [Instance("a", "node2", ("node3",)), Instance("b", "node4", ())]
    other = Plan(jobs=[Job("x", "migrate", [], nodes=frozenset(("node3", "node1")),
                           instances=frozenset(("z",))),
                       Job("y", "harep", [], instances=frozenset(("b",)))])
    assert ids(plan(insts, dict.fromkeys("ab", "down"), p=other)) == []


def test_restart_budget_and_settle() -> None:
    insts = [Instance("a", "node2", ("node3",))]
    down = {"a": "down"}
    # just restarted: the report may be stale
    assert ids(plan(insts, down, {"a": [9_990.0]})) == []
    # settled, budget left
    assert ids(plan(insts, down, {"a": [8_000.0, 9_000.0]})) == [("OP_INSTANCE_STARTUP", "a")]
    # budget used up within the window: a note, no job
    res = plan(insts, down, {"a": [7_000.0, 8_000.0, 9_000.0]})
    assert ids(res) == [] and "restarted 3 times" in res.notes[0]
    # older restarts fall out of the window
    assert ids(plan(insts, down, {"a": [1.0, 2.0, 3.0]})) == [("OP_INSTANCE_STARTUP", "a")]


def test_states_of_uses_the_primarys_report() -> None:
    insts = [Instance("a", "node2", ("node3",), uuid="ua"), Instance("b", "node3"),
             Instance("c", "node4")]
    reports = {
        "node2": {"data": {"instances": [{"name": "old-name", "uuid": "ua",
                                          "actual_state": "down"}]}},
        "node3": {"data": {"instances": [{"name": "a", "actual_state": "up"},
                                         {"name": "b", "actual_state": "paused"}]}},
        "node4": {"data": {"error": "x"}},
    }
    assert watcher.states_of(reports, insts) == {"a": "down", "b": "paused"}


def test_only_live_nodes_report_instance_states() -> None:
    nodes = [Node("n1", "u1"), Node("n2", "u2", offline=True), Node("n3", "u3", drained=True),
             Node("n4", "u4", vm_capable=False)]
    assert [n.name for n in watcher.live_nodes(nodes)] == ["n1"]


# --- the daemon --------------------------------------------------------------------------------

def setup(tmp_path: Path, insts: list[Instance]) -> tuple[Maintd, FakeCluster]:
    cluster = FakeCluster(4, insts)
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [FakeSource()],
               agents=FakeAgents(cluster), restart_settle=0)
    return d, cluster


def target(op: dict) -> str:
    return op.get("instance_name") or op["node_name"]


def drive(d: Maintd, cluster: FakeCluster, n: int = 8) -> list[list[str]]:
    out: list[list[str]] = []

    async def go() -> None:
        for _ in range(n):
            before = len(cluster.submitted)
            await d.tick()
            new = cluster.submitted[before:]
            if new:
                out.append([f"{ops[0]['OP_ID']}:{target(ops[0])}" for _, ops in new])
            cluster.run_all()
    asyncio.run(go())
    return out


def test_daemon_activates_disks_then_restarts(tmp_path: Path) -> None:
    d, cluster = setup(tmp_path, [Instance("a", "node2", ("node3",), disks_active=False),
                                  Instance("b", "node3", ("node4",))])
    cluster.actual = {"a": "down", "b": "down"}
    assert drive(d, cluster) == [
        ["OP_INSTANCE_ACTIVATE_DISKS:a", "OP_INSTANCE_STARTUP:b"],
        ["OP_INSTANCE_STARTUP:a"]]
    assert cluster.actual == {"a": "up", "b": "up"}
    assert d.restarts.keys() == {"a", "b"} and d.state.jobs == []
    for _, ops in cluster.submitted:
        assert ops[0]["reason"][-1][0] == reason.MAINTD


def test_daemon_crash_loop_stops_after_the_budget(tmp_path: Path) -> None:
    d, cluster = setup(tmp_path, [Instance("a", "node2", ("node3",))])
    cluster.actual = {"a": "down"}
    cluster.crashing = {"a"}
    assert drive(d, cluster, 8) == [["OP_INSTANCE_STARTUP:a"]] * 3
    assert cluster.starts == ["a"] * 3
    assert any("restarted 3 times" in n for n in d.overview()["notes"])
    assert d.overview()["restarts"] == {"a": 3}


def test_daemon_leaves_an_incidents_node_to_the_incident(tmp_path: Path) -> None:
    d, cluster = setup(tmp_path, [Instance("a", "node2", ("node3",))])
    cluster.actual = {"a": "down"}
    d.sources[0].data["u2"] = {"status": "evacuate", "command": "", "details": {}}
    steps = drive(d, cluster, 2)
    assert steps == [["OP_NODE_SET_PARAMS:node2"], ["OP_INSTANCE_MIGRATE:a"]]
    assert cluster.starts == []


def test_daemon_watcher_off(tmp_path: Path) -> None:
    d, cluster = setup(tmp_path, [Instance("a", "node2", ("node3",), disks_active=False)])
    d.watcher = False
    assert drive(d, cluster, 2) == []
    assert dataclasses.replace(cluster.instances()[0]).disks_active is False


def test_the_maintenance_switch_takes_effect_while_maintd_runs(tmp_path: Path) -> None:
    """`herder cluster modify --maintenance no` (and a merge's pause) stops a running maintd's
    repairs at its next tick, and `yes` resumes them: the switch is read every tick."""
    d, cluster = setup(tmp_path, [Instance("a", "node2", ("node3",))])
    cluster.actual = {"a": "down"}
    d.sources[0].data["u3"] = {"status": "evacuate", "command": "", "details": {}}
    cluster.settings = {"enabled": False}
    assert drive(d, cluster, 3) == []
    assert not d.enabled and cluster.starts == []
    cluster.settings = {"enabled": True}
    done = [step for tick in drive(d, cluster, 3) for step in tick]
    assert "OP_NODE_SET_PARAMS:node3" in done and "OP_INSTANCE_STARTUP:a" in done
    assert d.enabled and cluster.starts == ["a"]
