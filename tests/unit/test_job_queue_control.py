"""The job queue's controls (issue 32 item 4): dependencies, archive, priorities, the drain
flag and filter rules, on the queue with the real processor, locks and config store.

Jobs a test must hold running carry the comment "hold": the processor shows them running and
waits for the test's gate before running them (the queue's behaviour, not a job's duration, is
what is tested)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from herder.core import model
from herder.core.errors import NotFoundError
from herder.core.redist import archive_path
from herder.core.store import FileStore
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.jobs.queue import JobContext, JobQueue, QueueDrained
from herder.masterd.lu.base import MasterEnv
from herder.masterd.processor import Processor
from tests.conftest import build_config

DEADLINE = 30.0  # seconds a test waits for the queue to get somewhere


class GatedProcessor:
    """The real processor; an opcode with the comment "hold" first waits for `gate`."""

    def __init__(self, env: MasterEnv) -> None:
        self.real = Processor(env)
        self.gate = threading.Event()
        self.order: list[int] = []  # job ids in the order their opcodes started

    def __call__(self, ctx: JobContext, op: opcodes.OpCode) -> Any:
        self.order.append(ctx.job_id)
        if op.comment == "hold":  # shown running meanwhile, as a long opcode would be
            ctx.set_running()
            assert self.gate.wait(DEADLINE), "the test never opened the gate"
        return self.real(ctx, op)


class Master:
    def __init__(self, directory: Path, workers: int = 4) -> None:
        self.store = FileStore(directory / "config.json")
        if not self.store.exists():
            self.store.create(build_config(nodes=4))
        config = self.store.load()
        self.env = MasterEnv(store=self.store, locks=locking.LockManager(
            nodes=config.nodes, nodegroups=config.nodegroups, instances=config.instances))
        self.processor = GatedProcessor(self.env)
        self.queue = JobQueue(directory / "queue", self.processor, workers=workers,
                              rules=lambda: self.store.recent_snapshot().filters)
        self.recovered = self.queue.recover()
        self.queue.start()

    def add_rule(self, action: Any, predicates: list[Any], priority: int = 0) -> str:
        rule = msgspec.convert({"uuid": model.new_uuid(), "watermark": self.queue.highest_id(),
                                "priority": priority, "predicates": predicates,
                                "action": action}, model.FilterRule)
        with self.store.update() as config:
            config.filters[rule.uuid] = rule
        self.queue.reconsider()
        return rule.uuid

    def remove_rule(self, uuid: str) -> None:
        with self.store.update() as config:
            del config.filters[uuid]
        self.queue.reconsider()


@pytest.fixture
def master(tmp_path: Path):
    m = Master(tmp_path)
    yield m
    m.processor.gate.set()
    m.queue.stop()


def tag(node: str, value: str, **common: Any) -> dict[str, Any]:
    return {"OP_ID": "OP_TAGS_SET", "kind": "node", "name": node, "tags": [value], **common}


def hold(**common: Any) -> dict[str, Any]:
    return {"OP_ID": "OP_TEST_DELAY", "duration": 0, "no_locks": True, "comment": "hold",
            **common}


def wait_until(what: str, check: Any) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"not within {DEADLINE} s: {what}")


def one_busy_worker(directory: Path) -> tuple[Master, int]:
    """A master with one worker, busy with a held job (its id): what comes next stays
    queued."""
    master = Master(directory, workers=1)
    blocker = master.queue.submit([hold()])
    wait_until("the first job running", lambda: blocker in master.processor.order)
    return master, blocker


def finished(queue: JobQueue, job_id: int) -> dict[str, Any]:
    queue.wait(job_id, DEADLINE)
    return queue.info(job_id)


def node_tags(master: Master, node: str) -> list[str]:
    return master.store.load().find_node(node).tags


# --- dependencies -------------------------------------------------------------------------------

def test_a_chain_whose_middle_job_fails_fails_the_third_unrun(master: Master) -> None:
    queue = master.queue
    first = queue.submit([hold(), tag("node2", "chain:first")])
    # the middle job fails: node9 does not exist
    second = queue.submit([tag("node9", "chain:second", depends=[[first, ["success"]]])])
    third = queue.submit([tag("node3", "chain:third", depends=[[second, ["success"]]])])
    anyway = queue.submit([tag("node4", "chain:anyway", depends=[[second, []]])])
    held = wait_until("the dependants held",
                      lambda: (h := queue.held()).keys() >= {second, third, anyway} and h)
    assert held[second] == f"waiting for job {first}"
    assert held[third] == f"waiting for job {second}"
    assert queue.info(third)["status"] == "queued"
    master.processor.gate.set()
    assert finished(queue, first)["status"] == "success"
    assert finished(queue, second)["status"] == "error"
    info = finished(queue, third)
    assert info["status"] == "error"
    assert info["opresult"] == [["OpExecError", [
        f"Dependency job {second} finished with status 'error', not one of 'success' as "
        "required"]]]
    assert third not in master.processor.order  # never handed to the processor
    assert "chain:third" not in node_tags(master, "node3")
    # an empty status list: any final status will do
    assert finished(queue, anyway)["status"] == "success"
    assert node_tags(master, "node4") == ["chain:anyway"]


def test_relative_ids_name_earlier_jobs_of_the_submission(master: Master) -> None:
    queue = master.queue
    ids = queue.submit_many([[tag("node2", "rel:a")],
                             [tag("node3", "rel:b", depends=[[-1, ["success"]]])],
                             [tag("node4", "rel:c", depends=[[-2, ["success"]],
                                                             [-1, ["success"]]])]])
    for job_id in ids:
        assert finished(queue, job_id)["status"] == "success"
    stored = json.loads(json.dumps(queue.info(ids[2])["ops"][0]["depends"]))
    assert stored == [[ids[0], ["success"]], [ids[1], ["success"]]]  # resolved when queued
    before = queue.job_ids()
    with pytest.raises(opcodes.OpcodeError, match="Unable to resolve relative job ID -2"):
        queue.submit_many([[tag("node2", "x")], [tag("node3", "y", depends=[[-2, []]])]])
    with pytest.raises(opcodes.OpcodeError, match="relative job ID -1"):
        queue.submit([tag("node2", "z", depends=[[-1, []]])])
    assert queue.job_ids() == before  # nothing queued


def test_a_canceled_dependency_cancels_unless_listed(tmp_path: Path) -> None:
    master, _ = one_busy_worker(tmp_path)  # the rest stays queued
    queue = master.queue
    try:
        victim = queue.submit([tag("node2", "never")])
        dependant = queue.submit([tag("node3", "dep:any", depends=[[victim, []]])])
        listed = queue.submit([tag("node4", "dep:listed", depends=[[victim, ["canceled"]]])])
        assert queue.cancel(victim) == (True, f"Job {victim} canceled")
        unknown = queue.submit([tag("node2", "ghost", depends=[["999999", ["success"]]])])
        master.processor.gate.set()
        info = finished(queue, dependant)
        assert info["status"] == "canceled"
        assert info["opresult"] == [f"Dependency job {victim} was cancelled"]
        assert finished(queue, listed)["status"] == "success"
        assert finished(queue, unknown)["opresult"][0] == [
            "OpExecError", ["Dependency error: Job 999999 not found"]]
        assert node_tags(master, "node3") == [] and node_tags(master, "node4") == ["dep:listed"]
    finally:
        master.processor.gate.set()
        queue.stop()


def test_depends_is_checked_at_submission() -> None:
    for bad in ([[1, ["running"]]], [["one", []]], [[1]], [1]):
        with pytest.raises(opcodes.OpcodeError):
            opcodes.parse({"OP_ID": "OP_TEST_DELAY", "duration": 0, "depends": bad})
    op = opcodes.parse({"OP_ID": "OP_TEST_DELAY", "duration": 0, "depends": [["12", []]]})
    assert op.dependencies == [(12, [])]


# --- the archive ----------------------------------------------------------------------------------

def test_archived_jobs_leave_the_queue_and_stay_readable(tmp_path: Path) -> None:
    master = Master(tmp_path)
    queue = master.queue
    try:
        done = queue.submit([tag("node2", "arch:a")])
        busy = queue.submit([hold()])
        assert finished(queue, done)["status"] == "success"
        wait_until("the held job running", lambda: busy in master.processor.order)
        shown = queue.info(done)
        assert queue.archive(busy) == (False, f"Job {busy} is not finished (running)")
        assert queue.archive(done) == (True, f"Job {done} archived")
        assert queue.archive(done) == (True, f"Job {done} is archived")  # again: no error
        with pytest.raises(NotFoundError):
            queue.archive(999)
        assert done not in queue.job_ids() and busy in queue.job_ids()
        assert queue.job_ids(archived=True) == [done, busy]
        assert queue.info(done) == shown and queue.is_archived(done)
        path = archive_path(tmp_path / "queue", f"job-{done}.json")
        assert json.loads(path.read_text())["id"] == done
        assert not (tmp_path / "queue" / f"job-{done}.json").exists()
        assert queue.cancel(done) == (False, f"Job {done} is finished (success) and archived")
        assert queue.wait_for_change(done, ["status"], None, None, 1) == {
            "job_info": ["success"], "log_entries": []}
        master.processor.gate.set()
        finished(queue, busy)
    finally:
        master.processor.gate.set()
        queue.stop()
    # a new master: the archive is not loaded, and its ids are never used again
    again = Master(tmp_path)
    try:
        assert again.queue.job_ids() == [busy]
        assert again.recovered["finished"] == [busy]
        assert again.queue.archive(busy)[0]
        fresh = again.queue.submit([tag("node2", "arch:b")])
        assert fresh == busy + 1
        assert again.queue.info(done)["status"] == "success"
        assert finished(again.queue, fresh)["status"] == "success"  # (else the next master
        # recovers it unfinished, and the archiving below leaves it)
    finally:
        again.queue.stop()
    third = Master(tmp_path)  # every job archived: the next id still follows the archive's
    try:
        assert third.queue.job_ids() == [fresh]
        third.queue.auto_archive(-1)
        assert third.queue.job_ids() == []
    finally:
        third.queue.stop()
    fourth = Master(tmp_path)
    try:
        assert fourth.queue.submit([tag("node2", "arch:c")]) == fresh + 1
    finally:
        fourth.queue.stop()


def test_auto_archive_takes_finished_jobs_older_than_the_age(master: Master) -> None:
    queue = master.queue
    old, recent = queue.submit([tag("node2", "old")]), queue.submit([tag("node3", "new")])
    running = queue.submit([hold()])
    finished(queue, old), finished(queue, recent)
    wait_until("the held job running", lambda: running in master.processor.order)
    queue.get(old).end_timestamp = [int(time.time()) - 7 * 3600, 0]  # ended 7 h ago
    assert queue.auto_archive(6 * 3600) == (1, 0)
    assert queue.job_ids() == [recent, running]
    assert queue.auto_archive(-1) == (1, 0)  # every finished job; the running one stays
    assert queue.job_ids() == [running]
    assert queue.auto_archive(-1, timeout=-1) == (0, 1)  # no time: nothing examined
    master.processor.gate.set()


def test_read_only_jobs_are_never_archived(master: Master) -> None:
    """A read-only job lives in memory only: archiving never writes it (auto-archive leaves it
    to expire, an explicit archive drops it and says so), and it may depend on a stored job."""
    queue = master.queue
    stored = queue.submit([tag("node2", "ro:a")])
    query = {"OP_ID": "OP_INSTANCE_QUERY_DATA", "instances": ["plain0"], "static": True,
             "depends": [[stored, ["success"]]]}
    read = queue.submit([query])
    assert finished(queue, read)["status"] == "success"
    assert queue.auto_archive(-1) == (1, 0)
    assert queue.job_ids() == [read]
    assert queue.is_archived(stored) and not queue.is_archived(read)
    assert queue.archive(read) == (True, f"Job {read} was read-only: dropped, not archived")
    assert queue.job_ids(archived=True) == [stored]
    with pytest.raises(NotFoundError):
        queue.info(read)
    files = {path.name for path in (master.store.path.parent / "queue").rglob("job-*")}
    assert files == {f"job-{stored}.json"}


# --- priorities -----------------------------------------------------------------------------------

def test_change_priority_reorders_the_queued_jobs(tmp_path: Path) -> None:
    master, blocker = one_busy_worker(tmp_path)
    queue = master.queue
    try:
        later = [queue.submit([tag(f"node{n}", f"prio:{n}")]) for n in (2, 3, 4)]
        assert queue.change_priority(later[2], -10) == (
            True, f"Priorities of pending opcodes for job {later[2]} have been changed to -10")
        assert queue.info(later[2])["priority"] == -10
        with pytest.raises(opcodes.OpcodeError, match="between -20 and 19"):
            queue.change_priority(later[0], 20)
        assert queue.change_priority(blocker, 5) == (False, f"Job {blocker} had no pending "
                                                            "opcodes")
        master.processor.gate.set()
        for job_id in later:
            finished(queue, job_id)
        assert master.processor.order == [blocker, later[2], later[0], later[1]]
        assert queue.change_priority(later[0], 0) == (False, f"Job {later[0]} is finished")
        with pytest.raises(NotFoundError):
            queue.change_priority(999, 0)
    finally:
        master.processor.gate.set()
        queue.stop()


# --- the drain flag -------------------------------------------------------------------------------

def test_a_drained_queue_refuses_jobs_and_runs_those_it_has(tmp_path: Path) -> None:
    master = Master(tmp_path)
    queue = master.queue
    try:
        running = queue.submit([hold()])
        queue.set_drained(True)
        assert queue.drained
        with pytest.raises(QueueDrained, match="Job queue is drained, refusing job"):
            queue.submit([tag("node2", "drained")])
        master.processor.gate.set()
        assert finished(queue, running)["status"] == "success"
        assert queue.job_ids() == [running]
    finally:
        queue.stop()
    again = Master(tmp_path)  # the flag outlives the master daemon
    try:
        assert again.queue.drained
        again.queue.set_drained(False)
        assert again.queue.submit([tag("node2", "undrained")]) == running + 1
    finally:
        again.queue.stop()
    assert not Master(tmp_path).queue.drained


# --- filter rules ---------------------------------------------------------------------------------

NEW_JOBS = [["jobid", [">", "id", "watermark"]]]


def test_reject_cancels_new_jobs_only_and_continue_changes_nothing(master: Master) -> None:
    queue = master.queue
    before = queue.submit([tag("node2", "before")])
    finished(queue, before)
    master.add_rule("CONTINUE", NEW_JOBS, priority=0)
    reject = master.add_rule("REJECT", NEW_JOBS, priority=1)
    refused = queue.submit([tag("node2", "refused")])
    info = finished(queue, refused)
    assert info["status"] == "canceled"
    assert info["opresult"] == [f"Job canceled: rejected by filter rule {reject}"]
    assert refused not in master.processor.order
    master.remove_rule(reject)
    assert finished(queue, queue.submit([tag("node2", "after")]))["status"] == "success"
    assert node_tags(master, "node2") == ["before", "after"]


def test_reason_accept_before_pause_and_pause_until_removed(master: Master) -> None:
    queue = master.queue
    master.add_rule("ACCEPT", [["reason", ["=", "reason", "maintenance pink bunny"]]])
    pause = master.add_rule("PAUSE", NEW_JOBS, priority=1)
    paused = queue.submit([tag("node2", "paused")])
    allowed = queue.submit([tag("node3", "allowed",
                                reason=[["gnt:user", "maintenance pink bunny", 1]])])
    assert finished(queue, allowed)["status"] == "success"
    held = wait_until("the paused job held", lambda: queue.held().get(paused))
    assert held == f"paused by filter rule {pause}"
    assert queue.info(paused)["status"] == "queued"
    master.remove_rule(pause)
    assert finished(queue, paused)["status"] == "success"


def test_an_opcode_predicate_rejects_queued_jobs_at_once(tmp_path: Path) -> None:
    master, blocker = one_busy_worker(tmp_path)
    queue = master.queue
    try:
        tags = queue.submit([tag("node2", "queued")])
        other = queue.submit([{"OP_ID": "OP_TEST_DELAY", "duration": 0, "no_locks": True}])
        rule = master.add_rule("REJECT", [["opcode", ["=", "OP_ID", "OP_TAGS_SET"]]])
        assert queue.info(tags)["status"] == "canceled"  # while the worker is still busy
        assert queue.info(blocker)["status"] == "running"  # running jobs go on
        master.processor.gate.set()
        assert finished(queue, other)["status"] == "success"
        assert finished(queue, blocker)["status"] == "success"
        assert queue.info(tags)["opresult"] == [
            f"Job canceled: rejected by filter rule {rule}"]
    finally:
        master.processor.gate.set()
        queue.stop()


def test_rate_limit_holds_jobs_beyond_the_limit(master: Master) -> None:
    queue = master.queue
    rule = master.add_rule(["RATE_LIMIT", 2], NEW_JOBS)
    jobs = [queue.submit([hold()]) for _ in range(3)]
    wait_until("two jobs running", lambda: len(master.processor.order) == 2)
    held = wait_until("the third held", lambda: queue.held().get(jobs[2]))
    assert held == f"rate-limited by filter rule {rule} (2 of 2 running)"
    assert queue.info(jobs[2])["status"] == "queued"
    master.processor.gate.set()
    for job_id in jobs:
        assert finished(queue, job_id)["status"] == "success"


def test_filter_rules_are_checked_when_decoded() -> None:
    good = {"uuid": "u", "priority": 1, "predicates": NEW_JOBS, "action": ["RATE_LIMIT", 3]}
    assert msgspec.convert(good, model.FilterRule).action == ("RATE_LIMIT", 3)
    bad = [({"action": "STOP"}, "action"), ({"action": ["RATE_LIMIT", 0]}, "positive"),
           ({"priority": -1}, "must not be negative"),
           ({"predicates": [["jobid", [">", "name", 1]]]}, "Unknown field 'name'"),
           ({"predicates": [["owner", ["?", "id"]]]}, "predicates"),
           ({"predicates": [["opcode", ["=~", "OP_ID", "("]]]}, "Invalid regex"),
           ({"predicates": [["reason", ["&"] * 12]]}, "Invalid filter"),
           ({"reason_trail": [["a", "b"]]}, "reason entry 0")]
    for change, message in bad:
        with pytest.raises((msgspec.ValidationError, ValueError), match=message):
            msgspec.convert({**good, **change}, model.FilterRule)


def test_an_ad_hoc_reason_limits_the_jobs_that_carry_it(master: Master) -> None:
    """Ganeti's `--reason=rate-limit:2:hello`: no rule needed."""
    queue = master.queue
    limited = [["gnt:user", "rate-limit:2:hello", 1]]
    jobs = [queue.submit([hold(reason=limited)]) for _ in range(3)]
    other = queue.submit([hold(reason=[["gnt:user", "rate-limit:2:other", 1]])])
    wait_until("three jobs running", lambda: len(master.processor.order) == 3)
    held = wait_until("the third held", lambda: queue.held().get(jobs[2]))
    assert held == "rate-limited by its reason rate-limit:2:hello (2 of 2 running)"
    assert other in master.processor.order  # another bucket
    master.processor.gate.set()
    for job_id in [*jobs, other]:
        assert finished(queue, job_id)["status"] == "success"
