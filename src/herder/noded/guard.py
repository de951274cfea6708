"""A node never starts or re-defines a domain it is not the primary of (issue 18, item 5).

The master's instance RPCs carry the instance's claim (`herder.core.vmclaim`: UUID, primary
node, config version, master epoch). The guard keeps, per instance, the newest claim this node
has seen (`<state_dir>/guard/<instance>.json`, written atomically) and answers whether a call
may start or define the domain here:

- a claim older than the recorded one (master epoch, then config version) is refused: a stale
  job or a former master;
- a claim of the recorded version that names another primary is refused: after a migration's
  source recorded the move, the old claim (same version, source as primary) cannot start it
  there again;
- a claim naming another node as the primary is refused, except on the target of a move the
  master is running (the call carries the move, its target is this node and its source is the
  claim's primary); the target then records the move as incoming.

Calls that do not start anything (shutdown, prepare, stop of a stray copy) record a newer claim;
a migration's finish records that the instance moved to the target. The re-definition of domains
after a libvirtd restart (`herder.noded.hypervisor`) asks `may_restore`: only the primary's
domains and an incoming move's are defined again; an instance without a record is left to the
master (its next start defines it).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path

import msgspec

from herder.core.errors import HerderError
from herder.core.store import atomic_write
from herder.core.vmclaim import Claim, Move

log = logging.getLogger("herder.noded.guard")


class Refused(HerderError):
    """This node must not run the instance's domain under that claim (the message says why)."""


class Record(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The newest claim this node has seen for one instance."""

    uuid: str
    primary: str
    serial: int
    epoch: int
    incoming: Move | None = None  # a move to this node the master is running

    @property
    def version(self) -> tuple[int, int]:
        return (self.epoch, self.serial)

    @classmethod
    def of(cls, claim: Claim, *, primary: str | None = None,
           incoming: Move | None = None) -> Record:
        return cls(claim.uuid, primary or claim.primary, claim.serial, claim.epoch, incoming)


def judge_run(name: str, record: Record | None, claim: Claim, me: str,
              move: Move | None) -> str | None:
    """Why node `me` must not start or define `name`'s domain under `claim` (None: it may).
    Pure."""
    if record is not None and record.uuid == claim.uuid:
        if claim.version < record.version:
            return (f"the call carries config version {claim.serial} (master epoch "
                    f"{claim.epoch}) of {name}, this node has seen version {record.serial} "
                    f"(epoch {record.epoch}): a stale order")
        if claim.version == record.version and claim.primary != record.primary:
            return (f"this node recorded {record.primary} as {name}'s primary node at config "
                    f"version {record.serial}, the call names {claim.primary}")
    if move is not None:
        if move.target != me:
            return f"the move of {name} goes to {move.target}, not to this node ({me})"
        if move.source != claim.primary:
            return (f"the move of {name} starts from {move.source}, but its primary node is "
                    f"{claim.primary}")
        return None
    if claim.primary != me:
        return f"{name}'s primary node is {claim.primary}, not this node ({me})"
    return None


def judge_restore(name: str, record: Record | None, me: str) -> str | None:
    """Why `name`'s recorded domain must not be defined again after a libvirtd restart."""
    if record is None:
        return "no record of its primary node here; the master's next start defines it"
    if record.primary == me:
        return None
    if record.incoming is not None and record.incoming.target == me:
        return None
    return f"its primary node is {record.primary}, not this node"


class InstanceGuard:
    """The per-instance records of one node, and the checks of its instance RPCs."""

    def __init__(self, state_dir: Path, node_name: str) -> None:
        self.directory = state_dir / "guard"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.node = node_name
        self._lock = threading.Lock()

    def _path(self, name: str) -> Path:
        if not name or "/" in name or "\0" in name or name.startswith("."):
            raise Refused(f"invalid instance name {name!r}")
        return self.directory / f"{name}.json"

    def record(self, name: str) -> Record | None:
        try:
            return msgspec.json.decode(self._path(name).read_bytes(), type=Record)
        except FileNotFoundError:
            return None
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as err:
            # An unreadable record grants nothing: as if this node had never seen the
            # instance (a start under a valid claim for this node writes a new one).
            log.error("unreadable guard record of %s (%s); treating it as absent", name, err)
            return None

    def _write(self, name: str, record: Record) -> None:
        atomic_write(self._path(name), msgspec.json.encode(record), 0o644)

    def _current(self, name: str, claim: Claim) -> Record | None:
        """The record for this very instance (one of an earlier instance of the name: none)."""
        record = self.record(name)
        return record if record is not None and record.uuid == claim.uuid else None

    def admit_run(self, name: str, claim: Claim, move: Move | None = None) -> None:
        """Raise Refused unless this node may start or define `name` under `claim`; record the
        claim (and an incoming move) when it may."""
        with self._lock:
            record = self._current(name, claim)
            why = judge_run(name, record, claim, self.node, move)
            if why is not None:
                log.warning("refusing to run %s here: %s", name, why)
                raise Refused(f"refusing to run {name} on {self.node}: {why}")
            if record is None or claim.version >= record.version:
                self._write(name, Record.of(claim, incoming=move))

    def note(self, name: str, claim: Claim) -> None:
        """Record a newer claim from a call that starts nothing."""
        with self._lock:
            record = self._current(name, claim)
            if record is None or claim.version > record.version:
                self._write(name, Record.of(claim))

    def moved_away(self, name: str, claim: Claim, move: Move) -> None:
        """A migration's source handed the instance over: from now on its primary is the
        target, as far as this node is concerned (the old claim cannot start it here)."""
        with self._lock:
            record = self._current(name, claim)
            if record is None or claim.version >= record.version:
                self._write(name, Record.of(claim, primary=move.target))

    def not_mine(self, name: str, claim: Claim) -> None:
        """Raise Refused when the claim names this node as the primary: a copy this node is
        the primary of is no stray. Otherwise record the claim (an incoming move ends)."""
        if claim.primary == self.node:
            raise Refused(f"refusing to stop {name} on {self.node} as a stray copy: this node "
                          "is its primary node")
        with self._lock:
            record = self._current(name, claim)
            if record is None or claim.version >= record.version:
                self._write(name, Record.of(claim))

    def may_restore(self, name: str) -> str | None:
        """Why `name` must not be re-defined after a libvirtd restart (None: it may)."""
        try:
            record = self.record(name)
        except Refused as err:
            return str(err)
        return judge_restore(name, record, self.node)

    def forget(self, name: str) -> None:
        with self._lock, contextlib.suppress(FileNotFoundError, Refused):
            self._path(name).unlink()
