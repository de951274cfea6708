"""The machine-wide record of namespaced simulations (`/run/herder-sim/<index>.json`).

Each simulation has an index (1-254): its network namespace is `hsim-<index>`, its subnet
198.18.<index>.0/24, so simulations side by side never collide. The record is written before
every resource it names is created (processes with their start time, so a reused PID is never
killed; the identities of the image files behind loop devices), so a simulator that crashed
leaves enough behind for `herder.sim.host.teardown` to remove everything. All writers hold one
lock file (`flock`) while they read, change and replace a record.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec

from herder.core.errors import HerderError
from herder.core.store import atomic_write

REGISTRY = Path("/run/herder-sim")
INDEXES = range(1, 255)
_thread_lock = threading.Lock()  # flock does not exclude threads sharing a file description


class ProcessRecord(msgspec.Struct, frozen=True):
    pid: int
    start_time: int  # field 22 of /proc/<pid>/stat: tells a reused PID apart


class HostRecord(msgspec.Struct):
    name: str
    address: str
    slot: int  # the host's veth on the simulator's bridge is v<slot>
    directory: str
    volume_group: str = "xenvg"
    # "namespace" (hostinit, then `herder supervise` as PID 1) or "debian" (systemd-nspawn
    # booting systemd from the cached Debian root: herder.sim.debhost; `unshare` is then
    # systemd-nspawn, `init` the container's systemd)
    kind: str = "namespace"
    init: ProcessRecord | None = None  # PID 1 of the host's PID namespace (as the machine sees it)
    # The simulator's wish: True from power_on until power_off. A host whose PID 1 ended while
    # this is True rebooted itself (reboot(2) in its PID namespace): the keeper boots it again.
    powered: bool = False
    unshare: ProcessRecord | None = None  # its parent, `unshare`
    loops: list[str] = []  # loop devices attached for it
    images: list[tuple[int, int, int]] = []  # (major, minor, inode) of its image files


class SimRecord(msgspec.Struct):
    index: int
    directory: str
    hosts: dict[str, HostRecord] = {}
    forwarder: ProcessRecord | None = None
    keeper: ProcessRecord | None = None  # boots hosts that rebooted themselves (sim.keeper)
    published: dict[str, str] = {}  # "127.0.0.11:5080" -> "198.18.1.2:5080"

    @property
    def netns(self) -> str:
        return f"hsim-{self.index}"


def record_path(index: int) -> Path:
    return REGISTRY / f"{index}.json"


def runtime_dir(index: int) -> Path:
    """Short paths for the simulation's sockets (a unix socket path has at most 107 bytes)."""
    return REGISTRY / str(index)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    REGISTRY.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _thread_lock, open(REGISTRY / ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _read(index: int) -> SimRecord | None:
    try:
        return msgspec.json.decode(record_path(index).read_bytes(), type=SimRecord)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError) as err:
        raise HerderError(f"unreadable simulation record {record_path(index)}: {err}") from None


def _write(record: SimRecord) -> None:
    atomic_write(record_path(record.index), msgspec.json.encode(record), 0o600)


def allocate(directory: Path) -> SimRecord:
    """A fresh record with the lowest free index (no record, no namespace of that name)."""
    with _locked():
        for index in INDEXES:
            if record_path(index).exists() or Path(f"/run/netns/hsim-{index}").exists():
                continue
            record = SimRecord(index=index, directory=str(directory))
            _write(record)
            return record
    raise HerderError(f"no free simulation index: {len(INDEXES)} simulations exist "
                      f"(see {REGISTRY})")


def load(index: int) -> SimRecord | None:
    with _locked():
        return _read(index)


def records() -> list[SimRecord]:
    with _locked():
        found = []
        for path in sorted(REGISTRY.glob("*.json")):
            if path.stem.isdigit():
                record = _read(int(path.stem))
                if record is not None:
                    found.append(record)
        return found


def find(directory: Path) -> SimRecord | None:
    """The record of the simulation in `directory`."""
    wanted = os.path.realpath(directory)
    return next((r for r in records() if os.path.realpath(r.directory) == wanted), None)


@contextlib.contextmanager
def update(index: int) -> Iterator[SimRecord]:
    """Read, change (in the with-block) and replace a record, under the lock."""
    with _locked():
        record = _read(index)
        if record is None:
            raise HerderError(f"no simulation {index} (no {record_path(index)})")
        yield record
        _write(record)


def remove(index: int) -> None:
    with _locked():
        with contextlib.suppress(FileNotFoundError):
            record_path(index).unlink()
        with contextlib.suppress(OSError):
            for leftover in runtime_dir(index).iterdir():
                leftover.unlink()
            runtime_dir(index).rmdir()


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (None: no such process, or a zombie)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def process_record(pid: int) -> ProcessRecord:
    started = start_time(pid)
    if started is None:
        raise HerderError(f"process {pid} is gone")
    return ProcessRecord(pid, started)


def alive(process: ProcessRecord | None) -> bool:
    return process is not None and start_time(process.pid) == process.start_time


def children(process: ProcessRecord | None) -> list[ProcessRecord]:
    """The children of a live process."""
    if not alive(process):
        return []
    assert process is not None
    try:
        pids = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    except OSError:
        return []
    found = []
    for pid in pids:
        with contextlib.suppress(HerderError):
            found.append(process_record(int(pid)))
    return found


def _signal(process: ProcessRecord | None, signum: int) -> None:
    if alive(process):
        assert process is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signum)


def _wait_gone(process: ProcessRecord | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(process):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def end_process(process: ProcessRecord | None, grace: float) -> None:
    """SIGTERM, and SIGKILL after `grace` seconds (at once when `grace` is 0); a process that
    is gone (or whose PID now belongs to another) is left alone."""
    if grace > 0:
        _signal(process, signal.SIGTERM)
        if _wait_gone(process, grace):
            return
    _signal(process, signal.SIGKILL)
    if not _wait_gone(process, 10.0):
        assert process is not None
        raise HerderError(f"process {process.pid} does not end")
