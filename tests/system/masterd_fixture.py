"""Start a real `herder masterd` process on 127.0.0.1 for system tests."""

from __future__ import annotations

import atexit
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from herder.core.rapi import RapiClient

INIT = ["cluster", "init", "cluster.example.com", "--master-node", "node1.example.com",
        "--primary-ip", "192.0.2.11", "--force"]
NODES = [("node2.example.com", "192.0.2.12"), ("node3.example.com", "192.0.2.13")]


def herder_cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERDER_CONFIG": str(config), "HERDER_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=60, check=True)


def make_cluster(directory: Path) -> Path:
    config = directory / "config.json"
    if not config.exists():
        herder_cli(config, *INIT)
        for name, ip in NODES:
            herder_cli(config, "node", "add", name, "--ip", ip, "--no-node-check")
    return config


def add_plain_instance(directory: Path, name: str = "web1.example.com",
                       node: str = "node2") -> None:
    """A plain instance (a config entry, no disk anywhere) in the cluster `start_masterd(
    directory)` serves: for the routes that refuse or queue before any node is asked."""
    from herder.core.store import FileStore
    from tests.conftest import build_config

    with FileStore(make_cluster(directory / "cluster")).update() as config:
        plain = build_config(nodes=1, drbd_instances=0).instances.popitem()[1]
        plain.name, plain.primary_node = name, config.find_node(node).uuid
        config.instances[plain.uuid] = plain


@dataclass
class RunningMaster:
    proc: subprocess.Popen[str]
    url: str
    config_path: Path
    client: RapiClient
    node: str = "node2.example.com"

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def spawn(config: Path, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "HERDER_CONFIG": str(config)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "herder.cli.main", "masterd", "--bind", "127.0.0.1", "--port",
         "0", "--run-dir", str(config.parent / "run"), *extra],
        stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    lines = []
    for _ in range(5):
        line = proc.stderr.readline()
        lines.append(line)
        match = re.search(r"serving RAPI on (\w+)://127\.0\.0\.1:(\d+)/", line)
        if match:
            return proc, f"{match.group(1)}://127.0.0.1:{match.group(2)}"
        if not line:
            break
    proc.kill()
    raise AssertionError(f"masterd did not start: {''.join(lines)}")


@contextmanager
def start_masterd(tmp_path: Path, extra: tuple[str, ...] = ()) -> Iterator[RunningMaster]:
    config = make_cluster(tmp_path / "cluster")
    proc, url = spawn(config, extra)
    client = RapiClient.for_herder_cluster(config.parent, url)
    try:
        yield RunningMaster(proc, url, config, client)
    finally:
        client.close()
        if proc.poll() is None:
            proc.terminate()
            _EXITING.append(proc)
        _reap(block=False)


# Stopped masterds still exiting: masterd's exit waits for its calls in flight to this
# config's unreachable nodes (192.0.2.x) to time out (about 3 s), which no test waits for;
# each is reaped later here, and at the latest when the worker exits.
_EXITING: list[subprocess.Popen[str]] = []


def _reap(block: bool) -> None:
    for proc in list(_EXITING):
        if block:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.poll() is not None:
            _EXITING.remove(proc)


atexit.register(_reap, True)
