"""maintd's node-failure decisions (herder.maintd.nodefail): who is suspect, the candidates'
majority, the fence's confirmation, and where the instances go (pure; docs/ha.md)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

from herder.maintd import nodefail
from herder.maintd.rounds import Instance, Node

NODES = [Node("node1", "u1", master=True, group="g"), Node("node2", "u2", group="g"),
         Node("node3", "u3", group="g"), Node("node4", "u4", group="g"),
         Node("node5", "u5", group="g", offline=True),
         Node("node6", "u6", group="g", vm_capable=False)]


def test_only_online_vm_capable_non_master_nodes_past_the_failure_time_are_suspect() -> None:
    ages = {"node1": 99.0, "node2": 12.5, "node3": 11.9, "node4": 30.0, "node5": 99.0,
            "node6": 99.0}
    found = nodefail.suspects(NODES, ages, 12.0, busy={"u4"})
    assert [n.name for n in found] == ["node2"]


def answer(votes: dict[str, object], candidates: tuple[str, ...] = ("node1", "node2",
                                                                       "node3"),
           suspect: str = "node4") -> dict:
    return {"node": suspect, "master": "node1", "candidates": list(candidates),
            "votes": votes}


def test_a_majority_of_candidates_that_cannot_reach_the_node_fails_it() -> None:
    # node4 (no candidate) is suspect; the master and node2 cannot reach it: 2 of 3
    verdict = nodefail.decide(answer({
        "node2": {"reachable": False, "asked_age": None},
        "node3": {"reachable": True, "asked_age": None}}), 6.0)
    assert verdict.failed and verdict.cannot_reach == ["node1", "node2"]
    assert verdict.why == "2 of 3 other master candidates cannot reach it (node1, node2)"


def test_a_candidate_is_judged_by_the_other_candidates() -> None:
    # node3, a candidate, is suspect: the master and node2 decide (2 of 2) ...
    verdict = nodefail.decide(answer({"node2": {"reachable": False, "asked_age": None}},
                                     suspect="node3"), 6.0)
    assert verdict.failed and verdict.candidates == ["node1", "node2"]
    # ... one of the two is no majority
    verdict = nodefail.decide(answer({"node2": {"reachable": True, "asked_age": None}},
                                     suspect="node3"), 6.0)
    assert not verdict.failed
    # with one other candidate left (the master), the master decides alone
    verdict = nodefail.decide(answer({}, ("node1", "node2"), suspect="node2"), 6.0)
    assert verdict.failed and verdict.why == ("1 of 1 other master candidates cannot reach "
                                              "it (node1)")


def test_a_partitioned_master_has_no_majority() -> None:
    # the candidates do not answer the master: their silence is no vote
    verdict = nodefail.decide(answer({"node2": {"error": "no answer"},
                                      "node3": {"error": "no answer"}}), 6.0)
    assert not verdict.failed and verdict.cannot_reach == ["node1"]


def test_a_node_that_renewed_with_a_candidate_lately_is_not_failed() -> None:
    # node2 cannot open a connection to it, but it asked node2 for its lease 3 s ago (an
    # asymmetric cut): node2's vote does not count
    verdict = nodefail.decide(answer({
        "node2": {"reachable": False, "asked_age": 3.0},
        "node3": {"reachable": False, "asked_age": None}}, ("node1", "node2", "node3",
                                                            "node4", "node5")), 6.0)
    assert not verdict.failed and verdict.cannot_reach == ["node1", "node3"]
    assert verdict.last_asked == 3.0


def test_the_fence_is_confirmed_only_by_power_status_saying_unpowered() -> None:
    off = [[[0, "node3"], [0, None]]]
    assert nodefail.fence_confirmed([off, [[[0, "node3"], [0, {"powered": False}]]]])[0]
    for status in ([[[0, "node3"], [0, {"powered": True}]]],
                   [[[0, "node3"], [2, None]]], [[[0, "node3"], [0, "garbage"]]]):
        assert not nodefail.fence_confirmed([off, status])[0], status
    assert not nodefail.fence_confirmed([[[[0, "node3"], [2, None]]],
                                         [[[0, "node3"], [0, {"powered": False}]]]])[0]
    assert not nodefail.fence_confirmed(None)[0]


def inst(name: str, template: str = "sharedfile", memory: int = 512, priority: int = 0, *,
         snodes: tuple[str, ...] = (), admin_state: str = "up",
         auto_recover: bool = True) -> Instance:
    return Instance(name, "node2", snodes=snodes, disk_template=template, memory=memory,
                    ha_priority=priority, admin_state=admin_state, auto_recover=auto_recover)


def test_recovery_in_priority_order_within_the_memory_left() -> None:
    instances = [inst("low", priority=-5), inst("high", priority=50, memory=1024),
                 inst("mid", memory=1024), inst("local", "plain"), inst("file", "file"),
                 inst("down", admin_state="down"), inst("optout", auto_recover=False),
                 inst("mirror", "drbd", snodes=("node4",), memory=256),
                 Instance("elsewhere", "node3", disk_template="sharedfile")]
    free = {"node1": 1024, "node3": 1536, "node4": 512, "node5": 9999, "node6": 9999}
    plan = nodefail.plan_recovery("node2", NODES, instances, free)
    assert [(i.name, t) for i, t in plan.moves] == [
        ("high", "node3"), ("mid", "node1"), ("mirror", "node4"), ("low", "node3")]
    assert plan.lost == ["file", "local"]
    assert plan.skipped == ["down", "optout"]
    assert plan.unfit == []
    tight = nodefail.plan_recovery("node2", NODES, instances, {"node1": 600, "node3": 600,
                                                                "node4": 100})
    assert [(i.name, t) for i, t in tight.moves] == [("low", "node3")]  # ties: by name
    assert tight.unfit == ["high", "mid", "mirror"]  # reported, not forced


def test_job_priority_follows_ha_priority_within_ganetis_range() -> None:
    assert [nodefail.job_priority(p) for p in (100, 5, 0, -7, -100)] == [-20, -5, 0, 7, 19]


class LeaseCluster:
    """The cluster as `NodeFailures` sees it (`nodefail.Cluster`): node4 stopped renewing,
    no other candidate reaches it; every job succeeds when `finish` is called."""

    def __init__(self, recovery: bool = True) -> None:
        self.recovery = recovery
        self.node_list = [Node("node1", "u1", master=True, group="g"),
                          Node("node2", "u2", group="g"), Node("node3", "u3", group="g"),
                          Node("node4", "u4", group="g")]
        self.instance_list = [
            Instance("web", "node4", disk_template="sharedfile", memory=128),
            Instance("db", "node4", snodes=("node2",), disk_template="drbd", memory=128),
            Instance("mirror", "node2", snodes=("node4",), disk_template="drbd"),
            Instance("idle", "node3", snodes=("node4",), disk_template="drbd",
                     disks_active=False)]
        self.submitted: list[list[dict]] = []
        self.status: dict[int, str] = {}
        self.ages = {"node1": 0.5, "node2": 1.0, "node3": 1.5, "node4": 30.0}
        self.failure_time: float | None = None  # the cluster's maintenance nodeFailureTime

    def leases(self) -> dict:
        return {"lease": 6.0, "node_recovery": self.recovery, "nodes": dict(self.ages),
                "node_failure_time": self.failure_time}

    def liveness(self, node: str) -> dict:
        return {"node": node, "master": "node1", "candidates": ["node1", "node2", "node3"],
                "votes": {"node2": {"reachable": False, "asked_age": None},
                          "node3": {"reachable": False, "asked_age": None}}}

    def nodes(self) -> list[Node]:
        return list(self.node_list)

    def instances(self) -> list[Instance]:
        return list(self.instance_list)

    def node_figures(self) -> dict:
        return {n.name: {"mfree": 4096, "ndparams": {"oob_program": "/bin/oob"}}
                for n in self.node_list}

    def submit(self, ops: list[dict]) -> int:
        self.submitted.append(ops)
        for op in ops:  # what the jobs change, as masterd would
            if op["OP_ID"] == "OP_NODE_SET_PARAMS":
                self.node_list = [replace(n, offline=op["offline"]) if n.name == op["node_name"]
                                  else n for n in self.node_list]
            elif op["OP_ID"] == "OP_INSTANCE_FAILOVER":
                self.instance_list = [
                    replace(i, pnode=op["target_node"], snodes=tuple(
                        i.pnode if s == op["target_node"] else s for s in i.snodes))
                    if i.name == op["instance_name"] else i for i in self.instance_list]
        self.status[len(self.submitted)] = "running"
        return len(self.submitted)

    def job_info(self, job_id: int) -> dict | None:
        status = self.status.get(job_id)
        if status is None:
            return None
        ops = self.submitted[job_id - 1]
        result: list = [None] * len(ops)
        if ops[-1]["OP_ID"] == "OP_OOB_COMMAND":
            result = [[[[0, "node4"], [0, None]]], [[[0, "node4"], [0, {"powered": False}]]]]
        return {"id": job_id, "status": status, "opresult": result}

    def finish(self) -> None:
        self.status = {j: "success" for j in self.status}

    def op_ids(self) -> list[list[str]]:
        return [[op["OP_ID"] for op in ops] for ops in self.submitted]


def run_ticks(failures: nodefail.NodeFailures, incidents: list, cluster: LeaseCluster,
              count: int) -> None:
    import asyncio

    for _ in range(count):
        asyncio.run(failures.tick(incidents))
        cluster.finish()


def test_the_clusters_switch_turns_node_recovery_off_and_on() -> None:
    cluster = LeaseCluster(recovery=False)
    failures = nodefail.NodeFailures(cluster)
    incidents: list = []
    run_ticks(failures, incidents, cluster, 3)
    assert incidents == [] and cluster.submitted == []
    assert failures.summary()["state"] == "off (cluster setting nodeRecovery)"
    cluster.recovery = True
    run_ticks(failures, incidents, cluster, 1)
    (incident,) = incidents
    assert failures.summary()["state"] == "on"
    assert cluster.op_ids() == [["OP_NODE_SET_PARAMS"]]
    # turned off midway: the incident waits where it is, nothing more is submitted
    cluster.recovery = False
    run_ticks(failures, incidents, cluster, 3)
    assert cluster.op_ids() == [["OP_NODE_SET_PARAMS"]]
    assert incident.original["step"] == "offlining"


def test_a_returning_node_resyncs_as_the_secondary_then_the_incident_goes() -> None:
    cluster = LeaseCluster()
    failures = nodefail.NodeFailures(cluster)
    incidents: list = []
    run_ticks(failures, incidents, cluster, 8)
    (incident,) = incidents
    assert incident.repair_status == "completed", incident.original
    assert incident.original["recovered"] == {"db": "node2", "web": "node3"}
    # the node came back, offline: nothing happens until it is online again
    assert cluster.node_list[3].offline
    assert cluster.instance_list[1] == Instance("db", "node2", snodes=("node4",),
                                                disk_template="drbd", memory=128)
    submitted = len(cluster.submitted)
    run_ticks(failures, incidents, cluster, 2)
    assert len(cluster.submitted) == submitted and incidents == [incident]
    cluster.node_list[3] = Node("node4", "u4", group="g")
    cluster.ages["node4"] = 1.0  # it renews its lease again
    import asyncio

    asyncio.run(failures.tick(incidents))
    # activate-disks for the DRBD instances it is the secondary of, with active disks
    assert [ops[0]["instance_name"] for ops in cluster.submitted[submitted:]] == [
        "db", "mirror"]
    assert all(ops[0]["OP_ID"] == "OP_INSTANCE_ACTIVATE_DISKS"
               for ops in cluster.submitted[submitted:])
    assert incident.original["step"] == "resyncing" and incidents == [incident]
    asyncio.run(failures.tick(incidents))  # the jobs still run: the incident stays
    assert incidents == [incident]
    cluster.finish()
    asyncio.run(failures.tick(incidents))
    assert incidents == []
    assert len(cluster.submitted) == submitted + 2  # once each


def test_resync_instances_are_drbd_with_active_disks() -> None:
    instances = [Instance("a", "n1", snodes=("n2",)), Instance("b", "n2", snodes=("n3",)),
                 Instance("c", "n3", snodes=("n2",), disks_active=False),
                 Instance("d", "n3", snodes=("n2",), disk_template="sharedfile")]
    assert [i.name for i in nodefail.resync_instances("n2", instances)] == ["a"]


# --- the node-failed incident owns its node's instances (no second recovery races it) --------

U_WEB = "11111111-1111-4111-8111-111111111111"


def crash(host: str, when: str = "2027-01-15T08:00:00.000001", detail: str = "STOPPED_FAILED",
          uuid: str = U_WEB) -> Any:
    from herder.core import notification

    return notification.Notification("VM", host, when, {
        "event": "LIFECYCLE", "instance_uuid": uuid, "vir_domain_event": detail})


def owning_daemon(tmp_path: Path, step: str, *, pnode: str = "node2",
                  offline: bool = True) -> tuple[Any, Any, Any]:
    """maintd with node2's node-failed incident at `step` (its `web` moving to node3)."""
    from herder.maintd.daemon import Maintd
    from herder.maintd.state import FileState

    from .fakes import FakeCluster, FakeSource

    cluster = FakeCluster(4, [Instance("web", pnode, uuid=U_WEB, disk_template="sharedfile")])
    cluster.node("node2", offline=offline)
    daemon = Maintd(cluster, FileState(tmp_path / "s.json"), [FakeSource()], interval=0.01,
                    watcher=False, round_delay=3600, node_recovery=False)
    inc = nodefail.new_incident(cluster.nodes()[1], {
        "kind": "node-failed", "step": step, "recovered": {"web": "node3"}, "lost": [],
        "unfit": [], "skipped": []})
    inc.repair_status = "completed" if step == "done" else "pending"
    asyncio.run(daemon.start())  # (it loads its state: the incident after it)
    daemon.state.incidents.append(inc)
    return cluster, daemon, inc


def test_a_crash_report_of_a_recovering_instance_is_recorded_and_starts_nothing(
        tmp_path: Path) -> None:
    """node2 failed; while its incident recovers `web`, node2's own instmon (its report sent
    before it died, or spooled) says `web` crashed: no relocate incident, no job of its own
    racing the incident's failover; the report is on the incident."""
    cluster, daemon, inc = owning_daemon(tmp_path, "recovering")

    async def go() -> None:
        code, body = await daemon.notify(crash("node2"))
        assert code == 202, body
        said = body["notification"]
        assert said["status"] == "ignored" and said["incident"] == inc.uuid
        assert f"node-failed incident {inc.uuid} (recovering) owns it" in said["reason"]
        assert daemon.state.incidents == [inc]  # no instance incident
        await daemon.tick()
        assert cluster.submitted == []  # no second recovery
        (seen,) = inc.original["notifications"]
        assert seen["hostname"] == "node2" and seen["instance"] == U_WEB
        assert seen["kind"] == "crash" and seen["detail"] == "STOPPED_FAILED"
        # ... also from the node it is being started on (the move's own stop and start)
        code, body = await daemon.notify(crash("node3", "2027-01-15T08:00:01.000001",
                                               "STOPPED_DESTROYED"))
        assert code == 202 and body["notification"]["incident"] == inc.uuid
        assert len(inc.original["notifications"]) == 2

    asyncio.run(go())
    # saved with the incident: `maintd status` and the page show it
    from herder.maintd.state import FileState

    (saved,) = FileState(tmp_path / "s.json").load().incidents
    assert len(saved.original["notifications"]) == 2


def test_the_returning_nodes_reports_stay_with_the_incident_but_a_new_failure_elsewhere_is_not(
        tmp_path: Path) -> None:
    """Done, node2 still offline: the returned node's instmon reports `web` (now on node3)
    stopped: recorded, not refused; `web` crashing on node3 later is a failure of its own."""
    _, daemon, inc = owning_daemon(tmp_path, "done", pnode="node3")

    async def go() -> None:
        code, body = await daemon.notify(crash("node2"))
        assert code == 202 and body["notification"]["incident"] == inc.uuid
        assert len(inc.original["notifications"]) == 1
        code, body = await daemon.notify(crash("node3", "2027-01-15T09:00:00.000001"))
        assert code == 202 and body["notification"]["status"] == "new"
        assert daemon.state.incidents[-1].action == "restart"
        assert len(inc.original["notifications"]) == 1

    asyncio.run(go())


def test_once_the_node_is_online_again_its_reports_are_its_own(tmp_path: Path) -> None:
    _, daemon, inc = owning_daemon(tmp_path, "done", offline=False)

    async def go() -> None:
        code, body = await daemon.notify(crash("node2"))
        assert code == 202 and body["notification"]["status"] == "new"
        assert "notifications" not in inc.original

    asyncio.run(go())


def test_the_incident_takes_over_the_instance_incidents_of_its_node() -> None:
    """A crash report of node4's `web` came before node4 was declared failed (a restart
    planned): the node-failed incident cancels it and lists it; only the incident's own
    failover moves `web`, after the fence."""
    from herder.core import model

    cluster = LeaseCluster()
    earlier = model.Incident(uuid="e1", node="u4", instance="uuid-web",
                             original={"kind": "crash", "instance": "web"}, action="restart",
                             repair_status="pending", tag="", ctime=1.0, mtime=1.0, jobs=[7])
    shown = model.Incident(uuid="e2", node="u4", instance="uuid-db", original={"kind": "hung"},
                           action="notify", repair_status="noted", tag="", ctime=1.0,
                           mtime=1.0)
    incidents: list = [earlier, shown]
    failures = nodefail.NodeFailures(cluster)
    asyncio.run(failures.tick(incidents))
    inc = incidents[-1]
    assert inc.action == "node-failed"
    assert earlier.repair_status == "canceled"
    assert inc.original["taken_over"] == [{"incident": "e1", "instance": "web",
                                           "action": "restart", "jobs": [7]}]
    assert shown.repair_status == "noted"  # a notify incident only shows something
    run_ticks(failures, incidents, cluster, 8)
    assert inc.repair_status == "completed"
    assert [ops[0]["instance_name"] for ops in cluster.submitted
            if ops[0]["OP_ID"] == "OP_INSTANCE_FAILOVER"] == ["db", "web"]


def test_the_clusters_failure_time_overrides_maintds_own() -> None:
    """node4 silent for 9 s: not suspect with maintd's 12 s; with the cluster's maintenance
    nodeFailureTime of 8 s it is (and failed: nobody reaches it); unset again, 12 s."""
    cluster = LeaseCluster()
    cluster.ages["node4"] = 9.0
    failures = nodefail.NodeFailures(cluster, failure_time=12.0)
    incidents: list = []
    asyncio.run(failures.tick(incidents))
    assert incidents == [] and failures.summary()["failure_time"] == 12.0
    cluster.failure_time = 8.0
    asyncio.run(failures.tick(incidents))
    assert [i.action for i in incidents] == ["node-failed"]
    assert failures.summary()["failure_time"] == 8.0
    cluster.failure_time = None
    asyncio.run(failures.tick([]))
    assert failures.summary()["failure_time"] == 12.0
