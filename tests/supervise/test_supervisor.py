"""`herder supervise` as a real process with real daemons (small shell programs): start,
restart with backoff, exit code 11, stop and SIGKILL, orphans reaped, shutdown; its control
socket and `herder daemon-util` through it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from herder.core.errors import HerderError
from herder.core.supervise_control import (
    BACKOFF,
    NOT_MY_ROLE,
    RUNNING,
    STOPPED,
    DaemonStatus,
    Reply,
    request,
)
from tests import simhelpers


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    socket: Path
    logs: Path
    settings: Path

    def ask(self, command: str, *daemons: str) -> Reply:
        return request(self.socket, command, daemons, timeout=30)

    def status(self, name: str) -> DaemonStatus:
        return self.ask("status", name).daemons[0]

    def herder(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "herder.cli.main", *args],
                              capture_output=True, text=True, timeout=60)


def _answers(sup: Running) -> bool:
    try:
        sup.ask("status")
    except HerderError:
        return False
    return True


def wait_for(condition: Callable[[], object], timeout: float = 20.0, what: str = "") -> None:
    simhelpers.wait_for(condition, timeout, what, interval=0.02)


def pid_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


DAEMONS = """
[daemons.sleeper]
enabled = true
command = ["sleep", "100000"]

[daemons.notmine]
enabled = true
command = ["sh", "-c", "exit 11"]

[daemons.crasher]
enabled = true
command = ["sh", "-c", "echo crashing; exit 3"]

[daemons.stubborn]
command = ["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"]

[daemons.parent]
enabled = true
command = ["sh", "-c", "(sleep 1 &); sleep 100000"]

[daemons.envshow]
command = ["sh", "-c", "echo value=$SUPERVISED; exit 0"]
environment = { SUPERVISED = "yes" }

[daemons.missing]
command = ["/nonexistent/program"]
"""


@pytest.fixture
def running() -> Iterator[Running]:
    # A short directory: a unix socket path has at most 107 bytes.
    directory = Path(tempfile.mkdtemp(prefix="hsup-", dir="/tmp"))
    settings = directory / "node.toml"
    settings.write_text(f"""
[supervise]
socket = "{directory}/s.sock"
log_dir = "{directory}/log"
restart_delay = 0.2
restart_delay_max = 0.8
stop_timeout = 1.0
{DAEMONS}""")
    with open(directory / "supervise.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "herder.cli.main", "supervise",
                                 "--settings", str(settings)], stdout=out,
                                stderr=subprocess.STDOUT)
    sup = Running(proc, directory / "s.sock", directory / "log", settings)
    try:
        # answering, not only bound: the socket's file exists from bind() on, and a request
        # before listen() is refused (CI, under load: "Connection refused")
        wait_for(lambda: sup.socket.exists() and _answers(sup), 30, "the control socket")
        yield sup
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(directory, ignore_errors=True)


def test_enabled_daemons_start_and_others_wait(running: Running) -> None:
    states = {d.name: d.state for d in running.ask("status").daemons}
    assert states["sleeper"] == RUNNING
    assert states["parent"] == RUNNING
    assert states["stubborn"] == states["masterd"] == STOPPED
    assert set(states) >= {"noded", "mond", "confd", "instmon", "masterd", "maintd", "libvirtd"}


def test_a_killed_daemon_is_restarted(running: Running) -> None:
    before = running.status("sleeper")
    assert before.pid
    os.kill(before.pid, signal.SIGKILL)
    wait_for(lambda: (s := running.status("sleeper")).state == RUNNING
             and s.pid != before.pid, 10, "restart")
    after = running.status("sleeper")
    assert (after.restarts, after.last_exit) == (1, -signal.SIGKILL)


def test_a_crashing_daemon_is_retried_with_backoff(running: Running) -> None:
    wait_for(lambda: running.status("crasher").restarts >= 3, 20, "three restarts")
    status = running.status("crasher")
    assert status.last_exit == 3 and status.state in (BACKOFF, RUNNING)
    assert (running.logs / "crasher.log").read_text().count("crashing") >= 3
    running.ask("stop", "crasher")
    stopped = running.status("crasher")
    time.sleep(1.2)  # longer than restart_delay_max: a pending restart would have happened
    assert running.status("crasher") == stopped and stopped.state == STOPPED


def test_exit_code_11_means_not_my_role(running: Running) -> None:
    time.sleep(1.0)  # longer than restart_delay_max
    status = running.status("notmine")
    assert (status.state, status.last_exit, status.restarts) == (NOT_MY_ROLE, 11, 0)
    running.ask("start", "notmine")  # started on request, it ends the same way
    wait_for(lambda: running.status("notmine").state == NOT_MY_ROLE, 10)


def test_stop_kills_what_ignores_sigterm(running: Running) -> None:
    running.ask("start", "stubborn")
    wait_for(lambda: "ready" in (running.logs / "stubborn.log").read_text()
             if (running.logs / "stubborn.log").exists() else False, 10, "stubborn up")
    pid = running.status("stubborn").pid
    assert pid
    started = time.monotonic()
    reply = running.ask("stop", "stubborn")
    assert time.monotonic() - started >= 0.9  # stop_timeout, then SIGKILL
    assert (reply.daemons[0].state, reply.daemons[0].last_exit) == (
        STOPPED, -signal.SIGKILL)
    assert pid_gone(pid)


def test_restart_and_environment_and_output(running: Running) -> None:
    old = running.status("sleeper").pid
    reply = running.ask("restart", "sleeper")
    assert reply.daemons[0].state == RUNNING and reply.daemons[0].pid != old
    running.ask("start", "envshow")
    wait_for(lambda: running.status("envshow").last_exit == 0, 10, "envshow ran")
    assert running.status("envshow").state == STOPPED  # exit 0: not restarted
    assert (running.logs / "envshow.log").read_text() == "value=yes\n"


def test_a_program_that_cannot_run_is_retried(running: Running) -> None:
    status = running.ask("start", "missing").daemons[0]
    assert status.state == BACKOFF
    assert "cannot run /nonexistent/program" in status.message


def _children(pid: int) -> dict[int, str]:
    """The children of `pid`: command line ("" for a zombie)."""
    found = {}
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            found[int(child)] = Path(f"/proc/{child}/cmdline").read_bytes().decode().strip("\0")
        except OSError:
            continue
    return found


def test_orphans_are_adopted_and_reaped(running: Running) -> None:
    # `parent`'s background sleep outlives its subshell: it becomes the supervisor's child
    # (the supervisor is the subreaper) and, once it ends, must not stay a zombie.
    wait_for(lambda: "sleep\x001" in _children(running.proc.pid).values(), 10, "adopted")
    wait_for(lambda: "sleep\x001" not in _children(running.proc.pid).values(), 10, "ended")
    time.sleep(0.2)
    assert not [pid for pid in _children(running.proc.pid) if pid_gone(pid)]


def test_bad_requests_are_refused(running: Running) -> None:
    with pytest.raises(HerderError, match="unknown daemon 'nope'"):
        running.ask("start", "nope")
    with pytest.raises(HerderError, match="name the daemons"):
        running.ask("stop")


def test_sigterm_stops_everything(running: Running) -> None:
    running.ask("start", "stubborn")
    pids = [running.status(n).pid for n in ("sleeper", "parent", "stubborn")]
    running.proc.send_signal(signal.SIGTERM)
    assert running.proc.wait(timeout=20) == 0
    assert all(pid and pid_gone(pid) for pid in pids)
    assert not running.socket.exists()


def test_daemon_util_through_the_supervisor(running: Running) -> None:
    socket = ["daemon-util", "--socket", str(running.socket)]
    assert running.herder(*socket, "check", "sleeper").returncode == 0
    stopped = running.herder(*socket, "check", "masterd")
    assert (stopped.returncode, stopped.stdout) == (1, "masterd: stopped\n")
    assert running.herder(*socket, "stop", "herder-sleeper").returncode == 0
    assert running.status("sleeper").state == STOPPED
    assert running.herder(*socket, "start", "sleeper").returncode == 0
    assert running.status("sleeper").state == RUNNING
    bad = running.herder(*socket, "start", "no_such")
    assert bad.returncode == 1 and "'no_such' is not a daemon name" in bad.stderr
    # Without --socket: the one the settings name.
    status = running.herder("supervise", "--settings", str(running.settings), "status",
                            "sleeper")
    assert status.returncode == 0 and "sleeper" in status.stdout and "running" in status.stdout
    gone = running.herder(*["daemon-util", "--socket", "/nonexistent.sock"], "check", "noded")
    assert gone.returncode == 1 and "cannot reach the supervisor" in gone.stderr
