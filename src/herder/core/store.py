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
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, TypeGuard

from herder.core import model, upgrade
from herder.core.errors import ConfigError, HerderError, StoreError

DEFAULT_CONFIG_DIR = Path("/var/lib/herder")
DEFAULT_CONFIG_PATH = DEFAULT_CONFIG_DIR / "config.json"
CONFIG_MODE = 0o600  # the document holds DRBD secrets
# The config locations of the etcd backend (store_etcd): TLS and authentication, or plain HTTP
# (tests on loopback only).
ETCD_SCHEMES = ("etcds://", "etcd://")

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
    """The config document in one local file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")

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

    def load(self) -> model.ConfigData:
        raw = self.read_bytes()
        if not raw.strip():
            raise ConfigError(f"{self.path}: the config file is empty (truncated?)")
        try:
            return upgrade.load_document(raw)
        except ConfigError as err:
            raise ConfigError(f"{self.path}: {err}") from None

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
        """Change the document: nothing is written if the block raises or validation fails."""
        with self.locked():
            config = self.load()
            yield config
            stamp = model.now()
            config.touch(stamp)
            try:
                checked = model.revalidate(config)
            except ConfigError as err:
                raise ConfigError(f"change refused, nothing written: {err}") from None
            self._write(checked)

    def replace(self, config: model.ConfigData) -> None:
        """Overwrite the document with `config` (validated); for imports and restores."""
        with self.locked():
            self._write(model.revalidate(config))

    def _write(self, config: model.ConfigData) -> None:
        self._remove_stale_temporaries()
        atomic_write(self.path, model.encode(config), CONFIG_MODE)

    def _remove_stale_temporaries(self) -> None:
        """Remove temporary files left by writers that died mid-write."""
        for entry in self.directory.iterdir():
            match = _TMP_RE.match(entry.name)
            if not match or match["name"] != self.path.name:
                continue
            if not pid_alive(int(match["pid"])):
                with contextlib.suppress(OSError):
                    entry.unlink()


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
        self._stamp: tuple[int, int, int] | None = None
        self._config: model.ConfigData | None = None
        self.error: str | None = None

    def __call__(self) -> model.ConfigData | None:
        if self.path is None:
            return None
        try:
            st = self.path.stat()
        except OSError:
            self._config, self._stamp = None, None
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            try:
                self._config = FileStore(self.path).load()
                self.error = None
            except HerderError as err:  # keep the last good config; say why
                self.error = str(err)
            self._stamp = stamp
        return self._config


def is_etcd_location(location: object) -> TypeGuard[str]:
    """Whether a config location names the etcd backend (else it is a file)."""
    return isinstance(location, str) and location.startswith(ETCD_SCHEMES)


def default_config_path() -> Path:
    env = os.environ.get("HERDER_CONFIG")
    return Path(env) if env else DEFAULT_CONFIG_PATH


def open_store(path: str | os.PathLike[str] | None = None) -> ConfigStore:
    """The store at `path` (default: HERDER_CONFIG, else /var/lib/herder/config.json); a
    location `etcds://HOST:PORT[,HOST:PORT...]/CLUSTER` (or `etcd://` without TLS, for tests)
    opens the etcd backend instead."""
    location = path if path is not None else os.environ.get("HERDER_CONFIG")
    if is_etcd_location(location):
        from herder.core.store_etcd import EtcdStore  # only when used (keeps httpx out)

        return EtcdStore.from_location(location)
    return FileStore(path if path is not None else default_config_path())
