"""The lock stress run shared by tests/unit/test_locking_stress.py (a few seconds) and
bench/locks.py --stress (its long form, 30 s by default): 64 threads over a LockManager (50
instances, node groups, nodes, node resources, networks), each acquiring random subsets level by
level in mixed shared/exclusive modes, some blocking and some through acquire_with_retry with
short timeouts, while one thread adds and removes instances.

`run_stress` returns what happened; `problems` lists what breaks the promises: a deadlock (a
watchdog bounds the run and dumps the stacks if it hangs), errors, a thread without progress,
locks not idle at the end, and a wait for a single lock longer than (queue entries ahead when
it queued + 1) x the longest hold of that lock seen in the run, plus slack.
"""

from __future__ import annotations

import faulthandler
import random
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from herder.masterd import locking

THREADS = 64
WATCHDOG_GRACE = 60.0  # after DURATION, every thread must stop within this
MAX_HOLD_SLEEP = 0.002
SLACK_SECONDS = 1.0  # fixed slack for scheduling 64 threads on a small machine
SLACK_PER_STEP = 0.05  # per queue step: hand-over latency (wake-up, GIL)

INSTANCES = [f"inst{i:02d}" for i in range(50)]
NODEGROUPS = ["g1", "g2", "g3"]
NODES = [f"node{i:02d}" for i in range(12)]
NETWORKS = ["net1", "net2"]


@dataclass
class Wait:
    lock: str
    shared: bool
    ahead: int
    waited: float


@dataclass
class Recorder:
    """Per-thread record of waits and holds (a herder.masterd.locking.WaitRecorder)."""

    waits: list[Wait] = field(default_factory=list)
    max_hold: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    granted: dict[str, float] = field(default_factory=dict)
    acquisitions: int = 0

    def acquired(self, lock: str, shared: bool, ahead: int, started: float, granted: float,
                 ok: bool) -> None:
        if ok:
            self.granted[lock] = granted
            self.acquisitions += 1
        if ahead >= 0 and ok:
            self.waits.append(Wait(lock, shared, ahead, granted - started))

    def released(self, lock: str, at: float) -> None:
        start = self.granted.pop(lock, None)
        if start is not None:
            hold = at - start
            if hold > self.max_hold[lock]:
                self.max_hold[lock] = hold


def _pick(rng: random.Random, names: list[str], most: int) -> list[str] | None:
    if rng.random() < 0.03:
        return None  # ALL_SET
    return rng.sample(names, rng.randint(1, min(most, len(names))))


def _plan(rng: random.Random, glm: locking.LockManager) -> list[tuple[int, list[str] | None, bool]]:
    """Levels (in order) with names and mode for one operation, BGL first."""
    plan: list[tuple[int, list[str] | None, bool]] = [
        (locking.LEVEL_CLUSTER, [locking.BGL], rng.random() > 0.005)]
    for level, most, p in ((locking.LEVEL_INSTANCE, 5, 0.8), (locking.LEVEL_NODEGROUP, 2, 0.3),
                           (locking.LEVEL_NODE, 4, 0.6), (locking.LEVEL_NODE_RES, 3, 0.3),
                           (locking.LEVEL_NETWORK, 1, 0.2)):
        if rng.random() < p:
            names = sorted(glm.names(level))
            if names:
                plan.append((level, _pick(rng, names, most), rng.random() < 0.6))
    return plan


def _attempt(glm: locking.LockManager, plan: list[tuple[int, list[str] | None, bool]],
             timeout: float | None) -> bool | None:
    """One attempt over every level with one budget; None on timeout (caller releases)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for level, names, shared in plan:
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        if glm.acquire(level, names, shared=shared, timeout=remaining) is None:
            return None
    return True


def _worker(index: int, glm: locking.LockManager, stop: threading.Event, recorder: Recorder,
            counts: list[int], errors: list[BaseException]) -> None:
    rng = random.Random(index)
    locking.set_wait_recorder(recorder)
    retrying = index % 2 == 1
    try:
        while not stop.is_set():
            plan = _plan(rng, glm)
            try:
                if retrying:
                    strategy = locking.LockAttemptTimeoutStrategy(
                        timeouts=[0.005, 0.01, 0.02, 0.05])
                    locking.acquire_with_retry(lambda t, plan=plan: _attempt(glm, plan, t),
                                               glm.release_all, strategy)
                else:
                    _attempt(glm, plan, None)
            except locking.LockError:
                # an instance removed by the churn thread meanwhile
                glm.release_all()
                continue
            time.sleep(rng.random() * MAX_HOLD_SLEEP)
            glm.release_all()
            counts[index] += 1
            time.sleep(rng.random() * 0.001)
    except BaseException as exc:
        errors.append(exc)
    finally:
        locking.set_wait_recorder(None)


def _churn(glm: locking.LockManager, stop: threading.Event, recorder: Recorder, counts: list[int],
           errors: list[BaseException]) -> None:
    """Add an instance (acquired), hold it briefly, remove it, as instance create/remove do."""
    locking.set_wait_recorder(recorder)
    i = 0
    try:
        while not stop.is_set():
            name = f"tmp{i:05d}"
            glm.acquire(locking.LEVEL_CLUSTER, [locking.BGL], shared=True)
            glm.add(locking.LEVEL_INSTANCE, name, acquired=True)
            time.sleep(0.001)
            assert glm.remove(locking.LEVEL_INSTANCE, [name]) == [name]
            glm.release_all()
            counts[-1] += 1
            i += 1
            time.sleep(0.005)
    except BaseException as exc:
        errors.append(exc)
    finally:
        locking.set_wait_recorder(None)


@dataclass
class StressResult:
    glm: locking.LockManager
    elapsed: float
    counts: list[int]
    errors: list[BaseException]
    hung: list[str]
    waits: list[Wait]
    max_hold: dict[str, float]
    acquisitions: int


def run_stress(duration: float, threads: int = THREADS) -> StressResult:
    """`threads` - 1 workers and the churn thread for `duration` seconds."""
    glm = locking.LockManager(nodes=NODES, nodegroups=NODEGROUPS, instances=INSTANCES,
                              networks=NETWORKS)
    stop = threading.Event()
    errors: list[BaseException] = []
    counts = [0] * threads
    recorders = [Recorder() for _ in range(threads)]
    running = [threading.Thread(target=_worker, name=f"stress-{i}", daemon=True,
                                args=(i, glm, stop, recorders[i], counts, errors))
               for i in range(threads - 1)]
    running.append(threading.Thread(target=_churn, name="stress-churn", daemon=True,
                                    args=(glm, stop, recorders[-1], counts, errors)))
    started = time.monotonic()
    for t in running:
        t.start()
    time.sleep(duration)
    stop.set()
    deadline = time.monotonic() + WATCHDOG_GRACE
    for t in running:
        t.join(max(deadline - time.monotonic(), 0.0))
    hung = [t.name for t in running if t.is_alive()]
    if hung:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    max_hold: dict[str, float] = defaultdict(float)
    waits: list[Wait] = []
    for rec in recorders:
        waits.extend(rec.waits)
        for lock, hold in rec.max_hold.items():
            max_hold[lock] = max(max_hold[lock], hold)
    return StressResult(glm, time.monotonic() - started, counts, errors, hung, waits,
                        dict(max_hold), sum(r.acquisitions for r in recorders))


def bound(wait: Wait, max_hold: dict[str, float]) -> float:
    hold = max_hold.get(wait.lock, 0.0)
    return (wait.ahead + 1) * (hold + SLACK_PER_STEP) + SLACK_SECONDS


def problems(result: StressResult) -> list[str]:
    """What broke the promises (empty: none)."""
    if result.hung:
        return [f"deadlock: {len(result.hung)} threads still running: {result.hung[:8]}"]
    found = [f"error: {err!r}" for err in result.errors[:3]]
    idle = [c for c in result.counts if c == 0]
    if idle:
        found.append(f"{len(idle)} threads made no progress: {result.counts}")
    for level in locking.LEVELS:
        lockset = result.glm._sets[level]
        if lockset._owners:
            found.append(f"level {level}: owners left {lockset._owners}")
        for lock in [*lockset._locks.values(), lockset._set_lock]:
            if lock.owner_count() or lock.pending_count():
                found.append(f"lock {lock} not idle")
    if len(result.waits) <= 100:
        found.append(f"the stress produced (almost) no contention: {len(result.waits)} waits")
    late = [(w, round(bound(w, result.max_hold), 3)) for w in result.waits
            if w.waited > bound(w, result.max_hold)]
    found.extend(f"wait over its bound: {w} (bound {b} s)" for w, b in late[:5])
    return found


def report(result: StressResult) -> str:
    """One line: what ran, and the worst wait against its bound."""
    worst = max((w.waited / bound(w, result.max_hold) for w in result.waits), default=0.0)
    # the same ratio without any slack
    worst_raw = max((w.waited / max((w.ahead + 1) * result.max_hold.get(w.lock, 0.0), 1e-9)
                     for w in result.waits), default=0.0)
    return (f"lock stress: {len(result.counts)} threads, {result.elapsed:.1f}s, "
            f"{sum(result.counts)} operations, {result.acquisitions} lock acquisitions, "
            f"{len(result.waits)} queued waits, max ahead "
            f"{max((w.ahead for w in result.waits), default=0)}, longest wait "
            f"{max((w.waited for w in result.waits), default=0.0):.3f}s, worst wait/bound "
            f"{worst:.2f} (without slack {worst_raw:.2f})")
