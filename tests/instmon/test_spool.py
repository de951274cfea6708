"""The instmon spool: order, persistence across a restart, quarantine of bad entries, the cap
(non-failures dropped first) and concurrent use."""

from __future__ import annotations

import datetime
import logging
import threading
import tracemalloc
import uuid
from pathlib import Path

import pytest

from herder.core.notification import Notification, failure_kind, vm_notification
from herder.instmon import spool as spool_mod
from herder.instmon.spool import Spool

T0 = datetime.datetime(2026, 11, 22, 0, 0, 0)


def note(i: int, failure: bool = False) -> Notification:
    """Notification number i: a crash (failure) or a resume (not a failure)."""
    detail = ("LIFECYCLE", "STOPPED_FAILED") if failure else ("LIFECYCLE", "RESUMED_UNPAUSED")
    n = vm_notification("node1", str(uuid.UUID(int=i)), *detail,
                        when=T0 + datetime.timedelta(microseconds=i))
    assert (failure_kind(n) is not None) is failure
    return n


def test_put_peek_remove_in_order(tmp_path: Path) -> None:
    sp = Spool(tmp_path)
    notes = [note(i) for i in range(5)]
    seqs = [sp.put(n) for n in notes]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    assert len(sp) == 5
    assert sp.size_bytes == sum(len(n.to_json()) for n in notes)
    assert sp.peek() == [(seqs[0], notes[0])]
    assert sp.peek(3) == list(zip(seqs[:3], notes[:3], strict=True))
    assert sp.peek(100) == list(zip(seqs, notes, strict=True))
    sp.remove(seqs[0])
    sp.remove(seqs[2])
    sp.remove(seqs[2])  # already gone: a no-op
    assert [n for _, n in sp.peek(10)] == [notes[1], notes[3], notes[4]]
    assert len(sp) == 3
    assert sp.size_bytes == sum(len(notes[i].to_json()) for i in (1, 3, 4))
    # One file per entry, names that sort in sequence order.
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"{s:020d}.json" for s in (seqs[1], seqs[3], seqs[4])]
    for s in (seqs[1], seqs[3], seqs[4]):
        sp.remove(s)
    assert len(sp) == 0 and sp.size_bytes == 0 and sp.peek() == []
    assert list(tmp_path.iterdir()) == []


def test_restart_keeps_entries_and_continues_the_sequence(tmp_path: Path) -> None:
    sp = Spool(tmp_path)
    seqs = [sp.put(note(i)) for i in range(4)]
    sp.remove(seqs[0])
    again = Spool(tmp_path)
    assert len(again) == 3
    assert again.size_bytes == sp.size_bytes
    assert again.peek(10) == sp.peek(10)
    new = again.put(note(9))
    assert new > seqs[-1]
    assert [s for s, _ in again.peek(10)] == [*seqs[1:], new]


def test_leftover_temporary_of_a_dead_writer_is_removed(tmp_path: Path) -> None:
    sp = Spool(tmp_path)
    sp.put(note(0))
    # A pid that cannot be running (above the kernel's pid_max).
    tmp = tmp_path / f".{7:020d}.json.tmp-999999999-abcd1234"
    tmp.write_bytes(b'{"notif')
    assert len(Spool(tmp_path)) == 1
    assert not tmp.exists()


def test_corrupt_entry_is_moved_to_bad(tmp_path: Path,
                                       caplog: pytest.LogCaptureFixture) -> None:
    sp = Spool(tmp_path)
    seqs = [sp.put(note(i)) for i in range(3)]
    broken = tmp_path / f"{seqs[1]:020d}.json"
    broken.write_bytes(b'{"notification": {"type": "VM", "hostn')  # torn by hand
    with caplog.at_level(logging.WARNING, logger="herder.instmon.spool"):
        again = Spool(tmp_path)
    assert [s for s, _ in again.peek(10)] == [seqs[0], seqs[2]]
    assert (tmp_path / "bad" / broken.name).read_bytes().startswith(b'{"notification"')
    assert not broken.exists()
    assert any(broken.name in r.getMessage() and "bad" in r.getMessage()
               for r in caplog.records)
    # The sequence continues after the bad entry too, so its name is never reused.
    assert again.put(note(5)) > seqs[2]


def test_entry_corrupted_after_loading_is_skipped_by_peek(tmp_path: Path) -> None:
    sp = Spool(tmp_path)
    seqs = [sp.put(note(i)) for i in range(3)]
    (tmp_path / f"{seqs[0]:020d}.json").write_bytes(b"garbage")
    assert [s for s, _ in sp.peek(2)] == [seqs[1], seqs[2]]
    assert len(sp) == 2
    assert (tmp_path / "bad" / f"{seqs[0]:020d}.json").read_bytes() == b"garbage"
    # A second bad file of the same name (the sequence restarts in an emptied spool) does
    # not overwrite the first one.
    other = tmp_path / "other"
    for content in (b"one", b"two"):
        sp = Spool(other)
        seq = sp.put(note(0))
        (other / f"{seq:020d}.json").write_bytes(content)
        assert sp.peek() == []
    assert sorted(p.read_bytes() for p in (other / "bad").iterdir()) == [b"one", b"two"]


def test_cap_on_entries_drops_non_failures_first(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    sp = Spool(tmp_path, max_entries=5)
    kinds = [True, False, True, False, False]  # failures at 0 and 2
    seqs = [sp.put(note(i, f)) for i, f in enumerate(kinds)]
    with caplog.at_level(logging.WARNING, logger="herder.instmon.spool"):
        s5 = sp.put(note(5, True))
        s6 = sp.put(note(6, False))
    assert len(sp) == 5 and sp.dropped == 2
    # The two oldest non-failures (1 and 3) went; both failures stayed.
    assert [s for s, _ in sp.peek(10)] == [seqs[0], seqs[2], seqs[4], s5, s6]
    dropped_logs = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped_logs) == 2
    assert str(uuid.UUID(int=1)) in dropped_logs[0] and str(uuid.UUID(int=3)) in dropped_logs[1]
    assert len(list(tmp_path.glob("*.json"))) == 5


def test_cap_full_of_failures_drops_the_oldest_failure(tmp_path: Path) -> None:
    sp = Spool(tmp_path, max_entries=3)
    seqs = [sp.put(note(i, True)) for i in range(3)]
    # A new non-failure is the entry to drop: failures are worth more.
    assert sp.put(note(3, False)) == -1
    assert [s for s, _ in sp.peek(10)] == seqs
    # A new failure replaces the oldest failure.
    s4 = sp.put(note(4, True))
    assert [s for s, _ in sp.peek(10)] == [seqs[1], seqs[2], s4]
    assert sp.dropped == 2 and len(sp) == 3


def test_cap_on_bytes(tmp_path: Path) -> None:
    size = len(note(0).to_json())
    sp = Spool(tmp_path, max_bytes=3 * size + size // 2)
    for i in range(20):
        sp.put(note(i, failure=i % 4 == 0))
        assert sp.size_bytes <= sp.max_bytes
    assert len(sp) == 3
    assert sp.dropped == 17
    # The newest failures survive the stream of non-failures.
    kept = [n for _, n in sp.peek(10)]
    assert sum(failure_kind(n) is not None for n in kept) >= 2
    # A note larger than the whole spool cannot be spooled.
    tiny = Spool(tmp_path / "tiny", max_bytes=10)
    assert tiny.put(note(0)) == -1 and tiny.dropped == 1 and len(tiny) == 0


def test_lowered_cap_applies_on_restart(tmp_path: Path) -> None:
    sp = Spool(tmp_path)
    for i in range(6):
        sp.put(note(i, failure=i == 0))
    small = Spool(tmp_path, max_entries=2)
    assert len(small) == 2 and small.dropped == 4
    assert [failure_kind(n) is not None for _, n in small.peek(5)] == [True, False]
    assert len(list(tmp_path.glob("*.json"))) == 2


def test_unwritable_entry_is_kept_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    sp = Spool(tmp_path)
    first = sp.put(note(0))

    def disk_full(path: Path, data: bytes, mode: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(spool_mod, "atomic_write", disk_full)
    with caplog.at_level(logging.ERROR, logger="herder.instmon.spool"):
        second = sp.put(note(1))
    assert "No space left" in caplog.text
    assert [(s, n) for s, n in sp.peek(5)] == [(first, note(0)), (second, note(1))]
    sp.remove(second)
    assert len(sp) == 1


def test_two_threads(tmp_path: Path) -> None:
    sp = Spool(tmp_path, max_entries=10_000)
    total = 300
    got: list[Notification] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def producer() -> None:
        try:
            for i in range(total):
                sp.put(note(i))
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)
        finally:
            done.set()

    def consumer() -> None:
        try:
            while len(got) < total:
                batch = sp.peek(7)
                if not batch and done.is_set() and len(sp) == 0:
                    break
                for seq, n in batch:
                    got.append(n)
                    sp.remove(seq)
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert got == [note(i) for i in range(total)]
    assert len(sp) == 0 and sp.size_bytes == 0
    assert list(tmp_path.glob("*.json")) == []


def test_index_stays_small(tmp_path: Path) -> None:
    sp = Spool(tmp_path)
    for i in range(1000):
        sp.put(note(i))
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        loaded = Spool(tmp_path)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert len(loaded) == 1000
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert grown < 1 * 2**20, f"the index of 1000 entries takes {grown} bytes"
