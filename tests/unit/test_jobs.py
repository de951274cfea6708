"""The job queue with the real processor, locks and config store (in-process)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from herder.core import model
from herder.core.errors import NotFoundError
from herder.core.store import FileStore
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.jobs.queue import JobQueue, OpStatus, job_fields
from herder.masterd.jobs.store_file import FileJobStorage
from herder.masterd.lu.base import MasterEnv
from herder.masterd.processor import Processor
from tests.conftest import build_config, stored_files


class Master:
    def __init__(self, tmp_path: Path, workers: int = 4, strategy=None) -> None:
        self.store = FileStore(tmp_path / "config.json")
        if not self.store.exists():
            self.store.create(build_config(nodes=4))
        config = self.store.load()
        self.env = MasterEnv(store=self.store, locks=locking.LockManager(
            nodes=config.nodes, nodegroups=config.nodegroups, instances=config.instances))
        processor = Processor(self.env, strategy) if strategy else Processor(self.env)
        self.queue = JobQueue(tmp_path / "queue", processor, workers=workers)
        self.recovered = self.queue.recover()
        self.queue.start()

    def run(self, *ops: dict, timeout: float = 10) -> dict:
        job_id = self.queue.submit(list(ops))
        self.queue.wait(job_id, timeout)
        return self.queue.info(job_id)


@pytest.fixture
def master(tmp_path: Path):
    m = Master(tmp_path)
    yield m
    m.queue.stop()


def delay(node: str, seconds: float) -> dict:
    return {"OP_ID": "OP_TEST_DELAY", "duration": seconds, "on_nodes": [node]}


def test_config_opcodes_change_the_config(master: Master) -> None:
    info = master.run({"OP_ID": "OP_TAGS_SET", "kind": "node", "name": "node2",
                       "tags": ["rack:a1"]})
    assert info["status"] == "success"
    assert master.store.load().find_node("node2").tags == ["rack:a1"]
    # node2 is a candidate and node4 could take its place: Ganeti's refusal, then its
    # auto_promote (node4 fills the pool of 10: four possible, three candidates before)
    info = master.run({"OP_ID": "OP_NODE_SET_PARAMS", "node_name": "node2", "drained": True})
    assert info["status"] == "error" and "Not enough master candidates" in str(info["opresult"])
    assert not master.store.load().find_node("node2").drained
    info = master.run({"OP_ID": "OP_NODE_SET_PARAMS", "node_name": "node2", "drained": True,
                       "auto_promote": True})
    assert info["opresult"] == [[["master_candidate", "False"], ["drained", "True"]]]
    assert master.store.load().find_node("node4").master_candidate
    info = master.run({"OP_ID": "OP_GROUP_ADD", "group_name": "rack2"},
                      {"OP_ID": "OP_GROUP_RENAME", "group_name": "rack2", "new_name": "rack3"})
    assert info["opstatus"] == ["success", "success"]
    assert master.store.load().find_group("rack3")
    info = master.run({"OP_ID": "OP_CLUSTER_SET_PARAMS", "add_uids": [[1000, 1009]],
                       "beparams": {"vcpus": 2}, "maint_round_delay": 60})
    config = master.store.load()
    assert config.cluster.uid_pool == [(1000, 1009)]
    assert config.cluster.beparams == {"vcpus": 2}
    assert config.maintenance.round_delay == 60


def test_master_rules_and_errors_are_job_errors(master: Master) -> None:
    before = stored_files(master.store.path)
    info = master.run({"OP_ID": "OP_NODE_SET_PARAMS", "node_name": "node1", "offline": True})
    assert info["status"] == "error"
    assert info["opresult"][0] == ["OpPrereqError", [
        "The master role can be changed only via master-failover", "wrong_input"]]
    info = master.run({"OP_ID": "OP_CLUSTER_SET_PARAMS", "beparams": {"minmem": 4096}})
    assert info["status"] == "error" and "must not exceed maxmem" in info["opresult"][0][1][0]
    info = master.run({"OP_ID": "OP_GROUP_REMOVE", "group_name": "default"})
    assert info["status"] == "error" and "still has nodes" in info["opresult"][0][1][0]
    assert stored_files(master.store.path) == before  # nothing written by failed opcodes


def test_later_opcodes_are_not_run_after_a_failure(master: Master) -> None:
    info = master.run({"OP_ID": "OP_TAGS_DEL", "kind": "cluster", "tags": ["absent"]},
                      {"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["good"]})
    assert info["opstatus"] == ["error", "error"]
    assert info["opresult"][1][1][0].startswith("not run")
    assert master.store.load().cluster.tags == []


def test_dry_run_changes_nothing(master: Master) -> None:
    before = master.store.load().serial_no
    info = master.run({"OP_ID": "OP_NODE_SET_PARAMS", "node_name": "node2", "drained": True,
                       "auto_promote": True, "dry_run": True})
    assert info["status"] == "success" and info["opresult"] == [None]
    assert master.store.load().serial_no == before
    info = master.run({"OP_ID": "OP_NODE_SET_PARAMS", "node_name": "node1", "drained": True,
                       "dry_run": True})
    assert info["status"] == "error"  # the checks still run


def test_a_tag_added_by_one_job_is_removed_by_the_next(master: Master) -> None:
    """The processor checks on the store's shared snapshot: a check that changed it (the tag
    removal's trial) made the job's own change find the tag gone ("not present")."""
    add = {"OP_ID": "OP_TAGS_SET", "kind": "node", "name": "node2", "tags": ["ready:1"]}
    remove = {"OP_ID": "OP_TAGS_DEL", "kind": "node", "name": "node2", "tags": ["ready:1"]}
    assert master.run(add)["status"] == "success"
    assert "ready:1" in master.store.snapshot().find_node("node2").tags
    info = master.run(remove)
    assert info["status"] == "success", info["opresult"]
    assert master.store.load().find_node("node2").tags == []


def test_checks_leave_the_shared_snapshot_alone(master: Master) -> None:
    """Dry runs (checks only) of changing opcodes: the readers' snapshot equals the stored
    document afterwards, object for object."""
    master.run({"OP_ID": "OP_TAGS_SET", "kind": "node", "name": "node3", "tags": ["t1"]},
               {"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["c1"]})
    inst = next(iter(master.store.load().instances.values())).name
    for op in (
        {"OP_ID": "OP_TAGS_DEL", "kind": "node", "name": "node3", "tags": ["t1"]},
        {"OP_ID": "OP_TAGS_SET", "kind": "node", "name": "node3", "tags": ["t2"]},
        {"OP_ID": "OP_TAGS_DEL", "kind": "cluster", "tags": ["c1"]},
        {"OP_ID": "OP_TAGS_SET", "kind": "instance", "name": inst, "tags": ["i1"]},
        {"OP_ID": "OP_NODE_SET_PARAMS", "node_name": "node3", "drained": True,
         "ndparams": {"spindle_count": 2}},
        {"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": inst, "beparams": {"vcpus": 2},
         "osparams": {"x": "1"}},
        {"OP_ID": "OP_CLUSTER_SET_PARAMS", "beparams": {"vcpus": 2}, "add_uids": [[1, 2]]},
    ):
        info = master.run({**op, "dry_run": True})
        assert info["status"] == "success", (op, info["opresult"])
        assert model.encode(master.store.snapshot()) == model.encode(master.store.load()), op


def test_reason_trail_is_recorded(master: Master) -> None:
    job_id = master.queue.submit(
        [{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["t"],
          "reason": [["gnt:daemon:maintd", "incident 1", 5]]}],
        reason=[["gnt:client:test", "because", 6]])
    master.queue.wait(job_id, 10)
    trail = master.queue.info(job_id, ["ops"])["ops"][0]["reason"]
    assert trail[0] == ["gnt:daemon:maintd", "incident 1", 5]
    assert trail[1] == ["gnt:client:test", "because", 6]
    assert trail[2][0] == "gnt:opcode:tags_set" and trail[2][1] == f"job={job_id};index=0"


def _interval(info: dict) -> tuple[float, float]:
    """When the (single) opcode ran: from holding its locks to its end."""
    start, end = info["opexec"][0], info["opend"][0]
    return start[0] + start[1] / 1e6, end[0] + end[1] / 1e6


def test_non_conflicting_jobs_overlap_conflicting_ones_do_not(master: Master) -> None:
    a = master.queue.submit([delay("node2", 0.6)])
    b = master.queue.submit([delay("node3", 0.6)])
    c = master.queue.submit([delay("node2", 0.6)])
    for job_id in (a, b, c):
        master.queue.wait(job_id, 15)
    ia, ib, ic = (_interval(master.queue.info(j, ["opexec", "opend"])) for j in (a, b, c))
    def overlap(x: tuple[float, float], y: tuple[float, float]) -> bool:
        return x[0] < y[1] - 0.05 and y[0] < x[1] - 0.05

    assert not overlap(ia, ic)  # same node: one after the other
    first = ia if ia[0] < ic[0] else ic
    assert overlap(ib, first)  # another node: at the same time


def test_blocked_job_shows_waiting_and_can_be_canceled(master: Master) -> None:
    holder = master.queue.submit([delay("node2", 1.5)])
    deadline = time.monotonic() + 5
    while master.queue.get(holder).status != OpStatus.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    blocked = master.queue.submit([delay("node2", 0.1)])
    while master.queue.get(blocked).status != OpStatus.WAITING:
        assert time.monotonic() < deadline, master.queue.get(blocked).status
        time.sleep(0.02)
    ok, message = master.queue.cancel(blocked)
    assert ok and "will be canceled" in message
    job = master.queue.wait(blocked, 10)
    assert job.status == OpStatus.CANCELED
    assert master.queue.wait(holder, 10).status == OpStatus.SUCCESS
    assert master.queue.cancel(holder) == (False, f"Job {holder} is finished (success)")


def test_cancel_ends_an_unlimited_lock_wait_at_once(tmp_path: Path) -> None:
    """In the final, blocking phase a waiting job keeps its place in the lock queue; a cancel
    still ends the wait immediately."""
    m = Master(tmp_path, strategy=lambda: locking.LockAttemptTimeoutStrategy(timeouts=[]))
    try:
        holder = m.queue.submit([delay("node2", 3)])
        deadline = time.monotonic() + 5
        while m.queue.get(holder).status != OpStatus.RUNNING:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        blocked = m.queue.submit([delay("node2", 0.1)])
        while m.queue.get(blocked).status != OpStatus.WAITING:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        started = time.monotonic()
        assert m.queue.cancel(blocked)[0]
        assert m.queue.wait(blocked, 5).status == OpStatus.CANCELED
        assert time.monotonic() - started < 2.0  # not after the holder's 3 s
        assert m.queue.get(holder).status == OpStatus.RUNNING
    finally:
        m.queue.stop()


def test_cancel_queued_job(tmp_path: Path) -> None:
    m = Master(tmp_path, workers=1)
    try:
        busy = m.queue.submit([delay("node2", 0.8)])
        queued = m.queue.submit([{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["x"]}])
        assert m.queue.get(queued).status == OpStatus.QUEUED
        assert m.queue.cancel(queued) == (True, f"Job {queued} canceled")
        assert m.queue.get(queued).status == OpStatus.CANCELED
        m.queue.wait(busy, 10)
        time.sleep(0.2)
        assert m.store.load().cluster.tags == []  # never ran
    finally:
        m.queue.stop()


def test_priority_orders_queued_jobs(tmp_path: Path) -> None:
    m = Master(tmp_path, workers=1)
    try:
        m.queue.submit([delay("node2", 0.5)])  # occupies the only worker
        low = m.queue.submit([{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["low"],
                               "priority": 10}])
        high = m.queue.submit([{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["high"],
                                "priority": -10}])
        m.queue.wait(low, 10)
        m.queue.wait(high, 10)
        assert m.store.load().cluster.tags == ["high", "low"]
    finally:
        m.queue.stop()


def test_wait_for_change(master: Master) -> None:
    job_id = master.queue.submit([delay("node2", 0.5)])
    first = master.queue.wait_for_change(job_id, ["status"], None, None, 5)
    assert first is not None
    seen = [first["job_info"][0]]
    while seen[-1] not in ("success", "error"):
        nxt = master.queue.wait_for_change(job_id, ["status"], [seen[-1]], None, 5)
        assert nxt is not None
        seen.append(nxt["job_info"][0])
    assert seen[-1] == "success"
    assert master.queue.wait_for_change(job_id, ["status"], ["success"], None, 0.1) == {
        "job_info": ["success"], "log_entries": []}  # finished: answers at once
    unfinished = master.queue.submit([delay("node3", 2)])
    deadline = time.monotonic() + 5
    while master.queue.get(unfinished).status != OpStatus.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    started = time.monotonic()
    assert master.queue.wait_for_change(unfinished, ["status"], ["running"], None, 0.3) is None
    assert time.monotonic() - started >= 0.25
    with pytest.raises(NotFoundError):
        master.queue.wait_for_change(99999, ["status"], None, None, 0.1)


def test_log_entries_reach_waiters(master: Master) -> None:
    info = master.run({"OP_ID": "OP_NODE_EVACUATE", "node_name": "node4"})
    assert info["status"] == "success"
    entries = master.queue.wait_for_change(info["id"], ["status"], None, 0, 1)["log_entries"]
    assert entries and "holds no instances" in entries[0][3]
    assert entries[0][0] == 1 and len(entries[0][1]) == 2


def test_node_rpc_failure_is_a_clear_job_error(master: Master) -> None:
    before = stored_files(master.store.path)
    info = master.run({"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": "plain0"})
    assert info["status"] == "error"
    # a start asks the primary for its free memory first (Ganeti's CheckNodeFreeMemory)
    assert info["opresult"][0][1][0] == ("Can't get data from node node1.example.com: node "
                                         "node1.example.com: cannot call node_info: no node "
                                         "daemon transport is configured")
    assert stored_files(master.store.path) == before


def test_bad_submissions_queue_nothing(master: Master) -> None:
    before = master.queue.job_ids()
    with pytest.raises(opcodes.OpcodeError, match="unknown opcode 'OP_NOPE'"):
        master.queue.submit([{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["a"]},
                             {"OP_ID": "OP_NOPE"}])
    with pytest.raises(opcodes.OpcodeError, match="at least one opcode"):
        master.queue.submit([])
    with pytest.raises(opcodes.OpcodeError, match="unknown field `colour`"):
        master.queue.submit([{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["a"],
                              "colour": 1}])
    with pytest.raises(opcodes.OpcodeError, match="priority"):
        master.queue.submit([{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["a"],
                              "priority": 99}])
    assert master.queue.job_ids() == before


def test_restart_recovers_every_job(tmp_path: Path) -> None:
    """A master that stops with jobs queued, waiting and running: after restart every job is
    accounted for — queued ones run, the running one is an error that says why."""
    m = Master(tmp_path, workers=1)
    running = m.queue.submit([delay("node2", 30)])
    deadline = time.monotonic() + 25  # the holder runs 30 s; a loaded machine
    while m.queue.get(running).status != OpStatus.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    queued = m.queue.submit([{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["later"]}])
    # Simulate the master dying: the worker threads are abandoned mid-job (daemon threads),
    # and a new queue loads the same directory.
    m.queue._stopping = True
    files = {p.name: json.loads(p.read_text()) for p in (tmp_path / "queue").glob("job-*.json")}
    assert files[f"job-{running}.json"]["ops"][0]["status"] == "running"
    m2 = Master(tmp_path, workers=2)
    try:
        assert m2.recovered["failed"] == [running]
        assert m2.recovered["requeued"] == [queued]
        failed = m2.queue.info(running)
        assert failed["status"] == "error"
        assert "master daemon stopped while this opcode was running" in \
            failed["opresult"][0][1][0]
        assert m2.queue.wait(queued, 10).status == OpStatus.SUCCESS
        assert m2.store.load().cluster.tags == ["later"]
        assert m2.queue.submit([delay("node3", 0)]) > queued  # ids keep growing
    finally:
        m2.queue.stop()


def test_waiting_for_locks_is_not_written_and_a_restart_queues_the_job_again(
        tmp_path: Path) -> None:
    """An opcode's move from queued to waiting is the one change not written (a restart would
    queue a waiting opcode again anyway); the next change writes it with the rest."""
    m = Master(tmp_path, workers=2)
    holder = m.queue.submit([delay("node2", 30)])
    deadline = time.monotonic() + 25  # the holder runs 30 s; a loaded machine
    # the holder has the node's lock first (else the other job could take it before it)
    while m.queue.get(holder).status != OpStatus.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    blocked = m.queue.submit([delay("node2", 0)])
    while m.queue.get(blocked).status != OpStatus.WAITING:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    stored = json.loads((tmp_path / "queue" / f"job-{blocked}.json").read_text())
    assert stored["ops"][0]["status"] == "queued"
    m.queue._stopping = True  # the master dies (worker threads abandoned)
    m2 = Master(tmp_path, workers=2)
    try:
        assert m2.recovered["failed"] == [holder] and m2.recovered["requeued"] == [blocked]
        assert m2.queue.wait(blocked, 10).status == OpStatus.SUCCESS
        stored = json.loads((tmp_path / "queue" / f"job-{blocked}.json").read_text())
        assert stored["ops"][0]["status"] == "success"
    finally:
        m2.queue.stop()


def test_job_fields_match_ganeti_names(master: Master) -> None:
    info = master.run({"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["f"]})
    assert set(info) == {"id", "status", "ops", "opresult", "opstatus", "oplog", "received_ts",
                         "start_ts", "end_ts", "summary", "priority"}
    assert info["summary"] == ["TAGS_SET"]
    assert all(len(info[k]) == 2 for k in ("received_ts", "start_ts", "end_ts"))
    with pytest.raises(opcodes.OpcodeError, match="unknown job field"):
        job_fields(master.queue.get(info["id"]), ["nope"])


def test_many_parallel_submitters(master: Master) -> None:
    ids: list[int] = []
    lock = threading.Lock()

    def submit(n: int) -> None:
        for i in range(10):
            job_id = master.queue.submit([{"OP_ID": "OP_TAGS_SET", "kind": "cluster",
                                           "tags": [f"t{n}-{i}"]}])
            with lock:
                ids.append(job_id)

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 40
    for job_id in ids:
        assert master.queue.wait(job_id, 30).status == OpStatus.SUCCESS
    assert len(master.store.load().cluster.tags) == 40


def test_corrupt_job_file_is_set_aside_and_its_id_not_reused(tmp_path: Path) -> None:
    m = Master(tmp_path)
    first = m.run({"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["a"]})["id"]
    m.queue.stop()
    (tmp_path / "queue" / "job-7.json").write_text('{"id": 7, "ops": [')  # torn garbage
    m2 = Master(tmp_path)
    try:
        assert (tmp_path / "queue" / "job-7.corrupt").exists()
        assert m2.queue.job_ids() == [first]
        assert m2.queue.submit([delay("node3", 0)]) == 8
    finally:
        m2.queue.stop()


def test_a_job_summary_is_stored_not_parsed_again(master: Master, monkeypatch) -> None:
    """Issue 35 item 9: showing a job (its summary, in every list and every console's
    overview) re-parsed and re-validated each opcode; the summary is made once, at submission,
    and stored with the job. A job stored before (no summary) or whose input no longer
    validates is shown by its OP_ID."""
    info = master.run({"OP_ID": "OP_TAGS_SET", "kind": "instance", "name": "web1",
                       "tags": ["f"]})
    assert info["summary"] == ["TAGS_SET(web1)"]

    def no_parsing(data):
        raise AssertionError("a job shown was parsed again")

    monkeypatch.setattr(opcodes, "parse", no_parsing)
    assert master.queue.info(info["id"], ["summary"])["summary"] == ["TAGS_SET(web1)"]
    stored = json.loads((master.queue.directory / f"job-{info['id']}.json").read_text())
    assert stored["ops"][0]["summary"] == "TAGS_SET(web1)"
    monkeypatch.undo()
    old = master.queue.get(info["id"])
    old.ops[0].summary = None
    old.ops[0].input["tags"] = ["bad tag with a very long name" * 20]
    assert master.queue.info(info["id"], ["summary"])["summary"] == ["TAGS_SET"]


def test_read_only_jobs_are_kept_in_memory_briefly_and_their_ids_never_come_back(
        tmp_path: Path) -> None:
    """Issue 35 item 10: every `/2/instances/NAME/info` was a job kept forever and copied to
    every master candidate. A job of read-only opcodes only (instance info, storage and OS
    queries) is no file in the queue directory (so redistribution has nothing to copy), is
    shown like any job while it lives, and is dropped once it has been finished for the
    queue's `ephemeral_ttl`; a restart never gives its id to another job."""
    from herder.masterd.redist import queue_state

    m = Master(tmp_path)
    m.queue.ephemeral_ttl = 0.5
    try:
        query = {"OP_ID": "OP_INSTANCE_QUERY_DATA", "instances": ["plain0"], "static": True}
        read = m.run(query)
        assert read["status"] == "success" and "plain0.example.com" in read["opresult"][0]
        assert read["id"] in m.queue.job_ids()
        written = m.run({"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["w"]})
        mixed = m.run(query, {"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["x"]})
        stored = set(queue_state(m.queue.directory))
        assert stored == {f"job-{written['id']}.json", f"job-{mixed['id']}.json"}
        time.sleep(0.6)
        assert read["id"] not in m.queue.job_ids()
        with pytest.raises(NotFoundError):
            m.queue.info(read["id"])
        last = m.run(query)["id"]
    finally:
        m.queue.stop()
    again = Master(tmp_path)
    try:
        assert again.queue.submit([{"OP_ID": "OP_TAGS_SET", "kind": "cluster",
                                    "tags": ["y"]}]) > last
    finally:
        again.queue.stop()


def test_read_only_jobs_held_at_once_are_bounded(tmp_path: Path) -> None:
    """A queue never holds more than `max_ephemeral` read-only jobs: more are refused (the
    RAPI answers 503) until some expire; other jobs are not affected."""
    from herder.masterd.jobs.queue import QueueFull

    m = Master(tmp_path)
    m.queue.max_ephemeral = 3
    try:
        query = {"OP_ID": "OP_INSTANCE_QUERY_DATA", "instances": ["plain0"], "static": True}
        for _ in range(3):
            m.queue.submit([query])
        with pytest.raises(QueueFull, match="3 read-only jobs"):
            m.queue.submit([query])
        before = m.queue.job_ids()
        with pytest.raises(QueueFull):  # several jobs at once: none queued
            m.queue.submit_many([[{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["y"]}],
                                 [query]])
        assert m.queue.job_ids() == before
        assert m.run({"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["z"]})["status"] \
            == "success"
    finally:
        m.queue.stop()


def test_a_move_the_master_died_in_is_followed_by_its_cleanup(tmp_path: Path) -> None:
    """Issue 35 item 12: a move interrupted by the master's death left a second copy of the
    disks and the instance down; the job is failed at restart as before (never run again),
    and a cleanup move of the same instance and target follows it (the LU's
    `after_master_death`), submitted by the queue's recovery, also while the queue is
    drained (it finishes what the dead master began)."""
    from herder.masterd.jobs.queue import Job, QueuedOpCode, timestamp

    m = Master(tmp_path)
    m.queue.stop()
    m.queue.set_drained(True)
    move = opcodes.parse({"OP_ID": "OP_INSTANCE_MOVE", "instance_name": "plain0",
                          "target_node": "node2"}).to_dict()
    died = Job(id=50, ops=[QueuedOpCode(input=move, status=OpStatus.RUNNING)],
               received_timestamp=timestamp())
    m.queue.storage.save(died)
    again = Master(tmp_path)
    try:
        assert again.recovered["failed"] == [50] and again.queue.drained
        (follow_up,) = again.recovered["follow-ups"]
        op = again.queue.get(follow_up).ops[0].input
        assert (op["OP_ID"], op["instance_name"], op["target_node"], op["cleanup"]) == \
            ("OP_INSTANCE_MOVE", "plain0", "node2", True)
        assert any("after job 50" in str(entry) for entry in op["reason"])
        assert again.queue.info(50)["status"] == "error"
    finally:
        again.queue.stop()
    third = Master(tmp_path)  # recovered once: the follow-up is not submitted again
    try:
        assert third.recovered["follow-ups"] == []
    finally:
        third.queue.stop()


def test_a_slow_job_write_leaves_the_event_loop_free(tmp_path: Path) -> None:
    """A job's thread writes the job file holding the queue's lock (two fsyncs: seconds on a
    busy disk); RAPI's /wait runs on masterd's event loop, which must go on serving every other
    request meanwhile (the CLI following a job saw masterd silent for a minute in CI)."""
    class SlowDisk(FileJobStorage):
        def save(self, job: Any) -> None:
            if job.ops[0].status == OpStatus.RUNNING:
                time.sleep(1.5)  # a write while the job runs
            super().save(job)

    master = Master(tmp_path)
    master.queue.stop()
    queue = JobQueue(tmp_path / "slow", master.queue.processor, workers=2,
                     storage=SlowDisk(tmp_path / "slow"))
    queue.recover()
    queue.start()
    try:
        job_id = queue.submit([delay("node2", 0.2)])

        async def follow() -> tuple[list[str], float]:
            loop = asyncio.get_running_loop()
            gaps: list[float] = []
            done = asyncio.Event()

            async def tick() -> None:
                last = loop.time()
                while not done.is_set():
                    await asyncio.sleep(0.02)
                    gaps.append(loop.time() - last)
                    last = loop.time()

            async def another_client() -> None:  # short polls: each takes the lock
                while not done.is_set():
                    await queue.wait_for_change_async(job_id, ["status"], ["?"], None, 0.05)
                    await asyncio.sleep(0.01)

            ticker = asyncio.create_task(tick())
            other = asyncio.create_task(another_client())
            seen: list[str] = []
            while not seen or seen[-1] not in ("success", "error"):
                change = await queue.wait_for_change_async(
                    job_id, ["status"], [seen[-1]] if seen else None, None, 10)
                if change is not None:
                    seen.append(change["job_info"][0])
            done.set()
            await ticker
            await other
            return seen, max(gaps)

        seen, longest = asyncio.run(follow())
        assert seen[-1] == "success" and "running" in seen
        assert longest < 0.5, f"the event loop stood still {longest:.2f} s"
    finally:
        queue.stop()
