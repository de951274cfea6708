"""A bounded FIFO of notifications, spooled to disk so that nothing is lost across a restart.

masakari's monitor keeps an undelivered notification only in the memory of the thread that
retries it and drops it after about two minutes (../shared/reference/masakari.md §2.4). instmon
instead puts every notification here first; the sender delivers the spool in order and removes
an entry only once the receiver has answered for it.

Layout: one file per notification in `directory`, named by a sequence number zero-padded to 20
digits (`00000000000000000042.json`, so names sort in order), holding the notification's wire
body (`Notification.to_json()`). Each file is written atomically (temporary file, fsync,
rename, directory fsync), so a crash leaves a whole entry or none. On construction the existing
entries are loaded in order and the sequence continues after the highest; a file that does not
parse is moved aside into `directory/bad/` with a warning (kept for a human, never deleted,
never fatal). Temporary files left by a dead writer are removed (their `put` never returned).

Cap: at most `max_entries` entries and `max_bytes` bytes of bodies. A `put` that would exceed
either first drops the oldest entry that is not a failure (`failure_kind(note) is None`,
counting the new note as the newest entry), else the oldest entry; each drop is counted in
`dropped` and logged. A failure is what recovery acts on, so it outlives informational events.

Memory: the index holds, per entry, its size and whether it is a failure; bodies stay on disk
and `peek` reads them again. Only an entry whose file could not be written (disk full, I/O
error) keeps its notification in memory, so it is still delivered by this process.

Thread safety: every method takes one lock (the monitor thread puts, the sender thread peeks and
removes).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path

from herder.core.notification import Notification, NotificationError, failure_kind, parse
from herder.core.store import atomic_write, fsync_directory, pid_alive

log = logging.getLogger("herder.instmon.spool")

SPOOL_MODE = 0o600
SEQ_DIGITS = 20
_NAME_RE = re.compile(r"^(\d{20})\.json$")  # SEQ_DIGITS
_TMP_RE = re.compile(r"^\.\d{20}\.json\.tmp-(\d+)-[0-9a-f]+$")


class _Entry:
    """What the index keeps per entry (slots: thousands of entries stay a few hundred KB)."""

    __slots__ = ("failure", "note", "size")

    def __init__(self, size: int, failure: bool, note: Notification | None = None) -> None:
        self.size = size
        self.failure = failure
        self.note = note  # only when the file could not be written


class Spool:
    """A bounded, persistent FIFO of notifications (see the module docstring)."""

    def __init__(self, directory: Path, max_entries: int = 10000,
                 max_bytes: int = 64 * 2**20) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("a spool needs room for at least one entry")
        self.directory = Path(directory)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.dropped = 0
        self._lock = threading.Lock()
        # Ordered by sequence; OrderedDict because popping its head is O(1) however many
        # entries were removed before (a plain dict scans its deleted slots).
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._plain: OrderedDict[int, None] = OrderedDict()  # the non-failures, oldest first
        self._bytes = 0
        self._next = 0
        self.directory.mkdir(parents=True, exist_ok=True)
        self._load()

    # -- public API ---------------------------------------------------------------------------

    def put(self, note: Notification) -> int:
        """Append `note`; returns its sequence number (-1 when the note alone is larger than
        `max_bytes`, which cannot be spooled and is dropped with a warning)."""
        body = note.to_json()
        failure = failure_kind(note) is not None
        with self._lock:
            seq = self._next
            self._next += 1
            if len(body) > self.max_bytes:
                self.dropped += 1
                log.warning("spool %s: dropped a notification of %d bytes, larger than the "
                            "whole spool (%d bytes): %s", self.directory, len(body),
                            self.max_bytes, _describe(note))
                return -1
            if not self._make_room(len(body), note, failure):
                return -1
            entry = _Entry(len(body), failure)
            try:
                atomic_write(self._path(seq), body, SPOOL_MODE)
            except OSError as err:
                # Keep it in memory: delivered by this process, lost only if it also dies.
                log.error("spool %s: cannot write entry %d (%s); keeping it in memory only",
                          self.directory, seq, err)
                entry.note = note
            self._add(seq, entry)
            return seq

    def peek(self, limit: int = 1) -> list[tuple[int, Notification]]:
        """Up to `limit` entries, oldest first, without removing them."""
        out: list[tuple[int, Notification]] = []
        with self._lock:
            while True:
                out.clear()
                unreadable: list[int] = []
                for seq, entry in self._entries.items():
                    if len(out) >= limit:
                        break
                    note = entry.note or self._read(seq)
                    if note is None:  # became unreadable since it was loaded: now in bad/
                        unreadable.append(seq)
                    else:
                        out.append((seq, note))
                if not unreadable:
                    return out
                for seq in unreadable:  # not while iterating; then look again
                    self._discard(seq)

    def remove(self, seq: int) -> None:
        """Forget entry `seq` (no-op when it is gone already, e.g. dropped by the cap)."""
        with self._lock:
            if seq in self._entries:
                self._discard(seq)
                self._unlink(seq)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def size_bytes(self) -> int:
        """Total size of the spooled bodies."""
        with self._lock:
            return self._bytes

    # -- internals (called with the lock held) ------------------------------------------------

    def _path(self, seq: int) -> Path:
        return self.directory / f"{seq:0{SEQ_DIGITS}d}.json"

    def _add(self, seq: int, entry: _Entry) -> None:
        self._entries[seq] = entry
        if not entry.failure:
            self._plain[seq] = None
        self._bytes += entry.size

    def _discard(self, seq: int) -> _Entry:
        entry = self._entries.pop(seq)
        self._plain.pop(seq, None)
        self._bytes -= entry.size
        return entry

    def _unlink(self, seq: int) -> None:
        try:
            self._path(seq).unlink()
        except FileNotFoundError:
            pass
        except OSError as err:
            # It would come back at the next start: a duplicate, which the receiver answers
            # with 409; better than stopping the sender.
            log.warning("spool %s: cannot remove entry %d: %s", self.directory, seq, err)

    def _over_cap(self, size: int = 0, count: int = 0) -> bool:
        return (len(self._entries) + count > self.max_entries
                or self._bytes + size > self.max_bytes)

    def _make_room(self, size: int, note: Notification, failure: bool) -> bool:
        """Drop entries until one of `size` bytes fits; False when the new note itself is the
        one to drop (a non-failure arriving in a spool full of failures)."""
        while self._entries and self._over_cap(size, 1):
            if not self._plain and not failure:
                self.dropped += 1
                log.warning("spool %s is full (%d entries, %d bytes) of failures: dropped the "
                            "new notification %s", self.directory, len(self._entries),
                            self._bytes, _describe(note))
                return False
            self._drop_oldest()
        return True

    def _drop_oldest(self) -> None:
        """Drop the oldest non-failure, else the oldest entry."""
        victim = next(iter(self._plain)) if self._plain else next(iter(self._entries))
        entry = self._entries[victim]
        dropped = entry.note or self._read(victim)
        self._discard(victim)
        self._unlink(victim)
        self.dropped += 1
        log.warning("spool %s is full (max %d entries, %d bytes): dropped the oldest %s "
                    "entry %d: %s", self.directory, self.max_entries, self.max_bytes,
                    "failure" if entry.failure else "non-failure", victim,
                    _describe(dropped) if dropped else "(unreadable)")

    def _read(self, seq: int) -> Notification | None:
        """The notification in entry `seq`'s file; a file that does not parse is moved to
        bad/ and None is returned."""
        path = self._path(seq)
        try:
            return parse(path.read_bytes())
        except (OSError, NotificationError) as err:
            self._quarantine(path, str(err))
            return None

    def _quarantine(self, path: Path, reason: str) -> None:
        bad = self.directory / "bad"
        try:
            bad.mkdir(exist_ok=True)
            target = bad / path.name
            n = 1
            while target.exists():  # never overwrite an earlier bad entry
                target = bad / f"{path.name}.{n}"
                n += 1
            os.replace(path, target)
            fsync_directory(self.directory)
        except OSError as err:
            log.warning("spool %s: entry %s is unreadable (%s) and cannot be moved to %s: %s",
                        self.directory, path.name, reason, bad, err)
            return
        log.warning("spool %s: entry %s is unreadable (%s); moved to %s", self.directory,
                    path.name, reason, target)

    def _load(self) -> None:
        highest = -1
        found: list[tuple[int, Path]] = []
        for path in self.directory.iterdir():
            match = _NAME_RE.match(path.name)
            if match and path.is_file():
                found.append((int(match.group(1)), path))
                continue
            tmp = _TMP_RE.match(path.name)
            if tmp and not pid_alive(int(tmp.group(1))):
                # A write interrupted before its rename: that put never returned.
                with contextlib.suppress(OSError):
                    path.unlink()
        for seq, path in sorted(found):
            highest = max(highest, seq)  # bad entries count too: their names stay unique
            try:
                body = path.read_bytes()
                note = parse(body)
            except (OSError, NotificationError) as err:
                self._quarantine(path, str(err))
                continue
            self._add(seq, _Entry(len(body), failure_kind(note) is not None))
        self._next = highest + 1
        while self._over_cap():  # the cap was lowered since these were spooled
            self._drop_oldest()
        if self._entries:
            log.info("spool %s: %d undelivered notifications from before the restart",
                     self.directory, len(self._entries))


def _describe(note: Notification) -> str:
    return (f"{note.type} {note.hostname} {note.generated_time} {note.event}/{note.detail} "
            f"{note.instance_uuid}")
