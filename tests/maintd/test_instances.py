"""Instance incidents (instmon's failure notifications): the decision table, the planned
opcodes and their reason trails, completion and failure, and the state round-trip."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import msgspec
import pytest

from herder.core import model, notification, reason
from herder.maintd import incidents as incident_lifecycle
from herder.maintd import instances as instance_incidents
from herder.maintd.daemon import Maintd
from herder.maintd.rounds import Instance, Job, Node, Plan
from herder.maintd.state import FileState, MaintState

from .fakes import FakeCluster, FakeSource

U_A = "11111111-1111-4111-8111-111111111111"
U_B = "22222222-2222-4222-8222-222222222222"
NOW = 1_800_000_000.0

NODES = [Node("node1", "u1", master=True), Node("node2", "u2"), Node("node3", "u3"),
         Node("node4", "u4")]


def inst(name: str = "a", uuid: str = U_A, pnode: str = "node2", **kw) -> Instance:
    kw.setdefault("disk_template", "sharedfile")
    return Instance(name, pnode, uuid=uuid, **kw)


def note(detail: str = "STOPPED_FAILED", event: str = "LIFECYCLE", host: str = "node2",
         uuid: str = U_A, when: str = "2027-01-15T08:00:00.000001") -> notification.Notification:
    return notification.Notification("VM", host, when, {"event": event, "instance_uuid": uuid,
                                                        "vir_domain_event": detail})


def decide(n: notification.Notification, instances=None, incidents=(), nodes=NODES,
           **kw) -> instance_incidents.Verdict:
    kind = notification.failure_kind(n)
    return instance_incidents.decide(n, kind, nodes,
                                     instances if instances is not None else [inst()],
                                     list(incidents), now=NOW, **kw)


# --- the decision table -------------------------------------------------------------------------


def test_crash_restarts_in_place() -> None:
    v = decide(note())
    assert v.status == "new" and v.kind == notification.CRASH
    inc = v.incident
    assert inc is not None and inc.action == "restart" and inc.instance == U_A
    assert inc.node == "u2" and inc.repair_status == "noted" and inc.ctime == NOW
    assert inc.original["payload"]["vir_domain_event"] == "STOPPED_FAILED"
    assert inc.original["kind"] == "crash"


def test_io_error_drains_and_relocates() -> None:
    v = decide(note("IO_ERROR_REPORT", "IO_ERROR"))
    assert v.kind == notification.IO_ERROR and v.incident is not None
    assert v.incident.action == "drain-relocate"


def test_second_failure_within_the_window_relocates() -> None:
    first = decide(note()).incident
    assert first is not None
    first.repair_status = "completed"
    v = decide(note(when="2027-01-15T08:01:00.000001"), incidents=[first])
    assert v.incident is not None and v.incident.action == "relocate"
    assert first.uuid in v.reason
    first.ctime = NOW - 601  # outside the window: in place again
    v = decide(note(when="2027-01-15T08:02:00.000001"), incidents=[first])
    assert v.incident is not None and v.incident.action == "restart"
    v = decide(note(when="2027-01-15T08:02:00.000001"), incidents=[first], window=3600)
    assert v.incident is not None and v.incident.action == "relocate"


@pytest.mark.parametrize("change", ["drained", "offline", "incident", "diagnose"])
def test_unhealthy_node_relocates(change: str) -> None:
    nodes = list(NODES)
    incidents: list[model.Incident] = []
    diagnoses = {}
    if change in ("drained", "offline"):
        nodes[1] = dataclasses.replace(nodes[1], **{change: True})
    elif change == "incident":
        incidents.append(incident_lifecycle.new_incident("u2", {"status": "evacuate"}, NOW - 5))
    else:
        diagnoses["u2"] = {"status": "live-repair", "command": "x"}
    v = decide(note(), incidents=incidents, nodes=nodes, diagnoses=diagnoses)
    assert v.incident is not None and v.incident.action == "relocate", v.reason
    assert "unhealthy" in v.reason


def test_stop_of_an_admin_up_instance_without_an_order_restarts() -> None:
    v = decide(note("STOPPED_DESTROYED"))
    assert v.kind == notification.STOP and v.incident is not None and v.incident.action == "restart"


@pytest.mark.parametrize("case, why", [
    ("not-a-failure", "not a failure"),
    ("unknown", "no instance has the UUID"),
    ("admin-down", "administratively down"),
    ("optout", instance_incidents.OPTOUT_TAG),
    ("running-job", "job 7 stopping or moving a is running"),
    ("node-job", "job 5 stopping or moving a is running"),
    ("recent-job", "job 8 stopping a ended 10s ago"),
    ("collapse", "already has the active incident"),
])
def test_ignored(case: str, why: str) -> None:
    n = note("STOPPED_SHUTDOWN")
    instances = [inst()]
    incidents: list[model.Incident] = []
    jobs: list[instance_incidents.JobInfo] = []
    if case == "not-a-failure":
        n = note("STARTED_BOOTED", "LIFECYCLE")
    elif case == "unknown":
        n = note(uuid=U_B)
    elif case == "admin-down":
        instances = [inst(admin_state="down")]
    elif case == "optout":
        instances = [inst(tags=("x", instance_incidents.OPTOUT_TAG))]
    elif case == "running-job":
        jobs = [instance_incidents.JobInfo(6, "running", None, frozenset({"b"})),
                instance_incidents.JobInfo(7, "running", None, frozenset({"a"}))]
    elif case == "node-job":
        jobs = [instance_incidents.JobInfo(5, "running", None, nodes=frozenset({"node2"}))]
    elif case == "recent-job":
        jobs = [instance_incidents.JobInfo(8, "success", NOW - 10, frozenset({"a"}),
                                           frozenset({"a"}))]
    elif case == "collapse":
        first = decide(note(when="2027-01-15T07:59:00.000001")).incident
        assert first is not None
        incidents = [first]
    v = decide(n, instances, incidents, jobs=jobs)
    assert v.status == "ignored" and v.incident is None
    assert why in v.reason, v.reason


def test_a_failure_of_an_instance_another_node_runs_is_refused() -> None:
    """Only the node an instance runs on reports its failures (issue 35 item 2): a report of
    an instance whose primary is another node is refused, admin state or not."""
    for instances in ([inst(pnode="node3")], [inst(pnode="node3", admin_state="down")]):
        v = decide(note("STOPPED_SHUTDOWN"), instances)
        assert v.status == instance_incidents.REFUSED and v.incident is None
        assert "not hosted by node2: its primary node is node3" in v.reason, v.reason


def test_an_ordered_job_long_ago_or_a_crash_during_a_job_is_a_failure() -> None:
    old = [instance_incidents.JobInfo(8, "success", NOW - 31, frozenset({"a"}), frozenset({"a"}))]
    assert decide(note("STOPPED_SHUTDOWN"), jobs=old).status == "new"
    # a job that created or started it, or a finished migration, is no order to stop
    recent = [instance_incidents.JobInfo.from_ops(9, "success", NOW - 1, [
        {"OP_ID": "OP_INSTANCE_CREATE", "instance_name": "a"},
        {"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": "a"},
        {"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": "a"}])]
    assert decide(note("STOPPED_DESTROYED"), jobs=recent).status == "new"
    running = [instance_incidents.JobInfo(7, "running", None, frozenset({"a"}))]
    assert decide(note("STOPPED_FAILED"), jobs=running).status == "new"  # crash, not stop


def test_job_info_from_rapi() -> None:
    j = instance_incidents.JobInfo.from_rapi({
        "id": 3, "status": "success", "end_ts": [100, 500000],
        "ops": [{"OP_ID": "OP_INSTANCE_SHUTDOWN", "instance_name": "a"},
                {"OP_ID": "OP_TEST_DELAY"}]})
    assert j == instance_incidents.JobInfo(3, "success", 100.5, frozenset({"a"}), frozenset({"a"}))
    m = instance_incidents.JobInfo.from_rapi({"id": 5, "status": "running", "ops": [
        {"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": "b"},
        {"OP_ID": "OP_NODE_EVACUATE", "node_name": "node2"}]})
    assert (m.instances, m.lingering, m.nodes) == ({"b"}, frozenset(), {"node2"})
    unended = instance_incidents.JobInfo.from_rapi({"id": 4, "status": "running", "end_ts": None})
    assert unended.end is None


# --- planning -------------------------------------------------------------------------------------


def incident(action: str, node: str = "u2", uuid: str = U_A, **kw) -> model.Incident:
    n = note()
    return model.Incident(uuid=f"ev-{action}", node=node, instance=uuid, action=action,
                          original=instance_incidents.original_of(n, "crash", "nu"), ctime=NOW,
                          mtime=NOW, **kw)


def check_reasons(op: dict, event: str) -> None:
    (instmon, maintd) = op["reason"]
    assert instmon[0] == reason.INSTMON
    assert instmon[1] == "LIFECYCLE/STOPPED_FAILED on node2 at 2027-01-15T08:00:00.000001"
    assert isinstance(instmon[2], int) and isinstance(maintd[2], int)
    assert maintd[0] == reason.MAINTD and maintd[1] == event


def test_plan_restart() -> None:
    res = instance_incidents.plan_instances(NODES, [inst()], [incident("restart")], Plan())
    (job,) = res.jobs
    assert job.step == "restart" and job.final and job.instances == {"a"}
    (op,) = job.ops
    assert {k: v for k, v in op.items() if k != "reason"} == {
        "OP_ID": "OP_INSTANCE_STARTUP", "instance_name": "a", "force": False}
    check_reasons(op, "ev-restart")


def test_instmon_reason_is_stamped_with_the_generated_time() -> None:
    entry = instance_incidents.instmon_reason(instance_incidents.original_of(note(), "crash", "x"))
    import datetime
    expected = datetime.datetime(2027, 1, 15, 8, 0, 0, 1, tzinfo=datetime.UTC).timestamp()
    assert entry[2] == round(expected * 1e6) * 1000


@pytest.mark.parametrize("template", ["sharedfile", "rbd", "diskless", "blockdev", "ext"])
def test_plan_relocate_shared_asks_the_allocator(template: str) -> None:
    res = instance_incidents.plan_instances(NODES, [inst(disk_template=template)],
                                            [incident("relocate")],
                                            Plan())
    (job,) = res.jobs
    (op,) = job.ops
    assert op["OP_ID"] == "OP_INSTANCE_FAILOVER" and op["iallocator"] == "herder"
    assert op["ignore_consistency"] is True and "target_node" not in op
    check_reasons(op, "ev-relocate")


def test_plan_relocate_drbd_to_its_secondary() -> None:
    res = instance_incidents.plan_instances(NODES, [inst(disk_template="drbd", snodes=("node3",))],
                                            [incident("relocate")], Plan())
    (op,) = res.jobs[0].ops
    assert op["OP_ID"] == "OP_INSTANCE_FAILOVER" and "iallocator" not in op
    assert "target_node" not in op and op["ignore_consistency"] is True
    assert res.jobs[0].nodes == {"node2", "node3"}


@pytest.mark.parametrize("template", ["plain", "file"])
def test_plan_relocate_of_an_unmovable_template_restarts_in_place(template: str) -> None:
    res = instance_incidents.plan_instances(NODES, [inst(disk_template=template)],
                                            [incident("relocate")],
                                            Plan())
    (op,) = res.jobs[0].ops
    assert op["OP_ID"] == "OP_INSTANCE_STARTUP"
    assert any("cannot move" in n for n in res.notes)


def test_plan_drain_relocate_is_one_job() -> None:
    res = instance_incidents.plan_instances(NODES, [inst()], [incident("drain-relocate")], Plan())
    (job,) = res.jobs
    drain, failover = job.ops
    assert drain["OP_ID"] == "OP_NODE_SET_PARAMS" and drain["node_name"] == "node2"
    assert drain["drained"] is True
    assert failover["OP_ID"] == "OP_INSTANCE_FAILOVER" and failover["iallocator"] == "herder"
    for op in job.ops:
        check_reasons(op, "ev-drain-relocate")
    # the node already drained: only the failover
    nodes = [dataclasses.replace(n, drained=n.name == "node2") for n in NODES]
    (job,) = instance_incidents.plan_instances(nodes, [inst()], [incident("drain-relocate")],
                                               Plan()).jobs
    assert [op["OP_ID"] for op in job.ops] == ["OP_INSTANCE_FAILOVER"]


def test_plan_waits_for_the_node_incidents_jobs_and_skips_planned_ones() -> None:
    plan = Plan(jobs=[Job("ev-node", "drain", [], nodes=frozenset({"node2"}))])
    res = instance_incidents.plan_instances(NODES, [inst()], [incident("restart")], plan)
    assert res.jobs == [] and "busy" in res.notes[0]
    done = incident("restart", jobs=[5], repair_status="pending")
    assert instance_incidents.plan_instances(NODES, [inst()], [done], Plan()).jobs == []


def test_plan_cancels_when_nothing_is_left_to_do() -> None:
    res = instance_incidents.plan_instances(NODES, [inst(admin_state="down")],
                                            [incident("restart")], Plan())
    assert res.jobs == [] and res.canceled == ["ev-restart"]
    res = instance_incidents.plan_instances(NODES, [], [incident("restart")], Plan())
    assert res.canceled == ["ev-restart"]


def test_node_incident_logic_ignores_instance_incidents() -> None:
    incs = [incident("relocate"), incident("restart", uuid=U_B)]
    assert incident_lifecycle.leading(incs) == {}
    assert incident_lifecycle.supersede(incs) == []
    assert incident_lifecycle.observe(incs, {"u2": {"status": "Ok"}}) == []
    incs[0].repair_status = "completed"
    assert incident_lifecycle.forget(incs, {}, {}) == []


def test_forget_keeps_finished_instance_incidents_for_the_window() -> None:
    done = incident("restart", repair_status="completed")
    failed = incident("relocate", repair_status="failed",
                      tag=incident_lifecycle.failed_tag("ev-relocate"))
    active = incident("drain-relocate")
    incs = [done, failed, active]
    tags = {U_A: (failed.tag,)}
    assert instance_incidents.forget(incs, tags, now=NOW + 100) == []
    # failed: its tag is still there
    assert instance_incidents.forget(incs, tags, now=NOW + 700) == [done]
    assert instance_incidents.forget(incs, {U_A: ()}, now=NOW + 700) == [failed]
    assert incs == [active]
    gone = incident("restart", repair_status="canceled")
    assert instance_incidents.forget([gone], {}, now=NOW) == [gone]


# --- the daemon: notification to job, completion, failure, state ----------------------------------


def make_daemon(tmp_path: Path, instances, **kw) -> tuple[FakeCluster, Maintd]:
    cluster = FakeCluster(4, instances)
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [FakeSource()], interval=0.01,
               watcher=False, round_delay=3600, **kw)
    return cluster, d


def test_daemon_restart_then_relocate_then_failure_tags_the_instance(tmp_path: Path) -> None:
    cluster, d = make_daemon(tmp_path, [inst(uuid=U_A)])

    async def go() -> None:
        await d.start()
        code, body = await d.notify(note())
        assert code == 202 and body["notification"]["status"] == "new"
        assert (await d.notify(note()))[0] == 409
        await d.tick()  # round_delay 3600: instance incidents do not wait for it
        (jid, ops), = cluster.submitted
        assert ops[0]["OP_ID"] == "OP_INSTANCE_STARTUP"
        (inc,) = d.state.incidents
        assert inc.repair_status == "pending" and inc.jobs == [jid]
        cluster.run_all()
        await d.tick()
        assert inc.repair_status == "completed"
        # crashes again: relocated
        code, body = await d.notify(note(when="2027-01-15T08:00:30.000001"))
        assert code == 202 and body["notification"]["status"] == "new"
        assert "relocate" in body["notification"]["reason"]
        await d.tick()
        ops = cluster.submitted[-1][1]
        assert ops[0]["OP_ID"] == "OP_INSTANCE_FAILOVER" and ops[0]["iallocator"] == "herder"
        cluster.fail_ops.add("OP_INSTANCE_FAILOVER")
        cluster.run_all()
        await d.tick()
        second = d.state.incidents[-1]
        assert second.repair_status == "failed"
        tag_ops = cluster.submitted[-1][1]
        assert tag_ops[0]["OP_ID"] == "OP_TAGS_SET" and tag_ops[0]["kind"] == "instance"
        assert tag_ops[0]["name"] == "a"
        assert tag_ops[0]["tags"] == [incident_lifecycle.failed_tag(second.uuid)]
        cluster.run_all()
        assert incident_lifecycle.failed_tag(second.uuid) in cluster.instance_tags("a")
        assert not any(t.startswith("maintd:") for n in cluster.nodes() for t in n.tags)

    asyncio.run(go())
    # the state (file) keeps the instance incidents
    loaded = FileState(tmp_path / "s.json").load()
    assert [(i.instance, i.action, i.repair_status) for i in loaded.incidents] == [
        (U_A, "restart", "completed"), (U_A, "relocate", "failed")]


def test_daemon_drain_relocate_and_the_watcher_skips_recovering(tmp_path: Path) -> None:
    cluster, d = make_daemon(tmp_path, [inst(uuid=U_A), inst("b", U_B)])
    d.round_delay = 0

    async def go() -> None:
        code, body = await d.notify(note("IO_ERROR_REPORT", "IO_ERROR"))
        assert code == 202 and "drain-relocate" in body["notification"]["reason"]
        await d.tick()
        ((_, ops),) = cluster.submitted
        assert [o["OP_ID"] for o in ops] == ["OP_NODE_SET_PARAMS", "OP_INSTANCE_FAILOVER"]
        cluster.run_all()
        await d.tick()
        assert d.state.incidents[0].repair_status == "completed"
        assert {n.name for n in cluster.nodes() if n.drained} == {"node2"}
        assert cluster.instances()[0].pnode != "node2"

    asyncio.run(go())


def test_watcher_skips_instances_with_an_active_instance_incident() -> None:
    from herder.maintd import watcher

    res = watcher.plan_watcher(NODES, [inst(), inst("b", U_B)], Plan(), {"a": "down", "b": "down"},
                               {}, now=NOW, skip={"a"})
    assert [j.instances for j in res.jobs] == [frozenset({"b"})]


def test_daemon_ignores_ordered_stops(tmp_path: Path) -> None:
    from herder.maintd.instances import JobInfo

    cluster, d = make_daemon(tmp_path, [inst(uuid=U_A)])
    cluster.other_jobs.append(JobInfo(9, "running", None, frozenset({"a"})))

    async def go() -> None:
        code, body = await d.notify(note("STOPPED_SHUTDOWN"))
        assert code == 202 and body["notification"]["status"] == "ignored"
        assert "job 9" in body["notification"]["reason"]
        assert d.state.incidents == []
        assert d.notifications()[-1]["status"] == "ignored"
        assert d.overview()["notifications"][-1]["reason"] == body["notification"]["reason"]

    asyncio.run(go())


def test_state_round_trip_with_instance_incidents(tmp_path: Path) -> None:
    node_inc = incident_lifecycle.new_incident("u3", {"status": "evacuate"}, NOW)
    st = MaintState(incidents=[incident("relocate"), node_inc])
    FileState(tmp_path / "s.json").save(st)
    loaded = FileState(tmp_path / "s.json").load()
    assert loaded.incidents == st.incidents
    assert loaded.incidents[0].instance == U_A and loaded.incidents[1].instance is None
    # what masterd's PUT /2/herder/maintenance/state validates
    maint = msgspec.convert({"incidents": model.to_builtins(st.incidents)}, model.Maintenance)
    assert maint.incidents == st.incidents
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"incidents": [{**model.to_builtins(st.incidents[0]), "action": "x"}]},
                        model.Maintenance)
