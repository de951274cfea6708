"""The names the master and the nodes agree on for redistribution (docs/ha.md
"Redistribution"): masterd's `redist` pushes by them, noded's `upload_file` white-list reads by
them, and its copy of the job queue is filed by them."""

from __future__ import annotations

import re
from pathlib import Path

# Beside the config: the user-maintained list of files every node receives (one absolute path
# per line, `#` comments).
REDIST_FILES = "redist-files"
# The ssconf value listing every file a node may receive through upload_file (its white-list),
# written first in every push.
UPLOAD_LIST = "redist_files"

# The job queue's files, in the master's queue directory and in a candidate's copy of it:
# `job-<id>.json` (a job), `archive/<id // 10000>/job-<id>.json` (an archived job: Ganeti's
# `queue/archive/<dir>/job-<id>`, `jstore.GetArchiveDirectory`)
JOB_FILE = re.compile(r"^job-(\d+)\.json$")
ARCHIVE = "archive"
JOBS_PER_ARCHIVE_DIRECTORY = 10_000  # Ganeti's JSTORE_JOBS_PER_ARCHIVE_DIRECTORY


def job_file(job_id: int) -> str:
    return f"job-{job_id}.json"


def archive_path(queue_dir: Path, name: str) -> Path:
    """Where a job file `name` (`job-<id>.json`) lives once archived."""
    found = JOB_FILE.match(name)
    if found is None:
        raise ValueError(f"not a job file name: {name!r}")
    return queue_dir / ARCHIVE / str(int(found.group(1)) // JOBS_PER_ARCHIVE_DIRECTORY) / name
