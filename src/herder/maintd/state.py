"""maintd's persistent state behind a small interface.

`FileState` keeps it in a JSON file (atomic replace); `RapiState` in the cluster config's
`maintenance` section through masterd's herder routes (`GET /2/herder/maintenance`,
`PUT /2/herder/maintenance/state`), so a master failover continues where it was.

Crash safety (kill -9): before a job is submitted its intent (event, step, a unique key) is
saved; the job id is saved right after. Every job's reason trail carries the event uuid, so on
a restart the jobs of an intent whose id was never recorded are found in the job queue and
adopted instead of submitted again.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec

from herder.core import model
from herder.core.backupsched import BackupRun
from herder.core.store import atomic_write

log = logging.getLogger("herder.maintd.state")


@dataclass
class MaintState:
    incidents: list[model.Incident] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)  # the running round's jobs
    evacuated: list[str] = field(default_factory=list)
    intents: list[dict[str, Any]] = field(default_factory=list)  # {"key","event","step"}
    # node UUID -> [timestamp, hmac] of the last accepted diagnose report (replay protection
    # across restarts)
    seen: dict[str, list[Any]] = field(default_factory=dict)
    # the runs of the scheduled backups (maintd.backups), the newest backupsched.RUNS_KEPT
    backups: list[BackupRun] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"incidents": model.to_builtins(self.incidents), "jobs": list(self.jobs),
                "evacuated": list(self.evacuated), "intents": list(self.intents),
                "seen": dict(self.seen), "backupRuns": model.to_builtins(self.backups)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MaintState:
        return cls(incidents=msgspec.convert(d.get("incidents") or [], list[model.Incident]),
                   jobs=[int(j) for j in d.get("jobs") or []],
                   evacuated=[str(e) for e in d.get("evacuated") or []],
                   intents=list(d.get("intents") or []),
                   seen={str(k): list(v) for k, v in (d.get("seen") or {}).items()},
                   backups=msgspec.convert(d.get("backupRuns") or [], list[BackupRun]))

    def incident(self, event: str) -> model.Incident | None:
        return next((i for i in self.incidents if i.uuid == event), None)


class StateStore(Protocol):
    def load(self) -> MaintState: ...

    def save(self, state: MaintState) -> None: ...


class FileState:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def load(self) -> MaintState:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return MaintState()
        return MaintState.from_dict(json.loads(raw))

    def save_local(self, state: MaintState) -> None:
        self.save(state)

    def save(self, state: MaintState) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(state.to_dict(), indent=1).encode(), 0o600)


class RapiState:
    """Through masterd: everything, intents and the last accepted report per node included,
    lives in the config's maintenance section, so a master failover continues where it was.
    `fallback` (a FileState) keeps a local copy; a 404 (an older masterd) falls back to it."""

    def __init__(self, client: Any, fallback: FileState) -> None:
        self.client = client
        self.fallback = fallback
        self.routes = True

    def load(self) -> MaintState:
        local = self.fallback.load()
        if self.routes:
            try:
                maint = self.client.get_herder("maintenance")
            except Exception as err:
                if getattr(err, "status", None) == 404:
                    self.routes = False
                    log.warning("masterd has no maintenance routes; state kept in %s",
                                self.fallback.path)
                    return local
                raise
            state = MaintState.from_dict(maint)
            if "intents" not in maint:  # a masterd without these fields: keep the local ones
                state.intents, state.seen = local.intents, local.seen
            if "backupRuns" not in maint:
                state.backups = local.backups
            return state
        return local

    def save_local(self, state: MaintState) -> None:
        self.fallback.save(state)

    def save(self, state: MaintState) -> None:
        self.fallback.save(state)
        if not self.routes:
            return
        body = {"incidents": model.to_builtins(state.incidents), "jobs": state.jobs,
                "evacuated": state.evacuated, "intents": model.to_builtins(state.intents),
                "seen": model.to_builtins(state.seen),
                "backupRuns": model.to_builtins(state.backups)}
        try:
            self.client.put_herder("maintenance/state", body)
        except Exception as err:
            if getattr(err, "status", None) == 404:
                self.routes = False
                log.warning("masterd has no PUT /2/herder/maintenance/state; state kept in %s",
                            self.fallback.path)
                return
            raise


def intent_key(event: str, step: str, serial: int) -> str:
    return f"{event}/{step}/{serial}"


def clear_intents(state: MaintState, keys: set[str]) -> None:
    with contextlib.suppress(ValueError):
        state.intents = [i for i in state.intents if i.get("key") not in keys]
