"""Namespaced simulated hosts for tests: one set per test module, always torn down."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from herder.sim.host import HostConfig, HostSimulation, SimHost, terminate, unsupported
from tests.simhelpers import wait_for

DOMAIN = "sim.herder.test"
# A server for reachability tests: answers every connection with the host's name.
NAME_SERVER = ("import os, socket, sys\n"
               "server = socket.create_server(('', int(sys.argv[1])))\n"
               "while True:\n"
               "    conn, _ = server.accept()\n"
               "    conn.sendall(os.uname().nodename.encode())\n"
               "    conn.close()\n")
# Prints what connecting to HOST PORT gives: the peer's first bytes, or the error's name.
CONNECT = ("import socket, sys\n"
           "try:\n"
           "    conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), 3)\n"
           "    print(conn.recv(100).decode())\n"
           "except OSError as err:\n"
           "    print(type(err).__name__, err.errno)\n")


def host_configs(sim: HostSimulation, count: int, *, node_settings: str, vg_mib: int,
                 file_storage_mib: int) -> list[HostConfig]:
    return [HostConfig(f"node{i}.{DOMAIN}", sim.address(10 + i), node_settings=node_settings,
                       vg_mib=vg_mib, file_storage_mib=file_storage_mib)
            for i in range(1, count + 1)]


def running_hosts(directory: Path, configs: Callable[[HostSimulation], Sequence[HostConfig]]
                  ) -> Iterator[HostSimulation]:
    """Body of a fixture: a simulation in `directory` with the hosts `configs` names (skips
    when the machine cannot run namespaced hosts), torn down at the end."""
    reason = unsupported()
    if reason:
        pytest.skip(reason)
    sim = HostSimulation.create(directory)
    try:
        sim.add_hosts(configs(sim))
        yield sim
    finally:
        sim.teardown(grace=5.0)


def connect(host: SimHost, address: str, port: int) -> str:
    """What connecting from `host` to address:port gives (the peer's name or the error)."""
    return host.run(["python3", "-c", CONNECT, address, str(port)]).stdout.strip()


def can_connect(host: SimHost, address: str, port: int) -> bool:
    """Whether a TCP connection from `host` to address:port is accepted."""
    probe = ("import socket, sys\n"
             "socket.create_connection((sys.argv[1], int(sys.argv[2])), 3).close()\n")
    return host.run(["python3", "-c", probe, address, str(port)]).returncode == 0


def start_name_server(host: SimHost, port: int) -> None:
    proc = host.popen(["python3", "-c", NAME_SERVER, str(port)])
    try:
        wait_for(lambda: connect(host, "127.0.0.1", port) == host.name, 30,
                 f"name server on {host.name}", interval=0.05)
    except BaseException:
        terminate(proc)
        raise
