"""Redistribution (docs/ha.md "Redistribution"): the files the cluster distributes, the ssconf
facts, and a master candidate's copy of the config and the job queue (Ganeti's upload_file,
write_ssconf_files, and herder's write_config)."""

from __future__ import annotations

import msgspec

from herder.core.redist import JOB_FILE
from herder.core.rpcdefs.base import Call


class UploadAnswer(msgspec.Struct, kw_only=True):
    path: str
    size: int


class UploadFile(Call[UploadAnswer], kw_only=True):
    """A white-listed file (absolute `path`, base64 `data`, `mode`, optional `uid`/`gid`),
    written atomically."""

    METHOD = "upload_file"
    TIMEOUT = 30.0
    path: str
    data: str
    mode: int = 0o600
    uid: int | None = None
    gid: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.mode <= 0o7777:
            raise ValueError(f"mode {self.mode} out of range")
        for ident in (self.uid, self.gid):
            if ident is not None and not -1 <= ident < 2**32 - 1:
                raise ValueError(f"uid/gid {ident} out of range")


class WriteSsconf(Call[list[str]], kw_only=True):
    """`ssconf_<name>` files; the answer names those written."""

    METHOD = "write_ssconf"
    TIMEOUT = 30.0
    values: dict[str, str | int | float | bool | None]

    def __post_init__(self) -> None:
        for name in self.values:
            if not name or not all(ch.isalnum() or ch == "_" for ch in name):
                raise ValueError(f"invalid ssconf name {name!r}")


class QueueCopy(msgspec.Struct, kw_only=True):
    """Job files (name -> base64), when given every name the queue holds (the others go: to
    the archive when they are job files), and the job files archived since the last push
    (name -> base64), which the candidate files under `queue/archive/`."""

    files: dict[str, str] = msgspec.field(default_factory=dict)
    names: list[str] | None = None
    archived: dict[str, str] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.files:
            if "/" in name or name.startswith(".") or not name.endswith(".json"):
                raise ValueError(f"invalid job queue file name {name!r}")
        for name in self.archived:
            if not JOB_FILE.match(name):
                raise ValueError(f"invalid archived job file name {name!r}")


class JournalCopy(msgspec.Struct, kw_only=True):
    """The master's config journal from `offset` (0: the whole file) continuing the snapshot
    whose SHA-256 is `snapshot` (base64 data)."""

    snapshot: str
    offset: int
    data: str

    def __post_init__(self) -> None:
        if self.offset < 0:
            raise ValueError("journal offset must not be negative")


class WriteConfigAnswer(msgspec.Struct, kw_only=True):
    serial: int
    previous: int | None  # the copy's serial before (None: not read, or none)


class WriteConfig(Call[WriteConfigAnswer], kw_only=True):
    """A master candidate's copy of the config (the whole document or the journal's new
    records) and of the job queue."""

    METHOD = "write_config"
    TIMEOUT = 60.0
    serial: int
    config: str | None = None  # the whole document (the master's snapshot file)
    journal: JournalCopy | None = None
    queue: QueueCopy | None = None

    def __post_init__(self) -> None:
        if self.config is None and self.journal is None:
            raise ValueError("write_config needs the config or its journal")
