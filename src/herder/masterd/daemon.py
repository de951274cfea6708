"""The master daemon: config store + locks + job queue + RAPI over HTTPS."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from herder.core import envelope
from herder.core import locking as L
from herder.core.cluster_secrets import SecretPaths
from herder.core.errors import HerderError
from herder.core.jobs.queue import JobQueue
from herder.core.noderpc import HttpNodeRpc, NodeRpc
from herder.core.store import ConfigCache, FileStore, atomic_write
from herder.masterd.auth import UsersFile
from herder.masterd.lu.base import MasterEnv
from herder.masterd.processor import Processor
from herder.masterd.rapi import RapiContext, make_app

log = logging.getLogger("herder.masterd")
DEFAULT_PORT = 5080


@dataclass
class MasterSettings:
    config_path: Path
    bind: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    workers: int = 8
    anonymous_reads: bool = False
    tls: bool = True
    run_dir: Path = Path("/run/herder")
    noded_port: int = 1811
    iallocator_path: tuple[Path, ...] = ()


def lock_manager_for(store: FileStore) -> L.LockManager:
    config = store.load()
    return L.LockManager(nodes=config.nodes, nodegroups=config.nodegroups,
                         instances=config.instances, networks=config.networks)


class MasterDaemon:
    def __init__(self, settings: MasterSettings, rpc: NodeRpc | None = None) -> None:
        self.settings = settings
        self.store = FileStore(settings.config_path)
        self.store.load()  # refuse to start on a missing or broken config, with the reason
        self.secrets = SecretPaths.beside(self.store.path)
        if rpc is None:
            rpc = HttpNodeRpc(envelope.load_key(self.secrets.hmac_key), self.secrets.certificate,
                              port=settings.noded_port)
        self.env = MasterEnv(store=self.store, locks=lock_manager_for(self.store), rpc=rpc,
                             queue_dir=self.store.directory / "queue",
                             iallocator_path=settings.iallocator_path)
        assert self.env.queue_dir is not None
        self.queue = JobQueue(self.env.queue_dir, Processor(self.env), workers=settings.workers)
        self.recovered = self.queue.recover()
        self.rapi = RapiContext(config=ConfigCache(self.store.path), queue=self.queue,
                                users=UsersFile(self.secrets.rapi_users),
                                anonymous_reads=settings.anonymous_reads,
                                store=self.store)

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.settings.tls:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(self.secrets.certificate)
        except (OSError, ssl.SSLError) as err:
            raise HerderError(f"cannot load the cluster certificate {self.secrets.certificate}: "
                              f"{err}") from None
        return context

    async def serve(self, *, ready: Callable[[int], None] | None = None,
                    stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        context = self.ssl_context()
        self.queue.start()
        runner = web.AppRunner(make_app(self.rapi), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.bind, self.settings.port, ssl_context=context,
                           reuse_address=True, backlog=256)
        pid_file: Path | None = None
        try:
            await site.start()
            bound = self.settings.port
            server = site._server  # aiohttp exposes the bound sockets only here
            if server is not None and getattr(server, "sockets", None):
                bound = server.sockets[0].getsockname()[1]
            pid_file = self._write_pid()
            if ready is not None:
                ready(bound)
            await stop.wait()
        finally:
            await runner.cleanup()
            await asyncio.to_thread(self.queue.stop)
            if pid_file is not None:
                with contextlib.suppress(OSError):
                    pid_file.unlink()

    def _write_pid(self) -> Path | None:
        try:
            self.settings.run_dir.mkdir(parents=True, exist_ok=True)
            path = self.settings.run_dir / "masterd.pid"
            atomic_write(path, f"{os.getpid()}\n".encode(), 0o644)
            return path
        except OSError as err:
            log.warning("cannot write pid file in %s: %s", self.settings.run_dir, err)
            return None
