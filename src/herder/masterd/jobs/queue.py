"""The job queue: jobs of opcodes, run by worker threads, persisted so a restart loses none.

A job is a list of opcodes, each with its own status, log and result (`jobs.job`). Workers take
the queued job of highest priority (lowest number), oldest first (`jobs.scheduling`); jobs that
do not conflict run in parallel, guarded by the locks the processor takes. A queued job is held
back while a job it depends on is not finished (`jobs.depends`) or a filter rule of the config
pauses or rate-limits it, and canceled when one rejects it (`jobs.filters`); its dependencies'
statuses decide when each opcode comes up.

Every change of a job is written to its storage before anyone is told of it (but an opcode's
move from queued to waiting for its locks: a restart makes a waiting opcode queued again, so the
stored "queued" says the same, and a job's path costs one write less): by default
`<dir>/job-<id>.json`, atomically (`jobs.store_file.FileJobStorage`); with the etcd backend one
key per job (`jobs.store_etcd.EtcdJobStorage`, fenced by the master lease). A read-only job
(queries only: instance info, storage and OS queries) is not stored: it lives in memory, is
dropped two minutes after it finished, is never archived nor copied to the candidates (a
restart loses it, never its id). On start,
`recover()` accounts for every job found: queued and waiting jobs are queued again; an opcode
that was running when the master died is marked as an error saying so (it is
never run twice), and the opcodes after it as not run; what the processor says must follow
such an opcode (a move's cleanup) is submitted.

Finished jobs are archived (`archive`, `auto_archive`, Ganeti's ArchiveJob and
AutoArchiveJobs): moved out of the queue into the storage's archive, no longer held in memory
nor listed, still readable by id. A drained queue (`set_drained`, Ganeti's drain flag) refuses
new jobs and runs those it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from herder.core import model
from herder.core import reason as reason_trail
from herder.core.errors import HerderError, NotFoundError
from herder.core.store import atomic_write
from herder.masterd import locking
from herder.masterd.jobs import depends, filters, opcodes
from herder.masterd.jobs.job import (
    FINAL,
    JOB_FIELDS,
    NOT_RUN_ERROR,
    RESTART_ERROR,
    Job,
    OpStatus,
    QueuedOpCode,
    error_result,
    job_fields,
    timestamp,
)
from herder.masterd.jobs.scheduling import RunQueue
from herder.masterd.jobs.store_file import FileJobStorage

log = logging.getLogger("herder.jobs")

ARCHIVE_BATCH = 100  # jobs moved to the archive per storage call (and per hold of the lock)


class JobCanceled(HerderError):
    """Raised inside a job's processing when it has been canceled while waiting."""


class QueueDrained(HerderError):
    """The queue is drained: it takes no new jobs (Ganeti's JobQueueDrainError)."""


class QueueFull(HerderError):
    """The queue holds as many read-only jobs as it may; try again when some have ended."""


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

    def log_entry(self, kind: str, message: object) -> None:
        """A log entry of another type than a message (Ganeti's ELOG_*, e.g. the
        `remote-import` dict `move-instance` waits for): JSON."""
        self.queue._append_log(self.job, self.index, kind, message)


class Processor(Protocol):
    def __call__(self, ctx: JobContext, op: opcodes.OpCode) -> object: ...


# A processor may also say what must follow an opcode that was running when the master died
# (`after_master_death(op) -> [opcode dicts]`, e.g. a move's cleanup): `recover` submits it.
FollowUp = Callable[[opcodes.OpCode], list[dict[str, object]]]


class JobStorage(Protocol):
    """Where jobs are kept: every write is durable before it returns (or it raises)."""

    def load(self) -> tuple[list[Job], int]:
        """Every readable job of the queue (unreadable ones set aside; archived ones not) and
        the highest job id ever used."""
        ...

    def save(self, job: Job) -> None: ...

    def add(self, candidate: int, make: Callable[[int], Job]) -> Job:
        """Store a new job, `make(id)`, under an id never used before (`candidate` is the
        queue's own next id); the job as stored."""
        ...

    def archive(self, jobs: Iterable[Job]) -> None:
        """Move finished jobs out of the queue into the archive."""
        ...

    def load_archived(self, job_id: int) -> Job | None: ...

    def archived_ids(self) -> list[int]: ...

    def drained(self) -> bool: ...

    def set_drained(self, drained: bool) -> None: ...


Rules = Callable[[], Mapping[str, model.FilterRule]]


def _no_rules() -> Mapping[str, model.FilterRule]:
    return {}


# Read-only jobs (every opcode a query, `OpCode.READ_ONLY`): kept in memory only, never stored
# (so never archived nor copied to the master candidates), dropped this long after they
# finished, at most this many at once; their ids come from the same series, whose high-water
# mark is written every EPHEMERAL_ID_BLOCK ids to EPHEMERAL_SERIAL in the queue directory (not
# a job file), so a restart never gives one's id to another job.
EPHEMERAL_TTL = 120.0  # seconds
MAX_EPHEMERAL = 2000
EPHEMERAL_ID_BLOCK = 100
EPHEMERAL_SERIAL = "read-only-serial"


class JobQueue:
    def __init__(self, directory: Path, processor: Processor, *, workers: int = 8,
                 storage: JobStorage | None = None, rules: Rules = _no_rules) -> None:
        """`rules`: the filter rules as they are now (masterd: its config's `filters`)."""
        self.ephemeral_ttl = EPHEMERAL_TTL
        self.max_ephemeral = MAX_EPHEMERAL
        # read-only job id -> when it finished (time.monotonic(); None: not yet)
        self._ephemeral: dict[int, float | None] = {}
        self._reserved = 0  # the ids up to this one may have been given to read-only jobs
        self.directory = Path(directory)
        self.storage: JobStorage = storage if storage is not None else FileJobStorage(directory)
        self.processor = processor
        self.workers = workers
        self.rules = rules
        self._jobs: dict[int, Job] = {}  # the queue (archived jobs are not held)
        self._order = RunQueue()
        self._cond = threading.Condition()  # guards everything; notified on every change
        self._archiving = threading.Lock()  # one archiver at a time
        self._threads: list[threading.Thread] = []
        self._stopping = False
        self._drained = False
        self._next_id = 1
        self._cancel_tokens: dict[int, locking.CancelToken] = {}
        # job id -> wake-ups of the event-loop waiters (`wait_for_change_async`)
        self._watchers: dict[int, set[Callable[[], None]]] = {}
        # the rules as last compiled (the mapping they were compiled from, the result)
        self._compiled: tuple[Mapping[str, model.FilterRule],
                              tuple[filters.CompiledRule, ...]] | None = None
        self._archived_status: dict[int, str] = {}  # final statuses of archived jobs seen

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
        drained = self.storage.drained()
        with self._cond:
            self._drained = drained
            for job in jobs:
                highest = max(highest, job.id)
                self._jobs[job.id] = job
                kind = self._settle(job, interrupted)
                outcome[kind].append(job.id)
                if kind == "requeued":
                    self._order.add(job.id, job.priority)
            self._reserved = self._read_reserved()
            self._next_id = max(highest, self._reserved) + 1
            self._cond.notify_all()
        outcome["follow-ups"] = self._follow_up(interrupted)
        return outcome

    def _settle(self, job: Job, interrupted: list[tuple[int, QueuedOpCode]]) -> str:
        """A job as a dead master left it: finished, failed (an opcode was running: added to
        `interrupted`), canceled (it was being canceled) or requeued; written again when
        changed."""
        if job.finished:
            return "finished"
        kind, changed = "requeued", False
        if any(op.status == OpStatus.RUNNING for op in job.ops):
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
            kind, changed = "failed", True
        elif any(op.status == OpStatus.CANCELING for op in job.ops):
            for op in job.ops:
                if op.status not in FINAL:
                    op.status = OpStatus.CANCELED
            job.end_timestamp = timestamp()
            kind, changed = "canceled", True
        else:
            for op in job.ops:
                if op.status == OpStatus.WAITING:
                    op.status = OpStatus.QUEUED
                    changed = True
        if changed:
            self._save(job)
        return kind

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
                if ops:  # (a drained queue takes it: it finishes what the dead master began)
                    submitted += self.submit_many([ops], reason=trail, despite_drain=True)
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
                while True:
                    if self._stopping:
                        return
                    job = self._take()
                    if job is not None:
                        break
                    self._cond.wait()
            try:
                self._run(job)
            except Exception:  # a processor bug must not kill the worker
                log.exception("job %s: unexpected failure", job.id)
            finally:
                with self._cond:
                    self._order.done(job.id)
                    self._order.unpark_all()  # its dependants, its rate-limit slot
                    self._cond.notify_all()

    # --- which job runs next (the caller holds the condition) -----------------------------------

    def _rules(self) -> tuple[filters.CompiledRule, ...]:
        current = self.rules()
        if self._compiled is None or self._compiled[0] is not current:
            self._compiled = (current, filters.compile_rules(current.values()))
            self._order.unpark_all()  # what held them may have changed
        return self._compiled[1]

    def _take(self) -> Job | None:
        """The next job a worker may run, marked started; None when none may run now."""
        rules = self._rules()
        while (job_id := self._order.pop()) is not None:
            job = self._jobs.get(job_id)
            if job is None or job.finished:
                self._order.forget(job_id)
                continue
            why = self._held(job, rules)
            if why is None:
                self._order.start(job_id)
                return job
            if not job.finished:  # (a rejected job is canceled by now)
                self._order.park(job_id, why)
        return None

    def _held(self, job: Job, rules: Sequence[filters.CompiledRule]) -> str | None:
        """Why a queued job may not start now (None: it may): a dependency not finished, or
        the filter rules (a job they reject is canceled here)."""
        for dep_id in sorted(depends.job_ids([op.input for op in job.ops
                                              if op.status not in FINAL])):
            other = self._jobs.get(dep_id)
            if other is not None and not other.finished and dep_id != job.id:
                return f"waiting for job {dep_id}"
        if job.start_timestamp is not None:  # filters and limits hold only unstarted jobs
            return None
        limits = filters.ad_hoc_limits([op.input for op in job.ops])
        for bucket, limit in sorted(limits.items()):
            running = sum(1 for other in self._order.running if other in self._jobs
                          and bucket in filters.ad_hoc_limits(
                              [op.input for op in self._jobs[other].ops]))
            if running >= limit:
                return f"rate-limited by its reason {bucket} ({running} of {limit} running)"
        if not rules:
            return None
        decision = self._decide(job, rules)
        if decision.verdict == "ACCEPT":
            return None
        if decision.verdict == "PAUSE":
            return f"paused by filter rule {decision.rule}"
        if decision.verdict == "REJECT":
            self._reject(job, decision)
            return "rejected"
        running = sum(1 for other in self._order.running
                      if other in self._jobs
                      and self._decide(self._jobs[other], rules).rule == decision.rule)
        if running >= decision.limit:
            return (f"rate-limited by filter rule {decision.rule} ({running} of "
                    f"{decision.limit} running)")
        return None

    @staticmethod
    def _decide(job: Job, rules: Sequence[filters.CompiledRule]) -> filters.Decision:
        return filters.decide(rules, job.id, [op.input for op in job.ops])

    def _reject(self, job: Job, decision: filters.Decision) -> None:
        self._finish_canceled(job, f"Job canceled: rejected by filter rule {decision.rule}")
        self._order.forget(job.id)

    def reconsider(self) -> None:
        """Apply the filter rules as they are now: queued jobs they reject are canceled at
        once, held jobs are looked at again."""
        with self._cond:
            rules = self._rules()
            for job_id in self._order.queued if rules else ():
                job = self._jobs.get(job_id)
                if job is None or job.finished or job.start_timestamp is not None:
                    continue
                decision = self._decide(job, rules)
                if decision.verdict == "REJECT":
                    self._reject(job, decision)
            self._order.unpark_all()
            self._cond.notify_all()

    def held(self) -> dict[int, str]:
        """Queued jobs held back, and why."""
        with self._cond:
            return self._order.parked

    # --- running a job --------------------------------------------------------------------------

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
            if qop.input.get("depends") and not self._dependencies_allow(job, index):
                return
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
                    self._fail(job, index, error_result(err))
                return
            with self._cond:
                qop.status, qop.result = OpStatus.SUCCESS, result
                qop.end_timestamp = timestamp()
                if index == len(job.ops) - 1:
                    job.end_timestamp = timestamp()
                self._changed(job)

    def _dependencies_allow(self, job: Job, index: int) -> bool:
        """Whether opcode `index` may run as its dependencies ended; if not, the job is
        canceled or the opcode fails unrun, as Ganeti's dependency manager says."""
        found = depends.verdict(job.id, job.ops[index].input["depends"], self.status_of)
        if found.outcome == "continue":
            return True
        with self._cond:
            if found.outcome == "cancel":
                self._finish_canceled(job, found.message)
            else:
                self._fail(job, index, ["OpExecError", [found.message]])
        return False

    def _fail(self, job: Job, index: int, result: list[Any]) -> None:
        """Opcode `index` failed with `result`, the later ones are not run (caller holds the
        condition)."""
        qop = job.ops[index]
        qop.status, qop.result = OpStatus.ERROR, result
        qop.end_timestamp = timestamp()
        for later in job.ops[index + 1:]:
            later.status, later.result = OpStatus.ERROR, list(NOT_RUN_ERROR)
        job.end_timestamp = timestamp()
        self._changed(job)

    def _finish_canceled(self, job: Job, why: str | None = None) -> None:
        for op in job.ops:
            if op.status not in FINAL:
                op.status = OpStatus.CANCELED
                op.end_timestamp = timestamp()
                if why is not None:
                    op.result = why
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

    def _append_log(self, job: Job, index: int, kind: str, message: object) -> None:
        with self._cond:
            job.log_serial += 1
            job.ops[index].log.append([job.log_serial, timestamp(), kind, message])
            self._changed(job)

    # --- submitting -----------------------------------------------------------------------------

    def submit(self, ops: Sequence[dict[str, object] | opcodes.OpCode], *,
               reason: Iterable[list[object]] = ()) -> int:
        """Queue a job; every opcode is validated first (nothing is queued if one is bad)."""
        return self.submit_many([ops], reason=reason)[0]

    def submit_many(self, jobs: Sequence[Sequence[dict[str, object] | opcodes.OpCode]], *,
                    reason: Iterable[list[object]] = (),
                    despite_drain: bool = False) -> list[int]:
        """Queue jobs in order (Ganeti's SubmitManyJobs): a relative dependency (-1: the job
        before) names an earlier job of the same call. Every opcode of every job is validated
        first: nothing is queued if one is bad, nor when the read-only jobs among them do not
        fit (QueueFull). A drained queue refuses them (QueueDrained) unless `despite_drain`
        (the master's own follow-ups)."""
        if not jobs:
            raise opcodes.OpcodeError("no job to submit")
        parsed = [[opcodes.parse(op) for op in ops] for ops in jobs]
        for position, job_ops in enumerate(parsed):
            if not job_ops:
                raise opcodes.OpcodeError("a job needs at least one opcode")
            depends.check_relative(job_ops, position)
        given = [list(r) for r in reason]
        read_only = sum(all(op.READ_ONLY for op in job_ops) for job_ops in parsed)
        with self._cond:
            if self._stopping:
                raise HerderError("the job queue is shutting down")
            if self._drained and not despite_drain:
                raise QueueDrained("Job queue is drained, refusing job")
            self._expire()
            if read_only and len(self._ephemeral) + read_only > self.max_ephemeral:
                raise QueueFull(f"the queue holds {len(self._ephemeral)} read-only jobs "
                                "already; try again in a while")
            ids: list[int] = []
            try:
                for job_ops in parsed:
                    depends.resolve(job_ops, ids)
                    job = self._add(job_ops, given)
                    self._next_id = job.id + 1
                    self._jobs[job.id] = job
                    self._order.add(job.id, job.priority)
                    ids.append(job.id)
            finally:  # the jobs queued before a storage failure run all the same
                self._cond.notify_all()
        return ids

    def _add(self, ops: Sequence[opcodes.OpCode], given: list[list[object]]) -> Job:
        """A new job of `ops`: stored (not kept, nor run, when not stored), or in memory only
        when every opcode is a query (caller holds the condition)."""
        if not all(op.READ_ONLY for op in ops):
            return self.storage.add(self._next_id, _maker(ops, given))
        self._reserve(self._next_id)
        job = _maker(ops, given)(self._next_id)
        self._ephemeral[job.id] = None
        return job

    # --- reading --------------------------------------------------------------------------------

    def get(self, job_id: int) -> Job:
        """A job of the queue or of the archive."""
        with self._cond:
            self._expire()
            job = self._jobs.get(job_id)
        if job is None:
            job = self.storage.load_archived(job_id)
        if job is None:
            raise NotFoundError(f"job {job_id} not found")
        return job

    def is_archived(self, job_id: int) -> bool:
        with self._cond:
            if job_id in self._jobs:
                return False
        return self.storage.load_archived(job_id) is not None

    def status_of(self, job_id: int) -> str | None:
        """A job's status, also when archived (None: no such job)."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is not None:
                return str(job.status)
            known = self._archived_status.get(job_id)
        if known is not None:
            return known
        archived = self.storage.load_archived(job_id)
        if archived is None:
            return None
        with self._cond:
            self._archived_status[job_id] = str(archived.status)
        return str(archived.status)

    def job_ids(self, *, archived: bool = False) -> list[int]:
        """The queue's job ids (with `archived`, the archive's too), ascending."""
        with self._cond:
            self._expire()
            ids = sorted(self._jobs)
        if archived:
            ids = sorted({*ids, *self.storage.archived_ids()})
        return ids

    def highest_id(self) -> int:
        """The highest job id ever handed out (archived jobs' too; a filter rule's
        watermark)."""
        with self._cond:
            return self._next_id - 1

    def info(self, job_id: int, fields: Sequence[str] = JOB_FIELDS) -> dict[str, Any]:
        job = self.get(job_id)
        with self._cond:
            return job_fields(job, fields)

    # --- steering -------------------------------------------------------------------------------

    def cancel(self, job_id: int) -> tuple[bool, str]:
        """Cancel a queued or waiting job; Ganeti's (success, message) answer."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is not None:
                return self._cancel(job)
        return False, self._finished_message(job_id)

    def _cancel(self, job: Job) -> tuple[bool, str]:
        status, job_id = job.status, job.id
        if status == OpStatus.QUEUED:
            self._finish_canceled(job)
            self._order.forget(job_id)
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

    def _finished_message(self, job_id: int) -> str:
        """For a job not in the queue: archived, or NotFoundError."""
        status = self.status_of(job_id)
        if status is None:
            raise NotFoundError(f"job {job_id} not found")
        return f"Job {job_id} is finished ({status}) and archived"

    def change_priority(self, job_id: int, priority: int) -> tuple[bool, str]:
        """Ganeti's ChangeJobPriority: the priority of the job's pending opcodes (queued or
        waiting); (success, message)."""
        if not opcodes.PRIORITY_HIGHEST <= priority <= opcodes.PRIORITY_LOWEST:
            raise opcodes.OpcodeError(f"priority must be between {opcodes.PRIORITY_HIGHEST} "
                                      f"and {opcodes.PRIORITY_LOWEST}, got {priority}")
        with self._cond:
            job = self._jobs.get(job_id)
            if job is not None:
                return self._change_priority(job, priority)
        return False, self._finished_message(job_id)

    def _change_priority(self, job: Job, priority: int) -> tuple[bool, str]:
        status = job.status
        if status in FINAL:
            return False, f"Job {job.id} is finished"
        if status == OpStatus.CANCELING:
            return False, f"Job {job.id} is cancelling"
        pending = [op for op in job.ops if op.status in (OpStatus.QUEUED, OpStatus.WAITING)]
        if not pending:
            return False, f"Job {job.id} had no pending opcodes"
        for op in pending:
            op.priority = priority
        self._changed(job)
        self._order.reprioritize(job.id, job.priority)
        return True, (f"Priorities of pending opcodes for job {job.id} have been changed to "
                      f"{priority}")

    @property
    def drained(self) -> bool:
        with self._cond:
            return self._drained

    def set_drained(self, drained: bool) -> None:
        """Ganeti's SetDrainFlag: a drained queue refuses new jobs (kept across restarts and
        failovers: the storage holds it)."""
        with self._cond:
            self.storage.set_drained(drained)
            self._drained = drained

    # --- the archive ----------------------------------------------------------------------------

    def archive(self, job_id: int) -> tuple[bool, str]:
        """Ganeti's ArchiveJob: a finished job leaves the queue for the archive;
        (success, message)."""
        with self._archiving:
            with self._cond:
                job = self._jobs.get(job_id)
                if job is not None and not job.finished:
                    return False, f"Job {job_id} is not finished ({job.status})"
                if job is not None and job_id in self._ephemeral:  # never stored: forgotten
                    del self._ephemeral[job_id]
                    del self._jobs[job_id]
                    return True, f"Job {job_id} was read-only: dropped, not archived"
            if job is None:
                if self.status_of(job_id) is None:
                    raise NotFoundError(f"job {job_id} not found")
                return True, f"Job {job_id} is archived"
            self._move_to_archive([job])
        return True, f"Job {job_id} archived"

    def auto_archive(self, age: float, timeout: float | None = None) -> tuple[int, int]:
        """Ganeti's AutoArchiveJobs: archive the finished jobs that ended more than `age`
        seconds ago (every finished job when `age` is negative), in batches, for at most
        `timeout` seconds; (jobs archived, jobs left unexamined)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        threshold = time.time() - age
        with self._cond:
            ids = sorted(self._jobs)
        archived = 0
        with self._archiving:
            for start in range(0, len(ids), ARCHIVE_BATCH):
                if deadline is not None and time.monotonic() > deadline:
                    return archived, len(ids) - start
                with self._cond:
                    batch = [job for job_id in ids[start:start + ARCHIVE_BATCH]
                             if (job := self._jobs.get(job_id)) is not None
                             and job_id not in self._ephemeral and job.finished
                             and (age < 0 or _ended(job) < threshold)]
                if batch:
                    self._move_to_archive(batch)
                    archived += len(batch)
        return archived, 0

    def _move_to_archive(self, jobs: list[Job]) -> None:
        """Finished jobs (written for the last time) to the archive, then out of the queue
        (the caller holds `_archiving`)."""
        self.storage.archive(jobs)
        with self._cond:
            for job in jobs:
                self._jobs.pop(job.id, None)
                self._archived_status[job.id] = str(job.status)
                for wake in self._watchers.get(job.id, ()):
                    wake()

    # --- waiting --------------------------------------------------------------------------------

    def _change_since(self, job: Job, fields: Sequence[str], prev_info: object,
                      prev_serial: int | None) -> dict[str, Any] | None:
        """What changed since the caller's view (caller holds the condition); None: nothing."""
        info = [job_fields(job, [f])[f] for f in fields]
        serial = prev_serial or 0
        entries = [e for op in job.ops for e in op.log if e[0] > serial]
        if info != prev_info or entries or job.finished:
            return {"job_info": info, "log_entries": entries}
        return None

    def _current(self, job_id: int) -> Job:
        """The job as it is now (caller holds the condition): the queue's, or the archive's
        (archived meanwhile)."""
        job = self._jobs.get(job_id)
        return job if job is not None else self.get(job_id)

    def wait_for_change(self, job_id: int, fields: Sequence[str], prev_info: object,
                        prev_serial: int | None, timeout: float) -> dict[str, Any] | None:
        """Block until the job's `fields` differ from `prev_info`, a log entry newer than
        `prev_serial` appears, or the job is finished; None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        self.get(job_id)  # NotFoundError before waiting
        with self._cond:
            while True:
                change = self._change_since(self._current(job_id), fields, prev_info,
                                            prev_serial)
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
        async with self._locked_in_loop():
            live = job_id in self._jobs
            if live:
                self._watchers.setdefault(job_id, set()).add(wake)
        if not live:  # archived (finished) or unknown: answered at once
            return await self._archived_change(job_id, fields, prev_info, prev_serial)
        try:
            while True:
                changed.clear()  # before looking: a change after the look sets it again
                async with self._locked_in_loop():
                    job = self._jobs.get(job_id)
                    change = None if job is None else \
                        self._change_since(job, fields, prev_info, prev_serial)
                if job is None:  # archived meanwhile
                    return await self._archived_change(job_id, fields, prev_info, prev_serial)
                if change is not None:
                    return change
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)
        finally:
            async with self._locked_in_loop():
                watchers = self._watchers.get(job_id)
                if watchers is not None:
                    watchers.discard(wake)
                    if not watchers:
                        del self._watchers[job_id]

    async def _archived_change(self, job_id: int, fields: Sequence[str], prev_info: object,
                               prev_serial: int | None) -> dict[str, Any] | None:
        job = await asyncio.to_thread(self.get, job_id)
        async with self._locked_in_loop():
            return self._change_since(job, fields, prev_info, prev_serial)

    @contextlib.asynccontextmanager
    async def _locked_in_loop(self) -> AsyncIterator[None]:
        """The condition's lock, taken by the event loop without blocking it: a job's thread
        holds the lock while it writes the job file (two fsyncs, seconds on a busy disk), and
        the loop serves every other request meanwhile."""
        pause = 0.001
        while not self._cond.acquire(blocking=False):
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.02)
        try:
            yield
        finally:
            self._cond.release()

    def wait(self, job_id: int, timeout: float | None = None) -> Job:
        """Block until the job is finished (tests, CLI)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.get(job_id)
        with self._cond:
            while True:
                job = self._current(job_id)
                if job.finished:
                    return job
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"job {job_id} not finished after {timeout}s")
                self._cond.wait(remaining)


def _maker(ops: Sequence[opcodes.OpCode], given: list[list[object]]) -> Callable[[int], Job]:
    """Makes the job of `ops` under the id the storage gives it (its reason trail names it)."""
    def make(job_id: int) -> Job:
        queued = []
        for index, op in enumerate(ops):
            trail = [*op.reason, *given,
                     reason_trail.entry(opcodes.opcode_reason_source(op),
                                        f"job={job_id};index={index}")]
            data = op.to_dict()
            data["reason"] = trail
            queued.append(QueuedOpCode(input=data, priority=op.priority,
                                       summary=op.summary()))
        return Job(id=job_id, ops=queued, received_timestamp=timestamp())

    return make


def _ended(job: Job) -> float:
    """When a job ended (Ganeti: end, else start, else received timestamp), in seconds."""
    stamp = job.end_timestamp or job.start_timestamp or job.received_timestamp
    return stamp[0] + stamp[1] / 1_000_000


ProcessorFn = Callable[[JobContext, opcodes.OpCode], Any]
