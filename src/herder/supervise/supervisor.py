"""The supervisor: runs a host's daemons as systemd would, for hosts without systemd.

It starts the daemons `node.toml` enables, each in a session of its own with its output appended
to its log file; restarts one that fails (exit code other than 0 and 11, or killed by a signal)
after a delay that doubles with every crash in a row (`restart_delay` .. `restart_delay_max`;
a run of `STABLE_AFTER` seconds ends the row); leaves one that exits with 11 ("not my role":
masterd or maintd on a node that is not the master) stopped, as the systemd units'
`RestartPreventExitStatus=11` does; and stops everything on SIGTERM or SIGINT (SIGTERM to each
daemon's process group, SIGKILL after `stop_timeout`).

It reaps every child that ends, its own daemons and orphans alike: as PID 1 of a PID namespace
(a container, a simulated host) every orphan of the namespace becomes its child; elsewhere it
makes itself the child subreaper so that orphans of its daemons (QEMU processes libvirtd left
behind) come to it. Children are therefore reaped only here, with `waitpid(-1)`, never by
`subprocess` or asyncio (they would race for the same exit statuses).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from herder.core import supervise_control, untrusted
from herder.supervise.settings import DaemonSpec, NodeSettings, daemon_specs

log = logging.getLogger("herder.supervise")

STABLE_AFTER = 10.0  # seconds of running after which a crash counts as the first in a row
KILL_WAIT = 5.0  # after SIGKILL, how long to wait for the exit status
PR_SET_CHILD_SUBREAPER = 36


def restart_delay(crashes: int, initial: float, maximum: float) -> float:
    """The delay before restarting a daemon after `crashes` crashes in a row (>= 1)."""
    return min(maximum, initial * 2 ** max(0, crashes - 1))


def describe_exit(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exited with {code}"


@dataclass
class Daemon:
    spec: DaemonSpec
    state: str = supervise_control.STOPPED
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0  # monotonic time of the last spawn
    since: float = field(default_factory=time.time)
    restarts: int = 0
    crashes: int = 0  # in a row, for the backoff
    last_exit: int | None = None
    message: str = ""
    wanted: bool = False  # should run (false once stopped on request or for good)
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    restart_timer: asyncio.TimerHandle | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def set_state(self, state: str) -> None:
        self.state = state
        self.since = time.time()

    def status(self) -> supervise_control.DaemonStatus:
        return supervise_control.DaemonStatus(
            name=self.spec.name, state=self.state, enabled=self.spec.enabled,
            pid=self.proc.pid if self.proc is not None else None, since=self.since,
            restarts=self.restarts, last_exit=self.last_exit, message=self.message)


class Supervisor:
    def __init__(self, settings: NodeSettings) -> None:
        self.settings = settings
        self.daemons = {spec.name: Daemon(spec) for spec in daemon_specs(settings)}
        self.by_pid: dict[int, Daemon] = {}
        self.stopping = asyncio.Event()
        self.socket_path = Path(settings.supervise.socket)

    # --- processes ---------------------------------------------------------------------

    def _spawn(self, daemon: Daemon) -> None:
        spec = daemon.spec
        daemon.exited = asyncio.Event()
        try:
            spec.output.parent.mkdir(parents=True, exist_ok=True)
            with open(spec.output, "ab") as out:
                proc = subprocess.Popen(
                    list(spec.argv), stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, env={**os.environ, **dict(spec.environment)},
                    start_new_session=True, close_fds=True, cwd="/")
        except OSError as err:
            daemon.proc = None
            daemon.message = f"cannot run {spec.argv[0]}: {err.strerror or err}"
            log.error("%s: %s", spec.name, daemon.message)
            daemon.exited.set()
            self._crashed(daemon)
            return
        daemon.proc = proc
        daemon.started = time.monotonic()
        daemon.message = ""
        daemon.set_state(supervise_control.RUNNING)
        self.by_pid[proc.pid] = daemon
        log.info("%s: started (pid %d)", spec.name, proc.pid)

    def _crashed(self, daemon: Daemon) -> None:
        """Schedule the restart of a daemon that failed or could not be run."""
        daemon.crashes += 1
        delay = restart_delay(daemon.crashes, self.settings.supervise.restart_delay,
                              self.settings.supervise.restart_delay_max)
        daemon.set_state(supervise_control.BACKOFF)
        log.warning("%s: restart in %gs", daemon.spec.name, delay)
        daemon.restart_timer = asyncio.get_running_loop().call_later(
            delay, self._restart_after_backoff, daemon)

    def _restart_after_backoff(self, daemon: Daemon) -> None:
        daemon.restart_timer = None
        backing_off = daemon.state == supervise_control.BACKOFF
        if daemon.wanted and backing_off and not self.stopping.is_set():
            daemon.restarts += 1
            self._spawn(daemon)

    def reap(self) -> None:
        """Collect every ended child (SIGCHLD): ours are handled, orphans only reaped."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            daemon = self.by_pid.pop(pid, None)
            if daemon is None:
                log.debug("reaped orphan %d", pid)
                continue
            self._exited(daemon, os.waitstatus_to_exitcode(status))

    def _exited(self, daemon: Daemon, code: int) -> None:
        assert daemon.proc is not None
        daemon.proc.returncode = code  # reaped here: subprocess must not wait for it
        daemon.proc = None
        daemon.last_exit = code
        daemon.exited.set()
        name = daemon.spec.name
        if not daemon.wanted or self.stopping.is_set():
            daemon.set_state(supervise_control.STOPPED)
            log.info("%s: stopped (%s)", name, describe_exit(code))
        elif code == supervise_control.EXIT_NOT_MY_ROLE:
            daemon.wanted = False
            daemon.set_state(supervise_control.NOT_MY_ROLE)
            log.info("%s: exited with %d (not my role): stopped, not restarted", name, code)
        elif code == 0:
            daemon.wanted = False
            daemon.set_state(supervise_control.STOPPED)
            log.info("%s: exited with 0: stopped", name)
        else:
            if time.monotonic() - daemon.started >= STABLE_AFTER:
                daemon.crashes = 0
            log.warning("%s: %s", name, describe_exit(code))
            self._crashed(daemon)

    def _signal_group(self, daemon: Daemon, signum: int) -> None:
        if daemon.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(daemon.proc.pid, signum)

    # --- operations -------------------------------------------------------------------

    def _cancel_restart(self, daemon: Daemon) -> None:
        if daemon.restart_timer is not None:
            daemon.restart_timer.cancel()
            daemon.restart_timer = None

    async def start(self, daemon: Daemon) -> None:
        async with daemon.lock:
            daemon.wanted = True
            if daemon.proc is not None:
                return  # already running
            self._cancel_restart(daemon)
            daemon.crashes = 0
            self._spawn(daemon)

    async def stop(self, daemon: Daemon) -> None:
        async with daemon.lock:
            daemon.wanted = False
            self._cancel_restart(daemon)
            if daemon.proc is None:
                if daemon.state == supervise_control.BACKOFF:
                    daemon.set_state(supervise_control.STOPPED)
                return
            self._signal_group(daemon, signal.SIGTERM)
            try:
                await asyncio.wait_for(daemon.exited.wait(),
                                       self.settings.supervise.stop_timeout)
            except TimeoutError:
                log.warning("%s: still running after %gs, killing it", daemon.spec.name,
                            self.settings.supervise.stop_timeout)
                self._signal_group(daemon, signal.SIGKILL)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(daemon.exited.wait(), KILL_WAIT)

    async def restart(self, daemon: Daemon) -> None:
        await self.stop(daemon)
        await self.start(daemon)

    async def handle(self, request: supervise_control.Request) -> supervise_control.Reply:
        unknown = [n for n in request.daemons if n not in self.daemons]
        error = ""
        if unknown:
            error = f"unknown daemon {unknown[0]!r} (known: {', '.join(self.daemons)})"
        elif request.command != "status" and not request.daemons:
            error = f"{request.command}: name the daemons"
        elif self.stopping.is_set() and request.command in ("start", "restart"):
            error = "the supervisor is shutting down"
        if error:
            return supervise_control.Reply(ok=False, error=error)
        chosen = [self.daemons[n] for n in request.daemons] or list(self.daemons.values())
        if request.command == "start":
            for daemon in chosen:
                await self.start(daemon)
        elif request.command == "stop":
            await asyncio.gather(*(self.stop(d) for d in reversed(chosen)))
        elif request.command == "restart":
            for daemon in chosen:
                await self.restart(daemon)
        return supervise_control.Reply(ok=True, daemons=[d.status() for d in chosen])

    async def _serve_client(self, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            try:
                reply = await self.handle(supervise_control.decode_request(line))
            except (untrusted.BadDocument, msgspec.ValidationError) as err:
                reply = supervise_control.Reply(ok=False, error=f"bad request: {err}")
            writer.write(supervise_control.encode(reply))
            await writer.drain()
        except (ConnectionError, ValueError) as err:
            log.debug("control connection: %s", err)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    # --- the main loop ----------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        become_subreaper()
        loop.add_signal_handler(signal.SIGCHLD, self.reap)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stopping.set)
        loop.add_signal_handler(signal.SIGHUP, lambda: log.info("SIGHUP ignored"))
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        old_umask = os.umask(0o077)  # the socket: root only
        try:
            server = await asyncio.start_unix_server(self._serve_client,
                                                     path=str(self.socket_path),
                                                     limit=supervise_control.MAX_LINE)
        finally:
            os.umask(old_umask)
        log.info("control socket %s", self.socket_path)
        try:
            for daemon in self.daemons.values():
                if daemon.spec.enabled:
                    await self.start(daemon)
            self.reap()  # children that ended before the handler was installed
            await self.stopping.wait()
            log.info("stopping every daemon")
            server.close()
            await asyncio.gather(*(self.stop(d) for d in reversed(self.daemons.values())))
        finally:
            server.close()
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
        log.info("stopped")


def become_subreaper() -> None:
    """Orphans of our daemons become our children (PID 1 gets them anyway)."""
    if os.getpid() == 1:
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def serve(settings: NodeSettings) -> None:
    asyncio.run(Supervisor(settings).run())
