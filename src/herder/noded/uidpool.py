"""The user-id pool at run time (design-2.1 "User-id pool").

A node hands out uids from the cluster's pool (see `herder.core.uidpool` for the range syntax
and `expand`) so that every instance process runs under a uid no other process uses.

Protocol, shared by every requester on the node (threads and processes alike):

* one lock file per uid in `lock_dir`, named by the uid in decimal;
* a requester opens the file (creating it), takes an exclusive non-blocking lock on it, checks
  that no process runs under that uid, and keeps the lock until the process it starts runs
  (`LockedUid.unlock`); the file then stays, meaning "probably in use";
* `release_uid` removes the file once the process has gone.

The lock is `fcntl.flock`, which belongs to the open file description: two opens of the same
file conflict even inside one process, so threads of one daemon exclude each other as well as
separate processes. (`fcntl.lockf`/`F_SETLK` record locks are per process and would let two
threads of the daemon take the same uid.)

A file can be unlinked by `release_uid` while another requester is waiting to open it; after
taking the lock a requester therefore checks that the file it locked is still the one at the
path, and retries otherwise. `release_uid` itself unlinks only while holding the lock, so a
holder of a lock on a linked file is always the only one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import psutil

from herder.core import randomness
from herder.core.errors import HerderError

DEFAULT_LOCK_DIR = Path("/run/herder/uid-pool")

_T = TypeVar("_T")

# How often a requester retries one uid whose lock file was replaced under it.
_REOPEN_ATTEMPTS = 3


class UidPoolError(HerderError):
    """The uid pool's lock directory or a lock file cannot be used."""


class UidPoolExhaustedError(UidPoolError):
    """Every uid of the pool is locked by another requester or has a running process."""


class LockedUid:
    """A uid reserved by `request_unused_uid`: its lock file is open and exclusively locked."""

    def __init__(self, uid: int, fd: int, path: Path) -> None:
        self.uid = uid
        self.path = path
        self._fd: int | None = fd

    def __repr__(self) -> str:
        state = "locked" if self.locked else "unlocked"
        return f"<LockedUid {self.uid} {state}>"

    def __int__(self) -> int:
        return self.uid

    def as_str(self) -> str:
        return str(self.uid)

    @property
    def locked(self) -> bool:
        return self._fd is not None

    def unlock(self) -> None:
        """Release the lock (call once the process runs); the lock file stays. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor drops the flock


def uid_in_use(uid: int) -> bool:
    """True when a process runs with `uid` as its real, effective or saved user id."""
    # Not process_iter(attrs=...): its `info` lives on Process objects psutil caches and shares
    # between threads, so a concurrent caller asking for other attributes could overwrite it.
    for proc in psutil.process_iter():
        try:
            uids = proc.uids()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # gone meanwhile (or unreadable)
        if uid in (uids.real, uids.effective, uids.saved):
            return True
    return False


def _ensure_dir(lock_dir: Path) -> None:
    try:
        lock_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as err:
        raise UidPoolError(f"cannot create the uid pool lock directory {lock_dir}: {err}") from err
    if not lock_dir.is_dir():
        raise UidPoolError(f"the uid pool lock path {lock_dir} is not a directory")


def _listed_uids(lock_dir: Path) -> set[int]:
    try:
        names = os.listdir(lock_dir)
    except OSError as err:
        raise UidPoolError(f"cannot list the uid pool lock directory {lock_dir}: {err}") from err
    return {int(n) for n in names if n.isdigit()}


def _try_lock(path: Path) -> int | None:
    """Open and exclusively lock `path`; None when someone else holds it."""
    for _ in range(_REOPEN_ATTEMPTS):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise UidPoolError(f"cannot open the uid lock file {path}: {err}") from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                return None
            raise UidPoolError(f"cannot lock the uid lock file {path}: {err}") from err
        # The file may have been removed (release_uid) between open and flock.
        try:
            on_disk = os.stat(path)
        except FileNotFoundError:
            os.close(fd)
            continue
        mine = os.fstat(fd)
        if (on_disk.st_dev, on_disk.st_ino) != (mine.st_dev, mine.st_ino):
            os.close(fd)
            continue
        return fd
    return None


def request_unused_uid(all_uids: Iterable[int], lock_dir: Path = DEFAULT_LOCK_DIR) -> LockedUid:
    """Reserve a uid of `all_uids` that no process uses; it is returned still locked.

    Uids without a lock file are tried first, then those whose file stayed behind (probably in
    use), each group in random order. Raises `UidPoolExhaustedError` when none is free.
    """
    pool = set(all_uids)
    if not pool:
        raise UidPoolExhaustedError("the uid pool is empty")
    _ensure_dir(lock_dir)
    taken = pool & _listed_uids(lock_dir)
    unused = list(pool - taken)
    taken_list = list(taken)
    randomness.RNG.shuffle(unused)
    randomness.RNG.shuffle(taken_list)
    for uid in unused + taken_list:
        path = lock_dir / str(uid)
        fd = _try_lock(path)
        if fd is None:
            continue
        try:
            used = uid_in_use(uid)
        except BaseException:
            os.close(fd)
            raise
        if used:
            os.close(fd)
            continue
        return LockedUid(uid, fd, path)
    raise UidPoolExhaustedError(
        f"no unused user-id in the uid pool ({len(pool)} uids): every uid is being allocated"
        " or has a running process"
    )


def release_uid(uid: int | LockedUid, lock_dir: Path = DEFAULT_LOCK_DIR) -> None:
    """Give a uid back to the pool: remove its lock file (a `LockedUid` is unlocked too).

    Does not check for processes still running under the uid. A missing file is fine. Refuses
    (UidPoolError) when another requester holds the lock right now.
    """
    if isinstance(uid, LockedUid):
        path = uid.path
        fd = uid._fd
        try:
            if fd is not None:
                # We hold the lock: unlink first, so nobody can lock this inode afterwards.
                _unlink(path)
            else:
                _release_unlocked(path)
        finally:
            uid.unlock()
        return
    _release_unlocked(lock_dir / str(uid))


def _release_unlocked(path: Path) -> None:
    if not path.exists():
        return
    fd = _try_lock(path)
    if fd is None:
        if not path.exists():
            return
        raise UidPoolError(
            f"cannot release user-id {path.name}: another requester holds its lock right now"
        )
    try:
        _unlink(path)
    finally:
        os.close(fd)


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as err:
        raise UidPoolError(f"failed to remove the user-id lock file {path}: {err}") from err


def exec_with_unused_uid(
    fn: Callable[..., _T], all_uids: Iterable[int], lock_dir: Path, *args: object,
    **kwargs: object,
) -> _T:
    """Reserve a uid, call `fn(uid, *args, **kwargs)` and unlock it afterwards.

    On success the lock file stays (the uid is in use until `release_uid`); when `fn` raises,
    the uid is released (file removed) and the exception propagates.
    """
    locked = request_unused_uid(all_uids, lock_dir)
    try:
        result = fn(locked.uid, *args, **kwargs)
    except BaseException:
        with contextlib.suppress(UidPoolError):
            release_uid(locked, lock_dir)
        raise
    locked.unlock()
    return result
