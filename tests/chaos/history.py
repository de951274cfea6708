"""What a chaos run did and what it found afterwards, as typed records: the driver's operations,
the nemesis' events, and the cluster's state once every node is back (the checker's input).
Times are wall-clock seconds (time.time()), so operations and events share one timeline."""

from __future__ import annotations

import msgspec

# the statuses a job ends in (Ganeti's JOB_STATUS_SUCCESS, _ERROR, _CANCELED)
FINAL_JOB_STATUSES = frozenset({"success", "error", "canceled"})


class Operation(msgspec.Struct, frozen=True):
    """One job the driver asked for: acknowledged when RAPI answered with a job id."""

    kind: str  # create, migrate, failover, move, modify, remove, tags
    instance: str
    started: float
    ended: float  # when the job ended as the driver saw it, or when it gave up waiting
    job_id: int | None = None
    refused: str = ""  # RAPI's one-line answer when it gave no job id
    status: str = ""  # the job's status when the driver stopped waiting for it
    detail: str = ""  # the job's error, or what the driver asked (target node, ...)


class NemesisEvent(msgspec.Struct, frozen=True):
    """One fault: `kind` (kill, power-off, power-on, cut, heal, fill, free) on `node`."""

    kind: str
    node: str
    at: float
    detail: str = ""  # the daemon killed, the bytes written, a failure to inject


class Beat(msgspec.Struct, frozen=True):
    """An acknowledged heartbeat: boot `boot_id` synced record `seq`; seen in `node`'s log."""

    boot_id: str
    seq: int
    node: str


class GuestState(msgspec.Struct, frozen=True):
    """An instance of the cluster at the end: its acknowledged heartbeats (every node's serial
    log), the write sequence on its disk, the nodes whose libvirt runs it."""

    instance: str
    beats: list[Beat]
    records: list[tuple[str, int]]  # (boot id, number) in disk order (guest.read_sequence)
    running_on: list[str]


class Volume(msgspec.Struct, frozen=True):
    node: str  # "" for shared storage
    name: str  # a logical volume (vg/lv) or a disk file's path


class Final(msgspec.Struct, frozen=True):
    """The cluster once every node is back and the driver's jobs have ended."""

    jobs: dict[int, str]  # job id -> its status now
    verify: list[str]  # `cluster verify`'s error lines (empty: clean)
    guests: list[GuestState]
    volumes: list[Volume]  # every instance volume found on the nodes and shared storage
    owned: list[Volume]  # the volumes the config's instances own


class History(msgspec.Struct, frozen=True):
    seed: int
    operations: list[Operation]
    events: list[NemesisEvent]
    final: Final
