"""`file`: the file storage directories of the cluster (category storage, kind 1).

The directories come from the cluster config: `cluster.file_storage_dir` when the `file` disk
template is enabled, `cluster.shared_file_storage_dir` when `sharedfile` is. Each is measured
with statvfs, in KiB: `total` (the filesystem's size), `free` (the space available to new
files, statvfs' f_bavail) and `used` (= total - free, so blocks reserved for root count as
used). The top-level free/used/total add up each filesystem once, even when both directories
live on it. A directory that is missing, not a directory, unreadable or on a read-only
filesystem makes the status 4 with "filesystem error: ..." naming it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from herder.core import model
from herder.mond.collector import Collector
from herder.mond.report import Kind, Status, merge_statuses, status

KIB = 1024

# disk template -> the cluster attribute naming its directory
TEMPLATE_DIRS = (("file", "file_storage_dir"), ("sharedfile", "shared_file_storage_dir"))


def storage_dirs(config: model.ConfigData | None) -> list[tuple[str, str]]:
    """(template, directory) for every enabled file-based template, in a fixed order."""
    if config is None:
        return []
    cluster = config.cluster
    return [(template, getattr(cluster, attr)) for template, attr in TEMPLATE_DIRS
            if template in cluster.enabled_disk_templates and getattr(cluster, attr)]


def measure(template: str, path: str) -> tuple[dict[str, Any], int | None]:
    """One directory's entry and its filesystem's device id (None when it failed)."""
    entry: dict[str, Any] = {"template": template, "path": path}
    problem: str | None = None
    device: int | None = None
    try:
        st = os.stat(path)
        if not os.path.isdir(path):
            problem = "not a directory"
        elif not os.access(path, os.R_OK | os.X_OK):
            problem = "not readable"
        else:
            vfs = os.statvfs(path)
            device = st.st_dev
            total = vfs.f_blocks * vfs.f_frsize // KIB
            free = vfs.f_bavail * vfs.f_frsize // KIB
            entry.update(total=total, free=free, used=total - free,
                         read_only=bool(vfs.f_flag & os.ST_RDONLY))
            if entry["read_only"]:
                problem = "read-only filesystem"
    except FileNotFoundError:
        problem = "does not exist"
    except OSError as err:
        problem = err.strerror or str(err)
    if problem is None:
        entry["status"] = status(Status.OK)
    else:
        entry["status"] = status(
            Status.BAD, f"filesystem error: {template} storage directory {path}: {problem}")
    return entry, device


def file_data(dirs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    counted: set[int] = set()
    totals = {"free": 0, "used": 0, "total": 0}
    for template, path in dirs:
        entry, device = measure(template, path)
        entries.append(entry)
        if device is not None and device not in counted:
            counted.add(device)
            for key in totals:
                totals[key] += entry[key]
    return {"status": merge_statuses(e["status"] for e in entries), **totals,
            "dirs": entries}


class FileStorageCollector(Collector):
    """Storage type `file` (and `sharedfile`): space in the storage directories."""

    name = "file"
    category = "storage"
    kind = Kind.STATUS

    def available(self) -> bool:
        return bool(storage_dirs(self.ctx.config()))

    def collect(self) -> dict[str, Any]:
        return file_data(storage_dirs(self.ctx.config()))

    def summary(self, data: Any) -> Any:
        return {key: data[key] for key in ("status", "free", "used", "total") if key in data}


COLLECTORS = [FileStorageCollector]
