"""The job query resource (`/2/query/job`, `herder job list`): Ganeti 3.0's job fields, the
values from the job queue (`masterd.jobs.queue.JobQueue.info`), jobs by id."""

from __future__ import annotations

from operator import attrgetter
from typing import NamedTuple

from herder.core import model
from herder.core.errors import NotFoundError
from herder.masterd import livefields
from herder.masterd.livecache import Snapshot
from herder.masterd.queries.fields import (
    BOOL,
    NUMBER,
    OTHER,
    TEXT,
    ColumnFn,
    FieldDef,
    FieldSet,
    JobSource,
    Objects,
    Resource,
    Results,
    RowFn,
)

FIELDS: dict[str, FieldDef] = {
    "archived": FieldDef("Archived", BOOL, "Whether job is archived"),
    "end_ts": FieldDef("End", OTHER, "Timestamp of job end (tuple containing seconds and "
                       "microseconds)", split_timestamp=True),
    "id": FieldDef("ID", NUMBER, "Job ID"),
    "opend": FieldDef("OpCode_end", OTHER, "List of opcode execution end timestamps"),
    "opexec": FieldDef("OpCode_exec", OTHER, "List of opcode execution start timestamps "
                       "(after acquiring locks)"),
    "oplog": FieldDef("OpCode_log", OTHER, "List of opcode output logs"),
    "oppriority": FieldDef("OpCode_prio", OTHER, "List of opcode priorities"),
    "opresult": FieldDef("OpCode_result", OTHER, "List of opcodes results"),
    "ops": FieldDef("OpCodes", OTHER, "List of all opcodes"),
    "opstart": FieldDef("OpCode_start", OTHER, "List of opcode start timestamps (before "
                        "acquiring locks)"),
    "opstatus": FieldDef("OpCode_status", OTHER, "List of opcodes status"),
    "priority": FieldDef("Priority", NUMBER, "Current job priority (19 to -20)"),
    "received_ts": FieldDef("Received", OTHER, "Timestamp of when job was received (tuple "
                            "containing seconds and microseconds)", split_timestamp=True),
    "start_ts": FieldDef("Start", OTHER, "Timestamp of job start (tuple containing seconds "
                         "and microseconds)", split_timestamp=True),
    "status": FieldDef("Status", TEXT, "Job status"),
    "summary": FieldDef("Summary", OTHER, "List of per-opcode summaries"),
}
# the fields the queue gives (JobQueue.info); the others are found here
QUEUE_FIELDS = ("status", "ops", "opresult", "opstatus", "oplog", "received_ts", "start_ts",
                "end_ts", "summary", "priority", "opstart", "opexec", "opend")


class JobRef(NamedTuple):
    """A job of the queue, as the resource lists it."""

    id: int
    queue: JobSource | None  # None: a job id nobody has (a filter named it)


def _info(_config: model.ConfigData, _live: Snapshot) -> RowFn:
    def row(job: JobRef) -> Results:
        try:
            if job.queue is None:
                raise NotFoundError(f"job {job.id} not found")
            info = job.queue.info(job.id, QUEUE_FIELDS)
        except NotFoundError:  # gone since the list was taken, or never there
            return {name: (livefields.RS_UNAVAIL, None) for name in FIELDS if name != "id"}
        found: Results = {name: (livefields.RS_NORMAL, info[name]) for name in QUEUE_FIELDS}
        # the queue lists jobs that are not archived; each opcode runs at the job's priority
        found["archived"] = (livefields.RS_NORMAL, False)
        found["oppriority"] = (livefields.RS_NORMAL, [info["priority"]] * len(info["ops"]))
        return found

    return row


def _jobs(source: Objects) -> list[JobRef]:
    queue = source.jobs
    return [] if queue is None else [JobRef(job_id, queue) for job_id in queue.job_ids()]


def missing(job_id: object) -> JobRef:
    """The row of a job id a filter names that the queue does not have (Ganeti lists it with
    every other field unavailable)."""
    return JobRef(job_id if isinstance(job_id, int) else -1, None)


SIMPLE: dict[str, ColumnFn] = {"id": lambda _c, jobs: [job.id for job in jobs]}
RESOURCE = Resource("job", FIELDS, _jobs, SIMPLE,
                    (FieldSet(frozenset(FIELDS) - {"id"}, _info, False),),
                    name_field="id", order=attrgetter("id"))
