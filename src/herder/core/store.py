"""The config store: one JSON document, changed atomically and one writer at a time.

`ConfigStore` is the interface every component uses; `FileStore` keeps the document in a local
file. A replicated backend (issue: high availability) implements the same interface.

Durability: a change is written to a temporary file in the same directory, fsynced, renamed over
the document, and the directory is fsynced, so a crash at any point leaves either the old or the
new document. Writers serialize on an exclusive `flock` of a lock file beside the document; the
kernel drops it when a writer dies. A document that does not load is never overwritten.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import msgspec

from herder.core import configdiff, model, upgrade
from herder.core.errors import ConfigError, HerderError, StoreError
from herder.core.locations import DEFAULT_CONFIG_DIR as DEFAULT_CONFIG_DIR
from herder.core.locations import DEFAULT_CONFIG_PATH as DEFAULT_CONFIG_PATH
from herder.core.locations import ETCD_SCHEMES as ETCD_SCHEMES
from herder.core.locations import default_config_path as default_config_path
from herder.core.locations import is_etcd_location as is_etcd_location

CONFIG_MODE = 0o600  # the document holds DRBD secrets

_TMP_RE = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)-[0-9a-f]+$")


class ConfigStore(Protocol):
    """Where the cluster config lives (`FileStore`, `store_etcd.EtcdStore`). Every change goes
    through `update`."""

    @property
    def path(self) -> Path:
        """The document's path, or for a remote backend the local anchor beside which the
        secrets and certificates live."""
        ...

    @property
    def directory(self) -> Path:
        """The local directory of the secrets and certificates."""
        ...

    def exists(self) -> bool:
        ...

    def load(self) -> model.ConfigData:
        """The current document, validated (and upgraded in memory if older)."""
        ...

    def snapshot(self) -> model.ConfigData:
        """The current document, shared by this process's readers: read it, never change it."""
        ...

    def recent_snapshot(self) -> model.ConfigData:
        """`snapshot()` as this process knows it (its own writes included), not checked
        against the store when that costs a round trip: for what orders only this process's
        own work, e.g. declaring a job's locks (another process's writes take none of them)."""
        ...

    def create(self, config: model.ConfigData) -> None:
        """Write the first document; refuses if one exists."""
        ...

    def update(self) -> contextlib.AbstractContextManager[model.ConfigData]:
        """Lock, load, let the caller change the document, validate, bump serial, write."""
        ...

    def replace(self, config: model.ConfigData) -> None:
        """Overwrite the document with `config` (validated); for imports and restores."""
        ...

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """Hold the writers' lock (blocks until other writers are done)."""
        ...


class FileStore:
    """The config document in one local file, with a journal of changes beside it.

    `config.json` is a whole document (a snapshot: what Ganeti import/export, the candidates
    and every older reader know); `config.json.journal` holds the changes made since, one
    record per write (`configdiff`: the objects it touched), each a line with its CRC, fsynced
    before the write returns. The journal's first line names the snapshot it continues (its
    SHA-256), so a journal left beside another snapshot (a candidate's pushed document) is
    ignored. Every `COMPACT_RECORDS` records or once the journal outgrows a quarter of the
    snapshot, the next write writes a new snapshot and starts a new journal.

    Crash safety: a record is appended and fsynced; a torn last record (kill -9 while
    appending) fails its CRC and is not part of the state, and the next writer cuts it off;
    a new snapshot is renamed into place before its new journal, and the old journal does not
    continue the new snapshot. So a kill -9 at any point leaves the old or the new state.

    Readers in one process share a decoded copy per path (`snapshot()`), refreshed from the
    journal's new records only; `update()` works on a copy of its tables, writes what changed
    and gives the shared objects it changed their written values back.
    """

    COMPACT_RECORDS = 2000

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.journal_path = self.path.with_name(self.path.name + JOURNAL_SUFFIX)

    def __repr__(self) -> str:
        return f"FileStore({str(self.path)!r})"

    @property
    def directory(self) -> Path:
        return self.path.parent

    def exists(self) -> bool:
        return self.path.exists()

    # --- reading --------------------------------------------------------------------------------

    def read_bytes(self) -> bytes:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            raise StoreError(
                f"no cluster config at {self.path} (create one with 'herder cluster init NAME', "
                "or point --config / HERDER_CONFIG at it)"
            ) from None
        except OSError as err:
            raise StoreError(f"cannot read {self.path}: {err.strerror}") from None

    def _decode_snapshot(self, raw: bytes) -> model.ConfigData:
        if not raw.strip():
            raise ConfigError(f"{self.path}: the config file is empty (truncated?)")
        try:
            return upgrade.load_document(raw)
        except ConfigError as err:
            raise ConfigError(f"{self.path}: {err}") from None

    def load(self) -> model.ConfigData:
        """The current document, read from disk: the caller's own copy (change it freely)."""
        return self._read_state().config

    def snapshot(self) -> model.ConfigData:
        """The current document, shared by this process's readers: never change it (its
        objects may change under a writer of this process while it is read: take `load()` or
        `update()` for a copy of your own)."""
        with _STATE_LOCK:  # not while a writer of this process appends (`update`)
            with _CACHE_LOCK:
                state = _CACHE.get(self.path)
            state = self._refresh(state)
            with _CACHE_LOCK:
                _CACHE[self.path] = state
        return state.config

    def recent_snapshot(self) -> model.ConfigData:
        return self.snapshot()  # a stat and the journal's new records: no round trip

    def serial_no(self) -> int | None:
        """The document's serial (the snapshot's, moved on by its journal's records) without
        decoding the document; None when there is none or it does not parse."""
        try:
            raw = self.path.read_bytes()
            serial = _SERIAL.decode(raw).serial_no
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return None
        journal = _read_journal(self.journal_path)
        if journal is None or journal.header != hashlib.sha256(raw).hexdigest():
            return serial
        for _, record in journal.records:
            try:
                base, change = configdiff.decode_change(record)
            except ConfigError:
                break
            if base != serial:
                break
            serial = int(change.top.get("serial_no", serial))
        return serial

    def stamp(self) -> tuple[object, ...]:
        """Changes whenever the document does (the snapshot's and the journal's identity)."""
        return (_file_stamp(self.path), _file_stamp(self.journal_path))

    def _read_state(self) -> _State:
        """Snapshot plus journal, from disk."""
        for _ in range(5):  # a writer may compact between our two reads: read again
            snap_stamp = _file_stamp(self.path)
            raw = self.read_bytes()
            config = self._decode_snapshot(raw)
            journal = _read_journal(self.journal_path)
            if _file_stamp(self.path) != snap_stamp:
                continue
            state = _State(snap_stamp, config, configdiff.Encoded.of(config),
                           hashlib.sha256(raw).hexdigest(), len(raw))
            if journal is not None and journal.header == state.digest:
                state.journal_end = journal.header_end
                self._replay(state, journal)
            return state
        raise StoreError(f"{self.path}: the config changed while being read, five times")

    def _replay(self, state: _State, journal: _Journal) -> None:
        for line_end, record in journal.records:
            base, change = configdiff.decode_change(record)
            if base != state.config.serial_no:
                break  # not a continuation of this state: the rest is not ours
            try:
                state.config = configdiff.apply(state.config, change)
            except ConfigError as err:
                raise ConfigError(f"{self.journal_path}: {err}") from None
            state.encoded = configdiff.Encoded.of(state.config)
            state.records += 1
            state.journal_end = line_end
        state.journal_stamp = journal.stamp

    def _refresh(self, state: _State | None) -> _State:
        """`state` brought up to date with the files: the journal's new records only when the
        snapshot and the journal file are the same, else everything again."""
        if state is not None and _file_stamp(self.path) == state.snapshot_stamp:
            journal_stamp = _file_stamp(self.journal_path)
            if journal_stamp == state.journal_stamp:
                return state
            if (journal_stamp is not None and state.journal_stamp is not None
                    and journal_stamp[0] == state.journal_stamp[0]  # same journal file
                    and state.journal_end > 0):
                journal = _read_journal(self.journal_path, start=state.journal_end)
                if journal is not None:
                    fresh = state.successor()
                    self._replay(fresh, journal)
                    return fresh
        return self._read_state()

    # --- writing --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the writers' lock (blocks until other writers are done)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, CONFIG_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the flock

    def create(self, config: model.ConfigData) -> None:
        with self.locked():
            if self.path.exists():
                raise StoreError(f"{self.path} already exists; refusing to overwrite it")
            config = model.revalidate(config)
            self._write(config)

    @contextlib.contextmanager
    def update(self) -> Iterator[model.ConfigData]:
        """Change the document: nothing is written if the block raises or validation fails.
        Only what changed is checked and written (a journal record)."""
        with self.locked():
            with _CACHE_LOCK:
                state = _CACHE.get(self.path)
            state = self._refresh(state)
            current = state.config
            config, started = configdiff.begin_change(current, state.encoded)
            yield config
            change = configdiff.end_change(config, current, state.encoded, started)
            # readers of this process wait for the new state rather than replay its record
            # from the journal themselves: a replay of a record being appended found the
            # older config's index handed on to the new one and built the whole index again
            # (seconds at 50,000 instances), and a reader holds no file lock
            with _STATE_LOCK:
                new_state = self._append(state, config, change)
                with _CACHE_LOCK:
                    _CACHE[self.path] = new_state

    def replace(self, config: model.ConfigData) -> None:
        """Overwrite the document with `config` (validated); for imports and restores."""
        with self.locked():
            self._write(model.revalidate(config))

    def _append(self, state: _State, config: model.ConfigData,
                change: configdiff.ChangeSet) -> _State:
        """Write `change` (the step from `state` to `config`); the state after it."""
        self._remove_stale_temporaries()  # every writer cleans up after a killed one
        if (state.records >= self.COMPACT_RECORDS or state.journal_end == 0
                or state.journal_end > max(state.snapshot_size // 4, 1 << 20)):
            return self._write(config)
        record = configdiff.encode_change(change, state.config.serial_no)
        line = b"%08x %s\n" % (zlib.crc32(record), record)
        fd = os.open(self.journal_path, os.O_WRONLY)
        try:
            # what follows the last record of this state goes: a torn record of a killed
            # writer (or records continuing no state of ours)
            os.ftruncate(fd, state.journal_end)
            os.lseek(fd, state.journal_end, os.SEEK_SET)
            _write_all(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        fresh = state.successor()
        fresh.config = config
        index = state.config.__dict__.get("_index")
        if index is not None:  # follow the change (the older snapshot builds its own anew)
            state.config.__dict__.pop("_index", None)
            config.keep_index(configdiff.follow(index[1], config, change))
        fresh.encoded = configdiff.Encoded.of(config)
        fresh.records += 1
        fresh.journal_end = state.journal_end + len(line)
        fresh.journal_stamp = _file_stamp(self.journal_path)
        return fresh

    def _write(self, config: model.ConfigData) -> _State:
        """A new snapshot and an empty journal continuing it (compaction, create, replace)."""
        self._remove_stale_temporaries()
        raw = model.encode(config)
        atomic_write(self.path, raw, CONFIG_MODE)
        digest = hashlib.sha256(raw).hexdigest()
        header = _ENCODER.encode({"snapshot": digest}) + b"\n"
        atomic_write(self.journal_path, header, CONFIG_MODE)
        state = _State(_file_stamp(self.path), config, configdiff.Encoded.of(config), digest,
                       len(raw))
        state.journal_end = len(header)
        state.journal_stamp = _file_stamp(self.journal_path)
        with _CACHE_LOCK:
            _CACHE[self.path] = state
        return state

    # --- copies on the master candidates (masterd.redist, noded's write_config) -------------

    def replica(self, with_snapshot: bool) -> Replica | None:
        """What a candidate's copy needs, read consistently (under the writers' lock): the
        journal's bytes, the SHA-256 of the snapshot it continues, the serial they reach,
        and the snapshot's bytes if asked. None without a journal continuing the snapshot."""
        with self.locked():
            try:
                journal_raw = self.journal_path.read_bytes()
            except FileNotFoundError:
                return None
            except OSError as err:
                raise StoreError(f"cannot read {self.journal_path}: {err.strerror}") from None
            with _CACHE_LOCK:
                state = _CACHE.get(self.path)
            known = state is not None and state.snapshot_stamp == _file_stamp(self.path)
            snapshot = self.read_bytes() if with_snapshot or not known else None
            digest = state.digest if state is not None and known else \
                hashlib.sha256(snapshot or b"").hexdigest()
            journal = _parse_journal(journal_raw, 0, None)
            if journal.header != digest:
                return None
            serial: int | None = None
            for _, record in journal.records:
                serial = int(configdiff.decode_change(record)[1].top.get("serial_no", 0))
            if serial is None:
                raw = snapshot if snapshot is not None else self.read_bytes()
                serial = _SERIAL.decode(raw).serial_no
            return Replica(digest, journal_raw, serial, snapshot)

    def write_journal(self, digest: str, offset: int, data: bytes) -> None:
        """A candidate's copy of the master's journal (the caller holds `locked()`): the whole
        file (`offset` 0; it must continue the snapshot beside it), or records appended where
        this copy ends (it must continue the same snapshot and end at `offset`)."""
        if offset == 0:
            if hashlib.sha256(self.read_bytes()).hexdigest() != digest:
                raise StoreError(f"{self.journal_path}: the journal sent does not continue "
                                 "this node's snapshot")
            atomic_write(self.journal_path, data, CONFIG_MODE)
            return
        journal = _read_journal(self.journal_path)
        size = _file_stamp(self.journal_path)
        if journal is None or journal.header != digest or size is None or size[2] != offset:
            raise StoreError(f"{self.journal_path}: this copy does not end where the "
                             f"records sent continue it (offset {offset})")
        fd = os.open(self.journal_path, os.O_WRONLY)
        try:
            os.lseek(fd, offset, os.SEEK_SET)
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _remove_stale_temporaries(self) -> None:
        """Remove temporary files left by writers that died mid-write."""
        ours = (self.path.name, self.journal_path.name)
        for entry in self.directory.iterdir():
            match = _TMP_RE.match(entry.name)
            if not match or match["name"] not in ours:
                continue
            if not pid_alive(int(match["pid"])):
                with contextlib.suppress(OSError):
                    entry.unlink()


JOURNAL_SUFFIX = ".journal"
_ENCODER = msgspec.json.Encoder(order="sorted")


class _Serial(msgspec.Struct):
    serial_no: int


_SERIAL = msgspec.json.Decoder(_Serial)
_CACHE: dict[Path, _State] = {}
_CACHE_LOCK = threading.Lock()
# held by a shared snapshot's refresh and by a writer from its journal record to its new state
_STATE_LOCK = threading.RLock()


def _file_stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class _State:
    """One process's view of a store: the shared config and what its files held."""

    def __init__(self, snapshot_stamp: tuple[int, int, int] | None, config: model.ConfigData,
                 encoded: configdiff.Encoded, digest: str, snapshot_size: int) -> None:
        self.snapshot_stamp = snapshot_stamp
        self.config = config
        self.encoded = encoded
        self.digest = digest
        self.snapshot_size = snapshot_size
        self.journal_stamp: tuple[int, int, int] | None = None
        # after the last record applied, where the next goes (0: no journal continues it)
        self.journal_end = 0
        self.records = 0

    def successor(self) -> _State:
        fresh = _State(self.snapshot_stamp, self.config, self.encoded, self.digest,
                       self.snapshot_size)
        fresh.journal_stamp, fresh.journal_end = self.journal_stamp, self.journal_end
        fresh.records = self.records
        return fresh


@dataclass
class Replica:
    """A candidate's copy of the store (`FileStore.replica`)."""

    digest: str  # SHA-256 of the snapshot the journal continues
    journal: bytes
    serial: int
    snapshot: bytes | None


class _Journal:
    def __init__(self, header: str | None, header_end: int, records: list[tuple[int, bytes]],
                 stamp: tuple[int, int, int] | None) -> None:
        self.header = header  # the SHA-256 of the snapshot it continues
        self.header_end = header_end
        self.records = records  # (offset after the line, record)
        self.stamp = stamp


def _read_journal(path: Path, start: int = 0) -> _Journal | None:
    """The journal's whole, intact lines from `start` (0: with its header); None if absent.
    Reading stops at the first torn or damaged line."""
    try:
        with path.open("rb") as file:
            stat = os.fstat(file.fileno())
            data = file.read() if start == 0 else (file.seek(start), file.read())[1]
    except FileNotFoundError:
        return None
    except OSError as err:
        raise StoreError(f"cannot read {path}: {err.strerror}") from None
    return _parse_journal(data, start, (stat.st_ino, stat.st_mtime_ns, stat.st_size))


def _parse_journal(data: bytes, start: int,
                   stamp: tuple[int, int, int] | None) -> _Journal:
    header: str | None = None
    header_end = 0
    records: list[tuple[int, bytes]] = []
    offset = 0
    if start == 0:
        end = data.find(b"\n")
        if end < 0:
            return _Journal(None, 0, [], stamp)
        try:
            header = str(msgspec.json.decode(data[:end])["snapshot"])
        except (msgspec.DecodeError, KeyError, TypeError):
            header = None
        offset = header_end = end + 1
    while True:
        end = data.find(b"\n", offset)
        if end < 0:
            break
        line = data[offset:end]
        crc, _, record = line.partition(b" ")
        try:
            if int(crc, 16) != zlib.crc32(record):
                break
        except ValueError:
            break
        offset = end + 1
        records.append((start + offset, record))
    return _Journal(header, header_end, records, stamp)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def atomic_write(path: Path, data: bytes, mode: int = CONFIG_MODE) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new content: write a
    temporary file in the same directory, fsync it, rename it over `path`, fsync the directory.
    The temporary's name carries the writer's pid, so leftovers of dead writers are found."""
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_directory(path.parent)


def atomic_write_if_changed(path: Path, data: bytes, mode: int = CONFIG_MODE) -> bool:
    """`atomic_write` (its directory made first) unless `path` already holds `data`; whether
    it wrote (a caller restarts what reads the file only then)."""
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return False
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data, mode)
    return True


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except OSError as err:
        return err.errno == errno.EPERM
    return True


class ConfigCache:
    """The cluster config, reloaded only when the file changes; None when there is none."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._stamp: tuple[object, ...] | None = None
        self._config: model.ConfigData | None = None
        self.error: str | None = None

    def __call__(self) -> model.ConfigData | None:
        """The shared snapshot (`FileStore.snapshot`): read it, never change it."""
        if self.path is None:
            return None
        store = FileStore(self.path)
        stamp = store.stamp()
        if stamp[0] is None:
            self._config, self._stamp = None, None
            return None
        if stamp != self._stamp:
            try:
                self._config = store.snapshot()
                self.error = None
            except HerderError as err:  # keep the last good config; say why
                self.error = str(err)
            self._stamp = stamp
        return self._config


def open_store(path: str | os.PathLike[str] | None = None) -> ConfigStore:
    """The store at `path` (default: HERDER_CONFIG, else /var/lib/herder/config.json); a
    location `etcds://HOST:PORT[,HOST:PORT...]/CLUSTER` (or `etcd://` without TLS, for tests)
    opens the etcd backend instead."""
    location = path if path is not None else os.environ.get("HERDER_CONFIG")
    if is_etcd_location(location):
        from herder.core.store_etcd import EtcdStore  # only when used (keeps httpx out)

        return EtcdStore.from_location(location)
    return FileStore(path if path is not None else default_config_path())
