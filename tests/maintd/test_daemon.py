from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from herder.core import reason
from herder.maintd.daemon import Maintd
from herder.maintd.rounds import Instance
from herder.maintd.state import FileState

from .fakes import FakeCluster, FakeSource

EVAC = {"status": "evacuate", "command": "", "details": {"disk": "sdb"}}
LIVE = {"status": "live-repair", "command": "fix", "details": {}}


def make(tmp_path: Path, cluster: FakeCluster) -> tuple[Maintd, FakeSource]:
    src = FakeSource()
    return Maintd(cluster, FileState(tmp_path / "state.json"), [src], interval=0.01), src


def run(coro):
    return asyncio.run(coro)


def drive(d: Maintd, cluster: FakeCluster, rounds: int = 12) -> list[list[str]]:
    """Tick and finish jobs until nothing more happens; the steps of every round."""
    per_round: list[list[str]] = []

    async def go() -> None:
        for _ in range(rounds):
            before = len(cluster.submitted)
            await d.tick()
            new = cluster.submitted[before:]
            if new:
                per_round.append([ops[-1]["OP_ID"] for _, ops in new])
            cluster.run_all()
    run(go())
    return per_round


def test_evacuation_round_by_round(tmp_path: Path) -> None:
    insts = [Instance("a", "node2", ("node3",)), Instance("b", "node3", ("node2",))]
    cluster = FakeCluster(4, insts)
    d, src = make(tmp_path, cluster)
    src.data["u2"] = EVAC
    rounds = drive(d, cluster)
    assert rounds == [["OP_NODE_SET_PARAMS"], ["OP_INSTANCE_MIGRATE"],
                      ["OP_INSTANCE_REPLACE_DISKS", "OP_INSTANCE_REPLACE_DISKS"],
                      ["OP_TAGS_SET"]]
    (inc,) = d.state.incidents
    assert inc.repair_status == "completed" and len(inc.jobs) == 5
    node2 = next(n for n in cluster.nodes() if n.name == "node2")
    assert node2.offline and node2.drained and inc.tag in node2.tags
    assert all("node2" not in (i.pnode, *i.snodes) for i in cluster.instances())
    for _, ops in cluster.submitted:
        assert all([reason.MAINTD, inc.uuid] == op["reason"][-1][:2] for op in ops)
    # persisted
    assert FileState(tmp_path / "state.json").load().incidents[0].repair_status == "completed"
    # tag removed while still observed: kept; fixed script -> forgotten
    cluster.node("node2", tags=())
    drive(d, cluster, 1)
    assert len(d.state.incidents) == 1
    src.data["u2"] = {"status": "Ok"}
    drive(d, cluster, 1)
    assert d.state.incidents == []


def test_failed_job_fails_incident_and_stops(tmp_path: Path) -> None:
    cluster = FakeCluster(4, [Instance("a", "node2", ("node3",))])
    cluster.fail_ops = {"OP_INSTANCE_MIGRATE"}
    d, src = make(tmp_path, cluster)
    src.data["u2"] = EVAC
    rounds = drive(d, cluster)
    assert rounds == [["OP_NODE_SET_PARAMS"], ["OP_INSTANCE_MIGRATE"], ["OP_TAGS_SET"]]
    (inc,) = d.state.incidents
    assert inc.repair_status == "failed"
    assert inc.tag == f"maintd:repairfailed:{inc.uuid}"
    node2 = next(n for n in cluster.nodes() if n.name == "node2")
    assert inc.tag in node2.tags
    assert drive(d, cluster, 3) == []  # no further jobs
    # removing the repairfailed tag forgets at once (and, still observed, a new one starts)
    cluster.node("node2", tags=())
    drive(d, cluster, 1)
    assert [i.uuid for i in d.state.incidents] != [inc.uuid]


class JobsEndWhileReading(FakeCluster):
    """Jobs end between maintd's read of the nodes and its look at the jobs (a real cluster:
    the repairfailed tag job finishes during the round's RAPI calls)."""

    def job_status(self, job_id: int) -> str | None:
        self.run_all()
        return super().job_status(job_id)


def test_a_failed_incident_stays_when_its_tag_job_ends_during_the_tick(tmp_path: Path) -> None:
    """The tag job ended after the node list was read: maintd reads the nodes again rather
    than take the tag's absence for the operator's removal (it forgot the incident, and the
    node, still failing, got a new incident and the refused jobs again)."""
    cluster = JobsEndWhileReading(4, [Instance("a", "node2", ("node3",))])
    cluster.fail_ops = {"OP_INSTANCE_MIGRATE"}
    d, src = make(tmp_path, cluster)
    src.data["u2"] = EVAC

    async def ticks() -> None:
        for _ in range(10):
            await d.tick()  # jobs end only while maintd asks for their status

    run(ticks())
    steps = [ops[-1]["OP_ID"] for _, ops in cluster.submitted]
    assert steps == ["OP_NODE_SET_PARAMS", "OP_INSTANCE_MIGRATE", "OP_TAGS_SET"]
    (inc,) = d.state.incidents
    assert inc.repair_status == "failed"


def test_live_repair(tmp_path: Path) -> None:
    cluster = FakeCluster(3)
    d, src = make(tmp_path, cluster)
    src.data["u3"] = LIVE
    rounds = drive(d, cluster)
    assert rounds == [["OP_TAGS_SET"]]
    (_jid, ops), = cluster.submitted
    assert ops[0]["OP_ID"] == "OP_REPAIR_COMMAND" and ops[0]["input"] == LIVE
    assert d.state.incidents[0].repair_status == "completed"


def test_cancel_stops_actions_and_forgets_when_unobserved(tmp_path: Path) -> None:
    cluster = FakeCluster(4, [Instance("a", "node2", ("node3",))])
    d, src = make(tmp_path, cluster)
    src.data["u2"] = EVAC
    assert drive(d, cluster, 1) == [["OP_NODE_SET_PARAMS"]]
    inc = d.state.incidents[0]
    run(d.cancel(inc.uuid))
    assert inc.repair_status == "canceled"
    assert drive(d, cluster, 3) == []
    src.data["u2"] = {"status": "Ok"}
    drive(d, cluster, 1)
    assert d.state.incidents == []


def test_running_jobs_block_next_round(tmp_path: Path) -> None:
    cluster = FakeCluster(4, [Instance("a", "node2", ("node3",))])
    d, src = make(tmp_path, cluster)
    src.data["u2"] = EVAC

    async def go() -> None:
        await d.tick()
        await d.tick()
        await d.tick()
    run(go())
    assert len(cluster.submitted) == 1 and d.state.jobs == [cluster.submitted[0][0]]


def test_crash_between_submit_and_record_no_double_submit(tmp_path: Path) -> None:
    """kill -9 right after the job was submitted, before its id was saved."""
    cluster = FakeCluster(4, [Instance("a", "node2", ("node3",))])
    store = FileState(tmp_path / "state.json")
    src = FakeSource()
    src.data["u2"] = EVAC
    d = Maintd(cluster, store, [src])
    real_submit = cluster.submit

    class Crash(BaseException):
        pass

    def crashing(ops):
        real_submit(ops)
        raise Crash

    cluster.submit = crashing  # type: ignore[method-assign]
    with contextlib.suppress(Crash):
        run(d.tick())
    saved = store.load()
    assert saved.intents and saved.incidents[0].jobs == []
    cluster.submit = real_submit  # type: ignore[method-assign]
    d2 = Maintd(cluster, store, [src])
    run(d2.tick())
    assert len(cluster.submitted) == 1  # adopted, not submitted again
    inc = d2.state.incidents[0]
    assert inc.jobs == [cluster.submitted[0][0]] and inc.repair_status == "pending"
    assert d2.state.jobs == inc.jobs and d2.state.intents == []
    cluster.run_all()
    rounds = drive(d2, cluster)
    assert rounds[0] == ["OP_INSTANCE_MIGRATE"]
    assert d2.state.incidents[0].repair_status == "completed"


def test_crash_before_submit_resubmits_once(tmp_path: Path) -> None:
    cluster = FakeCluster(4)
    store = FileState(tmp_path / "state.json")
    src = FakeSource()
    src.data["u2"] = EVAC
    d = Maintd(cluster, store, [src])

    class Crash(BaseException):
        pass

    def crashing(ops):
        raise Crash

    real_submit = cluster.submit
    cluster.submit = crashing  # type: ignore[method-assign]
    with contextlib.suppress(Crash):
        run(d.tick())
    cluster.submit = real_submit  # type: ignore[method-assign]
    d2 = Maintd(cluster, store, [src])
    run(d2.tick())
    assert len(cluster.submitted) == 1
    assert len(d2.state.incidents) == 1  # incident not lost, not duplicated


def test_two_nodes_failing_rounds_never_share_an_instance(tmp_path: Path) -> None:
    insts = [Instance("x", "node2", ("node3",)), Instance("y", "node3", ("node2",)),
             Instance("z", "node4", ("node2",)), Instance("w", "node5", ("node3",))]
    cluster = FakeCluster(6, insts)
    d, src = make(tmp_path, cluster)
    src.data["u2"] = EVAC
    src.data["u3"] = {**EVAC, "details": {"disk": "sdc"}}
    seen_rounds = []

    async def go() -> None:
        for _ in range(15):
            before = len(cluster.submitted)
            await d.tick()
            seen_rounds.append(cluster.submitted[before:])
            cluster.run_all()
    run(go())
    for rnd in seen_rounds:
        names = [op.get("instance_name") for _, ops in rnd for op in ops
                 if op.get("instance_name")]
        assert len(names) == len(set(names))
    assert all(i.repair_status == "completed" for i in d.state.incidents)
    for i in cluster.instances():
        assert not {"node2", "node3"} & {i.pnode, *i.snodes}
