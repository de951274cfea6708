"""masterd on the etcd backend: the master is whoever holds the master lease (docs/ha.md).

With a config location `etcds://HOST:PORT,.../CLUSTER` (or `etcd://`), every node may run
`herder masterd`: each master candidate campaigns with a `MasterLease` and waits as a
**standby** (no RAPI port open) until it is elected; a node that is not a master candidate (as
in Ganeti, only a candidate may become master) waits without campaigning until the config
makes it one (`Candidacy`). The winner then, in order:
1. writes itself into the config as master (`master_node`, `master_ip` when it moved with the
   master, `master_epoch` = the lease's epoch), a write fenced by the lease;
2. signs every node RPC with that epoch, so noded's epoch check refuses the old master too;
3. recovers the job queue from etcd (jobs that were running under the old master are marked
   failed with the reason) and serves RAPI;
4. brings a floating master IP up on the master netdev (`daemon-util activate-master-ip`, as
   master-failover's `node_activate_master_ip` does; `MasterIpHolder`), then starts its node's
   maintd (`daemon-util start-master`, the path a master-failover takes through noded, in the
   same order: `core.master_daemons`), which handles the old master's failure. In that order
   because maintd listens on the master IP only when it is up as maintd starts (else on the
   node's primary IP, where the cluster's published address does not reach it).
When the lease is lost it stops acting at once (its etcd writes, config and jobs, are fenced and
refused from that moment), takes the master IP down, stops its node's maintd, and masterd exits
with code 75
(`EXIT_LEASE_LOST`), which its supervisor (systemd's `Restart=on-failure`, `herder supervise`)
restarts: as a standby candidate again. Only a node that is no node of the cluster exits 11
("not my role").
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Protocol

from herder.core import install_layout, master_daemons, model
from herder.core.errors import HerderError
from herder.core.store import ConfigStore, atomic_write
from herder.core.store_etcd import DEFAULT_LOCAL_DIR, EtcdStore, open_client
from herder.masterd.jobs.store_etcd import EtcdJobStorage
from herder.masterd.lease import MasterLease
from herder.masterd.master_ip import MasterIpHolder, find_me

log = logging.getLogger("herder.masterd")
DEFAULT_LEASE_TTL = model.MASTER_LEASE_TTL_DEFAULT
# daemon-util asks the supervisor (or systemd), which starts or stops maintd: seconds at most
MAINTD_START_TIMEOUT = 60.0
MAINTD_STOP_TIMEOUT = 20.0
# maintd waits this long for the master IP (an old master killed with SIGKILL keeps it until
# its host goes), then starts anyway, on the node's primary IP: a cluster with a maintd
# reachable there is better than one without
MAINTD_MASTER_IP_WAIT = 30.0
# a standby reads the config this often to learn whether it is a master candidate (promoted:
# it campaigns from then on; demoted: it stops campaigning)
CANDIDACY_CHECK = 1.0


class Candidate(Protocol):
    """What the election asks of a masterd (`MasterDaemon`) standing as a candidate."""

    me: str  # this node's name
    store: ConfigStore
    deposed: str | None  # why it stopped acting as master (None: it did not)

    def depose(self, reason: str) -> None:
        """Stop acting as master (thread-safe)."""

    def become_master(self, node_uuid: str, epoch: int) -> dict[str, list[int]]:
        """Act as master at `epoch` (written into the config); the recovered jobs."""


def open_etcd(location: str, node_name: str, *, ttl: int | None = None,
              local_dir: str | os.PathLike[str] | None = None
              ) -> tuple[EtcdStore, MasterLease, EtcdJobStorage]:
    """The config store, master lease (not started) and job storage, all fenced by the lease.
    `ttl`: the lease's TTL; None: the cluster's setting (`master_lease_ttl`) as the config in
    etcd has it now (the default when there is none yet)."""
    client, cluster = open_client(location)
    if ttl is None:
        ttl = lease_ttl_setting(EtcdStore(client, cluster))
    lease = MasterLease(client, cluster, node_name, ttl=ttl)
    store = EtcdStore(client, cluster, fence=lease,
                      local_dir=Path(local_dir) if local_dir is not None else DEFAULT_LOCAL_DIR)
    return store, lease, EtcdJobStorage(client, cluster, fence=lease)


def resign(lease: MasterLease, run_dir: Path) -> None:
    """A clean stop's end: the lease revoked (a standby takes over at once), or, asked by
    `daemon-util switch-version` (install_layout.KEEP_LEASE: masterd restarts on another
    build), kept for this node's next masterd (KEPT_LEASE: its id)."""
    request = run_dir / install_layout.KEEP_LEASE
    keep = request.exists()
    kept = lease.resign(keep=keep)
    if keep:
        request.unlink(missing_ok=True)
    if kept is not None:
        atomic_write(run_dir / install_layout.KEPT_LEASE, f"{kept}\n".encode(), 0o600)


def kept_lease(run_dir: Path) -> int | None:
    """The lease the previous masterd of this node kept for this one (read once: removed)."""
    path = run_dir / install_layout.KEPT_LEASE
    try:
        text = path.read_text()
    except OSError:
        return None
    path.unlink(missing_ok=True)
    try:
        return int(text.strip())
    except ValueError:
        log.warning("ignoring %s: not a lease id", path)
        return None


def lease_ttl_setting(observer: EtcdStore) -> int:
    """The cluster's master lease TTL, read (unfenced, a read only) before campaigning."""
    kv = observer.client.get(observer.key)
    return DEFAULT_LEASE_TTL if kv is None else observer.snapshot_at(kv).cluster.master_lease_ttl


def candidacy_problem(config: model.ConfigData, me: str) -> str | None:
    """Why this node may not become the master now (None: it may): as in Ganeti, only a
    master candidate (or the config's master) may; a node the config does not name, or one
    not marked a master candidate (offline, drained, not master-capable, outside the pool),
    waits without campaigning."""
    node = find_me(config, me)
    if node is None:
        return f"this node ({me}) is not a node of the cluster"
    if not node.master_candidate and node.uuid != config.cluster.master_node:
        return f"this node ({node.name}) is not a master candidate"
    return None


class Candidacy:
    """Whether this masterd may campaign: the config's word, read again every
    `CANDIDACY_CHECK` seconds while it is a standby (`await_election`); the lease asks it
    before every campaign (`MasterLease.eligible`) and `take_over` checks it once more in its
    fenced write, so a node demoted a moment before it won does not take over."""

    def __init__(self, store: ConfigStore, me: str) -> None:
        self.store = store
        self.me = me
        self.problem: str | None = "not checked yet"

    def __call__(self) -> bool:
        return self.problem is None

    def check(self) -> bool:
        """Read the config again; True when the answer changed."""
        try:
            problem = candidacy_problem(self.store.snapshot(), self.me)
        except HerderError as err:  # etcd unreachable: keep the last answer
            log.warning("master on etcd: cannot read the config: %s", err)
            return False
        changed = (problem is None) != (self.problem is None)
        self.problem = problem
        return changed


class EtcdConfigCache:
    """The RAPI's view of the config in etcd: decoded again only when its revision changes.

    Called from the RAPI's event loop: its own client gives up quickly (the last good config
    is kept and answered meanwhile), so a dead etcd member never stalls the server for long.
    """

    def __init__(self, store: EtcdStore) -> None:
        self.store = store
        self.client = store.client.clone(timeout=0.5, retry_for=1.0)
        self._revision: int | None = None
        self._config: model.ConfigData | None = None
        self.error: str | None = None

    def __call__(self) -> model.ConfigData | None:
        try:
            kv = self.client.get(self.store.key)
            if kv is None:
                self._config, self._revision = None, None
                return None
            if kv.mod_revision != self._revision:
                # the store's shared snapshot: current after this masterd's own writes, read
                # again (objects and all) only after another writer's; as of the head just read
                self._config = self.store.snapshot_at(kv)
                self._revision = kv.mod_revision
            self.error = None
        except HerderError as err:  # keep the last good config; say why
            self.error = str(err)
        return self._config


def take_over(candidate: Candidate, epoch: int) -> None:
    """Elected: become the config's master (fenced write), then let the daemon act as master at
    the epoch written (node RPCs, locks, the job queue recovered)."""
    with candidate.store.update() as config:
        problem = candidacy_problem(config, candidate.me)
        if problem is not None:
            raise HerderError(problem)
        node = find_me(config, candidate.me)
        assert node is not None
        c = config.cluster
        # this node's previous masterd held this very lease (kept across a restart:
        # lease.MasterLease.adopt): the same master at the same epoch, which the nodes and a
        # running `cluster upgrade` sign with; nothing to move
        held_on = c.master_node == node.uuid and c.master_epoch == epoch
        old = config.nodes.get(c.master_node)
        if old is not None and c.master_ip == old.primary_ip:
            c.master_ip = node.primary_ip  # no separate floating IP: it moves with the master
        c.master_node = node.uuid
        # the lease's epoch (an etcd revision: it grows with every election); a config that
        # came from the file backend may already carry a larger one: stay above it
        if not held_on:
            c.master_epoch = epoch if epoch > c.master_epoch else c.master_epoch + 1
        written = c.master_epoch
    recovered = candidate.become_master(node.uuid, written)
    log.info("master on etcd: %s took over at epoch %d (lease epoch %d); jobs %s",
             candidate.me, written, epoch, recovered)


def _say_candidacy(candidacy: Candidacy, me: str, ttl: int) -> None:
    if candidacy():
        log.info("master on etcd: %s is a standby candidate (lease ttl %d s)", me, ttl)
    else:
        log.info("master on etcd: %s: standby, not campaigning: %s", me, candidacy.problem)


async def await_election(candidate: Candidate, lease: MasterLease,
                         stop: asyncio.Event) -> bool:
    """Standby until elected (then take over) or stopped; False when stopped first. Only
    while the config has this node as a master candidate does it campaign (`Candidacy`)."""
    candidacy = Candidacy(candidate.store, candidate.me)
    await asyncio.to_thread(candidacy.check)
    lease.on_lost = candidate.depose
    lease.eligible = candidacy
    lease.start()
    _say_candidacy(candidacy, candidate.me, lease.ttl)
    checked = time.monotonic()
    while not stop.is_set():
        if time.monotonic() - checked >= CANDIDACY_CHECK:
            checked = time.monotonic()
            if await asyncio.to_thread(candidacy.check):
                _say_candidacy(candidacy, candidate.me, lease.ttl)
        if await asyncio.to_thread(lease.wait_elected, 0.2):
            epoch = lease.epoch
            if epoch is None:  # lost again at once
                continue
            try:
                await asyncio.to_thread(take_over, candidate, epoch)
            except HerderError as err:  # e.g. the fenced write lost to a newer master
                candidate.depose(f"cannot take over as master: {err}")
                return False
            return not stop.is_set()
        if lease.lost_reason is not None:
            candidate.depose(lease.lost_reason)
            return False
    return False


async def start_maintd(me: str, master_ip: MasterIpHolder,
                       wait: float = MAINTD_MASTER_IP_WAIT) -> None:
    """Elected and serving: this node's master daemons started as a master-failover starts
    them (masterd, running, stays as it is), once the master IP is up (at most `wait`
    seconds); maintd then handles the old master's failure (docs/ha.md). A failure is a
    warning: the master serves without maintd meanwhile."""
    try:
        await asyncio.wait_for(master_ip.settled.wait(), timeout=wait)
    except TimeoutError:
        log.warning("master on etcd: the master IP is not up after %g s; starting the maintd "
                    "of %s anyway (it listens on the node's primary IP)", wait, me)
    if master_ip.master.deposed is not None:
        return
    try:
        said = await asyncio.to_thread(master_daemons.start_master_daemons,
                                       MAINTD_START_TIMEOUT)
    except HerderError as err:
        log.warning("master on etcd: cannot start the maintd of %s: %s", me, err)
        return
    log.info("master on etcd: %s: %s", me, said)


async def stop_maintd_if_deposed(candidate: Candidate) -> None:
    """masterd stops after it lost the lease (or could not take over): its node's maintd,
    which acts as the master's, stops too. Not on a clean stop (SIGTERM): the supervisor may
    be stopping both (maintd first); maintd stops by itself once etcd names another master."""
    if candidate.deposed is None:
        return
    try:
        said = await asyncio.to_thread(master_daemons.stop_maintd, MAINTD_STOP_TIMEOUT)
    except HerderError as err:
        log.warning("master on etcd: cannot stop the maintd of %s: %s", candidate.me, err)
        return
    log.info("master on etcd: %s deposed: %s", candidate.me, said)

