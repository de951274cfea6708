"""herder's locks: SharedLock, LockSet, LockManager and the lock-attempt retry strategy.

This follows design-2.1 "Locking improvements" and the behaviour of Ganeti's `lib/locking.py`
(see ../shared/reference/ganeti21.md §3); the code is herder's own.

Ownership is per thread, as in Ganeti: a lock (or a lock set level) is owned by the thread that
acquired it and only that thread may release it.

SharedLock: one queue
---------------------
A SharedLock keeps a single FIFO queue of *entries*. Every exclusive acquire that has to wait
appends its own entry. Shared acquires that have to wait all join the *active shared entry*; it is
appended to the queue when its first waiter arrives and every later sharer joins it as long as it
has not been notified. So waiting sharers are one queue entry, and a sharer arriving while that
entry is queued "passes" any exclusive entries queued behind the entry (design-2.1: "shared
acquires will skip any exclusive acquire in the queue"). When the shared entry reaches the head of
the queue and is notified, a second shared entry becomes the active one: sharers arriving from then
on queue at the tail, behind any exclusive waiter, so exclusive acquires cannot starve. The
notified entry leaves the queue once all its waiters have taken the lock (or given up).

An acquire is granted only to the head of the queue (or, when nobody is queued, at once: the fast
path). Exclusive needs no holder at all; shared needs no exclusive holder. A newcomer queues
whenever anybody is queued, even if it could take the lock at that moment (fairness, as Ganeti).

release() notifies the head entry only when it can then acquire: an exclusive head when the last
holder leaves, a shared head when the exclusive holder leaves (Ganeti master; 2.1 notified on every
release, which woke timed exclusive waiters early). When a waiting entry gives up (timeout) and it
was the head, the new head is notified if it can acquire.

Timeouts: `timeout=None` blocks; `timeout=0` tries once without queueing; otherwise the call waits
until the lock is granted or the timeout has really expired (spurious or unrelated wake-ups wait
again for the remaining time, as Ganeti master; 2.1 gave up after the first wake-up). Negative
timeouts count as 0. On timeout the call returns False and holds nothing.

Waiting uses `threading.Condition.wait(timeout)` on a condition per queue entry, all sharing the
lock's internal mutex. In CPython 3 that is a timed acquire of an OS lock (sem_timedwait /
pthread_cond_timedwait), not the sleep-polling of Python 2 that design-2.1 worked around with pipe
conditions; so the pipe condition (an optimisation in design-2.1) is not needed and not built.

delete(): the caller must hold the lock exclusively, or it is acquired exclusively (honouring the
timeout; False on timeout). A caller holding it shared gets LockError. Then the lock is marked
deleted, every waiter wakes with LockDeletedError and every later acquire/delete raises it.

API misuse that Ganeti reports with AssertionError (double acquire, release by a non-owner, delete
while shared, LockSet/LockManager order violations) raises LockError here.

Cancel (a herder addition): acquire() at every layer takes an optional CancelToken. Its
cancel() wakes the token's waiting acquires at once (a notify, no polling); they return as on a
timeout (False / None, holding nothing). A job queue can so wait blocking, keep its place in the
queue, and still honour a cancel of a waiting job.

Retries: acquire_with_retry() drives one attempt per timeout of a LockAttemptTimeoutStrategy
(Ganeti 2.1's growing sequence, 24 attempts summing to ~158 s, ±5 % jitter; or design-2.1's
2**tries), releasing everything between attempts, and finally acquires blocking.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from herder.core import randomness
from herder.core.errors import HerderError

__all__ = [
    "ALL_SET",
    "BGL",
    "LEVELS",
    "LEVELS_MOD",
    "LEVEL_CLUSTER",
    "LEVEL_INSTANCE",
    "LEVEL_NAMES",
    "LEVEL_NETWORK",
    "LEVEL_NODE",
    "LEVEL_NODEGROUP",
    "LEVEL_NODE_RES",
    "CancelToken",
    "LockAttemptTimeoutStrategy",
    "LockDeletedError",
    "LockError",
    "LockManager",
    "LockSet",
    "SharedLock",
    "acquire_with_retry",
    "calc_lock_attempt_timeouts",
    "set_wait_recorder",
]

T = TypeVar("T")


class LockError(HerderError):
    """A lock operation is not allowed (not owner, wrong order, duplicate, unknown lock...)."""


class LockDeletedError(LockError):
    """The lock was deleted (before or while waiting for it)."""


# --- wait recorder (tests and diagnostics) ------------------------------------------------------


class WaitRecorder(Protocol):
    """Receives every acquire/release of the SharedLocks used by one thread (see set_wait_recorder).

    acquired(): `ahead` is the number of queue entries ahead of the caller's entry when it
    queued (-1 for the fast path, which did not queue); times are time.monotonic().
    """

    def acquired(self, lock: str, shared: bool, ahead: int, started: float, granted: float,
                 ok: bool) -> None: ...

    def released(self, lock: str, at: float) -> None: ...


_probe = threading.local()


def set_wait_recorder(recorder: WaitRecorder | None) -> None:
    """Install (or remove, with None) a WaitRecorder for the SharedLocks used by this thread."""
    _probe.recorder = recorder


def _recorder() -> WaitRecorder | None:
    return getattr(_probe, "recorder", None)


# --- cancel ------------------------------------------------------------------------------------


class CancelToken:
    """Cancels the lock waits made with it: they return as if timed out (see module doc)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._canceled = False
        self._waits: list[tuple[SharedLock, _Entry]] = []

    @property
    def canceled(self) -> bool:
        return self._canceled

    def cancel(self) -> None:
        """Mark canceled and wake every wait made with this token (now and later ones fail)."""
        with self._mutex:
            self._canceled = True
            waits = list(self._waits)
        # Never hold the token's mutex while taking a lock's (waiters nest them the other way).
        for lock, entry in waits:
            with lock._mutex:
                entry.notify_all()

    def _add(self, lock: SharedLock, entry: _Entry) -> None:
        with self._mutex:
            self._waits.append((lock, entry))

    def _discard(self, lock: SharedLock, entry: _Entry) -> None:
        with self._mutex:
            self._waits.remove((lock, entry))


# --- SharedLock ---------------------------------------------------------------------------------


class _Entry:
    """One queue entry: an exclusive acquire, or the group of waiting shared acquires.

    Its condition is made by the first wait: a cluster's lock manager holds a SharedLock (two
    shared entries) per object, at 10,000 instances tens of MB of Conditions nobody waits on.
    Every use is under the lock's mutex, so the lazy creation needs no lock of its own."""

    __slots__ = ("_cond", "_mutex", "queued", "shared", "waiters")

    def __init__(self, mutex: threading.Lock, shared: bool) -> None:
        self._mutex = mutex
        self._cond: threading.Condition | None = None
        self.shared = shared
        self.waiters = 0
        self.queued = False

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a notify (the lock's mutex held, as Condition.wait)."""
        if self._cond is None:
            self._cond = threading.Condition(self._mutex)
        self._cond.wait(timeout)

    def notify_all(self) -> None:
        """Wake this entry's waiters (the lock's mutex held); none yet, nothing to do."""
        if self._cond is not None:
            self._cond.notify_all()


class SharedLock:
    """A lock held by one exclusive owner or many sharers, with one fair queue (see module doc)."""

    # A cluster's lock manager holds one per object (12,000 at 10,000 instances), nearly all
    # never waited on: what only a wait or a sharer needs is made by it (the shared entries),
    # the sharers are a tuple (the empty one is shared), and the name is kept in its parts
    # (the object's part is the config's own key string).
    __slots__ = ("_active_shared", "_base", "_deleted", "_exclusive", "_inactive_shared",
                 "_mutex", "_owner", "_queue", "_sharers")

    def __init__(self, name: str, owner: str = "") -> None:
        """`name`, or with `owner` (a lock set's name) the lock `owner/name`."""
        self._base = name
        self._owner = owner
        self._mutex = threading.Lock()
        self._exclusive: int | None = None
        self._sharers: tuple[int, ...] = ()  # a few threads at most
        self._queue: list[_Entry] = []  # a few entries at most: no deque (600 bytes each)
        self._active_shared: _Entry | None = None  # both made by the first shared wait
        self._inactive_shared: _Entry | None = None
        self._deleted = False

    @property
    def name(self) -> str:
        return f"{self._owner}/{self._base}" if self._owner else self._base

    def __repr__(self) -> str:
        return f"<SharedLock {self.name!r}>"

    # -- internals (mutex held) --

    def _can_acquire(self, shared: bool) -> bool:
        if shared:
            return self._exclusive is None
        return self._exclusive is None and not self._sharers

    def _grant(self, me: int, shared: bool) -> None:
        if shared:
            self._sharers = (*self._sharers, me)
        else:
            self._exclusive = me

    def _notify_head(self) -> None:
        if not self._queue:
            return
        head = self._queue[0]
        if not self._can_acquire(head.shared):
            return
        head.notify_all()
        if head is self._active_shared:
            # Sharers arriving from now on form a new entry at the tail of the queue.
            self._active_shared, self._inactive_shared = self._inactive_shared, self._active_shared

    def _check_acquire(self, me: int) -> None:
        if self._deleted:
            raise LockDeletedError(f"lock {self.name} was deleted")
        if self._exclusive == me or me in self._sharers:
            raise LockError(f"lock {self.name} is already held by this thread")

    def _acquire_locked(self, me: int, shared: bool, timeout: float | None,
                        cancel: CancelToken | None = None) -> bool:
        recorder = _recorder()
        if cancel is not None and cancel.canceled:
            return False
        if not self._queue and self._can_acquire(shared):
            self._grant(me, shared)
            if recorder is not None:
                now = time.monotonic()
                recorder.acquired(self.name, shared, -1, now, now, True)
            return True
        if timeout is not None and timeout <= 0:
            if recorder is not None:
                now = time.monotonic()
                recorder.acquired(self.name, shared, -1, now, now, False)
            return False
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        if shared:
            if self._active_shared is None:
                self._active_shared = _Entry(self._mutex, shared=True)
                self._inactive_shared = _Entry(self._mutex, shared=True)
            entry = self._active_shared
            if not entry.queued:
                entry.queued = True
                self._queue.append(entry)
        else:
            entry = _Entry(self._mutex, shared=False)
            entry.queued = True
            self._queue.append(entry)
        ahead = self._queue.index(entry) if recorder is not None else 0
        entry.waiters += 1
        if cancel is not None:
            cancel._add(self, entry)
        ok = False
        try:
            while True:
                if self._deleted:
                    raise LockDeletedError(f"lock {self.name} was deleted")
                if cancel is not None and cancel.canceled:
                    return False
                if self._queue[0] is entry and self._can_acquire(shared):
                    self._grant(me, shared)
                    ok = True
                    return True
                if deadline is None:
                    entry.wait()
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    entry.wait(remaining)
        finally:
            if cancel is not None:
                cancel._discard(self, entry)
            entry.waiters -= 1
            if entry.waiters == 0 and entry.queued and not self._deleted:
                entry.queued = False
                was_head = self._queue[0] is entry
                self._queue.remove(entry)
                if was_head:
                    self._notify_head()
            if recorder is not None:
                recorder.acquired(self.name, shared, ahead, started, time.monotonic(), ok)

    # -- public API --

    def acquire(self, shared: bool = False, timeout: float | None = None,
                cancel: CancelToken | None = None) -> bool:
        """Acquire the lock; False if the timeout expired or `cancel` was canceled (nothing is
        held then).

        Raises LockDeletedError if the lock is deleted (also while waiting), LockError if the
        calling thread already holds it.
        """
        me = threading.get_ident()
        with self._mutex:
            self._check_acquire(me)
            return self._acquire_locked(me, shared, timeout, cancel)

    def release(self) -> None:
        """Release the lock held by the calling thread (LockError if it does not hold it)."""
        me = threading.get_ident()
        with self._mutex:
            if self._exclusive == me:
                self._exclusive = None
            elif me in self._sharers:
                self._sharers = tuple(t for t in self._sharers if t != me)
            else:
                raise LockError(f"lock {self.name} is not held by this thread")
            self._notify_head()
        recorder = _recorder()
        if recorder is not None:
            recorder.released(self.name, time.monotonic())

    def downgrade(self) -> None:
        """The calling thread's exclusive hold made shared (Ganeti's SharedLock.downgrade):
        the sharers at the head of the queue go on (LockError unless held exclusively)."""
        me = threading.get_ident()
        with self._mutex:
            if self._exclusive != me:
                raise LockError(f"lock {self.name} is not held exclusively by this thread")
            self._exclusive = None
            self._sharers = (*self._sharers, me)
            self._notify_head()

    def delete(self, timeout: float | None = None) -> bool:
        """Delete the lock, acquiring it exclusively first unless already held so.

        Returns False (lock untouched) if that acquire timed out. LockError if the caller holds
        the lock in shared mode; LockDeletedError if it is already deleted. Every waiter wakes
        with LockDeletedError; later acquires and deletes raise it.
        """
        me = threading.get_ident()
        with self._mutex:
            if self._deleted:
                raise LockDeletedError(f"lock {self.name} was deleted")
            if me in self._sharers:
                raise LockError(f"cannot delete lock {self.name} while holding it shared")
            if self._exclusive != me and not self._acquire_locked(me, False, timeout):
                return False
            self._deleted = True
            self._exclusive = None
            for entry in self._queue:
                entry.queued = False
                entry.notify_all()
            self._queue.clear()
        recorder = _recorder()
        if recorder is not None:
            recorder.released(self.name, time.monotonic())
        return True

    def is_owned(self, shared: bool | None = None) -> bool:
        """Whether the calling thread holds the lock (shared=None: in any mode)."""
        me = threading.get_ident()
        with self._mutex:
            if shared is None:
                return self._exclusive == me or me in self._sharers
            if shared:
                return me in self._sharers
            return self._exclusive == me

    def owner_count(self) -> int:
        """Number of threads holding the lock (0, 1 exclusive, or the number of sharers)."""
        with self._mutex:
            return len(self._sharers) + (self._exclusive is not None)

    def pending_count(self) -> int:
        """Queue entries: one per waiting exclusive acquire, one for all waiting sharers."""
        with self._mutex:
            return len(self._queue)

    def waiter_count(self) -> int:
        """Threads waiting for the lock (every waiting sharer counted)."""
        with self._mutex:
            return sum(entry.waiters for entry in self._queue)

    @property
    def deleted(self) -> bool:
        return self._deleted


# --- LockSet ------------------------------------------------------------------------------------

ALL_SET = None


class LockSet:
    """Named SharedLocks acquired in sorted order, plus a set-level lock guarding membership.

    - acquire(names): unique names, sorted (plain string order), one overall timeout. An unknown
      name, or one removed (its lock deleted) while waiting, raises LockError after releasing what
      this call got (Ganeti). On timeout it releases what this call got and returns None.
    - acquire(ALL_SET): first the set-level lock in the same mode (held shared, nobody can add;
      held exclusively, only the holder can), then every current member in sorted order;
      members removed meanwhile are skipped (Ganeti).
    - add(): needs the set-level lock exclusively: taken (blocking) for the call unless the caller
      holds it; refused if the caller holds members without it, or holds it shared.
    - remove(): the caller must own nothing at this level or own every named lock (Ganeti); a
      lock it does not hold is deleted after acquiring it exclusively (blocking). Names missing
      (or removed by someone else meanwhile) are skipped; returns the names removed.
    - A thread may call acquire() only while it owns nothing in the set (Ganeti).
    """

    def __init__(self, names: Iterable[str], name: str) -> None:
        self.name = name
        self._mutex = threading.Lock()
        self._locks: dict[str, SharedLock] = {}
        self._owners: dict[int, set[str]] = {}
        self._set_lock = SharedLock(f"{name}/[set]")
        for lock_name in names:
            if lock_name in self._locks:
                raise LockError(f"duplicate lock {lock_name} in set {name}")
            self._locks[lock_name] = self._new_lock(lock_name)

    def __repr__(self) -> str:
        return f"<LockSet {self.name!r}>"

    def _new_lock(self, lock_name: str) -> SharedLock:
        return SharedLock(lock_name, owner=self.name)

    def _owned(self) -> set[str]:
        with self._mutex:
            return set(self._owners.get(threading.get_ident(), ()))

    def _set_owned(self, owned: set[str]) -> None:
        me = threading.get_ident()
        with self._mutex:
            if owned:
                self._owners[me] = owned
            else:
                self._owners.pop(me, None)

    def _lookup(self, lock_name: str) -> SharedLock | None:
        with self._mutex:
            return self._locks.get(lock_name)

    def names(self) -> set[str]:
        """The names currently in the set (a snapshot)."""
        with self._mutex:
            return set(self._locks)

    def list_owned(self) -> set[str]:
        """Names the calling thread holds in this set."""
        return self._owned()

    def is_owned(self) -> bool:
        """Whether the calling thread holds anything here (a member or the set-level lock)."""
        return bool(self._owned()) or self._set_lock.is_owned()

    def owns_set_lock(self, shared: bool | None = None) -> bool:
        """Whether the calling thread holds the set-level lock (as ALL_SET or for add)."""
        return self._set_lock.is_owned(shared)

    def acquire(self, names: Iterable[str] | str | None, shared: bool = False,
                timeout: float | None = None,
                cancel: CancelToken | None = None) -> set[str] | None:
        """Acquire the named locks (or ALL_SET) in sorted order; None on timeout or cancel
        (nothing held then)."""
        if self.is_owned():
            raise LockError(f"cannot acquire locks in set {self.name} twice")
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)

        def remaining() -> float | None:
            return None if deadline is None else max(deadline - time.monotonic(), 0.0)

        whole = names is None
        if isinstance(names, str):
            wanted = [names]
        elif names is None:
            wanted = []
        else:
            wanted = sorted(set(names))
        got: set[str] = set()
        took_set_lock = False
        try:
            if whole:
                if not self._set_lock.acquire(shared, remaining(), cancel):
                    return None
                took_set_lock = True
                wanted = sorted(self.names())
            for lock_name in wanted:
                lock = self._lookup(lock_name)
                if lock is None:
                    if whole:
                        continue
                    raise LockError(f"non-existing lock {lock_name} in set {self.name}")
                try:
                    ok = lock.acquire(shared, remaining(), cancel)
                except LockDeletedError:
                    if whole:
                        continue
                    raise LockError(
                        f"non-existing lock {lock_name} in set {self.name} (removed)") from None
                if not ok:
                    self._release_these(got, took_set_lock)
                    got = set()
                    took_set_lock = False
                    return None
                got.add(lock_name)
                self._set_owned(set(got))
        except BaseException:
            self._release_these(got, took_set_lock)
            raise
        return set(got)

    def _release_these(self, got: set[str], set_lock: bool) -> None:
        if set_lock:
            self._set_lock.release()
        for lock_name in got:
            lock = self._lookup(lock_name)
            if lock is not None:
                lock.release()
        self._set_owned(self._owned() - got)

    def release(self, names: Iterable[str] | str | None = None) -> None:
        """Release the given names (all, with None); the set-level lock, if held, goes first.

        release([]) releases only the set-level lock. LockError if the caller owns nothing here
        or names something it does not hold.
        """
        if not self.is_owned():
            raise LockError(f"release() on lock set {self.name} while not owner")
        owned = self._owned()
        if names is None:
            to_release = owned
        else:
            to_release = {names} if isinstance(names, str) else set(names)
            if not to_release <= owned:
                raise LockError(f"release() on locks not held in set {self.name}: "
                                f"{', '.join(sorted(to_release - owned))}")
        if self._set_lock.is_owned():
            self._set_lock.release()
        for lock_name in sorted(to_release):
            lock = self._lookup(lock_name)
            if lock is not None:
                lock.release()
        self._set_owned(owned - to_release)

    def downgrade(self) -> None:
        """Every lock the caller holds here exclusively (and the set-level lock) made shared."""
        if not self.is_owned():
            raise LockError(f"downgrade() on lock set {self.name} while not owner")
        if self._set_lock.is_owned(shared=False):
            self._set_lock.downgrade()
        for lock_name in sorted(self._owned()):
            lock = self._lookup(lock_name)
            if lock is not None and lock.is_owned(shared=False):
                lock.downgrade()

    def add(self, names: Iterable[str] | str, acquired: bool = False,
            shared: bool = False) -> None:
        """Add locks (LockError on duplicates); with acquired=True the caller holds them."""
        new = [names] if isinstance(names, str) else list(names)
        holds_set_lock = self._set_lock.is_owned()
        if holds_set_lock and not self._set_lock.is_owned(shared=False):
            raise LockError(f"cannot add locks to set {self.name} while holding it shared")
        if not holds_set_lock and self._owned():
            raise LockError(f"cannot add locks to set {self.name} while owning some of it "
                            "but not the whole set")
        if not holds_set_lock:
            self._set_lock.acquire()
        try:
            with self._mutex:
                dups = sorted({n for n in new if n in self._locks})
                if dups or len(set(new)) != len(new):
                    raise LockError(f"duplicate add() of {', '.join(dups or new)} "
                                    f"in set {self.name}")
                locks = {n: self._new_lock(n) for n in new}
            if acquired:
                for lock in locks.values():
                    lock.acquire(shared)
            with self._mutex:
                self._locks.update(locks)
            if acquired:
                self._set_owned(self._owned() | set(new))
        finally:
            if not holds_set_lock:
                self._set_lock.release()

    def remove(self, names: Iterable[str] | str) -> list[str]:
        """Delete locks; returns the names actually removed, in argument order."""
        victims = [names] if isinstance(names, str) else list(names)
        owned = self._owned()
        if (owned or self._set_lock.is_owned()) and not owned.issuperset(victims):
            raise LockError(f"remove() on lock set {self.name} while not owning all of "
                            f"{', '.join(victims)}")
        for lock_name in victims:
            lock = self._lookup(lock_name)
            if lock is not None and lock.is_owned(shared=True):
                raise LockError(f"cannot remove lock {lock_name} of set {self.name} "
                                "while holding it shared")
        removed: list[str] = []
        for lock_name in victims:
            lock = self._lookup(lock_name)
            if lock is None:
                continue
            try:
                lock.delete()
            except LockDeletedError:
                continue
            with self._mutex:
                if self._locks.get(lock_name) is lock:
                    del self._locks[lock_name]
            owned.discard(lock_name)
            removed.append(lock_name)
        self._set_owned(owned)
        return removed


# --- LockManager --------------------------------------------------------------------------------

LEVEL_CLUSTER, LEVEL_INSTANCE, LEVEL_NODEGROUP, LEVEL_NODE, LEVEL_NODE_RES, LEVEL_NETWORK = range(6)
LEVELS = [LEVEL_CLUSTER, LEVEL_INSTANCE, LEVEL_NODEGROUP, LEVEL_NODE, LEVEL_NODE_RES,
          LEVEL_NETWORK]
# Levels whose members can be added and removed (the cluster level only ever holds the BGL).
LEVELS_MOD = [LEVEL_INSTANCE, LEVEL_NODEGROUP, LEVEL_NODE, LEVEL_NODE_RES, LEVEL_NETWORK]
LEVEL_NAMES = {
    LEVEL_CLUSTER: "cluster",
    LEVEL_INSTANCE: "instance",
    LEVEL_NODEGROUP: "nodegroup",
    LEVEL_NODE: "node",
    LEVEL_NODE_RES: "node-res",
    LEVEL_NETWORK: "network",
}
BGL = "BGL"


class LockManager:
    """Ganeti's lock levels in Ganeti's order, each a LockSet (one per cluster, like Ganeti's GLM).

    Rules (Ganeti's GanetiLockManager):
    - acquiring at any level but the cluster level needs the BGL (held, shared or exclusive);
    - acquiring at a level is refused while holding locks at a later level, or at that level;
    - the BGL cannot be released while holding locks at any other level; other levels can be
      released in any order;
    - add/remove only at the modifiable levels, with the BGL held; add is refused while holding
      locks at a later level; remove needs the level owned or nothing owned at a later level.
    LEVEL_NODE_RES starts with the node names; add/remove on one node level does not touch the
    other (the caller does both, as Ganeti's callers do).
    """

    def __init__(self, nodes: Iterable[str] = (), nodegroups: Iterable[str] = (),
                 instances: Iterable[str] = (), networks: Iterable[str] = ()) -> None:
        node_names = list(nodes)
        members: dict[int, Iterable[str]] = {
            LEVEL_CLUSTER: [BGL],
            LEVEL_INSTANCE: instances,
            LEVEL_NODEGROUP: nodegroups,
            LEVEL_NODE: node_names,
            LEVEL_NODE_RES: node_names,
            LEVEL_NETWORK: networks,
        }
        self._sets = {level: LockSet(members[level], LEVEL_NAMES[level]) for level in LEVELS}

    def _set(self, level: int) -> LockSet:
        try:
            return self._sets[level]
        except KeyError:
            raise LockError(f"unknown lock level {level!r}") from None

    def _bgl_owned(self) -> bool:
        return self._sets[LEVEL_CLUSTER].is_owned()

    def _upper_owned(self, level: int) -> bool:
        return any(self._sets[upper].is_owned() for upper in LEVELS if upper > level)

    def _check_modifiable(self, level: int) -> None:
        self._set(level)
        if level not in LEVELS_MOD:
            raise LockError(f"locks at level {LEVEL_NAMES[level]} cannot be added or removed")
        if not self._bgl_owned():
            raise LockError(f"the {BGL} must be held to add or remove locks")

    def acquire(self, level: int, names: Iterable[str] | str | None, shared: bool = False,
                timeout: float | None = None,
                cancel: CancelToken | None = None) -> set[str] | None:
        """LockSet.acquire at a level, refusing out-of-order acquisition (LockError)."""
        lockset = self._set(level)
        if level != LEVEL_CLUSTER and not self._bgl_owned():
            raise LockError(f"the {BGL} must be held before acquiring any other lock")
        if self._upper_owned(level):
            raise LockError(f"cannot acquire {LEVEL_NAMES[level]} locks while holding locks "
                            "at a later level")
        return lockset.acquire(names, shared=shared, timeout=timeout, cancel=cancel)

    def release(self, level: int, names: Iterable[str] | None = None) -> None:
        """LockSet.release at a level; the BGL only once no other level is held."""
        lockset = self._set(level)
        if level == LEVEL_CLUSTER and self._upper_owned(LEVEL_CLUSTER):
            raise LockError(f"cannot release the {BGL} while holding other locks")
        lockset.release(names)

    def downgrade(self, level: int) -> None:
        """What the caller holds at a level made shared (Ganeti's GLM.downgrade): an LU that
        took the BGL exclusively to add its objects lets the jobs on other objects go on."""
        self._set(level).downgrade()

    def add(self, level: int, names: Iterable[str] | str, acquired: bool = False,
            shared: bool = False) -> None:
        self._check_modifiable(level)
        if self._upper_owned(level):
            raise LockError(f"cannot add {LEVEL_NAMES[level]} locks while holding locks at a "
                            "later level")
        self._sets[level].add(names, acquired=acquired, shared=shared)

    def remove(self, level: int, names: Iterable[str] | str) -> list[str]:
        self._check_modifiable(level)
        lockset = self._sets[level]
        if not lockset.is_owned() and self._upper_owned(level):
            raise LockError(f"cannot remove {LEVEL_NAMES[level]} locks while holding locks at "
                            "a later level")
        return lockset.remove(names)

    def is_owned(self, level: int) -> bool:
        return self._set(level).is_owned()

    def list_owned(self, level: int) -> set[str]:
        return self._set(level).list_owned()

    def names(self, level: int) -> set[str]:
        return self._set(level).names()

    def release_all(self) -> None:
        """Release everything the calling thread holds, latest level first."""
        for level in reversed(LEVELS):
            if self._sets[level].is_owned():
                self._sets[level].release()


# --- retry strategy -----------------------------------------------------------------------------


def calc_lock_attempt_timeouts(first: float = 1.0, max_wait: float = 10.0, min_wait: float = 0.1,
                               total: float = 150.0) -> list[float]:
    """Ganeti 2.1's growing per-attempt timeouts: t' = (t*1.05)**1.25, clamped, until `total`.

    The defaults give 24 values: 1.0, 1.063, 1.147, ... 7.599, then 10.0 x 13 (sum ~157.8 s).
    """
    result = [first]
    while sum(result) < total:
        t = (result[-1] * 1.05) ** 1.25
        result.append(min(max(t, min_wait), max_wait))
    return result


class LockAttemptTimeoutStrategy:
    """Per-attempt timeouts for acquiring an operation's locks; None once they are exhausted.

    next_attempt() returns the timeout for the next try (with ±jitter, 5 % by default, on the
    value) and advances; after the last one it returns None (acquire blocking) for good.
    """

    DEFAULT_TIMEOUTS: tuple[float, ...] = tuple(calc_lock_attempt_timeouts())

    def __init__(self, attempt: int = 0, timeouts: Sequence[float] | None = None,
                 jitter: float = 0.05,
                 random_fn: Callable[[], float] = randomness.RNG.random) -> None:
        self.attempt = attempt
        self.timeouts = tuple(self.DEFAULT_TIMEOUTS if timeouts is None else timeouts)
        self.jitter = jitter
        self._random = random_fn

    @classmethod
    def exponential(cls, tries: int = 5, base: float = 1.0) -> LockAttemptTimeoutStrategy:
        """design-2.1's proposal: base * 2**tries seconds for `tries` attempts, then block."""
        return cls(timeouts=[base * 2**i for i in range(tries)])

    def next_attempt(self) -> float | None:
        if self.attempt >= len(self.timeouts):
            return None
        value = self.timeouts[self.attempt]
        self.attempt += 1
        return max(value + value * self.jitter * (2 * self._random() - 1), 0.0)

    def backoff(self) -> float:
        """Seconds to pause (holding nothing) after a failed attempt: small, growing, jittered."""
        return min(0.01 * 2.0**self.attempt, 0.5) * self._random()


def acquire_with_retry(acquire: Callable[[float | None], T | None],
                       release_all: Callable[[], None],
                       strategy: LockAttemptTimeoutStrategy | None = None,
                       on_wait: Callable[[], None] | None = None,
                       sleep: Callable[[float], None] = time.sleep) -> T:
    """Call acquire(timeout) with the strategy's growing timeouts until it returns non-None.

    After each failed attempt, release_all() drops whatever the attempt got, on_wait() (if
    given) is told, and a short jittered backoff passes; the last attempt blocks (timeout None).
    """
    strategy = strategy or LockAttemptTimeoutStrategy()
    while True:
        timeout = strategy.next_attempt()
        result = acquire(timeout)
        if result is not None:
            return result
        release_all()
        if timeout is None:
            raise LockError("a blocking lock acquire returned without the locks")
        if on_wait is not None:
            on_wait()
        pause = strategy.backoff()
        if pause > 0:
            sleep(pause)
