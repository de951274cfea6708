"""Benchmark of herder.masterd.locking: acquire/release throughput.

    .venv/bin/python bench/locks.py [--duration 1.0] [--jobs 200]
    .venv/bin/python bench/locks.py --stress 30

Prints operations per second (one operation = acquire + release) for a SharedLock uncontended
(exclusive and shared), under contention from 2, 8 and 32 threads (exclusive, shared, mixed),
a LockSet acquiring 10 of 100 names, and a LockManager two-level acquisition (BGL shared, then
3 of 100 instances). `bench_locks()` returns the figures for other benches to print.

`--stress SECONDS` runs instead the long form of the lock stress test (tests/lockstress.py: 64
threads over a LockManager; the test suite runs it for a few seconds): it prints what ran and
the worst wait against its bound, and exits 1 when a promise broke (deadlock, a wait beyond its
bound, locks left held).
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from herder.masterd import locking

Op = Callable[[random.Random], None]


def _run(make_op: Callable[[], Op], threads: int, duration: float) -> float:
    """Run `threads` threads, each calling its op in a loop for `duration`; total ops/s."""
    counts = [0] * threads
    stop = threading.Event()
    start_gate = threading.Barrier(threads + 1)

    def loop(index: int) -> None:
        op = make_op()
        rng = random.Random(index)
        start_gate.wait()
        n = 0
        while not stop.is_set():
            for _ in range(50):
                op(rng)
            n += 50
        counts[index] = n

    workers = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    start_gate.wait()
    started = time.perf_counter()
    time.sleep(duration)
    stop.set()
    for w in workers:
        w.join()
    return sum(counts) / (time.perf_counter() - started)


def _shared_lock_op(lock: locking.SharedLock, shared: bool | None) -> Callable[[], Op]:
    def make() -> Op:
        def op(rng: random.Random) -> None:
            mode = rng.random() < 0.5 if shared is None else shared
            lock.acquire(shared=mode)
            lock.release()

        return op

    return make


def bench_locks(duration: float = 1.0) -> list[tuple[str, float]]:
    """(label, operations per second) for each scenario."""
    results: list[tuple[str, float]] = []
    for shared in (False, True):
        mode = "shared" if shared else "exclusive"
        lock = locking.SharedLock("bench")
        results.append((f"SharedLock {mode}, uncontended",
                        _run(_shared_lock_op(lock, shared), 1, duration)))
    for threads in (2, 8, 32):
        modes: tuple[tuple[bool | None, str], ...] = (
            (False, "exclusive"), (True, "shared"), (None, "mixed"))
        for share, mode in modes:
            lock = locking.SharedLock("bench")
            results.append((f"SharedLock {mode}, {threads} threads",
                            _run(_shared_lock_op(lock, share), threads, duration)))

    names = [f"inst{i:03d}" for i in range(100)]
    for threads in (1, 8):
        lockset = locking.LockSet(names, "instance")

        def make_set_op(lockset: locking.LockSet = lockset) -> Op:
            def op(rng: random.Random) -> None:
                lockset.acquire(rng.sample(names, 10), shared=rng.random() < 0.5)
                lockset.release()

            return op

        results.append((f"LockSet 10 of 100 names, {threads} thread(s)",
                        _run(make_set_op, threads, duration)))

    for threads in (1, 8):
        glm = locking.LockManager(nodes=[f"node{i:02d}" for i in range(20)], instances=names)

        def make_glm_op(glm: locking.LockManager = glm) -> Op:
            def op(rng: random.Random) -> None:
                glm.acquire(locking.LEVEL_CLUSTER, [locking.BGL], shared=True)
                glm.acquire(locking.LEVEL_INSTANCE, rng.sample(names, 3))
                glm.release_all()

            return op

        results.append((f"LockManager BGL + 3 instances, {threads} thread(s)",
                        _run(make_glm_op, threads, duration)))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=1.0, help="seconds per scenario")
    parser.add_argument("--jobs", type=int, default=200, help="jobs per queue scenario")
    parser.add_argument("--stress", type=float, default=0.0, metavar="SECONDS",
                        help="run the lock stress for SECONDS (e.g. 30) instead")
    args = parser.parse_args()
    if args.stress > 0:
        sys.exit(stress(args.stress))
    print(f"{'scenario':<48} {'ops/s':>12}")
    for label, rate in bench_locks(args.duration):
        print(f"{label:<48} {rate:>12,.0f}")
    for label, rate in bench_jobs(args.jobs):
        print(f"{label:<48} {rate:>12,.1f}")


def stress(duration: float) -> int:
    """The long lock stress run; 0 when every promise held."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.lockstress
    from tests.lockstress import problems, report, run_stress

    result = run_stress(duration)
    print(report(result))
    found = problems(result)
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


def bench_jobs(count: int) -> list[tuple[str, float]]:
    """Jobs per second through the real queue (persisted jobs, locks, config writes with
    fsync) for config-only opcodes: one submitter, then several in parallel."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.conftest

    from herder.core.store import FileStore
    from herder.masterd.jobs.queue import JobQueue
    from herder.masterd.lu.base import MasterEnv
    from herder.masterd.processor import Processor
    from tests.conftest import build_config

    results: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        store = FileStore(Path(tmp) / "config.json")
        config = build_config(nodes=8)
        store.create(config)
        locks = locking.LockManager(nodes=config.nodes, nodegroups=config.nodegroups,
                                    instances=config.instances)
        queue = JobQueue(Path(tmp) / "queue", Processor(MasterEnv(store=store, locks=locks)),
                         workers=8)
        queue.recover()
        queue.start()
        nodes = sorted(n.name for n in config.nodes.values())
        try:
            for label, make in (
                ("jobs/s: tag a node (one submitter)",
                 lambda i: {"OP_ID": "OP_TAGS_SET", "kind": "node", "name": nodes[i % 8],
                            "tags": [f"t{i}"]}),
                ("jobs/s: drain/undrain nodes (one submitter)",
                 lambda i: {"OP_ID": "OP_NODE_SET_PARAMS", "node_name": nodes[1 + i % 7],
                            "drained": i % 2 == 0}),
                ("jobs/s: dry-run cluster modify (one submitter)",
                 lambda i: {"OP_ID": "OP_CLUSTER_SET_PARAMS", "dry_run": True,
                            "beparams": {"vcpus": 1 + i % 4}}),
            ):
                started = time.perf_counter()
                ids = [queue.submit([make(i)]) for i in range(count)]
                for job_id in ids:
                    queue.wait(job_id, 120)
                results.append((label, count / (time.perf_counter() - started)))
            submitted: list[int] = []
            guard = threading.Lock()

            def submitter(offset: int) -> None:
                for i in range(count // 4):
                    job_id = queue.submit([{"OP_ID": "OP_TAGS_SET", "kind": "node",
                                            "name": nodes[offset], "tags": [f"p{offset}-{i}"]}])
                    with guard:
                        submitted.append(job_id)

            started = time.perf_counter()
            threads = [threading.Thread(target=submitter, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for job_id in submitted:
                queue.wait(job_id, 120)
            results.append(("jobs/s: tag 4 nodes (4 parallel submitters)",
                            len(submitted) / (time.perf_counter() - started)))
        finally:
            queue.stop()
    return results


if __name__ == "__main__":
    main()
