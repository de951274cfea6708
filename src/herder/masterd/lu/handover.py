"""After a move (migration or failover) failed half way, which node keeps the instance: a pure
decision on what the two node daemons report, so that exactly one copy runs afterwards
(issue 18, item 5).

Two kinds of hand-over exist:

- `RESTART` (herder's move today, the only one libvirt's test driver allows): the target defines
  and starts its own copy while the source's still runs, then the source's is destroyed. Until
  the source's finish, the source's copy is the instance; a running copy on the target proves
  nothing about the source's.
- `LIVE` (libvirt's live migration: `herder.noded.kvm.migration`): libvirt resumes the guest on
  the target only after the source's QEMU handed it over, so a target copy that runs (and is not
  paused for the migration) means the migration completed, even when the source cannot say.

The rule: a source copy known to run keeps the instance; a source known not to run hands it to
a target known to run; with the source unknown, only a `LIVE` hand-over's running target
proves the move; otherwise the source keeps it (the config does not change on a move nobody can
confirm, and the target's copy is stopped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

RESTART: Final = "restart"
LIVE: Final = "live"
SOURCE: Final = "source"
TARGET: Final = "target"
RUNNING_STATES = frozenset({"running", "blocked", "paused"})


@dataclass(frozen=True)
class Copy:
    """One node's copy of the instance, as its node daemon reported it."""

    known: bool  # the node daemon answered (and its hypervisor did)
    running: bool = False  # running, blocked or paused
    paused_for_move: bool = False  # paused by the migration (not yet resumed there)

    @classmethod
    def from_domains(cls, domains: object, name: str) -> Copy:
        """From an `instance_list` answer (domain name -> state word)."""
        if not isinstance(domains, dict):
            return cls(known=False)
        return cls(known=True, running=domains.get(name) in RUNNING_STATES)


UNKNOWN = Copy(known=False)


def keeper(source: Copy, target: Copy, handover: str) -> str:
    """SOURCE or TARGET: who runs the instance from now on."""
    if source.known and source.running:
        return SOURCE
    if source.known and target.known and target.running:
        return TARGET
    if (not source.known and handover == LIVE and target.known and target.running
            and not target.paused_for_move):
        return TARGET
    return SOURCE
