from __future__ import annotations

import dataclasses
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from herder.core import reason
from herder.maintd import incidents
from herder.maintd.rounds import Instance, Job, Node, Plan, plan_round

EVAC = {"status": "evacuate", "command": "", "details": {}}
FAIL = {"status": "evacuate-failover", "command": "", "details": {}}
LIVE = {"status": "live-repair", "command": "fixit", "details": {"x": 1}}


def cluster(n: int = 4) -> list[Node]:
    return [Node(name=f"node{i}", uuid=f"u{i}", master=(i == 1)) for i in range(1, n + 1)]


def incident(node: str, data: dict, when: float = 1.0):
    return incidents.new_incident(node, data, when=when)


def replace(nodes: list[Node], name: str, **kw) -> list[Node]:
    return [dataclasses.replace(n, **kw) if n.name == name else n for n in nodes]


PHASE = {"drain": "drain", "migrate": "primaries", "failover": "primaries",
         "resecondary": "primaries", "secondary": "secondaries", "offline": "offline",
         "repair": "repair"}


def check_no_conflicts(plan: Plan) -> None:
    seen_inst: set[str] = set()
    pairs: set[frozenset[str]] = set()
    for job in plan.jobs:
        assert not (job.instances & seen_inst), plan.jobs
        seen_inst |= job.instances
        if len(job.nodes) == 2:
            assert job.nodes not in pairs
            pairs.add(job.nodes)
    per_event: dict[str, set[str]] = {}
    for job in plan.jobs:
        per_event.setdefault(job.event, set()).add(PHASE[job.step])
    assert all(len(steps) == 1 for steps in per_event.values()), per_event


def reasons_ok(job: Job) -> bool:
    return all(any(r[0] == reason.MAINTD and r[1] == job.event for r in op["reason"])
               for op in job.ops)


def test_busy_plans_nothing() -> None:
    inc = incident("u2", EVAC)
    assert plan_round(cluster(), [], [inc], busy=True).jobs == []


def test_evacuation_steps_in_order() -> None:
    nodes = cluster()
    insts = [Instance("a", "node2", ("node3",)), Instance("b", "node3", ("node2",))]
    inc = incident("u2", EVAC)
    plan = plan_round(nodes, insts, [inc])
    assert [j.step for j in plan.jobs] == ["drain"]
    op = plan.jobs[0].ops[0]
    assert op["OP_ID"] == "OP_NODE_SET_PARAMS" and op["drained"] is True
    assert reasons_ok(plan.jobs[0])
    nodes = replace(nodes, "node2", drained=True)
    plan = plan_round(nodes, insts, [inc])
    assert [(j.step, j.ops[0]["OP_ID"]) for j in plan.jobs] == [("migrate", "OP_INSTANCE_MIGRATE")]
    assert plan.jobs[0].ops[0]["mode"] == "live"
    assert plan.jobs[0].nodes == {"node2", "node3"}
    insts = [Instance("a", "node3", ("node2",)), Instance("b", "node3", ("node2",))]
    plan = plan_round(nodes, insts, [inc])
    assert [j.step for j in plan.jobs] == ["secondary", "secondary"]
    targets = {j.ops[0]["remote_node"] for j in plan.jobs}
    assert targets == {"node1", "node4"}  # distinct node pairs; never the drained node
    insts = [Instance("a", "node3", ("node4",))]
    plan = plan_round(nodes, insts, [inc])
    assert [j.step for j in plan.jobs] == ["offline"] and plan.jobs[0].final
    assert [o["OP_ID"] for o in plan.jobs[0].ops] == ["OP_NODE_SET_PARAMS", "OP_TAGS_SET"]
    assert plan.jobs[0].ops[1]["tags"] == [inc.tag]
    nodes = replace(nodes, "node2", offline=True, tags=(inc.tag,))
    plan = plan_round(nodes, insts, [inc])
    assert plan.jobs == [] and plan.completed == [inc.uuid]


def test_offline_without_tag_only_tags() -> None:
    nodes = replace(cluster(), "node2", drained=True, offline=True)
    inc = incident("u2", EVAC)
    plan = plan_round(nodes, [], [inc])
    assert [o["OP_ID"] for o in plan.jobs[0].ops] == ["OP_TAGS_SET"]


def test_failover_variant_never_migrates() -> None:
    nodes = replace(cluster(), "node2", drained=True)
    insts = [Instance("a", "node2", ("node3",)), Instance("s", "node2", (), "sharedfile")]
    plan = plan_round(nodes, insts, [incident("u2", FAIL)])
    ids = [j.ops[0]["OP_ID"] for j in plan.jobs]
    assert ids == ["OP_INSTANCE_FAILOVER", "OP_INSTANCE_FAILOVER"]
    assert all(j.ops[0]["ignore_consistency"] for j in plan.jobs)
    assert plan.jobs[1].ops[0]["target_node"] not in ("node2", "node3")


def test_plain_instance_blocks_with_note() -> None:
    nodes = replace(cluster(), "node2", drained=True)
    plan = plan_round(nodes, [Instance("p", "node2", (), "plain")], [incident("u2", EVAC)])
    assert plan.jobs == [] and "cannot be moved" in plan.notes[0]


def test_live_repair() -> None:
    inc = incident("u3", LIVE)
    plan = plan_round(cluster(), [], [inc])
    (job,) = plan.jobs
    assert job.final and job.step == "repair"
    rep, tag = job.ops
    assert rep["OP_ID"] == "OP_REPAIR_COMMAND" and rep["node_name"] == "node3"
    assert rep["command"] == "fixit" and rep["input"] == LIVE
    assert tag == {**tag, "OP_ID": "OP_TAGS_SET", "tags": [inc.tag], "name": "node3"}
    inc.jobs = [5]
    assert plan_round(cluster(), [], [inc]).jobs == []
    nodes = replace(cluster(), "node3", tags=(inc.tag,))
    assert plan_round(nodes, [], [inc]).completed == [inc.uuid]


def test_live_repair_without_command_fails() -> None:
    inc = incident("u3", {"status": "live-repair", "details": {}})
    plan = plan_round(cluster(), [], [inc])
    assert plan.jobs == [] and plan.failed == [inc.uuid]


def test_finalized_and_canceled_ignored() -> None:
    a, b = incident("u2", EVAC), incident("u3", EVAC)
    incidents.set_status(a, "canceled")
    incidents.set_status(b, "failed")
    assert plan_round(cluster(), [], [a, b]).jobs == []


def test_master_not_evacuated() -> None:
    plan = plan_round(cluster(), [], [incident("u1", EVAC)])
    assert plan.jobs == [] and "master" in plan.notes[0]


def test_two_nodes_failing_share_instance() -> None:
    """Instance x on node2 (primary) and node3 (secondary), both failing."""
    nodes = replace(replace(cluster(5), "node2", drained=True), "node3", drained=True)
    insts = [Instance("x", "node2", ("node3",)), Instance("y", "node3", ("node2",)),
             Instance("z", "node4", ("node2",))]
    incs = [incident("u2", EVAC, 1.0), incident("u3", EVAC, 2.0)]
    plan = plan_round(nodes, insts, incs)
    check_no_conflicts(plan)
    # x's secondary (node3) is failing too: node2's step gives x a new secondary first; the same
    # for y: no deadlock, two jobs on distinct instances and node pairs
    assert sorted((j.step, tuple(j.instances)) for j in plan.jobs) == [
        ("resecondary", ("x",)), ("resecondary", ("y",))]
    assert all(j.ops[0]["remote_node"] not in ("node2", "node3") for j in plan.jobs)
    # then x migrates to its new, healthy secondary
    insts = [Instance("x", "node2", ("node4",)), Instance("z", "node4", ("node2",))]
    plan = plan_round(nodes, insts, incs)
    check_no_conflicts(plan)
    assert [(j.step, j.nodes) for j in plan.jobs] == [("migrate", {"node2", "node4"}),
                                                      ("offline", {"node3"})]


# --- exhaustive: random clusters, several failing nodes, every round conflict-free ------------

@st.composite
def scenarios(draw):
    n = draw(st.integers(3, 7))
    nodes = [Node(name=f"node{i}", uuid=f"u{i}", drained=draw(st.booleans()),
                  offline=False) for i in range(1, n + 1)]
    insts = []
    for k in range(draw(st.integers(0, 12))):
        p = draw(st.integers(1, n))
        tmpl = draw(st.sampled_from(["drbd", "drbd", "sharedfile", "plain", "diskless"]))
        snodes: tuple[str, ...] = ()
        if tmpl == "drbd":
            s = draw(st.integers(1, n).filter(lambda x, p=p: x != p))
            snodes = (f"node{s}",)
        insts.append(Instance(f"i{k}", f"node{p}", snodes, tmpl))
    failing = draw(st.lists(st.integers(1, n), min_size=1, max_size=n, unique=True))
    incs = [incident(f"u{f}", draw(st.sampled_from([EVAC, FAIL, LIVE])), float(f))
            for f in failing]
    return nodes, insts, incs


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_no_round_has_two_jobs_touching_the_same_instance(scenario) -> None:
    nodes, insts, incs = scenario
    plan = plan_round(nodes, insts, incs)
    check_no_conflicts(plan)
    failing = {n.name for n in nodes if n.uuid in {i.node for i in incs}}
    for job in plan.jobs:
        assert reasons_ok(job)
        if job.step in ("migrate", "failover", "secondary", "resecondary"):
            src = {n.name for n in nodes if n.uuid == next(
                i.node for i in incs if i.uuid == job.event)}
            target = set(job.nodes) - src if "secondary" not in job.step else {
                job.ops[0]["remote_node"]}
            # never move onto a failing, drained or offline node
            for t in target:
                assert t not in failing
                assert not next(n for n in nodes if n.name == t).drained


def test_all_pairs_small_exhaustive() -> None:
    """Every pair of failing nodes on a 4-node ring of drbd instances."""
    base = cluster(4)
    insts = [Instance(f"i{a}{b}", f"node{a}", (f"node{b}",))
             for a, b in itertools.permutations(range(1, 5), 2)]
    for a, b in itertools.combinations(range(2, 5), 2):
        nodes = replace(replace(base, f"node{a}", drained=True), f"node{b}", drained=True)
        for da, db in itertools.product([EVAC, FAIL], repeat=2):
            plan = plan_round(nodes, insts, [incident(f"u{a}", da, 1.0),
                                             incident(f"u{b}", db, 2.0)])
            check_no_conflicts(plan)
