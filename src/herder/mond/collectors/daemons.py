"""Daemon collectors: one per herder daemon (design "Ganeti daemons status").

Category daemon, kind 1. Each reports whether its daemon runs, its memory (with unit), uptime
and CPU use. Whether a daemon is *expected* on this node follows from the cluster config (a
master candidate's copy) or, on other nodes, from the node's ssconf: masterd and maintd on the
master, confd on master candidates, noded and instmon on VM-capable nodes, mond everywhere. A
daemon that is expected but not running is status 4; one over its memory limit is status 4
too; one that is neither expected nor running is simply absent (0).

A daemon is found by its pid file (`<run_dir>/<daemon>.pid`, written by every herder daemon),
else by its command line (`herder <daemon> ...`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psutil

from herder.core import model
from herder.mond.collector import CollectContext, Collector
from herder.mond.report import Kind, Status, status

DAEMONS = ("mond", "masterd", "noded", "confd", "maintd", "instmon")
MEMORY_LIMIT_MIB = 1024  # above this a daemon is reported as leaking


def expected_daemons(config: model.ConfigData | None, node: model.Node | None) -> set[str]:
    """Which daemons should run on `node` (mond alone when the node has no config)."""
    if config is None or node is None:
        return {"mond"}
    return expected_for_role(node.uuid == config.cluster.master_node, node.master_candidate,
                             node.vm_capable)


def expected_for_role(master: bool, candidate: bool, vm_capable: bool) -> set[str]:
    expected = {"mond"}
    if vm_capable:
        expected |= {"noded", "instmon"}
    if candidate or master:
        expected.add("confd")
    if master:
        expected |= {"masterd", "maintd"}
    return expected


def expected_here(ctx: CollectContext) -> set[str]:
    """This node's expected daemons: from its config copy, else from its ssconf (a node that
    is no master candidate), else mond alone."""
    config = ctx.config()
    if config is not None:
        return expected_daemons(config, ctx.this_node())
    role = ctx.role_from_ssconf()
    return expected_for_role(*role) if role is not None else {"mond"}


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


DEFAULT_RUN_DIR = "/run/herder"


def is_daemon_process(cmdline: list[str], daemon: str,
                      run_dir: str | None = None) -> bool:
    """`herder <daemon>` or `python -m herder.cli.main <daemon>`, not `herder <daemon> report`;
    with `run_dir`, only a daemon of that run directory (its `--run-dir`, else the default):
    several simulated nodes share one machine."""
    for index, arg in enumerate(cmdline):
        base = arg.rsplit("/", 1)[-1]
        if base in ("herder", "herder.cli.main") and index + 1 < len(cmdline):
            rest = cmdline[index + 1 :]
            if rest[0] != daemon or (len(rest) > 1 and not rest[1].startswith("-")):
                return False
            if run_dir is None:
                return True
            theirs = DEFAULT_RUN_DIR
            for position, option in enumerate(rest):
                if option == "--run-dir" and position + 1 < len(rest):
                    theirs = rest[position + 1]
                elif option.startswith("--run-dir="):
                    theirs = option.split("=", 1)[1]
            return theirs.rstrip("/") == run_dir.rstrip("/")
    return False


def find_process(run_dir: Path, daemon: str) -> psutil.Process | None:
    pid = read_pid(run_dir / f"{daemon}.pid")
    if pid is not None:
        try:
            proc = psutil.Process(pid)
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                return proc
        except psutil.Error:
            pass
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if cmdline and is_daemon_process(cmdline, daemon, str(run_dir)):
            return proc
    return None


class DaemonCollector(Collector):
    """Base of the per-daemon collectors; subclasses set `name`."""

    category = "daemon"
    kind = Kind.STATUS

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx)
        self._process: psutil.Process | None = None

    def collect(self) -> dict[str, Any]:
        daemon = self.name
        expected = daemon in expected_here(self.ctx)
        proc = self._process
        try:
            if proc is None or not proc.is_running():
                proc = find_process(self.ctx.settings.run_dir, daemon)
            if proc is None:
                raise psutil.NoSuchProcess(0)
            with proc.oneshot():
                rss = proc.memory_info().rss
                cpu = proc.cpu_percent(interval=None)  # since our previous look
                started = proc.create_time()
                pid = proc.pid
        except psutil.Error:
            self._process = None
            st = status(Status.BAD, f"{daemon} is not running") if expected else status(0)
            return {"status": st, "daemon": daemon, "expected": expected, "running": False,
                    "pid": None, "memory": None, "memory_unit": "KiB", "uptime": None,
                    "cpu_percent": None}
        self._process = proc
        memory_kib = rss // 1024
        st = status(Status.OK)
        if memory_kib > MEMORY_LIMIT_MIB * 1024:
            st = status(Status.BAD, f"{daemon} uses {memory_kib // 1024} MiB, over its limit "
                                    f"of {MEMORY_LIMIT_MIB} MiB")
        return {"status": st, "daemon": daemon, "expected": expected, "running": True,
                "pid": pid, "memory": memory_kib, "memory_unit": "KiB",
                "uptime": round(time.time() - started, 3), "cpu_percent": cpu}


COLLECTORS = [
    type(f"{d.capitalize()}DaemonCollector", (DaemonCollector,), {"name": d}) for d in DAEMONS
]
