"""The block-device interface, the command runner and the node facts every device type uses.

`BlockDev` is Ganeti's `BlockDev`, smaller. A device object is built for one disk on this node
and *attaches* when built (finds the existing device, as Ganeti's constructors do, so the
commands run per operation equal Ganeti's); `create` makes the device and returns it attached.

Everything a device type does to the node goes through a `Host`: commands through its `Runner`
(argv, env, timeout -> exit code, stdout, stderr), file reads, device-node checks and waits.
Tests give a `Host` whose runner records the commands, or a real one with a stand-in
`/dev/disk` root.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, ClassVar, Protocol

from herder.core.diskobjects import BlockDevStatus, LocalDiskStatus
from herder.core.errors import HerderError

if TYPE_CHECKING:
    from herder.core.diskobjects import Disk

DEFAULT_TIMEOUT = 120.0  # seconds, for one storage command
DD_BLOCK_SIZE = 1048576  # Ganeti's DD_BLOCK_SIZE
NO_DEVICE_MAPPER = "LV activation is not available on this node (no device-mapper)"


class BlockDevError(HerderError):
    """A block-device operation failed; the message is one line for the operator."""


# --- running commands ------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandResult:
    """What one command did. `exit_code` is None when it was killed for its timeout."""

    argv: tuple[str, ...]
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False

    @property
    def failed(self) -> bool:
        return self.exit_code != 0

    @property
    def output(self) -> str:
        """stdout and stderr together, as Ganeti's RunResult.output."""
        return (self.stdout + self.stderr).strip()

    @property
    def fail_reason(self) -> str:
        if self.timed_out:
            return "timed out"
        return f"exited with status {self.exit_code}"

    def last_lines(self, count: int = 1) -> str:
        """The last non-empty output lines, joined with ' / ': one line for an error."""
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        return " / ".join(lines[-count:]) if lines else "no output"


class Runner(Protocol):
    """Runs one command; never raises for a failing command (the result says so)."""

    def __call__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 timeout: float | None = None, cwd: str | None = None) -> CommandResult: ...


@dataclass
class SubprocessRunner:
    """The real runner: LC_ALL=C, `extra_env` and the call's env on top of this process's
    environment, no stdin, a timeout after which the command's whole process group is killed."""

    extra_env: Mapping[str, str] = field(default_factory=dict)
    default_timeout: float = DEFAULT_TIMEOUT

    def __call__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 timeout: float | None = None, cwd: str | None = None) -> CommandResult:
        argv = tuple(str(arg) for arg in argv)
        full_env = {**os.environ, "LC_ALL": "C", **self.extra_env, **(env or {})}
        try:
            proc = subprocess.Popen(argv, env=full_env, cwd=cwd, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, errors="replace", start_new_session=True)
        except OSError as err:
            return CommandResult(argv, 127, "", f"{argv[0]}: {err.strerror}")
        try:
            stdout, stderr = proc.communicate(timeout=timeout or self.default_timeout)
        except subprocess.TimeoutExpired:
            # The command's children (a provider script's own commands) go with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            return CommandResult(argv, None, stdout, stderr, timed_out=True)
        return CommandResult(argv, proc.returncode, stdout, stderr)

    def stream(self, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """`argv` started in this runner's environment, its output pipes left to the caller."""
        try:
            return subprocess.Popen(
                [str(arg) for arg in argv], env={**os.environ, "LC_ALL": "C", **self.extra_env},
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True)
        except OSError as err:
            raise BlockDevError(f"{argv[0]}: {err.strerror}") from None

    def sink(self, argv: Sequence[str], stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        """`argv` started in this runner's environment reading what the caller writes to its
        stdin (a pipe), its stderr into the file `stderr` (never a pipe nobody reads)."""
        try:
            return subprocess.Popen(
                [str(arg) for arg in argv], env={**os.environ, "LC_ALL": "C", **self.extra_env},
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr,
                start_new_session=True)
        except OSError as err:
            raise BlockDevError(f"{argv[0]}: {err.strerror}") from None


@dataclass(frozen=True)
class ImportSink:
    """Where a device without a path on this node takes a stream (Ganeti's BlockDev.Import):
    `start` runs the command reading the bytes on its stdin (`argv`, for the operator's
    messages); once it ended well, `finish` puts what it wrote in place; after a failed or
    cut stream, `discard` removes what it left."""

    argv: list[str]
    start: Callable[[IO[bytes]], subprocess.Popen[bytes]]  # its argument: the stderr file
    finish: Callable[[], None]
    discard: Callable[[], None]
    what: str  # the device, for messages ("rbd image POOL/NAME")


# --- the node's facts ------------------------------------------------------------------------


@dataclass
class Host:
    """This node as the device types see it: commands, files, device nodes, paths.

    `file_storage_paths_file` is Ganeti's allowed-paths file; `es_search_path` where ExtStorage
    providers are looked for; `dev_disk_root` the only directory adopted block devices may be
    under (a test gives a stand-in); `ext_timeout` bounds one provider script.
    `lv_device_nodes_required` is False only for tests and benchmarks of the LVM metadata
    commands alone: noded always requires that a created LV has its device node.
    """

    runner: Runner = field(default_factory=SubprocessRunner)
    file_storage_paths_file: Path = Path("/etc/ganeti/file-storage-paths")
    es_search_path: tuple[Path, ...] = (
        Path("/srv/ganeti/extstorage"), Path("/usr/local/lib/ganeti/extstorage"),
        Path("/usr/lib/ganeti/extstorage"), Path("/usr/share/ganeti/extstorage"),
    )
    es_log_dir: Path | None = None
    dev_disk_root: Path = Path("/dev/disk")
    proc_drbd: Path = Path("/proc/drbd")
    drbd_usermode_helper: Path = Path("/sys/module/drbd/parameters/usermode_helper")
    gluster_mount_point: Path = Path("/var/run/ganeti/gluster")
    ext_timeout: float = 300.0
    lv_device_nodes_required: bool = True
    # when this node's daemon started (its Host is made once per noded): a temporary import
    # image made before it, that no running import owns, was left by a daemon that died
    started: float = field(default_factory=time.time, compare=False)
    # the temporary import images ("POOL/NAME") this daemon's imports are writing now
    imports_under_way: set[str] = field(default_factory=set, compare=False, repr=False)

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            timeout: float | None = None, cwd: str | None = None) -> CommandResult:
        return self.runner([str(arg) for arg in argv], env=env, timeout=timeout, cwd=cwd)

    def open_stream(self, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """`argv` started with its stdout a pipe to read (stderr too: kept short by the
        command), as the runner would run it; only the real runner streams."""
        if not isinstance(self.runner, SubprocessRunner):
            raise BlockDevError(f"cannot stream the output of {argv[0]} on this host")
        return self.runner.stream(argv)

    def open_sink(self, argv: Sequence[str], stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        """`argv` started with its stdin a pipe to write (its stderr into the file
        `stderr`), as the runner would run it; only the real runner streams."""
        if not isinstance(self.runner, SubprocessRunner):
            raise BlockDevError(f"cannot stream into {argv[0]} on this host")
        return self.runner.sink(argv, stderr)

    def read_text(self, path: str | Path) -> str:
        return Path(path).read_text()

    def exists(self, path: str | Path) -> bool:
        return os.path.exists(path)

    def block_device_numbers(self, path: str | Path) -> tuple[int, int] | None:
        """(major, minor) when `path` is (a link to) a block device, else None."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISBLK(st.st_mode):
            return None
        return os.major(st.st_rdev), os.minor(st.st_rdev)

    def can_read_device(self, path: str | Path, size: int = 128 * 1024) -> bool:
        try:
            with open(path, "rb") as device:
                device.read(size)
        except OSError:
            return False
        return True

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def monotonic(self) -> float:
        return time.monotonic()


def check(result: CommandResult, what: str) -> CommandResult:
    """Raise `what: <last output line>` when the command failed."""
    if result.failed:
        raise BlockDevError(f"{what}: {result.fail_reason}: {result.last_lines()}")
    return result


def retry(host: Host, attempt: Callable[[], bool], *, delay: float, timeout: float,
          factor: float = 1.0, max_delay: float | None = None) -> bool:
    """Call `attempt()` until it returns True or `timeout` seconds passed (Ganeti's Retry);
    the delay grows by `factor` up to `max_delay`. True when it succeeded."""
    end = host.monotonic() + timeout
    wait = delay
    while True:
        if attempt():
            return True
        if host.monotonic() >= end:
            return False
        host.sleep(wait)
        wait = min(wait * factor, max_delay or wait * factor)


# --- the interface ---------------------------------------------------------------------------


class BlockDev(ABC):
    """One device of one disk on this node. Built from the disk (attaching to what exists);
    `create` makes a new one. Operations raise BlockDevError with one line."""

    dev_type: ClassVar[str]

    def __init__(self, disk: Disk, children: Sequence[BlockDev | None], host: Host) -> None:
        self.disk = disk
        self.host = host
        self.children: list[BlockDev | None] = list(children)
        self.size = disk.size
        self.params = disk.params
        self.dev_path: str | None = None
        self.major: int | None = None
        self.minor: int | None = None
        self.attached = False

    @classmethod
    @abstractmethod
    def create(cls, disk: Disk, children: Sequence[BlockDev | None], host: Host, *,
               excl_stor: bool = False) -> BlockDev:
        """Make the device; on failure nothing this call made is left behind."""

    @abstractmethod
    def attach(self) -> bool:
        """Find the existing device; True (and `dev_path` set) when it is there."""

    def assemble(self) -> None:  # noqa: B027 (a no-op for most types)
        """Bring the device up (idempotent)."""

    def shutdown(self) -> None:  # noqa: B027 (a no-op for most types)
        """Undo `assemble`; the children stay assembled."""

    def open(self, *, force: bool = False, exclusive: bool = True) -> None:  # noqa: B027 (a no-op for most types)
        """Make the device ready for I/O (DRBD: primary)."""

    def close(self) -> None:  # noqa: B027 (a no-op for most types)
        """The device is no longer used for I/O (DRBD: secondary)."""

    @abstractmethod
    def remove(self) -> None:
        """Remove the device (a missing device is not an error)."""

    @abstractmethod
    def grow(self, amount: int, *, dryrun: bool, backingstore: bool, excl_stor: bool) -> None:
        """Grow by `amount` MiB (`backingstore`: the storage itself, else the logical layer)."""

    def rename(self, new_logical_id: Sequence[object]) -> None:
        raise BlockDevError(f"{self.dev_type} devices cannot be renamed")

    def set_info(self, text: str) -> None:
        """Record `text` (the owner) on the device where the type supports it."""
        for child in self.children:
            if child is not None:
                child.set_info(text)

    def snapshot(self, snap_name: str | None, snap_size: int | None) -> list[object]:
        raise BlockDevError(f"snapshots are not supported for {self.dev_type} disks")

    def sync_status(self) -> BlockDevStatus:
        """Not a mirror: never resynchronising, never degraded."""
        return BlockDevStatus(self.dev_path, self.major, self.minor, None, None, False,
                          LocalDiskStatus.OKAY)

    def combined_sync_status(self) -> BlockDevStatus:
        """The status over this device and its children (Ganeti's CombinedBlockDevStatus)."""
        own = self.sync_status()
        percent, est, degraded, ldisk = (own.sync_percent, own.estimated_time,
                                         own.is_degraded, own.ldisk_status)
        for child in self.children:
            if child is None:
                continue
            theirs = child.sync_status()
            if theirs.sync_percent is not None:
                percent = (theirs.sync_percent if percent is None
                           else min(percent, theirs.sync_percent))
            if theirs.estimated_time is not None:
                est = (theirs.estimated_time if est is None
                       else max(est, theirs.estimated_time))
            degraded = degraded or theirs.is_degraded
            ldisk = max(ldisk, theirs.ldisk_status)
        return BlockDevStatus(self.dev_path, self.major, self.minor, percent, est, degraded,
                          LocalDiskStatus(ldisk))

    def set_sync_params(self, params: Mapping[str, object]) -> list[str]:
        errors: list[str] = []
        for child in self.children:
            if child is not None:
                errors.extend(child.set_sync_params(params))
        return errors

    def userspace_uri(self, hypervisor: str) -> str:
        raise BlockDevError(f"{self.dev_type} disks have no userspace access for {hypervisor}")

    def export_command(self) -> list[str]:
        """The command writing the device's bytes to stdout, for a device with no path on
        this node (Ganeti's BlockDev.Export)."""
        raise BlockDevError(f"{self.dev_type} disk {self.disk.label} has no device on this "
                            "node to read")

    def import_sink(self) -> ImportSink:
        """The command taking the device's bytes on its stdin, for a device with no path on
        this node (Ganeti's BlockDev.Import)."""
        raise BlockDevError(f"{self.dev_type} disk {self.disk.label} has no device on this "
                            "node to write")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.disk.logical_id!r} at {self.dev_path}>"
