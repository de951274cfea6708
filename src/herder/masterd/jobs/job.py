"""A job of the queue as it is stored and shown: its opcodes with their statuses, results and
logs (Ganeti's `_QueuedJob` / `_QueuedOpCode` and their query fields).

Job states: queued, waiting (for locks), running, success, error, canceling, canceled,
computed from the opcodes' as Ganeti does (`Job.status`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import msgspec

from herder.masterd.jobs import opcodes


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


def error_result(err: BaseException) -> list[object]:
    """Ganeti's encoded error: [class name, [message, ...]]."""
    kind = getattr(err, "ganeti_class", None) or type(err).__name__
    args = getattr(err, "ganeti_args", None) or [str(err)]
    return [kind, list(args)]


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
