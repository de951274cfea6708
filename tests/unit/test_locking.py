"""herder.masterd.locking: the behaviours Ganeti's own lock tests assert (reference notes §3.7),
ported to herder's API (misuse raises LockError where Ganeti asserted), plus a hypothesis
state machine over SharedLock/LockSet driven by several owner threads."""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from herder.core.errors import HerderError
from herder.masterd import locking

WAIT = 5.0  # generous bound for anything that must happen "soon"


class Actor:
    """A dedicated daemon thread running submitted calls in order (one lock owner)."""

    def __init__(self, name: str = "actor") -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue())
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:
                fut.set_exception(exc)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        self._queue.put((lambda: fn(*args, **kwargs), fut))
        return fut

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.submit(fn, *args, **kwargs).result(WAIT)

    def stop(self) -> None:
        self._queue.put(None)


@pytest.fixture
def actors() -> Iterator[Callable[[], Actor]]:
    made: list[Actor] = []

    def make() -> Actor:
        made.append(Actor(f"actor-{len(made)}"))
        return made[-1]

    yield make
    for actor in made:
        actor.stop()


def wait_until(pred: Callable[[], bool], timeout: float = WAIT) -> None:
    """Poll a test condition (test-side only; the locks themselves never poll)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


def settle() -> None:
    """Give blocked threads a chance to (wrongly) proceed."""
    time.sleep(0.05)


def outcome(fn: Callable[[], Any], tag: str) -> Callable[[], str]:
    def run() -> str:
        try:
            fn()
        except locking.LockDeletedError:
            return "ERR"
        return tag

    return run


# --- SharedLock --------------------------------------------------------------------------------


def test_errors_are_herder_errors() -> None:
    assert issubclass(locking.LockDeletedError, locking.LockError)
    assert issubclass(locking.LockError, HerderError)


def test_sequence_and_ownership() -> None:
    lock = locking.SharedLock("x")
    assert lock.name == "x"
    assert not lock.is_owned()
    assert lock.acquire(shared=True) is True
    assert lock.is_owned() and lock.is_owned(shared=True) and not lock.is_owned(shared=False)
    lock.release()
    assert not lock.is_owned()
    assert lock.acquire() is True
    assert lock.is_owned() and lock.is_owned(shared=False) and not lock.is_owned(shared=True)
    assert lock.owner_count() == 1
    lock.release()
    assert lock.acquire(shared=True)
    lock.release()
    assert lock.owner_count() == 0 and lock.pending_count() == 0


@pytest.mark.parametrize(("first", "second"), [(True, False), (False, True), (True, True),
                                               (False, False)])
def test_double_acquire_refused(first: bool, second: bool) -> None:
    lock = locking.SharedLock("x")
    lock.acquire(shared=first)
    with pytest.raises(locking.LockError):
        lock.acquire(shared=second)
    assert lock.is_owned(shared=first)


def test_release_by_non_owner_fails(actors: Callable[[], Actor]) -> None:
    lock = locking.SharedLock("x")
    with pytest.raises(locking.LockError):
        lock.release()
    other = actors()
    other.call(lock.acquire)
    with pytest.raises(locking.LockError):
        lock.release()
    other.call(lock.release)
    other.call(lock.acquire, shared=True)
    with pytest.raises(locking.LockError):
        lock.release()
    other.call(lock.release)


def test_sharers_coexist(actors: Callable[[], Actor]) -> None:
    lock = locking.SharedLock("x")
    lock.acquire(shared=True)
    others = [actors() for _ in range(3)]
    assert all(a.call(lock.acquire, shared=True, timeout=0) for a in others)
    assert lock.owner_count() == 4
    for a in others:
        a.call(lock.release)
    lock.release()


@pytest.mark.parametrize(("holder_shared", "waiter"), [
    (False, "exclusive"), (False, "shared"), (False, "delete"),
    (True, "exclusive"), (True, "delete"),
])
def test_holder_blocks_waiter(actors: Callable[[], Actor], holder_shared: bool,
                              waiter: str) -> None:
    """exclusive blocks exclusive/sharer/delete; a sharer blocks exclusive/delete."""
    lock = locking.SharedLock("x")
    lock.acquire(shared=holder_shared)
    actor = actors()
    call = {"exclusive": lambda: lock.acquire(), "shared": lambda: lock.acquire(shared=True),
            "delete": lambda: lock.delete()}[waiter]
    fut = actor.submit(call)
    wait_until(lambda: lock.waiter_count() == 1)
    settle()
    assert not fut.done()
    lock.release()
    assert fut.result(WAIT) is True
    if waiter != "delete":
        assert lock.owner_count() == 1
        actor.call(lock.release)


def test_delete() -> None:
    lock = locking.SharedLock("x")
    assert lock.delete() is True
    assert lock.deleted
    for call in (lock.acquire, lambda: lock.acquire(shared=True), lock.delete,
                 lambda: lock.acquire(timeout=0)):
        with pytest.raises(locking.LockDeletedError):
            call()
    with pytest.raises(locking.LockError):
        lock.release()
    held = locking.SharedLock("y")
    held.acquire()
    assert held.delete() is True
    assert not held.is_owned() and held.owner_count() == 0


def test_delete_timeout_on_free_lock() -> None:
    assert locking.SharedLock("x").delete(timeout=60) is True


def test_delete_timeout_fails_against_holder(actors: Callable[[], Actor]) -> None:
    lock = locking.SharedLock("x")
    actor = actors()
    actor.call(lock.acquire, shared=True)
    assert lock.delete(timeout=0.05) is False
    assert not lock.deleted and lock.pending_count() == 0
    actor.call(lock.release)
    assert lock.acquire(timeout=0)
    lock.release()


def test_no_delete_while_shared() -> None:
    lock = locking.SharedLock("x")
    lock.acquire(shared=True)
    with pytest.raises(locking.LockError):
        lock.delete()
    assert not lock.deleted and lock.is_owned(shared=True)
    lock.release()


@pytest.mark.parametrize("holder_deletes", [True, False])
def test_delete_with_pending_waiters(actors: Callable[[], Actor], holder_deletes: bool) -> None:
    """Every pending acquirer (shared, exclusive, timed) and deleter gets LockDeletedError."""
    lock = locking.SharedLock("x")
    lock.acquire()
    calls: list[Callable[[], Any]] = [
        lambda: lock.acquire(shared=True), lambda: lock.acquire(),
        lambda: lock.acquire(shared=True, timeout=60), lambda: lock.acquire(timeout=60),
        lambda: lock.delete(),
    ]
    if not holder_deletes:
        # the first queued deleter gets the lock when the holder releases, and deletes it
        calls.insert(0, lambda: lock.delete())
    futs = []
    for i, call in enumerate(calls):
        futs.append(actors().submit(outcome(call, "DONE")))
        wait_until(lambda n=i + 1: lock.waiter_count() == n)
    if holder_deletes:
        assert lock.delete() is True
        assert [f.result(WAIT) for f in futs] == ["ERR"] * len(calls)
    else:
        lock.release()
        assert [f.result(WAIT) for f in futs] == ["DONE"] + ["ERR"] * (len(calls) - 1)
    assert lock.deleted and lock.pending_count() == 0 and lock.owner_count() == 0


def test_exclusive_acquire_timeout_succeeds_after_release(actors: Callable[[], Actor]) -> None:
    lock = locking.SharedLock("x")
    lock.acquire(shared=True)
    actor = actors()
    fut = actor.submit(lock.acquire, timeout=60)
    wait_until(lambda: lock.waiter_count() == 1)
    lock.release()
    assert fut.result(WAIT) is True
    actor.call(lock.release)


def test_expiring_timeouts_return_false_holding_nothing(actors: Callable[[], Actor]) -> None:
    lock = locking.SharedLock("x")
    lock.acquire()
    actor = actors()
    for i in range(11):
        timeout = i * 0.002
        shared = bool(i % 2)
        started = time.monotonic()
        assert actor.call(lock.acquire, shared=shared, timeout=timeout) is False
        assert time.monotonic() - started >= timeout
        assert not actor.call(lock.is_owned)
    assert lock.pending_count() == 0 and lock.waiter_count() == 0 and lock.owner_count() == 1
    assert actor.call(lock.acquire, timeout=-1) is False  # negative counts as 0
    lock.release()


def test_exclusive_waiters_are_fifo(actors: Callable[[], Actor]) -> None:
    lock = locking.SharedLock("x")
    lock.acquire()
    order: list[int] = []

    def take(i: int) -> None:
        lock.acquire()
        order.append(i)
        lock.release()

    futs = []
    for i in range(10):
        futs.append(actors().submit(take, i))
        wait_until(lambda n=i + 1: lock.pending_count() == n)
    lock.release()
    for f in futs:
        f.result(WAIT)
    assert order == list(range(10))


def test_shared_skip_exclusive_acquires(actors: Callable[[], Actor]) -> None:
    """Ganeti's testSharedSkipExclusiveAcquires: queued 5S 3X 7S 9S 2S 3X behind an exclusive
    holder; the sharers are one queue entry, so all 23 go first, then the exclusives in order."""
    lock = locking.SharedLock("x")
    lock.acquire()
    done: queue.SimpleQueue[str] = queue.SimpleQueue()

    def take(shared: bool, tag: str) -> None:
        lock.acquire(shared=shared)
        done.put(tag)
        lock.release()

    futs = []
    waiting = 0
    exclusives = 0
    for count, shared in [(5, True), (3, False), (7, True), (9, True), (2, True), (3, False)]:
        for _ in range(count):
            tag = "shr" if shared else f"exc{exclusives}"
            exclusives += not shared
            futs.append(actors().submit(take, shared, tag))
            waiting += 1
            wait_until(lambda n=waiting: lock.waiter_count() == n)
    assert lock.pending_count() == 7  # 6 exclusive entries + 1 shared group
    lock.release()
    for f in futs:
        f.result(WAIT)
    order = [done.get() for _ in range(29)]
    assert order == ["shr"] * 23 + [f"exc{i}" for i in range(6)]


def test_waiting_exclusive_blocks_new_sharer(actors: Callable[[], Actor]) -> None:
    """A sharer arriving while an exclusive waits queues behind it (no starvation)."""
    lock = locking.SharedLock("x")
    lock.acquire(shared=True)
    exc, shr = actors(), actors()
    fut_exc = exc.submit(lock.acquire)
    wait_until(lambda: lock.pending_count() == 1)
    fut_shr = shr.submit(lock.acquire, shared=True)
    wait_until(lambda: lock.pending_count() == 2)
    settle()
    assert not fut_shr.done() and not fut_exc.done()
    lock.release()
    assert fut_exc.result(WAIT)
    settle()
    assert not fut_shr.done()
    exc.call(lock.release)
    assert fut_shr.result(WAIT)
    shr.call(lock.release)


def test_notified_shared_group_closes(actors: Callable[[], Actor]) -> None:
    """Once the shared group at the head is notified, later sharers form a new entry at the tail
    (behind the exclusive that was queued after the group)."""
    lock = locking.SharedLock("x")
    lock.acquire()
    s1, s2, x1, s3 = actors(), actors(), actors(), actors()
    futs = [s1.submit(lock.acquire, shared=True), s2.submit(lock.acquire, shared=True)]
    wait_until(lambda: lock.waiter_count() == 2)
    fut_x = x1.submit(lock.acquire)
    wait_until(lambda: lock.pending_count() == 2)
    lock.release()
    assert all(f.result(WAIT) for f in futs)
    assert lock.owner_count() == 2
    wait_until(lambda: lock.pending_count() == 1)  # the notified group has left the queue
    fut_s3 = s3.submit(lock.acquire, shared=True)
    wait_until(lambda: lock.pending_count() == 2)
    settle()
    assert not fut_s3.done() and not fut_x.done()
    s1.call(lock.release)
    s2.call(lock.release)
    assert fut_x.result(WAIT)
    settle()
    assert not fut_s3.done()
    x1.call(lock.release)
    assert fut_s3.result(WAIT)
    s3.call(lock.release)


def test_notified_shared_entry_swaps(actors: Callable[[], Actor]) -> None:
    """White-box: notifying the shared entry at the head makes the other shared entry active at
    once, so sharers arriving before the notified ones have even woken cannot join them."""
    lock = locking.SharedLock("x")
    lock.acquire()
    s1, x1 = actors(), actors()
    fut_s1 = s1.submit(lock.acquire, shared=True)
    wait_until(lambda: lock.pending_count() == 1)
    fut_x1 = x1.submit(lock.acquire)
    wait_until(lambda: lock.pending_count() == 2)
    with lock._mutex:  # release() by hand, inspecting the queue before anybody wakes
        lock._exclusive = None
        lock._notify_head()
        head = lock._queue[0]
        assert head.shared and head.waiters == 1
        assert head is not lock._active_shared and not lock._active_shared.queued
    assert fut_s1.result(WAIT)
    settle()
    assert not fut_x1.done()
    s1.call(lock.release)
    assert fut_x1.result(WAIT)
    x1.call(lock.release)


def test_mixed_acquire_timeout(actors: Callable[[], Actor]) -> None:
    """Ganeti's testMixedAcquireTimeout: with sharers holding, a timed exclusive fails and leaves
    no queue entry; a blocking exclusive waits; later sharers wait behind it."""
    lock = locking.SharedLock("x")
    holders = [actors() for _ in range(3)]
    for h in holders:
        h.call(lock.acquire, shared=True)
    assert actors().call(lock.acquire, timeout=0.02) is False
    assert lock.pending_count() == 0
    done: queue.SimpleQueue[str] = queue.SimpleQueue()

    def take(shared: bool, tag: str) -> None:
        lock.acquire(shared=shared)
        done.put(tag)
        lock.release()

    futs = [actors().submit(take, False, "exc")]
    wait_until(lambda: lock.waiter_count() == 1)
    for i in range(10):
        futs.append(actors().submit(take, True, "shr2"))
        wait_until(lambda n=i + 2: lock.waiter_count() == n)
    settle()
    assert done.empty()
    for h in holders:
        h.call(lock.release)
    for f in futs:
        f.result(WAIT)
    assert [done.get() for _ in range(11)] == ["exc"] + ["shr2"] * 10


def test_timed_out_head_wakes_next(actors: Callable[[], Actor]) -> None:
    """An exclusive waiter at the head that times out lets the sharers behind it in."""
    lock = locking.SharedLock("x")
    lock.acquire(shared=True)
    x, s = actors(), actors()
    fut_x = x.submit(lock.acquire, timeout=0.2)
    wait_until(lambda: lock.pending_count() == 1)
    fut_s = s.submit(lock.acquire, shared=True)
    wait_until(lambda: lock.pending_count() == 2)
    assert fut_x.result(WAIT) is False
    assert fut_s.result(WAIT) is True
    assert lock.owner_count() == 2 and lock.pending_count() == 0
    s.call(lock.release)
    lock.release()


def test_timeout_with_spurious_notifications(actors: Callable[[], Actor]) -> None:
    """Ganeti master's testAcquireTimeoutWithSpuriousNotifications: wake-ups that do not grant
    the lock make a timed waiter wait again for the rest of its timeout, not give up early."""
    lock = locking.SharedLock("x")
    lock.acquire(shared=True)
    actor = actors()
    started = time.monotonic()
    fut = actor.submit(lock.acquire, timeout=0.3)
    wait_until(lambda: lock.pending_count() == 1)
    for _ in range(5):
        with lock._mutex:
            lock._queue[0].notify_all()
        time.sleep(0.02)
    assert not fut.done()
    assert fut.result(WAIT) is False
    assert time.monotonic() - started >= 0.3
    assert lock.pending_count() == 0
    lock.release()


def test_blocked_waiter_uses_no_cpu(actors: Callable[[], Actor]) -> None:
    """Waiting is an OS-level wait, not polling: a blocked thread burns (almost) no CPU."""
    lock = locking.SharedLock("x")
    lock.acquire()
    actor = actors()
    fut = actor.submit(lambda: (time.thread_time(), lock.acquire(timeout=0.5), time.thread_time()))
    before, ok, after = fut.result(WAIT)
    assert ok is False
    assert after - before < 0.05
    lock.release()


def test_cancel_wakes_blocking_waiter(actors: Callable[[], Actor]) -> None:
    """herder's CancelToken: a blocking waiter returns False at once, holding nothing, and its
    queue entry is gone; other waiters keep their places."""
    lock = locking.SharedLock("x")
    lock.acquire()
    token = locking.CancelToken()
    canceled, other = actors(), actors()
    fut = canceled.submit(lock.acquire, cancel=token)
    wait_until(lambda: lock.pending_count() == 1)
    fut_other = other.submit(lock.acquire)
    wait_until(lambda: lock.pending_count() == 2)
    token.cancel()
    assert fut.result(WAIT) is False
    assert not canceled.call(lock.is_owned)
    assert lock.pending_count() == 1 and not fut_other.done()
    assert canceled.call(lock.acquire, cancel=token) is False  # canceled for good
    assert locking.SharedLock("free").acquire(cancel=token) is False
    lock.release()
    assert fut_other.result(WAIT)
    other.call(lock.release)


def test_cancel_lockset_and_manager(actors: Callable[[], Actor]) -> None:
    glm = locking.LockManager(instances=["i1", "i2", "i3"])
    holder, waiter = actors(), actors()
    holder.call(glm.acquire, locking.LEVEL_CLUSTER, None, shared=True)
    holder.call(glm.acquire, locking.LEVEL_INSTANCE, ["i3"])
    token = locking.CancelToken()

    def run() -> set[str] | None:
        glm.acquire(locking.LEVEL_CLUSTER, None, shared=True)
        return glm.acquire(locking.LEVEL_INSTANCE, ["i1", "i2", "i3"], cancel=token)

    fut = waiter.submit(run)
    lock_i3 = glm._sets[locking.LEVEL_INSTANCE]._locks["i3"]
    wait_until(lambda: lock_i3.pending_count() == 1)
    token.cancel()
    assert fut.result(WAIT) is None
    assert waiter.call(glm.list_owned, locking.LEVEL_INSTANCE) == set()  # i1, i2 released
    waiter.call(glm.release_all)
    holder.call(glm.release_all)
    assert lock_i3.pending_count() == 0


# --- LockSet -----------------------------------------------------------------------------------

RESOURCES = ["one", "two", "three"]


@pytest.fixture
def ls() -> locking.LockSet:
    return locking.LockSet(RESOURCES, "test")


def test_lockset_resources(ls: locking.LockSet) -> None:
    assert ls.names() == set(RESOURCES)
    assert locking.LockSet([], "empty").names() == set()
    with pytest.raises(locking.LockError):
        locking.LockSet(["a", "a"], "dup")


def test_a_sets_locks_are_named_after_the_set(ls: locking.LockSet) -> None:
    lock = ls._locks["two"]
    assert lock.name == "test/two" and repr(lock) == "<SharedLock 'test/two'>"
    lock.acquire(shared=True)
    with pytest.raises(locking.LockError, match="lock test/two is already held"):
        lock.acquire(shared=True)
    lock.release()
    with pytest.raises(locking.LockError, match="lock test/two is not held"):
        lock.release()


def test_lockset_acquire_release(ls: locking.LockSet) -> None:
    assert ls.acquire("one") == {"one"}
    assert ls.list_owned() == {"one"} and ls.is_owned()
    ls.release()
    assert not ls.is_owned() and ls.list_owned() == set()
    assert ls.acquire(["one"]) == {"one"}
    ls.release()
    assert ls.acquire(["one", "two", "three"]) == set(RESOURCES)
    ls.release("one")
    assert ls.list_owned() == {"two", "three"}
    ls.release(["three"])
    assert ls.list_owned() == {"two"}
    ls.release()
    assert ls.acquire(["one", "three"]) == {"one", "three"}
    ls.release()


def test_lockset_no_double_acquire(ls: locking.LockSet) -> None:
    ls.acquire("one")
    with pytest.raises(locking.LockError):
        ls.acquire("two")
    ls.release()
    ls.acquire(["one", "three"])
    ls.release("one")
    with pytest.raises(locking.LockError):
        ls.acquire(["two"])
    ls.release("three")


def test_lockset_no_wrong_release(ls: locking.LockSet) -> None:
    with pytest.raises(locking.LockError):
        ls.release()
    ls.acquire(["one", "two"])
    with pytest.raises(locking.LockError):
        ls.release(["one", "three"])
    assert ls.list_owned() == {"one", "two"}
    ls.release()


def test_lockset_unknown_name(ls: locking.LockSet, actors: Callable[[], Actor]) -> None:
    with pytest.raises(locking.LockError):
        ls.acquire(["one", "zzz"])
    assert not ls.is_owned()
    assert actors().call(ls.acquire, ["one"], timeout=0) == {"one"}  # "one" was released


def test_lockset_sorted_acquisition(actors: Callable[[], Actor]) -> None:
    names = ["d", "b", "a", "c", "b", "e"]
    lockset = locking.LockSet(names[:2] + names[2:4] + names[5:], "s")
    got: list[str] = []

    class Recorder:
        def acquired(self, lock: str, shared: bool, ahead: int, started: float, granted: float,
                     ok: bool) -> None:
            got.append(lock.split("/")[1])

        def released(self, lock: str, at: float) -> None:
            pass

    def run() -> set[str] | None:
        locking.set_wait_recorder(Recorder())
        try:
            return lockset.acquire(names, shared=True)
        finally:
            locking.set_wait_recorder(None)

    actor = actors()
    assert actor.call(run) == set(names)  # repetitions are fine
    assert got == ["a", "b", "c", "d", "e"]
    actor.call(lockset.release)


def test_lockset_add_remove(ls: locking.LockSet) -> None:
    ls.add("four")
    assert ls.names() == {"one", "two", "three", "four"}
    ls.add(["five", "six", "seven"], acquired=True)
    assert ls.list_owned() == {"five", "six", "seven"}
    assert ls.remove(["five", "six"]) == ["five", "six"]
    assert ls.list_owned() == {"seven"}
    with pytest.raises(locking.LockError):  # adding while owning some elements
        ls.add("eight", acquired=True)
    ls.release()
    assert ls.remove("seven") == ["seven"]  # not owned: deleted after acquiring it
    assert ls.remove(["seven"]) == []  # already gone
    assert ls.names() == {"one", "two", "three", "four"}
    assert ls.acquire(None, shared=True) == {"one", "two", "three", "four"}
    with pytest.raises(locking.LockError):  # the set lock is held shared
        ls.add("eight")
    ls.release()
    assert ls.acquire(None) == {"one", "two", "three", "four"}
    ls.add("eight", acquired=True)
    ls.add("nine")
    assert ls.list_owned() == {"one", "two", "three", "four", "eight"}
    ls.release()
    assert ls.remove(["one", "three", "six"]) == ["one", "three"]
    assert ls.names() == {"two", "four", "eight", "nine"}


def test_lockset_remove_non_blocking(ls: locking.LockSet) -> None:
    ls.acquire(["one", "two"])
    assert ls.remove(["one", "two"]) == ["one", "two"]
    assert not ls.is_owned()
    assert ls.names() == {"three"}


def test_lockset_no_double_add(ls: locking.LockSet) -> None:
    with pytest.raises(locking.LockError):
        ls.add("two")
    with pytest.raises(locking.LockError):
        ls.add(["four", "four"])
    ls.add("four")
    with pytest.raises(locking.LockError):
        ls.add("four")
    assert not ls.is_owned()


def test_lockset_no_wrong_removes(ls: locking.LockSet) -> None:
    ls.acquire(["one", "three"], shared=True)
    with pytest.raises(locking.LockError):  # not held while holding others
        ls.remove(["two"])
    with pytest.raises(locking.LockError):  # held shared
        ls.remove(["one"])
    assert ls.names() == set(RESOURCES)
    ls.release()


def test_lockset_acquire_set_lock(ls: locking.LockSet) -> None:
    assert ls.acquire(locking.ALL_SET) == set(RESOURCES)
    assert ls.owns_set_lock(shared=False)
    assert ls.remove(["two"]) == ["two"]
    ls.add("four", acquired=True)
    assert ls.list_owned() == {"one", "three", "four"}
    ls.release()
    assert not ls.owns_set_lock()
    assert ls.acquire(locking.ALL_SET, shared=True) == {"one", "three", "four"}
    with pytest.raises(locking.LockError):
        ls.add("five")
    ls.release()


def test_lockset_empty_acquire(ls: locking.LockSet, actors: Callable[[], Actor]) -> None:
    assert ls.acquire([]) == set()
    assert not ls.is_owned()
    actors().call(ls.add, "four")
    with pytest.raises(locking.LockError):
        ls.release()


def test_lockset_concurrent_shared_and_exclusive(ls: locking.LockSet,
                                                 actors: Callable[[], Actor]) -> None:
    ls.acquire(["one", "two"], shared=True)
    other = actors()
    assert other.call(ls.acquire, ["one", "two", "three"], shared=True, timeout=0) == set(
        RESOURCES)
    other.call(ls.release)
    assert other.call(ls.acquire, ["three"], timeout=0) == {"three"}
    other.call(ls.release)
    assert other.call(ls.acquire, ["two"], timeout=0) is None
    assert other.call(ls.acquire, locking.ALL_SET, timeout=0) is None
    assert other.call(ls.acquire, locking.ALL_SET, shared=True, timeout=0) == set(RESOURCES)
    other.call(ls.release)
    fut = other.submit(ls.acquire, ["one"])
    settle()
    assert not fut.done()
    ls.release()
    assert fut.result(WAIT) == {"one"}
    other.call(ls.release)


@pytest.mark.parametrize("which", [["one"], None, ["three"]])
def test_lockset_simple_timeout_expiring(ls: locking.LockSet, actors: Callable[[], Actor],
                                         which: list[str] | None) -> None:
    """A timed acquire against a holder of the first, any or the last lock returns None and
    leaves nothing held by the caller."""
    holder = actors()
    holder.call(ls.acquire, which if which is not None else ["two"])
    actor = actors()
    assert actor.call(ls.acquire, None, timeout=0.1) is None
    assert not actor.call(ls.is_owned)
    assert not actor.call(ls.owns_set_lock)
    holder.call(ls.release)
    assert actor.call(ls.acquire, None, timeout=0) == set(RESOURCES)
    actor.call(ls.release)


def test_lockset_one_overall_timeout(actors: Callable[[], Actor]) -> None:
    """The timeout covers the whole call: each lock comes within it, but not all of them.

    Locks are released one every 0.5 s (the last at 2 s), the timeout is 1 s: a timeout per
    lock would get them all; the call gives up after 1 s, well before the last release (the
    margins hold on a loaded machine: a late wake-up only makes the call return later)."""
    names = ["a", "b", "c", "d"]
    lockset = locking.LockSet(names, "s")
    holder = actors()
    holder.call(lockset.acquire, names)

    def release_slowly() -> None:
        for name in names:
            time.sleep(0.5)
            lockset.release(name)

    releasing = holder.submit(release_slowly)
    acquirer = actors()
    started = time.monotonic()
    assert acquirer.call(lockset.acquire, names, timeout=1.0) is None
    assert 1.0 <= time.monotonic() - started < 2.0
    assert not acquirer.call(lockset.is_owned)
    releasing.result(WAIT)
    holder.call(lockset.acquire, names)
    releasing = holder.submit(release_slowly)
    assert acquirer.call(lockset.acquire, names) == set(names)  # blocking gets them all
    releasing.result(WAIT)
    acquirer.call(lockset.release)


def test_lockset_whole_set_blocks_add_and_remove(ls: locking.LockSet,
                                                 actors: Callable[[], Actor]) -> None:
    holder = actors()
    assert holder.call(ls.acquire, None, shared=True) == set(RESOURCES)
    adder, remover = actors(), actors()
    fut_add = adder.submit(ls.add, "four")
    fut_rm = remover.submit(ls.remove, ["one"])
    settle()
    assert not fut_add.done() and not fut_rm.done()
    assert ls.names() == set(RESOURCES)
    # other sharers still get in, partially or wholly
    sharer = actors()
    assert sharer.call(ls.acquire, ["two"], shared=True, timeout=0) == {"two"}
    sharer.call(ls.release)
    holder.call(ls.release, [])  # the set lock only: add can proceed, remove still waits
    assert fut_add.result(WAIT) is None
    assert ls.names() == {*RESOURCES, "four"}
    settle()
    assert not fut_rm.done()
    holder.call(ls.release)
    assert fut_rm.result(WAIT) == ["one"]
    assert ls.names() == {"two", "three", "four"}


def test_lockset_exclusive_set_lock_blocks_everything(ls: locking.LockSet,
                                                      actors: Callable[[], Actor]) -> None:
    ls.acquire(None)
    others = [actors() for _ in range(4)]

    def take(names: list[str] | None, shared: bool) -> None:
        ls.acquire(names, shared=shared)
        ls.release()

    futs = [others[0].submit(take, None, True),
            others[1].submit(take, ["two"], True),
            others[2].submit(ls.add, "four"),
            others[3].submit(take, ["three"], False)]
    settle()
    assert not any(f.done() for f in futs)
    ls.release()
    for f in futs:
        f.result(WAIT)


def test_lockset_empty_set_lock_still_blocks(actors: Callable[[], Actor]) -> None:
    lockset = locking.LockSet([], "empty")
    assert lockset.acquire(None) == set()
    assert lockset.is_owned()
    other = actors()
    assert other.call(lockset.acquire, None, timeout=0) is None
    fut = other.submit(lockset.add, "x")
    settle()
    assert not fut.done()
    lockset.release()
    fut.result(WAIT)
    assert lockset.names() == {"x"}


def test_lockset_concurrent_remove(ls: locking.LockSet, actors: Callable[[], Actor]) -> None:
    """A pending acquire of a removed lock fails with LockError (what it got is released); one
    pending on another lock proceeds; concurrent removes each report only what they removed."""
    ls.acquire(["one", "two"])
    w0, w1, w2 = actors(), actors(), actors()
    fut0 = w0.submit(ls.acquire, ["one"])
    fut1 = w1.submit(ls.acquire, ["two", "three"])
    wait_until(lambda: all(ls._locks[n].waiter_count() == 1 for n in ("one", "two")))
    assert ls._locks["three"].owner_count() == 1  # w1 got "three" first (sorted order)
    assert ls.remove(["two"]) == ["two"]
    with pytest.raises(locking.LockError):
        fut1.result(WAIT)
    assert not w1.call(ls.is_owned)
    assert ls._locks["three"].owner_count() == 0
    settle()
    assert not fut0.done()
    ls.release()
    assert fut0.result(WAIT) == {"one"}
    w0.call(ls.release)
    w2.call(ls.acquire, ["three"])
    removers = [actors(), actors()]
    futs = [r.submit(ls.remove, ["three", "two"]) for r in removers]
    wait_until(lambda: ls._locks["three"].waiter_count() == 2)
    w2.call(ls.release)
    assert sorted(f.result(WAIT) for f in futs) == [[], ["three"]]
    assert ls.names() == {"one"}


def test_lockset_add_remove_under_contention() -> None:
    """Workers acquire random subsets (with retries) while one thread adds and removes names."""
    base = [f"n{i:02d}" for i in range(20)]
    lockset = locking.LockSet(base, "s")
    stop = threading.Event()
    errors: list[BaseException] = []
    done = [0]

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                names = rng.sample(sorted(lockset.names()), 3)
                shared = rng.random() < 0.5
                try:
                    got = locking.acquire_with_retry(
                        lambda t, names=names, shared=shared: lockset.acquire(
                            names, shared=shared, timeout=t),
                        lambda: lockset.release() if lockset.is_owned() else None,
                        locking.LockAttemptTimeoutStrategy(timeouts=[0.01, 0.02, 0.05]))
                except locking.LockError:
                    assert not lockset.is_owned()
                    continue
                assert got == set(names)
                lockset.release()
                done[0] += 1
        except BaseException as exc:
            errors.append(exc)

    def churn() -> None:
        rng = random.Random(99)
        i = 0
        try:
            while not stop.is_set():
                name = f"x{i}"
                lockset.add(name)
                victim = rng.choice(sorted(lockset.names() - set(base)))
                assert lockset.remove([victim]) in ([victim], [])
                i += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in range(6)]
    threads.append(threading.Thread(target=churn, daemon=True))
    for t in threads:
        t.start()
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(WAIT)
        assert not t.is_alive()
    assert not errors, errors
    assert done[0] > 0
    assert set(base) <= lockset.names()
    for name in lockset.names():
        lock = lockset._locks[name]
        assert lock.owner_count() == 0 and lock.pending_count() == 0


# --- LockManager -------------------------------------------------------------------------------


@pytest.fixture
def glm() -> locking.LockManager:
    return locking.LockManager(nodes=["n1", "n2"], instances=["i1", "i2", "i3"],
                               nodegroups=["g1"], networks=["net1"])


def test_levels_constants() -> None:
    assert list(range(6)) == locking.LEVELS
    assert [locking.LEVEL_CLUSTER, locking.LEVEL_INSTANCE, locking.LEVEL_NODEGROUP,
            locking.LEVEL_NODE, locking.LEVEL_NODE_RES, locking.LEVEL_NETWORK] == locking.LEVELS
    assert locking.LEVEL_NAMES[locking.LEVEL_CLUSTER] == "cluster"
    assert len(set(locking.LEVEL_NAMES.values())) == 6
    assert locking.LEVEL_CLUSTER not in locking.LEVELS_MOD
    assert locking.BGL == "BGL"


def test_glm_init_and_resources(glm: locking.LockManager) -> None:
    assert glm.names(locking.LEVEL_CLUSTER) == {"BGL"}
    assert glm.names(locking.LEVEL_INSTANCE) == {"i1", "i2", "i3"}
    assert glm.names(locking.LEVEL_NODE) == glm.names(locking.LEVEL_NODE_RES) == {"n1", "n2"}
    assert glm.names(locking.LEVEL_NODEGROUP) == {"g1"}
    assert glm.names(locking.LEVEL_NETWORK) == {"net1"}
    empty = locking.LockManager()
    assert empty.names(locking.LEVEL_CLUSTER) == {"BGL"}
    assert empty.names(locking.LEVEL_NODE) == set()
    with pytest.raises(locking.LockError):
        glm.acquire(17, None)


def test_glm_acquire_release(glm: locking.LockManager) -> None:
    assert glm.acquire(locking.LEVEL_CLUSTER, ["BGL"], shared=True) == {"BGL"}
    assert glm.acquire(locking.LEVEL_INSTANCE, ["i1"]) == {"i1"}
    assert glm.acquire(locking.LEVEL_NODE, ["n1", "n2"], shared=True) == {"n1", "n2"}
    assert glm.list_owned(locking.LEVEL_INSTANCE) == {"i1"}
    glm.release(locking.LEVEL_NODE, ["n2"])
    assert glm.list_owned(locking.LEVEL_NODE) == {"n1"}
    glm.release(locking.LEVEL_NODE)
    glm.release(locking.LEVEL_INSTANCE)
    assert not glm.is_owned(locking.LEVEL_NODE) and not glm.is_owned(locking.LEVEL_INSTANCE)
    with pytest.raises(locking.LockError):
        glm.acquire(locking.LEVEL_INSTANCE, ["i5"])
    assert not glm.is_owned(locking.LEVEL_INSTANCE)
    glm.release(locking.LEVEL_CLUSTER)
    assert not glm.is_owned(locking.LEVEL_CLUSTER)


def test_glm_acquire_whole_sets(glm: locking.LockManager) -> None:
    glm.acquire(locking.LEVEL_CLUSTER, None, shared=True)
    assert glm.acquire(locking.LEVEL_INSTANCE, None) == {"i1", "i2", "i3"}
    assert glm.acquire(locking.LEVEL_NODEGROUP, None) == {"g1"}
    assert glm.acquire(locking.LEVEL_NODE, None, shared=True) == {"n1", "n2"}
    assert glm.acquire(locking.LEVEL_NODE_RES, None) == {"n1", "n2"}
    assert glm.acquire(locking.LEVEL_NETWORK, None) == {"net1"}
    glm.release_all()
    assert not any(glm.is_owned(level) for level in locking.LEVELS)


def test_glm_acquire_whole_and_partial(glm: locking.LockManager) -> None:
    glm.acquire(locking.LEVEL_CLUSTER, ["BGL"], shared=True)
    assert glm.acquire(locking.LEVEL_INSTANCE, None) == {"i1", "i2", "i3"}
    assert glm.acquire(locking.LEVEL_NODE, ["n2"], shared=True) == {"n2"}
    glm.release_all()


def test_glm_bgl_dependency(glm: locking.LockManager) -> None:
    for level in locking.LEVELS[1:]:
        with pytest.raises(locking.LockError):
            glm.acquire(level, None)
    glm.acquire(locking.LEVEL_CLUSTER, None, shared=True)
    glm.acquire(locking.LEVEL_NODE, ["n1"])
    with pytest.raises(locking.LockError):
        glm.release(locking.LEVEL_CLUSTER)
    glm.release(locking.LEVEL_NODE)
    glm.acquire(locking.LEVEL_INSTANCE, ["i1"])
    with pytest.raises(locking.LockError):
        glm.release(locking.LEVEL_CLUSTER)
    glm.release(locking.LEVEL_INSTANCE)
    glm.release(locking.LEVEL_CLUSTER)


def test_glm_wrong_order(glm: locking.LockManager) -> None:
    glm.acquire(locking.LEVEL_CLUSTER, None, shared=True)
    glm.acquire(locking.LEVEL_NODE, ["n1"])
    with pytest.raises(locking.LockError):  # same level twice
        glm.acquire(locking.LEVEL_NODE, ["n2"])
    with pytest.raises(locking.LockError):  # lower level after a higher one
        glm.acquire(locking.LEVEL_INSTANCE, ["i1"])
    with pytest.raises(locking.LockError):
        glm.acquire(locking.LEVEL_NODEGROUP, ["g1"])
    assert glm.acquire(locking.LEVEL_NETWORK, ["net1"]) == {"net1"}  # a later level is fine
    glm.release(locking.LEVEL_NODE)  # releasing a lower level while holding a later one: allowed
    assert glm.list_owned(locking.LEVEL_NETWORK) == {"net1"}
    glm.release_all()


def test_glm_add_remove_rules(glm: locking.LockManager) -> None:
    with pytest.raises(locking.LockError):  # no BGL
        glm.add(locking.LEVEL_INSTANCE, "i4")
    glm.acquire(locking.LEVEL_CLUSTER, None)
    with pytest.raises(locking.LockError):  # the cluster level is not modifiable
        glm.add(locking.LEVEL_CLUSTER, "BGL2")
    with pytest.raises(locking.LockError):
        glm.remove(locking.LEVEL_CLUSTER, "BGL")
    glm.add(locking.LEVEL_INSTANCE, "i4")
    glm.acquire(locking.LEVEL_NODE, ["n1"])
    with pytest.raises(locking.LockError):  # holding a later level
        glm.add(locking.LEVEL_INSTANCE, "i5")
    with pytest.raises(locking.LockError):
        glm.remove(locking.LEVEL_INSTANCE, "i4")
    assert glm.remove(locking.LEVEL_NODE, ["n1"]) == ["n1"]  # owned level
    assert glm.names(locking.LEVEL_NODE_RES) == {"n1", "n2"}  # the other node level is separate
    glm.add(locking.LEVEL_NODE, "n3", acquired=True)
    assert glm.list_owned(locking.LEVEL_NODE) == {"n3"}
    glm.release_all()
    glm.acquire(locking.LEVEL_CLUSTER, None, shared=True)
    assert glm.remove(locking.LEVEL_INSTANCE, ["i4", "i9"]) == ["i4"]
    glm.release_all()


def test_glm_concurrency(glm: locking.LockManager, actors: Callable[[], Actor]) -> None:
    a, b = actors(), actors()
    a.call(glm.acquire, locking.LEVEL_CLUSTER, None, shared=True)
    b.call(glm.acquire, locking.LEVEL_CLUSTER, None, shared=True)
    assert a.call(glm.acquire, locking.LEVEL_INSTANCE, ["i1"]) == {"i1"}
    assert b.call(glm.acquire, locking.LEVEL_INSTANCE, ["i2"]) == {"i2"}  # no conflict
    b.call(glm.release, locking.LEVEL_INSTANCE)
    fut = b.submit(glm.acquire, locking.LEVEL_INSTANCE, ["i1", "i2"])
    settle()
    assert not fut.done()
    # an exclusive BGL waits for the sharers
    c = actors()
    fut_c = c.submit(glm.acquire, locking.LEVEL_CLUSTER, None)
    a.call(glm.release, locking.LEVEL_INSTANCE)
    assert fut.result(WAIT) == {"i1", "i2"}
    a.call(glm.release, locking.LEVEL_CLUSTER)
    settle()
    assert not fut_c.done()
    b.call(glm.release_all)
    assert fut_c.result(WAIT) == {"BGL"}
    c.call(glm.release_all)


# --- retry strategy ----------------------------------------------------------------------------


def test_default_attempt_timeouts() -> None:
    timeouts = locking.LockAttemptTimeoutStrategy.DEFAULT_TIMEOUTS
    assert len(timeouts) == 24 and sum(timeouts) >= 150
    assert list(timeouts) == sorted(timeouts)
    assert timeouts[0] == 1.0 and max(timeouts) == 10.0
    assert abs(timeouts[1] - 1.0629) < 1e-4 and abs(timeouts[10] - 7.599) < 1e-3


def test_strategy_sequence_then_block() -> None:
    strategy = locking.LockAttemptTimeoutStrategy(random_fn=lambda: 0.5)
    values = [strategy.next_attempt() for _ in range(24)]
    assert values == list(locking.LockAttemptTimeoutStrategy.DEFAULT_TIMEOUTS)
    assert strategy.attempt == 24
    assert [strategy.next_attempt() for _ in range(10)] == [None] * 10
    jittered = locking.LockAttemptTimeoutStrategy(attempt=3, random_fn=lambda: 1.0)
    value = jittered.next_attempt()
    assert value is not None
    assert value == pytest.approx(locking.LockAttemptTimeoutStrategy.DEFAULT_TIMEOUTS[3] * 1.05)
    expo = locking.LockAttemptTimeoutStrategy.exponential(4)
    expo.jitter = 0.0
    assert [expo.next_attempt() for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, None]


def test_acquire_with_retry_grows_then_blocks() -> None:
    calls: list[float | None] = []
    events: list[str] = []
    sleeps: list[float] = []

    def acquire(timeout: float | None) -> str | None:
        calls.append(timeout)
        return "got" if timeout is None else None

    strategy = locking.LockAttemptTimeoutStrategy(timeouts=[0.1, 0.2, 0.4], random_fn=lambda: 0.5)
    assert locking.acquire_with_retry(acquire, lambda: events.append("release"), strategy,
                                      on_wait=lambda: events.append("wait"),
                                      sleep=sleeps.append) == "got"
    assert calls == [0.1, 0.2, 0.4, None]
    assert events == ["release", "wait"] * 3
    assert len(sleeps) == 3 and all(0 <= s <= 0.5 for s in sleeps)


def test_retry_design_demonstration(actors: Callable[[], Actor]) -> None:
    """design-2.1's example: A holds inst4; B wants inst1..inst4 and retries (releasing what it
    got); C then gets inst1 without waiting for A to finish."""
    names = ["inst1", "inst2", "inst3", "inst4"]
    lockset = locking.LockSet(names, "instance")
    a, b, c = actors(), actors(), actors()
    a.call(lockset.acquire, ["inst4"])
    strategy = locking.LockAttemptTimeoutStrategy(timeouts=[0.05] * 200)
    fut_b = b.submit(locking.acquire_with_retry,
                     lambda t: lockset.acquire(names, timeout=t),
                     lambda: lockset.release() if lockset.is_owned() else None, strategy)
    wait_until(lambda: strategy.attempt >= 2)
    got = None
    for _ in range(50):  # B holds inst1 only during its attempts; C gets in between them
        got = c.call(lockset.acquire, ["inst1"], timeout=0.05)
        if got is not None:
            break
    assert got == {"inst1"}
    assert not fut_b.done()
    c.call(lockset.release)
    a.call(lockset.release)
    assert fut_b.result(WAIT) == set(names)
    b.call(lockset.release)


# --- hypothesis state machine ------------------------------------------------------------------

_POOL: list[Actor] = []
N_ACTORS = 3
LOCK_NAMES = ["a", "b", "c", "d"]


def _actor_pool() -> list[Actor]:
    while len(_POOL) < N_ACTORS:
        _POOL.append(Actor(f"hyp-{len(_POOL)}"))
    return _POOL


class LockSetMachine(RuleBasedStateMachine):
    """Several owner threads drive one LockSet with non-blocking (timeout=0) calls; a model of
    who holds what in which mode predicts every result exactly."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = _actor_pool()
        self.lockset = locking.LockSet(LOCK_NAMES[:3], "m")
        self.exclusive: dict[str, int | None] = {n: None for n in LOCK_NAMES[:3]}
        self.sharers: dict[str, set[int]] = {n: set() for n in LOCK_NAMES[:3]}
        self.set_lock: dict[int, bool] = {}  # actor -> shared?
        self.owned: dict[int, set[str]] = {i: set() for i in range(N_ACTORS)}

    def run(self, actor: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.pool[actor].call(fn, *args, **kwargs)

    def free_for(self, name: str, shared: bool) -> bool:
        if self.exclusive[name] is not None:
            return False
        return shared or not self.sharers[name]

    def owns(self, actor: int) -> bool:
        return bool(self.owned[actor]) or actor in self.set_lock

    def set_lock_free_for(self, shared: bool) -> bool:
        if not self.set_lock:
            return True
        return shared and all(self.set_lock.values())

    @rule(actor=st.integers(0, N_ACTORS - 1), names=st.sets(st.sampled_from(LOCK_NAMES)),
          shared=st.booleans())
    def acquire(self, actor: int, names: set[str], shared: bool) -> None:
        if self.owns(actor):
            with pytest.raises(locking.LockError):
                self.run(actor, self.lockset.acquire, sorted(names), shared=shared, timeout=0)
            return
        expect: str = "ok"
        for n in sorted(names):  # locks are taken in sorted order: the first problem decides
            if n not in self.exclusive:
                expect = "error"
                break
            if not self.free_for(n, shared):
                expect = "timeout"
                break
        if expect == "error":
            with pytest.raises(locking.LockError):
                self.run(actor, self.lockset.acquire, sorted(names), shared=shared, timeout=0)
            return
        result = self.run(actor, self.lockset.acquire, sorted(names), shared=shared, timeout=0)
        if expect == "ok":
            assert result == names
            self.take(actor, names, shared)
        else:
            assert result is None

    def take(self, actor: int, names: set[str], shared: bool) -> None:
        for n in names:
            if shared:
                self.sharers[n].add(actor)
            else:
                self.exclusive[n] = actor
        self.owned[actor] = set(names)

    @rule(actor=st.integers(0, N_ACTORS - 1), shared=st.booleans())
    def acquire_all(self, actor: int, shared: bool) -> None:
        if self.owns(actor):
            with pytest.raises(locking.LockError):
                self.run(actor, self.lockset.acquire, locking.ALL_SET, shared=shared, timeout=0)
            return
        result = self.run(actor, self.lockset.acquire, locking.ALL_SET, shared=shared, timeout=0)
        names = set(self.exclusive)
        if self.set_lock_free_for(shared) and all(self.free_for(n, shared) for n in names):
            assert result == names
            self.take(actor, names, shared)
            self.set_lock[actor] = shared
        else:
            assert result is None

    @rule(actor=st.integers(0, N_ACTORS - 1), data=st.data())
    def release(self, actor: int, data: st.DataObject) -> None:
        if not self.owns(actor):
            with pytest.raises(locking.LockError):
                self.run(actor, self.lockset.release)
            return
        owned = sorted(self.owned[actor])
        subset = set(data.draw(st.lists(st.sampled_from(owned), unique=True))) if owned else set()
        partial = data.draw(st.booleans())
        self.run(actor, self.lockset.release, sorted(subset) if partial else None)
        gone = subset if partial else set(owned)
        self.set_lock.pop(actor, None)
        for n in gone:
            self.sharers[n].discard(actor)
            if self.exclusive[n] == actor:
                self.exclusive[n] = None
        self.owned[actor] -= gone

    @rule(actor=st.integers(0, N_ACTORS - 1), name=st.sampled_from(LOCK_NAMES))
    def add(self, actor: int, name: str) -> None:
        others_hold_set = any(a != actor for a in self.set_lock)
        if others_hold_set:
            return  # add would block on the set lock
        if (self.owns(actor) and self.set_lock.get(actor) is not False):
            with pytest.raises(locking.LockError):
                self.run(actor, self.lockset.add, name)
            return
        if name in self.exclusive:
            with pytest.raises(locking.LockError):
                self.run(actor, self.lockset.add, name)
            return
        self.run(actor, self.lockset.add, name)
        self.exclusive[name] = None
        self.sharers[name] = set()

    @precondition(lambda self: bool(self.exclusive))
    @rule(actor=st.integers(0, N_ACTORS - 1), data=st.data())
    def remove(self, actor: int, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.exclusive)))
        if self.owns(actor):
            if name not in self.owned[actor]:
                with pytest.raises(locking.LockError):
                    self.run(actor, self.lockset.remove, [name])
                return
            if actor in self.sharers[name]:
                with pytest.raises(locking.LockError):
                    self.run(actor, self.lockset.remove, [name])
                return
        elif not self.free_for(name, shared=False):
            return  # would block until the holders release
        assert self.run(actor, self.lockset.remove, [name]) == [name]
        del self.exclusive[name]
        del self.sharers[name]
        self.owned[actor].discard(name)

    @invariant()
    def matches_model(self) -> None:
        assert self.lockset.names() == set(self.exclusive)
        for i in range(N_ACTORS):
            assert self.run(i, self.lockset.list_owned) == self.owned[i]
            assert self.run(i, self.lockset.owns_set_lock) == (i in self.set_lock)
        for name in self.exclusive:
            lock = self.lockset._locks[name]
            expected = len(self.sharers[name]) + (self.exclusive[name] is not None)
            assert lock.owner_count() == expected
            assert lock.pending_count() == 0

    def teardown(self) -> None:
        for i in range(N_ACTORS):
            if self.owns(i):
                self.run(i, self.lockset.release)


TestLockSetMachine = LockSetMachine.TestCase
TestLockSetMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_downgrade_lets_the_waiting_sharers_go_on(actors: Callable[[], Actor]) -> None:
    """Ganeti's SharedLock.downgrade: the exclusive holder becomes one sharer; the sharers
    waiting go on at once, an exclusive waiter still waits for it; only an exclusive hold
    of the caller can be downgraded."""
    lock = locking.SharedLock("x")
    with pytest.raises(locking.LockError, match="not held exclusively"):
        lock.downgrade()
    lock.acquire()
    sharer, writer = actors(), actors()
    shared = sharer.submit(lock.acquire, shared=True)
    wait_until(lambda: lock.waiter_count() == 1)
    settle()
    assert not shared.done()
    lock.downgrade()
    assert shared.result(WAIT) is True and lock.owner_count() == 2
    assert lock.is_owned(shared=True) and not lock.is_owned(shared=False)
    with pytest.raises(locking.LockError, match="not held exclusively"):
        lock.downgrade()
    exclusive = writer.submit(lock.acquire)
    wait_until(lambda: lock.waiter_count() == 1)
    sharer.call(lock.release)
    settle()
    assert not exclusive.done()  # the downgraded holder still shares it
    lock.release()
    assert exclusive.result(WAIT) is True
    writer.call(lock.release)


def test_glm_downgrade_of_the_bgl(glm: locking.LockManager, actors: Callable[[], Actor]
                                  ) -> None:
    """An LU holding the BGL exclusively with its own instance and nodes downgrades the BGL:
    a job on another instance goes on, one on its instance still waits."""
    glm.acquire(locking.LEVEL_CLUSTER, ["BGL"])
    glm.add(locking.LEVEL_INSTANCE, "i4", acquired=True)
    glm.acquire(locking.LEVEL_NODE, ["n1"])
    other = actors()

    def job(instance: str) -> set[str] | None:
        glm.acquire(locking.LEVEL_CLUSTER, ["BGL"], shared=True)
        got = glm.acquire(locking.LEVEL_INSTANCE, [instance], timeout=0.2)
        if got is not None:
            glm.release(locking.LEVEL_INSTANCE)
        glm.release(locking.LEVEL_CLUSTER)
        return got

    blocked = other.submit(job, "i1")
    settle()
    assert not blocked.done()  # behind the exclusive BGL
    glm.downgrade(locking.LEVEL_CLUSTER)
    assert blocked.result(WAIT) == {"i1"}
    assert other.call(job, "i4") is None  # the new instance stays locked
    glm.release(locking.LEVEL_NODE)
    glm.release(locking.LEVEL_INSTANCE)
    glm.release(locking.LEVEL_CLUSTER)
    assert other.call(job, "i4") == {"i4"}
