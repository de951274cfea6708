from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from herder.alloc import Options, answer_message
from herder.core import reason
from herder.maintd import balance
from herder.maintd.daemon import Maintd
from herder.maintd.rounds import Instance, Job, Node, Plan
from herder.maintd.state import FileState

from .fakes import FakeAgents, FakeCluster, FakeSource, uniform_figures


def nodes(n: int = 4, **kw: dict[str, bool]) -> list[Node]:
    return [Node(f"node{i}", f"u{i}", f"127.0.0.{i}", master=i == 1, **kw.get(f"node{i}", {}))
            for i in range(1, n + 1)]


def crowded(k: int = 6) -> list[Instance]:
    """Every instance on node2 with its secondary on node3; node1 and node4 empty."""
    return [Instance(f"i{j}", "node2", ("node3",), memory=1024, vcpus=1, disks=(2048,))
            for j in range(k)]


def plan_balance(ns: list[Node], insts: list[Instance], *args, **kw) -> balance.BalanceResult:
    """maintd's balancing on a uniform cluster (`uniform_figures`)."""
    return balance.plan_balance(ns, insts, *args, figures=uniform_figures(ns, insts), **kw)


def uuids():
    counter = itertools.count()
    return lambda: f"bal{next(counter)}"


def test_message_is_accepted_by_the_allocator() -> None:
    msg = balance.build_message(nodes(), crowded(), uniform_figures(nodes(), crowded()),
                                request={"type": "balance", "max_moves": 0})
    assert msg["nodes"]["node2"]["free_memory"] == msg["nodes"]["node2"]["total_memory"] - 6144
    assert msg["nodes"]["node3"]["free_disk"] == msg["nodes"]["node3"]["total_disk"] - 6 * 2176
    assert msg["instances"]["i0"]["nodes"] == ["node2", "node3"]
    resp = answer_message(msg, Options(dry_run=True))
    assert resp.success and resp.result["moves"] == []


def test_live_figures_and_run_states_are_used() -> None:
    figs = {f"node{i}": {"mtotal": 8192, "mnode": 300, "mfree": 6000, "dtotal": 100_000,
                         "dfree": 50_000, "ctotal": 8, "cnos": 8} for i in range(1, 5)}
    insts = [Instance("up", "node2", ("node3",), memory=1024, disks=(2048,),
                      status="running", oper_ram=512),
             Instance("down", "node2", ("node3",), memory=1024, disks=(2048,),
                      status="ERROR_down"),
             Instance("stopped", "node2", ("node3",), memory=2048, disks=(2048,),
                      admin_state="down", status="ADMIN_down")]
    msg = balance.build_message(nodes(), insts, figs)
    n = msg["nodes"]["node1"]
    assert (n["total_memory"], n["reserved_memory"], n["free_memory"], n["total_disk"],
            n["free_disk"], n["total_cpus"], n["reserved_cpus"]) == (
        8192, 300, 6000, 100_000, 50_000, 8, 8)
    # Ganeti's rule: what admin-up primaries may still take is not free (1024 - 512 for the
    # one running with 512, all 1024 for the one that should run and does not)
    assert msg["nodes"]["node2"]["free_memory"] == 6000 - 512 - 1024


def test_nodes_without_figures_are_left_out() -> None:
    ns, insts = nodes(), crowded()
    figs = uniform_figures(ns, insts)
    figs["node1"]["mfree"] = None  # its node daemon did not answer
    res = balance.plan_balance(ns, insts, Plan(), 0.1, figures=figs)
    assert any("no live figures from node1" in n for n in res.notes)
    assert res.jobs and all("node1" not in j.nodes for j in res.jobs)
    # none at all: nothing to balance
    res = balance.plan_balance(ns, insts, Plan(), 0.1)
    assert res.jobs == [] and any("node1, node2, node3, node4" in n for n in res.notes)


def test_imbalanced_cluster_gets_moves() -> None:
    res = plan_balance(nodes(), crowded(), Plan(), 0.1, new_uuid=uuids())
    assert res.initial_score - res.final_score >= 0.1
    assert res.jobs, res.notes
    for job in res.jobs:
        assert job.step == "balance" and len(job.instances) == 1
        assert {op["OP_ID"] for op in job.ops} <= {"OP_INSTANCE_MIGRATE",
                                                   "OP_INSTANCE_REPLACE_DISKS"}
        assert all(op["reason"][-1][:2] == [reason.MAINTD, job.event] for op in job.ops)
    # the jobs of one round touch disjoint nodes
    touched = [n for j in res.jobs for n in j.nodes]
    assert len(touched) == len(set(touched))
    assert len({j.event for j in res.jobs}) == len(res.jobs)


def test_threshold_stops_small_gains() -> None:
    # initial score ~11.6 < 10 x 5 and no single move gains 5: nothing to do (Ganeti's rule)
    res = plan_balance(nodes(), crowded(), Plan(), 5.0)
    assert res.jobs == [] and res.initial_score == res.final_score > 0
    # a score above 10 x threshold lets smaller steps through
    assert plan_balance(nodes(), crowded(), Plan(), 1.0).jobs


def test_instances_of_excluded_nodes_stay() -> None:
    insts = [*crowded(4), Instance("x", "node4", ("node2",), memory=1024, disks=(2048,))]
    res = plan_balance(nodes(), insts, Plan(), 0.1, excluded={"node4"})
    assert res.jobs and all("node4" not in j.nodes and "x" not in j.instances
                            for j in res.jobs)


def test_balanced_cluster_has_nothing_to_do() -> None:
    insts = [Instance(f"i{p}{s}", f"node{p}", (f"node{s}",), memory=1024, disks=(1024,))
             for p in range(1, 5) for s in range(1, 5) if p != s]
    res = plan_balance(nodes(), insts, Plan(), 0.0)
    assert res.jobs == [] and res.notes == []


def test_excluded_busy_and_used_are_left_alone() -> None:
    # node1 and node4 both excluded: no move can land anywhere useful
    res = plan_balance(nodes(), crowded(), Plan(), 0.1, excluded={"node1", "node4"})
    assert all(not ({"node1", "node4"} & j.nodes) for j in res.jobs)
    other = Plan(jobs=[Job("x", "drain", [], nodes=frozenset(("node2",)))])
    res = plan_balance(nodes(), crowded(), other, 0.1)
    assert res.jobs == [] and any("waits" in n for n in res.notes)
    res = plan_balance(nodes(node4={"drained": True}, node1={"offline": True}), crowded(),
                               Plan(), 0.1)
    assert all(not ({"node1", "node4"} & j.nodes) for j in res.jobs)


# --- the daemon --------------------------------------------------------------------------------

def load(cluster: FakeCluster) -> dict[str, int]:
    out = {n.name: 0 for n in cluster.nodes()}
    for i in cluster.instances():
        out[i.pnode] += 1
    return out


def drive(d: Maintd, cluster: FakeCluster, n: int) -> list[list[str]]:
    out: list[list[str]] = []

    async def go() -> None:
        for _ in range(n):
            before = len(cluster.submitted)
            await d.tick()
            new = cluster.submitted[before:]
            if new:
                out.append([ops[0]["OP_ID"] for _, ops in new])
            cluster.run_all()
    asyncio.run(go())
    return out


def test_daemon_balances_when_enabled(tmp_path: Path) -> None:
    cluster = FakeCluster(4, crowded())
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [FakeSource()])
    assert drive(d, cluster, 2) == []  # balance defaults to false
    cluster.settings = {"balance": True, "balanceThreshold": 0.1}
    rounds = drive(d, cluster, 12)
    assert rounds and all(set(r) <= {"OP_INSTANCE_MIGRATE", "OP_INSTANCE_REPLACE_DISKS"}
                          for r in rounds)
    assert max(load(cluster).values()) <= 3  # was 6 on node2
    assert d.overview()["balance"]["final_score"] <= d.overview()["balance"]["initial_score"]
    # and it settles: no more moves
    assert drive(d, cluster, 3) == []


def test_daemon_does_not_balance_onto_a_failed_node(tmp_path: Path) -> None:
    cluster = FakeCluster(4, crowded())
    cluster.node("node4", tags=("maintd:repairfailed:e1",))
    cluster.settings = {"balance": True}
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [FakeSource()])
    drive(d, cluster, 10)
    assert all("node4" not in (i.pnode, *i.snodes) for i in cluster.instances())
    assert load(cluster)["node2"] < 6


def test_first_job_set_is_the_allocators_first_set() -> None:
    ns = [Node(f"node{i}", f"u{i}") for i in range(1, 9)]
    insts = [Instance(f"{p}{j}", a, (b,), memory=1024, disks=(2048,))
             for p, a, b in (("a", "node1", "node2"), ("b", "node3", "node4")) for j in range(4)]
    msg = balance.build_message(ns, insts, uniform_figures(ns, insts),
                                request={"type": "balance", "min_gain": 0.1,
                                         "min_gain_limit": 1.0})
    full = answer_message(msg, Options(dry_run=True)).result
    ini, _, moves = balance.first_job_set(msg, 0.1)
    assert abs(ini - full["initial_score"]) < 1e-6
    assert [ops for *_, ops in moves] == full["jobs"][0]
    assert len(moves) == 2  # disjoint moves run in parallel
    res = plan_balance(ns, insts, Plan(), 0.1)
    assert [sorted(j.instances) for j in res.jobs] == [[m[0]] for m in moves]


def test_without_disk_moves_only_primaries_move() -> None:
    with_disks = plan_balance(nodes(), crowded(), Plan(), 0.1)
    assert any(op["OP_ID"] == "OP_INSTANCE_REPLACE_DISKS" for j in with_disks.jobs
               for op in j.ops)
    res = plan_balance(nodes(), crowded(), Plan(), 0.1, disk_moves=False)
    assert res.jobs
    for job in res.jobs:  # only failovers/migrations between primary and secondary
        assert {op["OP_ID"] for op in job.ops} == {"OP_INSTANCE_MIGRATE"}
        assert job.nodes == {"node2", "node3"}


def cpu_reports(loads: dict[str, float]) -> dict[str, list[dict[str, object]]]:
    return {n: [{"name": "cpu-avg-load", "version": "B", "format_version": 1, "timestamp": 0,
                 "category": None, "kind": 0,
                 "data": {"cpu_number": 1, "cpus": [v], "cpu_total": v}}]
            for n, v in loads.items()}


def test_dynamic_load_enters_the_score_only_from_every_node() -> None:
    static = plan_balance(nodes(), crowded(), Plan(), 0.1)
    assert not static.dynamic_load
    assert [sorted(j.nodes) for j in static.jobs] == [["node1", "node2", "node3"]]
    # node1 is busy with something else: the move goes to the idle node4 instead
    loads = {"node1": 8.0, "node2": 0.1, "node3": 0.1, "node4": 0.1}
    res = plan_balance(nodes(), crowded(), Plan(), 0.1, mond_data=cpu_reports(loads))
    assert res.dynamic_load and res.initial_score > static.initial_score
    assert [sorted(j.nodes) for j in res.jobs] == [["node2", "node3", "node4"]]
    # one agent silent: Ganeti's rule, nobody's load is used, and a note says so
    del loads["node3"]
    res = plan_balance(nodes(), crowded(), Plan(), 0.1, mond_data=cpu_reports(loads))
    assert not res.dynamic_load and res.initial_score == static.initial_score
    assert [sorted(j.nodes) for j in res.jobs] == [["node1", "node2", "node3"]]
    assert any("Didn't receive an answer by all MonDs" in n for n in res.notes)


def test_daemon_uses_the_settings_for_disk_moves_and_dynamic_load(tmp_path: Path) -> None:
    cluster = FakeCluster(4, crowded())
    agents = FakeAgents(cluster)
    agents.cpu_load = {f"node{i}": 0.5 for i in range(1, 5)}
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [FakeSource()], agents=agents)
    cluster.settings = {"balance": True, "balanceDiskMoves": False, "balanceDynamicLoad": True}
    rounds = drive(d, cluster, 6)
    assert rounds and all(set(r) == {"OP_INSTANCE_MIGRATE"} for r in rounds)
    assert agents.polls == 6  # one poll per tick served the sources, the watcher and balancing
    assert d.overview()["balance"]["dynamic_load"] is True
    assert d.overview()["balance"]["disk_moves"] is False
    # primaries only: every instance still lives on node2 and node3
    assert {n for i in cluster.instances() for n in (i.pnode, *i.snodes)} == {"node2", "node3"}
