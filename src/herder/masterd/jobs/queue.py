"""The job queue: jobs of opcodes, run by worker threads, persisted so a restart loses none.

A job is a list of opcodes, each with its own status, log and result. Job states: queued,
waiting (for locks), running, success, error, canceling, canceled — computed from the opcodes'
as Ganeti does. Workers take the queued job of highest priority (lowest number), oldest first;
jobs that do not conflict run in parallel, guarded by the locks the processor takes.

Every change of a job is written to its storage before anyone is told of it (but an opcode's
move from queued to waiting for its locks: a restart makes a waiting opcode queued again, so the
stored "queued" says the same, and a job's path costs one write less): by default
`<dir>/job-<id>.json`, atomically (`FileJobStorage`); with the etcd backend one key per job
(`herder.masterd.jobs.store_etcd.EtcdJobStorage`, fenced by the master lease). A read-only
job (queries only: instance info, storage and OS queries) is not stored: it lives in memory,
is dropped two minutes after it finished and is never copied to the candidates (a restart
loses it, never its id). On start,
`recover()` accounts for every job found: queued and waiting jobs are queued again; an opcode
that was running when the master died is marked as an error saying so (it is
never run twice), and the opcodes after it as not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import msgspec

from herder.core import reason as reason_trail
from herder.core import untrusted
from herder.core.errors import HerderError, NotFoundError
from herder.core.store import atomic_write
from herder.masterd import locking
from herder.masterd.jobs import opcodes

log = logging.getLogger("herder.jobs")


class OpStatus(StrEnum):
    QUEUED = "queued"
    WAITING = "waiting"
    RUNNING = "running"
    SUCCESS = "success"
    ERROR = "error"
    CANCELING = "canceling"
    CANCELED = "canceled"


FINAL = frozenset({OpStatus.SUCCESS, OpStatus.ERROR, OpStatus.CANCELED})
RESTART_ERROR = ("OpExecError", ["the master daemon stopped while this opcode was running; it "
                                 "was not run again (its changes may or may not have been "
                                 "applied)"])
NOT_RUN_ERROR = ("OpExecError", ["not run: an earlier opcode of the job failed"])
JOB_FIELDS = ("id", "status", "ops", "opresult", "opstatus", "oplog", "received_ts",
              "start_ts", "end_ts", "summary", "priority")


def timestamp(when: float | None = None) -> list[int]:
    """Ganeti's [seconds, microseconds] timestamps."""
    when = time.time() if when is None else when
    seconds = int(when)
    return [seconds, round((when - seconds) * 1_000_000)]


class QueuedOpCode(msgspec.Struct, kw_only=True):
    input: dict[str, Any]
    status: OpStatus = OpStatus.QUEUED
    result: Any = None
    log: list[list[Any]] = msgspec.field(default_factory=list)
    priority: int = opcodes.PRIORITY_NORMAL
    start_timestamp: list[int] | None = None
    exec_timestamp: list[int] | None = None
    end_timestamp: list[int] | None = None
    # Ganeti's summary (`OP_ID(target)`), made once when the job is submitted: showing a job
    # never parses its opcodes again (None: a job stored before it was kept)
    summary: str | None = None

    @property
    def opcode(self) -> opcodes.OpCode:
        return opcodes.parse(self.input)

    def shown_summary(self) -> str:
        """The stored summary; for a job stored without one, made once from the opcode (its
        OP_ID alone when the stored input no longer passes today's checks)."""
        if self.summary is None:
            try:
                self.summary = self.opcode.summary()
            except opcodes.OpcodeError:
                self.summary = str(self.input.get("OP_ID", "?")).removeprefix("OP_")
        return self.summary


class Job(msgspec.Struct, kw_only=True):
    id: int
    ops: list[QueuedOpCode]
    received_timestamp: list[int]
    start_timestamp: list[int] | None = None
    end_timestamp: list[int] | None = None
    log_serial: int = 0

    @property
    def status(self) -> OpStatus:
        """Ganeti's CalcStatus over the opcodes."""
        statuses = [op.status for op in self.ops]
        if all(s == OpStatus.SUCCESS for s in statuses):
            return OpStatus.SUCCESS
        for special in (OpStatus.ERROR, OpStatus.CANCELED, OpStatus.CANCELING):
            if special in statuses:
                return special
        if OpStatus.RUNNING in statuses:
            return OpStatus.RUNNING
        if OpStatus.WAITING in statuses:
            return OpStatus.WAITING
        if OpStatus.SUCCESS in statuses:  # between two opcodes
            return OpStatus.RUNNING
        return OpStatus.QUEUED

    @property
    def priority(self) -> int:
        pending = [op.priority for op in self.ops if op.status not in FINAL]
        return min(pending) if pending else opcodes.PRIORITY_NORMAL

    @property
    def finished(self) -> bool:
        return self.status in FINAL

    def summary(self) -> list[str]:
        return [op.shown_summary() for op in self.ops]


class QueueFull(HerderError):
    """The queue holds as many read-only jobs as it may; try again when some have ended."""


class JobCanceled(HerderError):
    """Raised inside a job's processing when it has been canceled while waiting."""


class JobContext:
    """What the processor sees of the job it runs one opcode of."""

    def __init__(self, queue: JobQueue, job: Job, index: int,
                 cancel_token: locking.CancelToken | None = None) -> None:
        self.queue = queue
        self.job = job
        self.index = index
        # Lock waits made with this token end at once when the job is canceled.
        self.cancel_token = cancel_token or locking.CancelToken()

    @property
    def job_id(self) -> int:
        return self.job.id

    def set_waiting(self) -> None:
        self.queue._set_op_status(self.job, self.index, OpStatus.WAITING)

    def set_running(self) -> None:
        self.queue._set_op_status(self.job, self.index, OpStatus.RUNNING)

    def check_cancel(self) -> None:
        if self.job.ops[self.index].status == OpStatus.CANCELING:
            raise JobCanceled(f"job {self.job.id} canceled")

    def feedback(self, message: str, kind: str = "message") -> None:
        self.queue._append_log(self.job, self.index, kind, message)


class Processor(Protocol):
    def __call__(self, ctx: JobContext, op: opcodes.OpCode) -> object: ...


# A processor may also say what must follow an opcode that was running when the master died
# (`after_master_death(op) -> [opcode dicts]`, e.g. a move's cleanup): `recover` submits it.
FollowUp = Callable[[opcodes.OpCode], list[dict[str, Any]]]


def error_result(err: BaseException) -> list[object]:
    """Ganeti's encoded error: [class name, [message, ...]]."""
    kind = getattr(err, "ganeti_class", None) or type(err).__name__
    args = getattr(err, "ganeti_args", None) or [str(err)]
    return [kind, list(args)]


class JobStorage(Protocol):
    """Where jobs are kept: every write is durable before it returns (or it raises)."""

    def load(self) -> tuple[list[Job], int]:
        """Every readable job (unreadable ones set aside) and the highest job id ever used."""
        ...

    def save(self, job: Job) -> None: ...

    def add(self, candidate: int, make: Callable[[int], Job]) -> Job:
        """Store a new job, `make(id)`, under an id never used before (`candidate` is the
        queue's own next id); the job as stored."""
        ...


class FileJobStorage:
    """One file per job, `<directory>/job-<id>.json`, written atomically (the default)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def _path(self, job_id: int) -> Path:
        return self.directory / f"job-{job_id}.json"

    def save(self, job: Job) -> None:
        atomic_write(self._path(job.id), msgspec.json.encode(job))

    def add(self, candidate: int, make: Callable[[int], Job]) -> Job:
        job = make(candidate)  # job files are kept, so the highest on disk + 1 is next
        self.save(job)
        return job

    def load(self) -> tuple[list[Job], int]:
        self.directory.mkdir(parents=True, exist_ok=True)
        decoder = msgspec.json.Decoder(Job)
        jobs: list[Job] = []
        highest = 0
        for path in sorted(self.directory.glob("job-*.json")):
            try:
                raw = path.read_bytes()
                untrusted.check(raw, what="job file")
                job = decoder.decode(raw)
            except (OSError, ValueError, msgspec.DecodeError, msgspec.ValidationError) as err:
                log.error("unreadable job file %s (%s); moved aside", path, err)
                with contextlib.suppress(OSError):
                    path.rename(path.with_suffix(".corrupt"))
                continue
            highest = max(highest, job.id)
            jobs.append(job)
        for path in self.directory.glob("job-*.corrupt"):  # never reuse a set-aside id
            with contextlib.suppress(ValueError):
                highest = max(highest, int(path.stem.removeprefix("job-")))
        return jobs, highest


# Read-only jobs (every opcode a query, `OpCode.READ_ONLY`): kept in memory only, never stored
# (so never copied to the master candidates), dropped this long after they finished, at most
# this many at once; their ids come from the same series, whose high-water mark is written
# every EPHEMERAL_ID_BLOCK ids to EPHEMERAL_SERIAL in the queue directory (not a job file), so
# a restart never gives one's id to another job.
EPHEMERAL_TTL = 120.0  # seconds
MAX_EPHEMERAL = 2000
EPHEMERAL_ID_BLOCK = 100
EPHEMERAL_SERIAL = "read-only-serial"


class JobQueue:
    def __init__(self, directory: Path, processor: Processor, *, workers: int = 8,
                 storage: JobStorage | None = None) -> None:
        self.ephemeral_ttl = EPHEMERAL_TTL
        self.max_ephemeral = MAX_EPHEMERAL
        # read-only job id -> when it finished (time.monotonic(); None: not yet)
        self._ephemeral: dict[int, float | None] = {}
        self._reserved = 0  # the ids up to this one may have been given to read-only jobs
        self.directory = Path(directory)
        self.storage: JobStorage = storage if storage is not None else FileJobStorage(directory)
        self.processor = processor
        self.workers = workers
        self._jobs: dict[int, Job] = {}
        self._heap: list[tuple[int, int]] = []  # (priority, job id)
        self._cond = threading.Condition()  # guards everything; notified on every change
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self._next_id = 1
        self._cancel_tokens: dict[int, locking.CancelToken] = {}
        # job id -> wake-ups of the event-loop waiters (`wait_for_change_async`)
        self._watchers: dict[int, set[Callable[[], None]]] = {}

    # --- persistence ----------------------------------------------------------------------------

    def _save(self, job: Job) -> None:
        if job.id not in self._ephemeral:
            self.storage.save(job)

    def _read_reserved(self) -> int:
        try:
            return int((self.directory / EPHEMERAL_SERIAL).read_text())
        except (OSError, ValueError):
            return 0

    def _reserve(self, job_id: int) -> None:
        """Make sure a restart starts above `job_id` (a read-only job's, never stored)."""
        if job_id > self._reserved:
            self._reserved = job_id + EPHEMERAL_ID_BLOCK
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write(self.directory / EPHEMERAL_SERIAL, str(self._reserved).encode())

    def _expire(self) -> None:
        """Drop the read-only jobs finished more than `ephemeral_ttl` ago (caller holds the
        condition)."""
        limit = time.monotonic() - self.ephemeral_ttl
        for job_id, ended in list(self._ephemeral.items()):
            if ended is not None and ended < limit:
                del self._ephemeral[job_id]
                self._jobs.pop(job_id, None)

    def recover(self) -> dict[str, list[int]]:
        """Load every stored job and settle the ones a dead master left behind."""
        outcome: dict[str, list[int]] = {"requeued": [], "failed": [], "canceled": [],
                                         "finished": [], "follow-ups": []}
        interrupted: list[tuple[int, QueuedOpCode]] = []
        jobs, highest = self.storage.load()
        for job in jobs:
            highest = max(highest, job.id)
            self._jobs[job.id] = job
            if job.finished:
                outcome["finished"].append(job.id)
                continue
            changed = False
            if any(op.status in (OpStatus.RUNNING,) for op in job.ops):
                failed = False
                for op in job.ops:
                    if op.status == OpStatus.RUNNING:
                        op.status, op.result = OpStatus.ERROR, list(RESTART_ERROR)
                        op.end_timestamp = timestamp()
                        failed = True
                        interrupted.append((job.id, op))
                    elif failed and op.status not in FINAL:
                        op.status, op.result = OpStatus.ERROR, list(NOT_RUN_ERROR)
                job.end_timestamp = timestamp()
                outcome["failed"].append(job.id)
                changed = True
            elif any(op.status == OpStatus.CANCELING for op in job.ops):
                for op in job.ops:
                    if op.status not in FINAL:
                        op.status = OpStatus.CANCELED
                job.end_timestamp = timestamp()
                outcome["canceled"].append(job.id)
                changed = True
            else:
                for op in job.ops:
                    if op.status == OpStatus.WAITING:
                        op.status = OpStatus.QUEUED
                        changed = True
                heapq.heappush(self._heap, (job.priority, job.id))
                outcome["requeued"].append(job.id)
            if changed:
                self._save(job)
        self._reserved = self._read_reserved()
        self._next_id = max(highest, self._reserved) + 1
        outcome["follow-ups"] = self._follow_up(interrupted)
        return outcome

    def _follow_up(self, interrupted: list[tuple[int, QueuedOpCode]]) -> list[int]:
        """Submit what the processor says must follow each opcode the master died in; the
        ids of those jobs."""
        follow: FollowUp | None = getattr(self.processor, "after_master_death", None)
        submitted: list[int] = []
        if follow is None:
            return submitted
        for job_id, qop in interrupted:
            trail = [reason_trail.entry(f"{reason_trail.DAEMON_PREFIX}:masterd",
                                        f"after job {job_id}, interrupted by the master's "
                                        "death")]
            try:
                ops = follow(qop.opcode)
                if ops:
                    submitted.append(self.submit(ops, reason=trail))
            except HerderError as err:  # the master starts anyway; the operator is told
                log.error("job %s was interrupted by the master's death; its follow-up could "
                          "not be submitted: %s", job_id, err)
                continue
            if ops:
                log.warning("job %s was interrupted by the master's death: job %s follows "
                            "it up", job_id, submitted[-1])
        return submitted

    # --- workers --------------------------------------------------------------------------------

    def start(self) -> None:
        self._stopping = False
        for index in range(self.workers):
            thread = threading.Thread(target=self._worker, name=f"jobqueue-worker-{index}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()

    def _worker(self) -> None:
        while True:
            with self._cond:
                while not self._heap and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                _, job_id = heapq.heappop(self._heap)
                job = self._jobs.get(job_id)
                if job is None or job.finished:
                    continue
            try:
                self._run(job)
            except Exception:  # a processor bug must not kill the worker
                log.exception("job %s: unexpected failure", job_id)

    def _run(self, job: Job) -> None:
        token = locking.CancelToken()
        with self._cond:
            if job.start_timestamp is None:
                job.start_timestamp = timestamp()
            self._cancel_tokens[job.id] = token
        try:
            self._run_ops(job, token)
        finally:
            with self._cond:
                self._cancel_tokens.pop(job.id, None)

    def _run_ops(self, job: Job, token: locking.CancelToken) -> None:
        for index, qop in enumerate(job.ops):
            if qop.status in FINAL:
                continue
            with self._cond:
                if qop.status == OpStatus.CANCELING:
                    self._finish_canceled(job)
                    return
                qop.start_timestamp = timestamp()
            ctx = JobContext(self, job, index, token)
            try:
                result = self.processor(ctx, qop.opcode)
            except JobCanceled:
                with self._cond:
                    self._finish_canceled(job)
                return
            except Exception as err:
                if not isinstance(err, HerderError):
                    log.exception("job %s opcode %s crashed", job.id, index)
                with self._cond:
                    qop.status, qop.result = OpStatus.ERROR, error_result(err)
                    qop.end_timestamp = timestamp()
                    for later in job.ops[index + 1:]:
                        later.status, later.result = OpStatus.ERROR, list(NOT_RUN_ERROR)
                    job.end_timestamp = timestamp()
                    self._changed(job)
                return
            with self._cond:
                qop.status, qop.result = OpStatus.SUCCESS, result
                qop.end_timestamp = timestamp()
                if index == len(job.ops) - 1:
                    job.end_timestamp = timestamp()
                self._changed(job)

    def _finish_canceled(self, job: Job) -> None:
        for op in job.ops:
            if op.status not in FINAL:
                op.status = OpStatus.CANCELED
                op.end_timestamp = timestamp()
        job.end_timestamp = timestamp()
        self._changed(job)

    def _changed(self, job: Job, *, persist: bool = True) -> None:
        """Persist, then tell waiters (caller holds the condition). A finished job keeps no
        secret (`opcodes.redacted`): nothing runs it again."""
        if job.finished:
            for op in job.ops:
                op.input = opcodes.redacted(op.input)
            if job.id in self._ephemeral and self._ephemeral[job.id] is None:
                self._ephemeral[job.id] = time.monotonic()
        if persist:
            self._save(job)
        self._cond.notify_all()
        for wake in self._watchers.get(job.id, ()):
            wake()

    def _set_op_status(self, job: Job, index: int, status: OpStatus) -> None:
        with self._cond:
            qop = job.ops[index]
            if qop.status == OpStatus.CANCELING:
                raise JobCanceled(f"job {job.id} canceled")
            if qop.status == status:
                return
            # queued -> waiting is not written: recovery reads a waiting opcode as queued
            persist = not (status == OpStatus.WAITING and qop.status == OpStatus.QUEUED)
            qop.status = status
            if status == OpStatus.RUNNING:
                qop.exec_timestamp = timestamp()
            self._changed(job, persist=persist)

    def _append_log(self, job: Job, index: int, kind: str, message: str) -> None:
        with self._cond:
            job.log_serial += 1
            job.ops[index].log.append([job.log_serial, timestamp(), kind, message])
            self._changed(job)

    # --- the API --------------------------------------------------------------------------------

    def submit(self, ops: Sequence[dict[str, object] | opcodes.OpCode], *,
               reason: Iterable[list[object]] = ()) -> int:
        """Queue a job; every opcode is validated first (nothing is queued if one is bad)."""
        if not ops:
            raise opcodes.OpcodeError("a job needs at least one opcode")
        parsed = [opcodes.parse(op) for op in ops]
        given = [list(r) for r in reason]

        def make(job_id: int) -> Job:
            queued = []
            for index, op in enumerate(parsed):
                trail = [*op.reason, *given,
                         reason_trail.entry(opcodes.opcode_reason_source(op),
                                            f"job={job_id};index={index}")]
                data = op.to_dict()
                data["reason"] = trail
                queued.append(QueuedOpCode(input=data, priority=op.priority,
                                           summary=op.summary()))
            return Job(id=job_id, ops=queued, received_timestamp=timestamp())

        read_only = all(op.READ_ONLY for op in parsed)
        with self._cond:
            if self._stopping:
                raise HerderError("the job queue is shutting down")
            self._expire()
            if read_only:
                if len(self._ephemeral) >= self.max_ephemeral:
                    raise QueueFull(f"the queue holds {len(self._ephemeral)} read-only jobs "
                                    "already; try again in a while")
                self._reserve(self._next_id)
                job = make(self._next_id)
                self._ephemeral[job.id] = None
            else:  # not kept (nor run) when not stored
                job = self.storage.add(self._next_id, make)
            job_id = job.id
            self._next_id = job_id + 1
            self._jobs[job_id] = job
            heapq.heappush(self._heap, (job.priority, job_id))
            self._cond.notify_all()
        return job_id

    def get(self, job_id: int) -> Job:
        with self._cond:
            self._expire()
            job = self._jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"job {job_id} not found")
        return job

    def job_ids(self) -> list[int]:
        with self._cond:
            self._expire()
            return sorted(self._jobs)

    def cancel(self, job_id: int) -> tuple[bool, str]:
        """Cancel a queued or waiting job; Ganeti's (success, message) answer."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None:
                raise NotFoundError(f"job {job_id} not found")
            status = job.status
            if status == OpStatus.QUEUED:
                self._finish_canceled(job)
                return True, f"Job {job_id} canceled"
            if status == OpStatus.WAITING:
                for op in job.ops:
                    if op.status not in FINAL:
                        op.status = OpStatus.CANCELING
                self._changed(job)
                token = self._cancel_tokens.get(job_id)
                if token is not None:
                    token.cancel()  # its lock waits end now
                return True, f"Job {job_id} will be canceled"
            if status == OpStatus.CANCELING:
                return True, f"Job {job_id} is already being canceled"
            if status in FINAL:
                return False, f"Job {job_id} is finished ({status})"
            return False, f"Job {job_id} is running and can no longer be canceled"

    def info(self, job_id: int, fields: Sequence[str] = JOB_FIELDS) -> dict[str, Any]:
        with self._cond:
            return job_fields(self.get(job_id), fields)

    def _change_since(self, job_id: int, fields: Sequence[str], prev_info: object,
                      prev_serial: int | None) -> dict[str, Any] | None:
        """What changed since the caller's view (caller holds the condition); None: nothing."""
        job = self._jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"job {job_id} not found")
        info = [job_fields(job, [f])[f] for f in fields]
        serial = prev_serial or 0
        entries = [e for op in job.ops for e in op.log if e[0] > serial]
        if info != prev_info or entries or job.finished:
            return {"job_info": info, "log_entries": entries}
        return None

    def wait_for_change(self, job_id: int, fields: Sequence[str], prev_info: object,
                        prev_serial: int | None, timeout: float) -> dict[str, Any] | None:
        """Block until the job's `fields` differ from `prev_info`, a log entry newer than
        `prev_serial` appears, or the job is finished; None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                change = self._change_since(job_id, fields, prev_info, prev_serial)
                if change is not None:
                    return change
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)

    async def wait_for_change_async(self, job_id: int, fields: Sequence[str], prev_info: object,
                                    prev_serial: int | None,
                                    timeout: float) -> dict[str, Any] | None:
        """`wait_for_change` for an event loop: the waiter holds no thread while it waits (the
        thread that changes the job wakes it through the loop), so any number of waiters
        leave the threads to the requests that need them."""
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()

        def wake() -> None:  # in the thread that changed the job, holding the condition
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(changed.set)

        deadline = loop.time() + timeout
        with self._cond:
            self._watchers.setdefault(job_id, set()).add(wake)
        try:
            while True:
                changed.clear()  # before looking: a change after the look sets it again
                with self._cond:
                    change = self._change_since(job_id, fields, prev_info, prev_serial)
                if change is not None:
                    return change
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)
        finally:
            with self._cond:
                watchers = self._watchers.get(job_id)
                if watchers is not None:
                    watchers.discard(wake)
                    if not watchers:
                        del self._watchers[job_id]

    def wait(self, job_id: int, timeout: float | None = None) -> Job:
        """Block until the job is finished (tests, CLI)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                job = self.get(job_id)
                if job.finished:
                    return job
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"job {job_id} not finished after {timeout}s")
                self._cond.wait(remaining)


def job_fields(job: Job, fields: Sequence[str]) -> dict[str, Any]:
    """Ganeti's job query fields."""
    values: dict[str, Any] = {}
    for field in fields:
        if field == "id":
            values[field] = job.id
        elif field == "status":
            values[field] = str(job.status)
        elif field == "ops":  # shown: its secrets never (opcodes.SecretText)
            values[field] = [opcodes.redacted(op.input) for op in job.ops]
        elif field == "opresult":
            values[field] = [op.result for op in job.ops]
        elif field == "opstatus":
            values[field] = [str(op.status) for op in job.ops]
        elif field == "oplog":
            values[field] = [op.log for op in job.ops]
        elif field == "received_ts":
            values[field] = job.received_timestamp
        elif field == "start_ts":
            values[field] = job.start_timestamp
        elif field == "end_ts":
            values[field] = job.end_timestamp
        elif field == "summary":
            values[field] = job.summary()
        elif field == "priority":
            values[field] = job.priority
        elif field == "opstart":
            values[field] = [op.start_timestamp for op in job.ops]
        elif field == "opexec":
            values[field] = [op.exec_timestamp for op in job.ops]
        elif field == "opend":
            values[field] = [op.end_timestamp for op in job.ops]
        else:
            raise opcodes.OpcodeError(f"unknown job field {field!r} "
                                      f"(known: {', '.join(JOB_FIELDS)}, opstart, opexec, opend)")
    return values


ProcessorFn = Callable[[JobContext, opcodes.OpCode], Any]
