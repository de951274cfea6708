"""The master daemon: config store + locks + job queue + RAPI over HTTPS.

Only the master runs it (docs/ha.md "Master failover"): it refuses to start (`NotMaster`, exit
code 11) when this node is a cluster node other than the config's master, signs every node RPC
with the config's `master_epoch` as it was at start, and stops (exit code 11) once the config
names another master or a newer epoch, or a node refuses its epoch as stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from herder.core import cluster_secrets, envelope, etcd_history, model, ports, serve
from herder.core.cluster_secrets import SecretPaths
from herder.core.errors import HerderError
from herder.core.noderpc import HttpNodeRpc, NodeRpc
from herder.core.rapi_users import UsersFile
from herder.core.reachability import Reachability, ReachabilityRpc
from herder.core.store import ConfigCache, ConfigStore, FileStore, is_etcd_location
from herder.masterd import alloctrace, heap, locking, redist
from herder.masterd.announce import Announcements
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.leases import Leases
from herder.masterd.livecache import InvalidatingRpc, LiveCache
from herder.masterd.lu.base import MasterEnv
from herder.masterd.master_ip import MasterIpHolder
from herder.masterd.processor import Processor
from herder.masterd.rapi.app import make_app
from herder.masterd.rapi.base import ROUTES as RAPI_ROUTES
from herder.masterd.rapi.base import ConfigView, RapiContext
from herder.masterd.web.context import WebContext
from herder.masterd.web.samples import sample_forever

if TYPE_CHECKING:
    from herder.core.store_etcd import EtcdStore
    from herder.masterd.lease import MasterLease

# masterd's clients: the CLI, maintd and the web console's pages (an SSE stream and consoles
# per tab) share the master's and the operators' addresses: more connections per source than
# the other daemons' (docs/security.md "Limits")
LIMITS = serve.Limits(per_source=128)
log = logging.getLogger("herder.masterd")


@dataclass
class MasterSettings:
    config_path: Path | str  # a file, or an etcd location etcds://HOST:PORT,.../CLUSTER
    bind: str = "0.0.0.0"
    port: int = ports.MASTERD
    workers: int = 8
    anonymous_reads: bool = False
    tls: bool = True
    run_dir: Path = Path("/run/herder")
    noded_port: int = ports.NODED
    iallocator_path: tuple[Path, ...] = ()
    # This node's name (None: the host's FQDN; a host that is no node of the cluster, e.g. a
    # test, then skips the name check and only watches the epoch).
    node_name: str | None = None
    check_interval: float = 2.0  # seconds between two checks that this is still the master
    # etcd backend: the master lease's TTL (seconds); None: the cluster's master_lease_ttl
    lease_ttl: int | None = None
    local_dir: Path | None = None  # etcd backend: the secrets' directory (default /var/lib/herder)
    # finished jobs are archived this long (seconds) after they ended (0: never), looked for
    # every `archive_interval` seconds (Ganeti's watcher: --job-age 6 h, every 5 minutes)
    job_age: float = 6 * 3600.0
    archive_interval: float = 300.0
    # etcd backend: the history kept before the master compacts it, and how often it looks
    # (core.etcd_history: etcd's default keeps every revision until its quota is full)
    etcd_history_keep: float = etcd_history.KEEP
    etcd_history_every: float = etcd_history.EVERY


EXIT_NOTMASTER = 11  # not my role: stopped for good (systemd: RestartPreventExitStatus=11)
# etcd backend: mastership lost, restart me as a standby candidate (sysexits' EX_TEMPFAIL; any
# code but 0 and 11 makes systemd's Restart=on-failure and the supervisor start it again)
EXIT_LEASE_LOST = 75


class NotMaster(HerderError):
    """This node is not (or no longer) the cluster's master."""


def master_problem(config: model.ConfigData, me: str, *, explicit: bool) -> str | None:
    """Why a masterd on node `me` must not act as master; None when it may."""
    master = config.node_name(config.cluster.master_node)
    node = next((n for n in config.nodes.values()
                 if n.name == me or n.name.split(".")[0] == me), None)
    if node is None:
        return f"this node ({me}) is not a node of the cluster" if explicit else None
    if node.uuid != config.cluster.master_node:
        return (f"this node ({node.name}) is not the master ({master}, epoch "
                f"{config.cluster.master_epoch})")
    return None


def lock_manager_for(store: ConfigStore) -> locking.LockManager:
    config = store.snapshot()  # the shared copy (names only): no second decoded document
    return locking.LockManager(nodes=config.nodes, nodegroups=config.nodegroups,
                               instances=config.instances, networks=config.networks)


class MasterDaemon:
    def __init__(self, settings: MasterSettings, rpc: NodeRpc | None = None) -> None:
        heap.limit_arenas()  # before any thread: see masterd.heap
        alloctrace.start_from_env()  # HERDER_TRACEMALLOC: where the memory goes (debugging)
        self.settings = settings
        self.me = settings.node_name or socket.getfqdn()
        self.lease: MasterLease | None = None  # etcd backend: etcd_master.py, docs/ha.md
        self.store: ConfigStore
        etcd_store: EtcdStore | None = None
        self.etcd_store: EtcdStore | None = None
        job_storage = None
        if is_etcd_location(str(settings.config_path)):
            from herder.masterd import etcd_master as masterd_etcd  # only when used

            etcd_store, self.lease, job_storage = masterd_etcd.open_etcd(
                str(settings.config_path), self.me, ttl=settings.lease_ttl,
                local_dir=settings.local_dir)
            self.lease.adopt = masterd_etcd.kept_lease(settings.run_dir)
            self.store = self.etcd_store = etcd_store
        else:
            self.store = FileStore(settings.config_path)
            if not self.store.exists():  # a node that holds no config cannot be the master
                raise NotMaster(f"no cluster config at {settings.config_path} (the master and "
                                "the master candidates have one)")
        # refuse a broken config, with the reason (the shared copy masterd keeps reading)
        config = self.store.snapshot()
        if self.lease is not None:  # a master candidate campaigns; the lease decides
            if masterd_etcd.find_me(config, self.me) is None:
                raise NotMaster(f"this node ({self.me}) is not a node of the cluster")
            problem = None
        else:
            problem = master_problem(config, self.me, explicit=settings.node_name is not None)
        if problem is not None:
            raise NotMaster(problem)
        # the indexes every list reads, built before serving: the first read after a start
        # does not pay for them (0.5-0.9 s at 10,000 instances)
        config.index()
        self.epoch = config.cluster.master_epoch
        self.master_uuid = config.cluster.master_node
        self.deposed: str | None = None  # why this masterd stopped acting as master
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.secrets = SecretPaths.beside(self.store.path)
        if rpc is None:
            rpc = HttpNodeRpc(envelope.load_key(self.secrets.hmac_key), self.secrets.certificate,
                              port=settings.noded_port, epoch=self.epoch,
                              on_stale=lambda err: self.depose(str(err)))
        # which nodes cannot be reached: every call of the LUs, the live cache and the
        # redistribution tells it; the last two skip a node in back-off (core.reachability)
        self.reachability = Reachability()
        # the transport itself: a takeover on etcd gives its calls the new master epoch
        self.node_rpc = rpc
        recorded = ReachabilityRpc(rpc, self.reachability)
        # the nodes' live figures (RAPI reads, placement); the LUs' calls keep it current
        self.live = LiveCache(recorded, reachability=self.reachability)
        self.env = MasterEnv(store=self.store, locks=lock_manager_for(self.store),
                             rpc=InvalidatingRpc(recorded, self.live),
                             queue_dir=self.store.directory / "queue",
                             iallocator_path=settings.iallocator_path, live=self.live,
                             reachability=self.reachability)
        assert self.env.queue_dir is not None
        store = self.store
        self.queue = JobQueue(self.env.queue_dir, Processor(self.env), workers=settings.workers,
                              storage=job_storage,
                              rules=lambda: store.recent_snapshot().filters)
        # on etcd the queue is recovered once elected (become_master)
        self.recovered = (self.queue.recover() if self.lease is None else
                          {"requeued": [], "failed": [], "canceled": [], "finished": []})
        cache: ConfigView = (ConfigCache(self.store.path) if etcd_store is None
                             else masterd_etcd.EtcdConfigCache(etcd_store))
        self.rapi = RapiContext(config=cache, queue=self.queue,
                                users=UsersFile(self.secrets.rapi_users),
                                anonymous_reads=settings.anonymous_reads,
                                store=self.store, live=self.live, rpc=rpc, web=WebContext(),
                                announce=Announcements(self.secrets.hmac_keys,
                                                       self.reachability),
                                leases=Leases(self.secrets.hmac_keys))
        heap.freeze()  # the shared config and the lock manager: no GC pass walks them again

    def ssl_context(self) -> ssl.SSLContext | None:
        """The RAPI's TLS: the cluster certificate; a client may show a certificate of the
        cluster CA (the current or the retiring one), which binds a node's heartbeat to that
        node (`masterd.leases.sender_refusal`), and needs none for anything else."""
        if not self.settings.tls:
            return None
        cert = self.secrets.certificate
        authorities = [path for path in (cert, cluster_secrets.retiring(cert))
                       if path.is_file()]
        return serve.server_tls(cert, client_cas=authorities, clients_optional=True)

    def depose(self, reason: str) -> None:
        """Stop acting as master (thread-safe): serve() returns, the CLI exits with code 11."""
        if self.deposed is None:
            self.deposed = reason
            log.error("no longer the master: %s; stopping", reason)
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                self._loop.call_soon_threadsafe(self._stop.set)

    def become_master(self, node_uuid: str, epoch: int) -> dict[str, list[int]]:
        """Elected on etcd (`etcd_master.take_over` wrote this node and `epoch` into the
        config): act as master from now on; the jobs recovered from the old master's queue."""
        self.epoch = epoch
        self.master_uuid = node_uuid
        # the transport's epoch, not a wrapper's (the live cache's and the reachability
        # record's wrappers have none): else the nodes would keep accepting the old master's
        # calls
        if hasattr(self.node_rpc, "epoch"):
            self.node_rpc.epoch = epoch
        self.env.locks = lock_manager_for(self.store)  # the config as it is now
        if self.rapi.leases is not None:  # the nodes' leases count from the takeover
            self.rapi.leases.start_afresh()
        self.recovered = self.queue.recover()
        return self.recovered

    def still_master(self) -> str | None:
        """None while the config still names this masterd's master and epoch, else why not."""
        config = self.store.snapshot()
        c = config.cluster
        if c.master_epoch != self.epoch or c.master_node != self.master_uuid:
            return (f"the config names {config.node_name(c.master_node)} as master at epoch "
                    f"{c.master_epoch} (this masterd: epoch {self.epoch})")
        return None

    async def _watch_master(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.settings.check_interval)
            if stop.is_set():
                return
            heap.trim(every=5.0)  # what bulk answers and job bursts freed goes back
            heap.freeze(grown=True)  # a whole new config (etcd generation, reload) since
            try:
                reason = await asyncio.to_thread(self.still_master)
            except (HerderError, OSError, ValueError) as err:
                log.warning("cannot check the master in the config: %s", err)
                continue
            if reason is not None:
                self.depose(reason)

    async def serve(self, *, ready: Callable[[int], None] | None = None,
                    stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        self._loop, self._stop = asyncio.get_running_loop(), stop
        if self.deposed is not None:
            stop.set()
        context = self.ssl_context()
        tasks: list[serve.Task] = []
        on_stop: list[serve.Hook] = []
        before_resign: list[serve.Hook] = []
        if self.lease is not None:  # standby (no RAPI) until elected: etcd_master.py
            from herder.masterd import etcd_master, redist_etcd
            from herder.masterd import master_ip as master_ip_here

            await master_ip_here.release_if_here(self)  # a crashed master left it up
            elected = False
            try:
                elected = await etcd_master.await_election(self, self.lease, stop)
            finally:
                if not elected:
                    await asyncio.to_thread(self.lease.resign)
            if not elected:
                await etcd_master.stop_maintd_if_deposed(self)
                return
            master_ip = MasterIpHolder(self)
            tasks.append(master_ip.hold)
            tasks.append(lambda stop: etcd_master.start_maintd(self.me, master_ip))
            tasks.append(lambda stop: redist_etcd.watch(self, self.env.rpc, stop,
                                                        self.settings.check_interval,
                                                        self.reachability))
            tasks.append(self._compact_etcd_history)  # core.etcd_history
            # the master IP down before the lease is handed over (`_resign`)
            before_resign.append(master_ip.release)
            on_stop.append(lambda: etcd_master.stop_maintd_if_deposed(self))
        else:  # file backend: up whenever masterd starts as the master (after a crash too)
            tasks.append(MasterIpHolder(self).hold)
        await serve.serve(
            "masterd", self.settings.run_dir,
            endpoints=[serve.Http(make_app(self.rapi), [serve.Listener(
                self.settings.bind, self.settings.port, tls=context, backlog=256)],
                routes=RAPI_ROUTES, limits=LIMITS)],
            tasks=[self._watch_master, lambda stop: redist.watch(self, stop),  # docs/ha.md
                   lambda stop: self.live.keep_fresh(self.rapi.config, stop),
                   self._sample_nodes, self._archive_old_jobs, *tasks],
            on_start=[self.queue.start],
            on_stop=[lambda: asyncio.to_thread(self.queue.stop), *before_resign, self._resign,
                     self.live.close, *on_stop],
            ready=None if ready is None else lambda bound: ready(bound[0].port), stop=stop)

    async def _archive_old_jobs(self, stop: asyncio.Event) -> None:
        """Ganeti's watcher's job archiving (`AutoArchiveJobs(--job-age)`): every
        `archive_interval`, the jobs that ended more than `job_age` ago leave the queue for
        the archive (at most half the interval's time a round)."""
        every, age = self.settings.archive_interval, self.settings.job_age
        if age <= 0:
            return
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every)
            if stop.is_set() or self.deposed is not None:
                return
            try:
                archived, left = await asyncio.to_thread(self.queue.auto_archive, age,
                                                         every / 2)
            except HerderError as err:
                log.warning("archiving old jobs failed: %s", err)
                continue
            if archived or left:
                log.info("archived %d job(s) older than %d s; %d left for the next round",
                         archived, age, left)

    async def _compact_etcd_history(self, stop: asyncio.Event) -> None:
        """etcd backend: the elected master keeps etcd's history short (core.etcd_history)."""
        if self.etcd_store is None:
            return
        compactor = etcd_history.HistoryCompactor(self.etcd_store.client, self.etcd_store.key,
                                                  self.settings.etcd_history_keep)
        await etcd_history.keep_short(compactor, time.monotonic, stop,
                                      self.settings.etcd_history_every)

    async def _sample_nodes(self, stop: asyncio.Event) -> None:
        assert self.rapi.web is not None
        await sample_forever(self.rapi.web.samples, self.live, self.rapi.config, stop)

    async def _resign(self) -> None:
        if self.lease is not None:  # a clean stop hands over at once, a restart keeps it
            from herder.masterd import etcd_master

            await asyncio.to_thread(etcd_master.resign, self.lease, self.settings.run_dir)
