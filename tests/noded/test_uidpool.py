"""The run-time uid pool: locking, process checks, release, exhaustion, concurrency."""

from __future__ import annotations

import multiprocessing
import os
import random
import subprocess
import threading
import time
from pathlib import Path

import pytest

from herder.core import uidpool as core_uidpool
from herder.noded import uidpool


@pytest.fixture
def lock_dir(tmp_path: Path) -> Path:
    return tmp_path / "uid-pool"


def _free_uids(count: int) -> list[int]:
    """A run of uids far above anything a system allocates, away from other test runs."""
    base = random.randrange(2_000_000_000, 3_000_000_000)
    return list(range(base, base + count))


def test_request_returns_locked_uid_and_creates_file(lock_dir: Path) -> None:
    uids = _free_uids(3)
    locked = uidpool.request_unused_uid(uids, lock_dir)
    assert locked.uid in uids
    assert locked.locked
    assert (lock_dir / str(locked.uid)).is_file()
    assert locked.as_str() == str(locked.uid)
    locked.unlock()
    assert not locked.locked
    locked.unlock()  # idempotent
    assert (lock_dir / str(locked.uid)).is_file()  # the file stays after unlock


def test_works_with_core_pool_expansion(lock_dir: Path) -> None:
    base = _free_uids(1)[0]
    pool = core_uidpool.parse_pool(f"{base}-{base + 4}")
    locked = uidpool.request_unused_uid(core_uidpool.expand(pool), lock_dir)
    assert base <= locked.uid <= base + 4
    locked.unlock()


def test_same_process_second_request_conflicts(lock_dir: Path) -> None:
    uid = _free_uids(1)
    first = uidpool.request_unused_uid(uid, lock_dir)
    with pytest.raises(uidpool.UidPoolExhaustedError, match="no unused user-id"):
        uidpool.request_unused_uid(uid, lock_dir)
    first.unlock()
    again = uidpool.request_unused_uid(uid, lock_dir)  # no process runs under it: grantable again
    assert again.uid == uid[0]
    again.unlock()


def test_empty_pool_is_a_clear_error(lock_dir: Path) -> None:
    with pytest.raises(uidpool.UidPoolExhaustedError, match="empty"):
        uidpool.request_unused_uid([], lock_dir)


def test_exhausted_pool(lock_dir: Path) -> None:
    uids = _free_uids(4)
    held = [uidpool.request_unused_uid(uids, lock_dir) for _ in uids]
    assert sorted(h.uid for h in held) == uids
    with pytest.raises(uidpool.UidPoolExhaustedError, match=r"4 uids"):
        uidpool.request_unused_uid(uids, lock_dir)
    for h in held:
        h.unlock()


def test_unused_uids_are_preferred_to_leftover_files(lock_dir: Path) -> None:
    uids = _free_uids(2)
    lock_dir.mkdir()
    (lock_dir / str(uids[0])).touch()  # left behind by a running instance
    for _ in range(10):
        locked = uidpool.request_unused_uid(uids, lock_dir)
        assert locked.uid == uids[1]
        uidpool.release_uid(locked, lock_dir)


def test_own_uid_is_in_use(lock_dir: Path) -> None:
    assert uidpool.uid_in_use(os.getuid())
    with pytest.raises(uidpool.UidPoolExhaustedError):
        uidpool.request_unused_uid([os.getuid()], lock_dir)


def test_lock_dir_that_is_a_file(tmp_path: Path) -> None:
    bad = tmp_path / "file"
    bad.write_text("")
    with pytest.raises(uidpool.UidPoolError, match="not a directory|cannot create"):
        uidpool.request_unused_uid(_free_uids(1), bad)


def test_non_numeric_files_are_ignored(lock_dir: Path) -> None:
    lock_dir.mkdir()
    (lock_dir / "README").write_text("x")
    locked = uidpool.request_unused_uid(_free_uids(1), lock_dir)
    locked.unlock()


@pytest.fixture
def running_as():
    """Start `sleep` under a given uid (needs root); kills it afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process under another uid")
    procs: list[subprocess.Popen[bytes]] = []

    def start(uid: int) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(["sleep", "60"], user=uid, group=uid)
        procs.append(proc)
        deadline = time.monotonic() + 5
        while not uidpool.uid_in_use(uid):
            assert time.monotonic() < deadline, "child did not show up under its uid"
            time.sleep(0.01)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_uid_with_running_process_is_skipped(lock_dir: Path, running_as) -> None:
    busy, free = _free_uids(2)
    running_as(busy)
    assert uidpool.uid_in_use(busy)
    with pytest.raises(uidpool.UidPoolExhaustedError):
        uidpool.request_unused_uid([busy], lock_dir)
    for _ in range(10):
        locked = uidpool.request_unused_uid([busy, free], lock_dir)
        assert locked.uid == free
        locked.unlock()


def test_released_uid_is_reusable(lock_dir: Path, running_as) -> None:
    (uid,) = _free_uids(1)
    locked = uidpool.request_unused_uid([uid], lock_dir)
    proc = running_as(uid)  # the "instance" starts under the uid ...
    locked.unlock()  # ... so the lock is dropped, the file stays
    assert (lock_dir / str(uid)).exists()
    with pytest.raises(uidpool.UidPoolExhaustedError):
        uidpool.request_unused_uid([uid], lock_dir)
    proc.kill()
    proc.wait()
    uidpool.release_uid(uid, lock_dir)
    assert not (lock_dir / str(uid)).exists()
    again = uidpool.request_unused_uid([uid], lock_dir)
    assert again.uid == uid
    uidpool.release_uid(again, lock_dir)
    assert not again.locked
    assert not (lock_dir / str(uid)).exists()


def test_release_missing_file_is_fine(lock_dir: Path) -> None:
    lock_dir.mkdir()
    uidpool.release_uid(12345, lock_dir)


def test_release_refused_while_someone_holds_the_lock(lock_dir: Path) -> None:
    (uid,) = _free_uids(1)
    locked = uidpool.request_unused_uid([uid], lock_dir)
    with pytest.raises(uidpool.UidPoolError, match="holds its lock"):
        uidpool.release_uid(uid, lock_dir)
    assert (lock_dir / str(uid)).exists()
    locked.unlock()
    uidpool.release_uid(uid, lock_dir)
    assert not (lock_dir / str(uid)).exists()


def test_exec_with_unused_uid_success_keeps_file(lock_dir: Path) -> None:
    uids = _free_uids(2)
    seen: list[tuple[int, str, int]] = []

    def start(uid: int, label: str, *, extra: int) -> str:
        # While fn runs the uid is still locked: nobody else can take it.
        with pytest.raises(uidpool.UidPoolExhaustedError):
            uidpool.request_unused_uid([uid], lock_dir)
        seen.append((uid, label, extra))
        return f"started {label}"

    assert uidpool.exec_with_unused_uid(start, uids, lock_dir, "vm1", extra=7) == "started vm1"
    (uid, label, extra) = seen[0]
    assert uid in uids and label == "vm1" and extra == 7
    assert (lock_dir / str(uid)).exists()
    uidpool.request_unused_uid([uid], lock_dir).unlock()  # unlocked afterwards


def test_exec_with_unused_uid_failure_releases(lock_dir: Path) -> None:
    (uid,) = _free_uids(1)

    def boom(uid: int) -> None:
        raise RuntimeError("kvm failed")

    with pytest.raises(RuntimeError, match="kvm failed"):
        uidpool.exec_with_unused_uid(boom, [uid], lock_dir)
    assert not (lock_dir / str(uid)).exists()
    uidpool.request_unused_uid([uid], lock_dir).unlock()


# --- concurrency ------------------------------------------------------------------------------


@pytest.mark.parametrize(("pool_size", "workers"), [(16, 16), (6, 16)])
def test_concurrent_threads_never_share_a_uid(lock_dir: Path, pool_size: int,
                                              workers: int) -> None:
    uids = _free_uids(pool_size)
    barrier = threading.Barrier(workers)
    done = threading.Barrier(workers)
    granted: list[int] = []
    failures: list[BaseException] = []
    mutex = threading.Lock()

    def worker() -> None:
        barrier.wait()
        held: uidpool.LockedUid | None = None
        try:
            held = uidpool.request_unused_uid(uids, lock_dir)
            with mutex:
                granted.append(held.uid)
        except uidpool.UidPoolExhaustedError as err:
            with mutex:
                failures.append(err)
        done.wait()  # keep the lock until everybody has tried (the start-up window)
        if held is not None:
            held.unlock()

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(granted) == len(set(granted)), "a uid was handed out twice"
    assert len(granted) == min(pool_size, workers)
    assert len(failures) == workers - len(granted)


def _process_worker(uids: list[int], lock_dir: str, start: multiprocessing.synchronize.Barrier,
                    done: multiprocessing.synchronize.Barrier, out: multiprocessing.Queue) -> None:
    start.wait()
    try:
        held = uidpool.request_unused_uid(uids, Path(lock_dir))
    except uidpool.UidPoolExhaustedError:
        out.put(None)
        done.wait()
        return
    out.put(held.uid)
    done.wait()
    held.unlock()


@pytest.mark.parametrize(("pool_size", "workers"), [(8, 8), (3, 8)])
def test_concurrent_processes_never_share_a_uid(lock_dir: Path, pool_size: int,
                                                workers: int) -> None:
    ctx = multiprocessing.get_context("fork")
    uids = _free_uids(pool_size)
    start, done = ctx.Barrier(workers), ctx.Barrier(workers)
    out: multiprocessing.Queue = ctx.Queue()
    procs = [ctx.Process(target=_process_worker, args=(uids, str(lock_dir), start, done, out))
             for _ in range(workers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    granted = [r for r in results if r is not None]
    assert len(granted) == len(set(granted)), "a uid was handed out twice"
    assert len(granted) == min(pool_size, workers)


def _churn_worker(uids: list[int], lock_dir: str, rounds: int, out: multiprocessing.Queue) -> None:
    """Request, hold briefly, release; report overlaps seen through a marker file."""
    overlaps = 0
    for _ in range(rounds):
        try:
            held = uidpool.request_unused_uid(uids, Path(lock_dir))
        except uidpool.UidPoolExhaustedError:
            continue
        marker = Path(lock_dir) / f"owner-{held.uid}"
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            overlaps += 1
            uidpool.release_uid(held, Path(lock_dir))
            continue
        os.close(fd)
        time.sleep(0.001)
        marker.unlink()
        uidpool.release_uid(held, Path(lock_dir))  # unlink under the lock, then unlock
    out.put(overlaps)


def test_request_release_churn_across_processes_and_threads(lock_dir: Path) -> None:
    """Requesters and releasers racing on a small pool never hold one uid twice at once."""
    ctx = multiprocessing.get_context("fork")
    uids = _free_uids(3)
    lock_dir.mkdir()
    out: multiprocessing.Queue = ctx.Queue()
    procs = [ctx.Process(target=_churn_worker, args=(uids, str(lock_dir), 40, out))
             for _ in range(4)]
    for p in procs:
        p.start()
    thread_out: multiprocessing.Queue = ctx.Queue()
    threads = [threading.Thread(target=_churn_worker, args=(uids, str(lock_dir), 40, thread_out))
               for _ in range(3)]
    for t in threads:
        t.start()
    overlaps = [out.get(timeout=60) for _ in procs]
    for t in threads:
        t.join(timeout=60)
    overlaps += [thread_out.get(timeout=5) for _ in threads]
    for p in procs:
        p.join(timeout=30)
    assert overlaps == [0] * 7
