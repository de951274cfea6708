"""The master lease in etcd: one master at a time, elected automatically, fenced by epoch.

Every candidate runs a `MasterLease`. It holds an etcd lease of `ttl` seconds, renewed every
ttl/3, and campaigns with one transaction: "if `/herder/<cluster>/master` does not exist
(create_revision == 0), create it with my name, attached to my lease". The winner's **epoch** is
the key's create_revision: etcd revisions only grow, so every election has a larger epoch than the
one before, and a write that carries an epoch can be checked against the key (see
`herder.core.fence`: a fenced write compares the key's value and create_revision in the same
transaction as the put).

Losing mastership: when the master cannot renew its lease before `ttl` seconds have passed since
it sent the last successful renewal (etcd counts the TTL from when it received that renewal, so
the master always gives up first), or when the key is no longer its own, it stops claiming to be
master and calls `on_lost(reason)`. It does not campaign again: a new `MasterLease` does.

Only an eligible node campaigns (`eligible`: masterd's says whether the config has it as a
master candidate, Ganeti's rule for who may become master); the others hold a lease and wait.

Restarting in place (`herder cluster upgrade` switching the master's build): a masterd asked to
keep its lease (`resign(keep=True)`) stops renewing it without revoking it, and the next
masterd of the same node, told that lease's id (`adopt`), renews it instead of campaigning: the
master key stays attached to it throughout, so no other candidate can be elected while masterd
restarts (unless the restart takes longer than the TTL: then the lease runs out and the
candidates race as after a crash).

Taking over: when the master dies its lease expires at most `ttl` seconds after its last renewal
(etcd extends every lease once by an election timeout when its own leader changes), the key goes
with it, and the waiting candidates, polling every `poll` seconds, race to create it; one wins.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from herder.core import etcd
from herder.core.fence import Fence, master_key

log = logging.getLogger(__name__)


class MasterLease:
    """Campaign for, hold, and lose the cluster's master key."""

    def __init__(
        self,
        client: etcd.EtcdClient,
        cluster: str,
        node_name: str,
        ttl: int = 10,
        *,
        on_lost: Callable[[str], None] | None = None,
        on_elected: Callable[[int], None] | None = None,
        poll: float | None = None,
        eligible: Callable[[], bool] | None = None,
    ) -> None:
        if ttl < 2:
            raise ValueError("the master lease TTL must be at least 2 seconds")
        self.cluster = cluster
        self.node_name = node_name
        self.ttl = ttl
        self.key = master_key(cluster)
        self.on_lost = on_lost
        self.on_elected = on_elected
        # whether this node may campaign now (a master candidate: etcd_master.Candidacy);
        # None: always. Asked before every campaign, so it must be cheap.
        self.eligible = eligible
        self.poll = poll if poll is not None else min(0.1, ttl / 8)
        # calls must give up well within the TTL, so the loss is noticed in time
        self.client = client.clone(timeout=min(client.timeout, ttl / 4), retry_for=ttl / 4)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._elected = threading.Event()
        self._epoch: int | None = None
        self._valid_until = 0.0  # monotonic: mastership is certain only before this
        self._lease: etcd.Lease | None = None
        self._thread: threading.Thread | None = None
        self.lost_reason: str | None = None
        self.elected_at: float | None = None  # monotonic
        # the lease a previous masterd of this node kept for it (`resign(keep=True)`): taken
        # over instead of campaigning while the master key is still attached to it
        self.adopt: int | None = None

    def __repr__(self) -> str:
        return f"MasterLease({self.cluster!r}, {self.node_name!r}, epoch={self._epoch})"

    # --- state ----------------------------------------------------------------------------------

    def is_master(self) -> bool:
        with self._lock:
            return self._epoch is not None and time.monotonic() < self._valid_until

    @property
    def epoch(self) -> int | None:
        """The create_revision of the master key while this node is master, else None."""
        with self._lock:
            if self._epoch is not None and time.monotonic() < self._valid_until:
                return self._epoch
            return None

    def fence(self) -> Fence | None:
        epoch = self.epoch
        return Fence(self.node_name, epoch) if epoch is not None else None

    def current_master(self) -> tuple[str, int] | None:
        """Who holds the master key now (name, epoch), as etcd says."""
        kv = self.client.get(self.key)
        return (kv.value.decode(), kv.create_revision) if kv else None

    # --- running --------------------------------------------------------------------------------

    def start(self) -> MasterLease:
        """Campaign in a background thread; once elected, keep the lease alive."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"master-lease-{self.node_name}", daemon=True
            )
            self._thread.start()
        return self

    def wait_elected(self, timeout: float | None = None) -> bool:
        return self._elected.wait(timeout) and self.is_master()

    def resign(self, keep: bool = False) -> int | None:
        """Stop campaigning or being master; revoke the lease (the key goes with it), or with
        `keep` leave it to run out by itself and answer its id (None: none was held) for the
        next masterd of this node to `adopt`."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.ttl)
        with self._lock:
            was_master = self._epoch is not None
            self._epoch = None
            lease, self._lease = self._lease, None
        if keep and lease is not None and was_master:
            # renewed once more: the next masterd has the whole TTL to start and hold it
            try:
                alive = self.client.lease_keepalive(lease.id).ttl > 0
            except etcd.EtcdError as err:  # the last renewal's time is left
                log.warning("master lease: last renewal before the restart failed: %s", err)
                alive = True
            self.client.close()
            if not alive:
                return None
            log.info("master lease: %s keeps lease %x for its next masterd", self.node_name,
                     lease.id)
            return lease.id
        if lease is not None:
            try:
                self.client.lease_revoke(lease.id)
            except etcd.EtcdError as err:  # it expires by itself
                log.warning("master lease: revoke failed: %s", err)
        self.client.close()
        return None

    def _lose(self, reason: str) -> None:
        with self._lock:
            was = self._epoch
            self._epoch = None
            self.lost_reason = reason
        self._stop.set()
        if was is not None:
            log.warning("master lease: %s lost mastership (epoch %d): %s",
                        self.node_name, was, reason)
            if self.on_lost is not None:
                self.on_lost(reason)

    def _run(self) -> None:
        lease_valid_until = 0.0
        next_renew = 0.0
        checked = False
        while not self._stop.is_set():
            try:
                if self._lease is None:
                    sent = time.monotonic()
                    self._lease = self.client.lease_grant(self.ttl)
                    lease_valid_until = sent + self._lease.ttl
                    next_renew = sent + self.ttl / 3
                    checked = False
                elif time.monotonic() >= next_renew:
                    checked = False
                    sent = time.monotonic()
                    renewed = self.client.lease_keepalive(self._lease.id)
                    if renewed.ttl <= 0:
                        self._lease = None
                        if self._epoch is not None:
                            self._lose("the lease expired in etcd")
                            break
                        continue
                    lease_valid_until = sent + renewed.ttl
                    next_renew = sent + self.ttl / 3
                if self._epoch is None:
                    lease_valid_until = self._campaign(lease_valid_until)
                elif not checked:  # after every renewal: is the key still mine?
                    kv = self.client.get(self.key)
                    if (kv is None or kv.value.decode() != self.node_name
                            or kv.create_revision != self._epoch):
                        self._lose("the master key is no longer this node's")
                        break
                    with self._lock:
                        self._valid_until = lease_valid_until
                    checked = True
            except etcd.EtcdError as err:
                log.warning("master lease (%s): %s", self.node_name, err)
            if self._epoch is not None and time.monotonic() >= lease_valid_until:
                self._lose(f"could not renew the lease within its TTL ({self.ttl} s)")
                break
            self._stop.wait(self.poll)

    def _campaign(self, lease_valid_until: float) -> float:
        """One campaign; the time until which the lease held is valid (the adopted one's)."""
        assert self._lease is not None
        if self.eligible is not None and not self.eligible():
            return lease_valid_until
        result = self.client.txn(
            [etcd.cmp_create(self.key, 0)],
            [etcd.op_put(self.key, self.node_name, self._lease.id)],
            [etcd.op_range(self.key)],
        )
        epoch: int | None = None
        if result.succeeded:
            epoch = result.revision
        else:  # a retried campaign may have won already
            kv = result.ranges[0].first if result.ranges else None
            if kv and kv.lease == self._lease.id and kv.value.decode() == self.node_name:
                epoch = kv.create_revision
            elif kv and self.adopt is not None and kv.lease == self.adopt and \
                    kv.value.decode() == self.node_name:
                lease_valid_until = self._adopt(self.adopt, lease_valid_until)
                if self._lease.id == self.adopt:
                    epoch = kv.create_revision
        self.adopt = None  # once: after that the lease is this one's, or it ran out
        if epoch is None:
            return lease_valid_until
        with self._lock:
            self._epoch = epoch
            self._valid_until = lease_valid_until
            self.elected_at = time.monotonic()
        log.info("master lease: %s is master (epoch %d)", self.node_name, epoch)
        self._elected.set()
        if self.on_elected is not None:
            self.on_elected(epoch)
        return lease_valid_until

    def _adopt(self, lease_id: int, lease_valid_until: float) -> float:
        """Renew the kept lease `lease_id`; while it lives, hold it instead of the one granted
        to this masterd (revoked). The time until which the lease held is valid."""
        assert self._lease is not None
        sent = time.monotonic()
        renewed = self.client.lease_keepalive(lease_id)
        if renewed.ttl <= 0:  # it ran out meanwhile: campaign as after a crash
            log.info("master lease: the kept lease %x ran out; campaigning", lease_id)
            return lease_valid_until
        granted, self._lease = self._lease, etcd.Lease(lease_id, renewed.ttl)
        try:
            self.client.lease_revoke(granted.id)
        except etcd.EtcdError as err:  # it expires by itself
            log.warning("master lease: revoke of the unused lease failed: %s", err)
        log.info("master lease: %s holds the lease its previous masterd kept (%x)",
                 self.node_name, lease_id)
        return sent + renewed.ttl
