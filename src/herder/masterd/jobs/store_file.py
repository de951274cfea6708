"""The job queue in files (`FileJobStorage`, the default `JobStorage`): the queue directory of
the master, copied to the master candidates by redistribution (`masterd.redist`).

- `<dir>/job-<id>.json`: a job of the queue, written atomically on every change;
- `<dir>/archive/<id // 10000>/job-<id>.json`: an archived job (Ganeti's
  `queue/archive/<dir>/job-<id>`, `jstore.GetArchiveDirectory`), moved there by a rename once
  it is archived; never read when the queue starts, nor listed with the queue;
- `<dir>/drain.json`: present while the queue is drained (Ganeti's `queue/drain`).

Only the live jobs are read at start, so a queue that has archived 100,000 jobs starts as one
that has none; the highest id ever used is the highest of the live jobs and of the newest
archive directory (ids are never used twice).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec

from herder.core import untrusted
from herder.core.redist import ARCHIVE, JOB_FILE, archive_path, job_file
from herder.core.store import atomic_write, fsync_directory
from herder.masterd.jobs.job import Job

log = logging.getLogger("herder.jobs")

DRAIN = "drain.json"


class FileJobStorage:
    """One file per job, written atomically; archived jobs moved to `archive/`."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._decoder = msgspec.json.Decoder(Job)
        # the job files archived by this process, in order: redistribution sends the
        # candidates what was archived since its last push (`archived_since`)
        self._archive_log: list[str] = []
        self._log_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FileJobStorage({str(self.directory)!r})"

    def _path(self, job_id: int) -> Path:
        return self.directory / job_file(job_id)

    def save(self, job: Job) -> None:
        atomic_write(self._path(job.id), msgspec.json.encode(job))

    def add(self, candidate: int, make: Callable[[int], Job]) -> Job:
        job = make(candidate)  # job ids are kept (archived too), so highest + 1 is next
        self.save(job)
        return job

    def load(self) -> tuple[list[Job], int]:
        self.directory.mkdir(parents=True, exist_ok=True)
        jobs: list[Job] = []
        highest = self._highest_archived()
        for path in sorted(self.directory.glob("job-*.json")):
            try:
                job = self._read(path)
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

    def _read(self, path: Path) -> Job:
        raw = path.read_bytes()
        untrusted.check(raw, what="job file")
        return self._decoder.decode(raw)

    # --- the archive ----------------------------------------------------------------------------

    def _archive_directories(self) -> list[tuple[int, Path]]:
        root = self.directory / ARCHIVE
        try:
            entries = list(os.scandir(root))
        except FileNotFoundError:
            return []
        return sorted((int(e.name), Path(e.path)) for e in entries
                      if e.name.isdigit() and e.is_dir())

    def _highest_archived(self) -> int:
        """The highest archived job id: the newest non-empty archive directory's."""
        for _, directory in reversed(self._archive_directories()):
            ids = [int(found.group(1)) for name in os.listdir(directory)
                   if (found := JOB_FILE.match(name))]
            if ids:
                return max(ids)
        return 0

    def archive(self, jobs: Iterable[Job]) -> None:
        """Move finished jobs into the archive (each file renamed as it is: its last write
        was its final state); durable when it returns."""
        touched: set[Path] = set()
        names = []
        for job in jobs:
            name = job_file(job.id)
            target = archive_path(self.directory, name)
            if target.parent not in touched:
                target.parent.mkdir(parents=True, exist_ok=True)
                touched.add(target.parent)
            try:
                os.replace(self._path(job.id), target)
            except FileNotFoundError:  # never written here (a copy): write its final state
                atomic_write(target, msgspec.json.encode(job))
            names.append(name)
        for directory in (*touched, self.directory):
            fsync_directory(directory)
        with self._log_lock:
            self._archive_log.extend(names)

    def load_archived(self, job_id: int) -> Job | None:
        path = archive_path(self.directory, job_file(job_id))
        try:
            return self._read(path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, msgspec.DecodeError, msgspec.ValidationError) as err:
            log.error("unreadable archived job file %s: %s", path, err)
            return None

    def archived_ids(self) -> list[int]:
        ids: list[int] = []
        for _, directory in self._archive_directories():
            ids.extend(int(found.group(1)) for name in os.listdir(directory)
                       if (found := JOB_FILE.match(name)))
        ids.sort()
        return ids

    def archived_since(self, position: int) -> tuple[list[str], int]:
        """The job files this process archived after the first `position`, and the position
        after them."""
        with self._log_lock:
            return self._archive_log[position:], len(self._archive_log)

    # --- the drain flag -------------------------------------------------------------------------

    def drained(self) -> bool:
        return (self.directory / DRAIN).exists()

    def set_drained(self, drained: bool) -> None:
        path = self.directory / DRAIN
        if drained:
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write(path, msgspec.json.encode({"drained": True, "since": time.time()}))
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                fsync_directory(self.directory)
