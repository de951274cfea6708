"""A private libvirtd serving libvirt's test driver on its own unix socket, for tests in which
another process (or connection) changes domains while a collector watches.

Preferred way: libvirtd as an unprivileged user in "session" mode, with HOME and the XDG
directories in a fresh temporary directory — it touches nothing of the host's. As root that user
is `nobody` (via `setpriv`); root may still connect to its socket. Fallback, for root without
`setpriv`/`nobody`: a system-mode libvirtd in its own mount namespace (`unshare -m`) with
tmpfs on /run/libvirt and the other directories it writes, and its sockets in the temporary
directory; system mode needs the
`libvirt-qemu` user and the `kvm` and `libvirt-qemu` groups, created here (`--system`) when missing.

The test driver's state lives only while some client stays connected, and a restart resets it
to the single default domain "test". `start_libvirtd()` raises `LibvirtdUnavailable` with the
reason (tests skip on it); `PrivateLibvirtd.stop()` always kills the daemon's process group and
removes the directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from herder.core import libvirt_host

LIBVIRTD = "/usr/sbin/libvirtd"
START_TIMEOUT = 15.0
PRIVATE_DIRS = ("/run/libvirt", "/etc/libvirt", "/var/lib/libvirt", "/var/cache/libvirt",
                "/var/log/libvirt")


class LibvirtdUnavailable(Exception):
    """libvirtd is missing or would not start here."""


@dataclass
class PrivateLibvirtd:
    workdir: Path
    socket: Path
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    # Empty mount points the namespace mode created on the host, removed by stop().
    host_dirs: tuple[str, ...] = ()

    @property
    def uri(self) -> str:
        return f"test+unix:///default?socket={self.socket}"

    @property
    def log(self) -> Path:
        return self.workdir / "libvirtd.log"

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Run the daemon and wait until its test driver answers on the socket."""
        with open(self.log, "ab") as out:
            try:
                self.proc = subprocess.Popen(
                    self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as err:
                self.stop()
                raise LibvirtdUnavailable(f"cannot run libvirtd: {err}") from None
        deadline = time.monotonic() + timeout
        last = "its socket never appeared"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                code = self.proc.returncode
                self.stop()
                raise LibvirtdUnavailable(f"libvirtd exited with {code}: {tail}")
            if self.socket.exists():
                try:
                    libvirt_host.open_connection(self.uri).close()
                    return
                except libvirt_host.Unreachable as err:
                    last = str(err)
            time.sleep(0.05)
        tail = self.log_tail()
        self.stop()
        raise LibvirtdUnavailable(
            f"libvirtd did not answer within {timeout:g}s ({last}): {tail}")

    def kill(self) -> None:
        """Stop the daemon (its whole process group, which we created); keep the directory."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        with contextlib.suppress(OSError):
            self.socket.unlink()
        self.proc = None  # only now: whoever waits for None may start a new one at once

    def restart(self, timeout: float = START_TIMEOUT) -> None:
        """Kill and start again on the same socket: the test driver is back to its default."""
        self.kill()
        self.start(timeout)

    def stop(self) -> None:
        """Kill the daemon and remove its directory."""
        self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)
        for path in self.host_dirs:
            with contextlib.suppress(OSError):
                os.rmdir(path)  # only if still empty


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _session_command(workdir: Path) -> tuple[list[str], dict[str, str], Path]:
    """libvirtd in session mode as an unprivileged user, everything under `workdir`."""
    home = workdir / "home"
    home.mkdir(mode=0o700)
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(home / "run"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_DATA_HOME": str(home / "data"),
        "LC_ALL": "C",
    }
    argv = [LIBVIRTD]
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        for path in (workdir, home):
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
        argv = [shutil.which("setpriv") or "setpriv", f"--reuid={nobody.pw_uid}",
                f"--regid={nobody.pw_gid}", "--clear-groups", LIBVIRTD]
    return argv, env, home / "run" / "libvirt" / "libvirt-sock"


ACCOUNTS_LOCK = "/run/lock/herder-system-accounts.lock"


def ensure_system_accounts(user: str = "libvirt-qemu", primary_group: str = "kvm",
                           groups: tuple[str, ...] = ("kvm", "libvirt-qemu")) -> None:
    """System-mode libvirtd refuses to start without these (its QEMU driver looks them up;
    Debian's qemu.conf: user and group "libvirt-qemu"). Idempotent, and serialised
    machine-wide: two processes creating them at once made `useradd` fail (exit 9)."""
    import fcntl
    import grp

    os.makedirs(os.path.dirname(ACCOUNTS_LOCK), exist_ok=True)
    with open(ACCOUNTS_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for group in groups:
            try:
                grp.getgrnam(group)
            except KeyError:
                subprocess.run(["groupadd", "--system", "-f", group], check=True,
                               capture_output=True)
        if not _user_exists(user):
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                            "/usr/sbin/nologin", "--gid", primary_group, user],
                           check=True, capture_output=True)


def _namespace_command(workdir: Path) -> tuple[list[str], dict[str, str], Path]:
    """System-mode libvirtd (root) in its own mount namespace; sockets under `workdir`."""
    ensure_system_accounts()
    sockdir = workdir / "sock"
    sockdir.mkdir()
    conf = workdir / "libvirtd.conf"
    conf.write_text(
        f'unix_sock_dir = "{sockdir}"\n'
        'auth_unix_ro = "none"\nauth_unix_rw = "none"\n'
    )
    # tmpfs over every directory a system libvirtd writes, inside its namespace only (the
    # mount points it had to create on the host are removed again by stop()).
    dirs = " ".join(PRIVATE_DIRS)
    script = (
        f"mkdir -p {dirs} && for d in {dirs}; do mount -t tmpfs herder-test $d || exit 1; "
        f'done && exec {LIBVIRTD} -f "{conf}"'
    )
    argv = [shutil.which("unshare") or "unshare", "-m", "--propagation", "private",
            "sh", "-c", script]
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
    return argv, env, sockdir / "libvirt-sock"


def start_libvirtd(timeout: float = START_TIMEOUT, mode: str | None = None) -> PrivateLibvirtd:
    """Start a private libvirtd and wait until its test driver answers. `mode` "session" or
    "namespace" forces a way (default: session where possible)."""
    if not os.access(LIBVIRTD, os.X_OK):
        raise LibvirtdUnavailable(f"{LIBVIRTD} is not installed")
    if not libvirt_host.AVAILABLE:
        raise LibvirtdUnavailable("libvirt-python is not installed")
    # Short path: unix socket paths are limited to 107 bytes.
    workdir = Path(tempfile.mkdtemp(prefix="hlvd-", dir="/tmp"))
    os.chmod(workdir, 0o755)
    if mode is None:
        session = os.geteuid() != 0 or bool(_user_exists("nobody") and shutil.which("setpriv"))
    else:
        session = mode == "session"
    try:
        argv, env, sock = (_session_command(workdir) if session
                           else _namespace_command(workdir))
    except (OSError, subprocess.CalledProcessError, KeyError) as err:
        shutil.rmtree(workdir, ignore_errors=True)
        raise LibvirtdUnavailable(f"cannot prepare libvirtd: {err}") from None
    missing = () if session else tuple(d for d in PRIVATE_DIRS if not os.path.exists(d))
    daemon = PrivateLibvirtd(workdir, sock, argv, env, host_dirs=missing)
    daemon.start(timeout)
    return daemon


@contextlib.contextmanager
def private_libvirtd(timeout: float = START_TIMEOUT,
                     mode: str | None = None) -> Iterator[PrivateLibvirtd]:
    daemon = start_libvirtd(timeout, mode)
    try:
        yield daemon
    finally:
        daemon.stop()
