"""masterd's job queue, processor and config store in this process, over real node daemons
(noded's server on libvirt's test driver, each on its own loopback address and one port):
for tests of the logical units' checks that ask the nodes."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from herder.core import model
from herder.core.noderpc import HttpNodeRpc
from herder.core.store import FileStore
from herder.masterd import locking
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.lu.base import MasterEnv
from herder.masterd.processor import Processor
from herder.noded.bdev.base import Host, SubprocessRunner
from herder.noded.node import Node, NodeSettings
from tests.noded.noded_fixture import KEY, serving


@dataclass
class InProcessMaster:
    store: FileStore
    queue: JobQueue
    port: int  # the node daemons' port


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def node_daemon(directory: Path, name: str, bdev: Host | None = None,
                os_path: tuple[Path, ...] | None = None) -> Node:
    """A node daemon named `name` on libvirt's test driver, its state under `directory`;
    `bdev`: how its block-device layer reaches the node (default: its files there);
    `os_path`: where it finds OS definitions (default: NodeSettings')."""
    settings = NodeSettings(
        node_name=name, state_dir=directory / name / "state", run_dir=directory / name / "run",
        hmac_key=KEY, libvirt_uri="test:///default", file_root=directory / name / "root",
        config_dir=directory / name / "cluster")
    if os_path is not None:
        settings.os_path = os_path
    return Node(settings, bdev=bdev)


@contextmanager
def master_over_nodes(directory: Path, config: model.ConfigData, nodes: Mapping[str, str],
                      *, workers: int = 2, hosts: Mapping[str, Host] | None = None,
                      os_path: tuple[Path, ...] | None = None
                      ) -> Iterator[InProcessMaster]:
    """`config` in a file store under `directory`, and node daemons for `nodes` (name ->
    address) serving on one free port (`hosts`: a node's block-device layer by name;
    `os_path`: the nodes' OS search path); the queue runs jobs until the block ends."""
    store = FileStore(directory / "config.json")
    store.create(config)
    port = free_port()
    daemons = [node_daemon(directory, name, (hosts or {}).get(name), os_path)
               for name in nodes]
    with ExitStack() as stack:
        for daemon, address in zip(daemons, nodes.values(), strict=True):
            stack.enter_context(serving(daemon, address, port))
            stack.callback(daemon.hv.close)
        env = MasterEnv(store=store, locks=locking.LockManager(
            nodes=config.nodes, nodegroups=config.nodegroups, instances=config.instances),
            rpc=HttpNodeRpc(KEY, None, port=port, timeout=30))
        queue = JobQueue(directory / "queue", Processor(env), workers=workers)
        queue.recover()
        queue.start()
        stack.callback(queue.stop)
        yield InProcessMaster(store, queue, port)


EXTSTORAGE = Path(__file__).resolve().parents[2] / "src/herder/sim/extstorage"


def sharedimg_hosts(directory: Path, names: Iterable[str]) -> tuple[dict[str, Host], Path]:
    """Each node's block-device layer with herder's `sharedimg` ExtStorage provider (its
    images on real loop devices, in one directory both nodes share) under `directory`: the
    hosts by node name, and the providers' directory (add variants there)."""
    images, providers = directory / "images", directory / "extstorage"
    images.mkdir()
    shutil.copytree(EXTSTORAGE / "sharedimg", providers / "sharedimg")
    hosts = {}
    for name in names:
        (directory / name / "es-logs").mkdir(parents=True)
        hosts[name] = Host(runner=SubprocessRunner(extra_env={
            "EXTP_DIR": str(images), "SHAREDIMG_RUN_DIR": str(directory / name / "sharedimg")}),
            es_search_path=(providers,), es_log_dir=directory / name / "es-logs",
            ext_timeout=60)
    return hosts, providers


def loops_of(image: Path) -> list[str]:
    """The loop devices attached to `image`."""
    out = subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(image)],
                         capture_output=True, text=True, check=False).stdout
    return out.split()


@contextmanager
def sharedimg_master(directory: Path, config: model.ConfigData, nodes: Mapping[str, str]
                     ) -> Iterator[InProcessMaster]:
    """`master_over_nodes` whose nodes (name -> address, set as their primary IPs in
    `config`) have `sharedimg` ext disks (`sharedimg_hosts`) and the herder-guest OS; the
    images' loop devices detached at the end."""
    from herder.sim import guest

    assert os.geteuid() == 0 and shutil.which("losetup"), \
        "ext disks on loop devices need root and losetup"
    hosts, _ = sharedimg_hosts(directory, nodes)
    for node in config.nodes.values():
        node.primary_ip = nodes[node.name]
    try:
        os_dir = guest.install_os_definition(directory / "os")
        with master_over_nodes(directory, config, nodes, hosts=hosts,
                               os_path=(os_dir.parent,)) as master:
            yield master
    finally:
        for image in (directory / "images").glob("*.img"):
            for loop in loops_of(image):
                subprocess.run(["losetup", "-d", loop], check=False)
