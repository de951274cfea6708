"""A job queue seeded directly in its storage (no job submitted): `archived` finished jobs in
the archive and `live` finished ones in the queue, each a one-opcode tag job with its reason
trail and a log entry, as masterd writes them. For the queue tests at scale and bench/jobqueue.py
(a year of a busy cluster's jobs without running them)."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from herder.core.redist import archive_path, job_file
from herder.masterd.jobs.job import Job, OpStatus, QueuedOpCode


def seeded_job(job_id: int, when: float) -> Job:
    stamp = [int(when), 0]
    op = QueuedOpCode(
        input={"OP_ID": "OP_TAGS_SET", "kind": "cluster", "name": None,
               "tags": [f"seed:{job_id}"], "dry_run": False, "debug_level": 0, "priority": 0,
               "depends": None, "comment": None,
               "reason": [["gnt:library:rlib2:tags", "", int(when * 1e9)],
                          ["gnt:opcode:tags_set", f"job={job_id};index=0", int(when * 1e9)]]},
        status=OpStatus.SUCCESS, result=None,
        log=[[1, stamp, "message", f"tag seed:{job_id} set"]],
        start_timestamp=stamp, exec_timestamp=stamp, end_timestamp=stamp)
    return Job(id=job_id, ops=[op], received_timestamp=stamp, start_timestamp=stamp,
               end_timestamp=stamp, log_serial=1)


def seed_queue(queue_dir: Path, archived: int, live: int) -> None:
    """Jobs 1..archived in the archive, the next `live` ones in the queue, ended a day ago
    (archived) and an hour ago (live)."""
    encode = msgspec.json.Encoder().encode
    queue_dir.mkdir(parents=True, exist_ok=True)
    day_ago, hour_ago = time.time() - 86400, time.time() - 3600
    made: set[Path] = set()
    for job_id in range(1, archived + 1):
        path = archive_path(queue_dir, job_file(job_id))
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.write_bytes(encode(seeded_job(job_id, day_ago)))
    for job_id in range(archived + 1, archived + live + 1):
        (queue_dir / job_file(job_id)).write_bytes(encode(seeded_job(job_id, hour_ago)))
