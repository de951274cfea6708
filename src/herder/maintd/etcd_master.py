"""maintd on the etcd backend: the master is the node whose masterd holds the master lease
(`herder.masterd.etcd_master`, docs/ha.md), so that decides where maintd may run.

- At start the lease holder replaces the master candidates' confd vote (confd does not serve
  an etcd-backed cluster): maintd starts only where etcd names its node the master.
- While it runs it reads the master key every `WATCH_INTERVAL` seconds and stops (exit code
  11, "not my role") once etcd names another node or none (its masterd lost the lease or was
  stopped), so two maintd never act for the cluster at once, whether or not its masterd could
  stop it. An etcd that cannot be reached stops nothing by itself: masterd, fenced by the same
  lease, refuses every job of a maintd whose master it no longer is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from herder.core.errors import HerderError
from herder.core.fence import master_key

if TYPE_CHECKING:  # httpx only where etcd is used
    from herder.core.etcd import EtcdClient
    from herder.core.store_etcd import EtcdStore

log = logging.getLogger("herder.maintd")
WATCH_INTERVAL = 1.0


def lease_holder(client: EtcdClient, cluster: str) -> str | None:
    """The node named by the master key (None: no master elected now)."""
    kv = client.get(master_key(cluster))
    return None if kv is None else kv.value.decode()


def same_node(a: str, b: str) -> bool:
    """One node's names: the FQDN or its short form (as masterd's `--node` may be given)."""
    return a == b or a.split(".")[0] == b.split(".")[0]


def not_master(client: EtcdClient, cluster: str, me: str) -> str | None:
    """Why `me` is not the master on etcd now; None while its masterd holds the lease."""
    holder = lease_holder(client, cluster)
    if holder is None:
        return "etcd names no master (the master lease is free)"
    if not same_node(holder, me):
        return f"this node ({me}) is not the master ({holder}, the master lease's holder)"
    return None


async def watch_master(store: EtcdStore, me: str, depose: Callable[[str], None],
                       stop: asyncio.Event, interval: float = WATCH_INTERVAL) -> None:
    """Until `stop`: every `interval` seconds, `depose(reason)` once etcd no longer names
    `me` the master (then return)."""
    client = store.client.clone(timeout=max(interval, 0.5), retry_for=interval)
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
            if stop.is_set():
                return
            try:
                reason = await asyncio.to_thread(not_master, client, store.cluster, me)
            except HerderError as err:  # etcd unreachable: masterd's fence refuses our jobs
                log.warning("cannot read the master lease in etcd: %s", err)
                continue
            if reason is not None:
                depose(reason)
                return
    finally:
        client.close()
