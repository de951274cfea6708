from __future__ import annotations

import asyncio
from pathlib import Path

from herder.maintd import harep
from herder.maintd.daemon import Maintd
from herder.maintd.rounds import Instance
from herder.maintd.state import FileState

from .fakes import FakeCluster, FakeSource

P = harep.PREFIX


def setup(tmp_path: Path, tags: list[str], **offline: bool) -> tuple[Maintd, FakeCluster]:
    cluster = FakeCluster(4, [Instance("a", "node2", ("node3",))])
    for name, value in offline.items():
        cluster.node(name, offline=value)
    cluster.cluster_tags = tags
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [FakeSource()], harep=True)
    return d, cluster


def rounds(d: Maintd, cluster: FakeCluster, n: int = 6) -> list[list[tuple[str, ...]]]:
    out = []

    async def go() -> None:
        for _ in range(n):
            before = len(cluster.submitted)
            await d.tick()
            new = cluster.submitted[before:]
            if new:
                out.append([tuple(op["OP_ID"] for op in ops) for _, ops in new])
            cluster.run_all()
    asyncio.run(go())
    return out


def tags_of(cluster: FakeCluster) -> tuple[str, ...]:
    return cluster.instance_tags("a")


def test_fix_storage_then_result_success(tmp_path: Path) -> None:
    d, cluster = setup(tmp_path, [P + "fix-storage"], node3=True)
    assert rounds(d, cluster) == [[("OP_TAGS_SET", "OP_INSTANCE_REPLACE_DISKS")],
                                  [("OP_TAGS_SET", "OP_TAGS_DEL")]]
    (tag,) = tags_of(cluster)
    state = harep.parse_state_tag(tag)
    assert state is not None and state.outcome == "success" and state.repair == "fix-storage"
    assert state.jobs == (cluster.submitted[0][0],)
    assert cluster.instances()[0].snodes[0] not in ("node2", "node3")
    # every opcode has maintd's reason with the repair's uuid
    for _, ops in cluster.submitted:
        assert all(op["reason"][-1][:2] == ["gnt:daemon:maintd", state.uuid] for op in ops)


def test_failed_repair_is_recorded_and_not_retried(tmp_path: Path) -> None:
    d, cluster = setup(tmp_path, [P + "failover"], node3=True)
    cluster.fail_ops = {"OP_INSTANCE_REPLACE_DISKS"}
    assert rounds(d, cluster) == [[("OP_TAGS_SET", "OP_INSTANCE_REPLACE_DISKS")],
                                  [("OP_TAGS_SET", "OP_TAGS_DEL")]]
    assert harep.repair_state(tags_of(cluster))[0] == "failed"


def test_not_allowed_gives_one_enoperm(tmp_path: Path) -> None:
    d, cluster = setup(tmp_path, [P + "fix-storage"], node2=True)  # needs failover
    assert rounds(d, cluster) == [[("OP_TAGS_SET",)]]
    (tag,) = tags_of(cluster)
    assert harep.parse_state_tag(tag).outcome == "enoperm"


def test_disabled_or_suspended_does_nothing(tmp_path: Path) -> None:
    d, cluster = setup(tmp_path, [], node3=True)
    assert rounds(d, cluster, 2) == []
    d, cluster = setup(tmp_path, [P + "reinstall", P + "suspend"], node3=True)
    assert rounds(d, cluster, 2) == []


def test_harep_off_by_default(tmp_path: Path) -> None:
    d, cluster = setup(tmp_path, [P + "fix-storage"], node3=True)
    d.harep = False
    assert rounds(d, cluster, 2) == []


def test_instances_of_an_incident_node_left_to_the_incident(tmp_path: Path) -> None:
    cluster = FakeCluster(4, [Instance("a", "node2", ("node3",))])
    cluster.node("node3", drained=True)
    cluster.cluster_tags = [P + "reinstall"]
    src = FakeSource()
    src.data["u2"] = {"status": "evacuate", "command": "", "details": {}}
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [src], harep=True)
    # node2 has an active incident: its evacuation moves "a"; harep never touches it
    steps = rounds(d, cluster, 8)
    assert steps[0] == [("OP_NODE_SET_PARAMS",)]
    assert not any(ops[0] == "OP_TAGS_SET" and len(ops) > 1 for rnd in steps for ops in rnd)
    assert not any(t.startswith(P) for t in cluster.instance_tags("a"))
    assert d.state.incidents[0].repair_status == "completed"


def test_crash_after_submitting_a_harep_job_does_not_repeat_it(tmp_path: Path) -> None:
    import contextlib

    d, cluster = setup(tmp_path, [P + "fix-storage"], node3=True)

    class Crash(BaseException):
        pass

    real = cluster.submit

    def crashing(ops):
        real(ops)
        raise Crash

    cluster.submit = crashing  # type: ignore[method-assign]
    with contextlib.suppress(Crash):
        asyncio.run(d.tick())
    cluster.submit = real  # type: ignore[method-assign]
    d2 = Maintd(cluster, d.store, [FakeSource()], harep=True)
    asyncio.run(d2.tick())  # the queued job is adopted: the round waits for it
    assert len(cluster.submitted) == 1 and d2.state.jobs == [cluster.submitted[0][0]]
    steps = rounds(d2, cluster)
    assert steps == [[("OP_TAGS_SET", "OP_TAGS_DEL")]]
    assert harep.repair_state(tags_of(cluster))[0] == "healthy"
