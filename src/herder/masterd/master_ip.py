"""The floating master IP brought up by masterd as master (Ganeti's `node_activate_master_ip`
through `daemon-util activate-master-ip`): on the etcd backend once elected and taken down when
deposed (the IP follows the lease, docs/ha.md); on the file backend whenever masterd starts as
the master, so a master that crashed or rebooted serves at the cluster's address again (a clean
stop leaves it up, as Ganeti's `daemon-util stop-master` does: an upgrade or a restart does not
cut the cluster's address). Only where the master node's primary IP is an address of this
host: a masterd run elsewhere for the config it reads (tests, a workstation) touches no
network device."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from typing import Protocol

from herder.core import master_daemons, model
from herder.core.errors import HerderError
from herder.core.rpcdefs.role_calls import MasterIp
from herder.core.store import ConfigStore

log = logging.getLogger("herder.masterd")
MASTER_IP_TIMEOUT = 60.0  # daemon-util's activate/deactivate-master-ip (a Python start)
# while another host still has the master IP (an old master takes it down once it knows it
# lost the lease or the config names another master): seconds between tries
MASTER_IP_RETRY = 2.0


class Master(Protocol):
    """What the holder asks of a masterd (`MasterDaemon`)."""

    me: str  # this node's name
    store: ConfigStore
    deposed: str | None  # why it stopped acting as master (None: it did not)


def find_me(config: model.ConfigData, me: str) -> model.Node | None:
    return next((n for n in config.nodes.values()
                 if n.name == me or n.name.split(".")[0] == me), None)


def is_local_address(ip: str) -> bool:
    """Whether `ip` is an address of this host (a socket can be bound to it)."""
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(ip).version == 6 else socket.AF_INET
    except ValueError:
        return False
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((ip, 0))
        except OSError:
            return False
    return True


def floating_master_ip(config: model.ConfigData, me: str) -> MasterIp | None:
    """The master IP this node brings up as master: None when there is none to bring up (it
    is this node's own primary IP, as `take_over` leaves it when there is no floating IP)."""
    node = find_me(config, me)
    c = config.cluster
    if node is None or not c.master_ip or c.master_ip == node.primary_ip:
        return None
    return MasterIp.of_cluster(c)


class MasterIpHolder:
    """The floating master IP of a masterd acting as master: brought up when it starts acting
    (retried while another host still has it: an old master takes it down once it lost the
    lease or was failed over, and `activate-master-ip` refuses an address another machine
    answers for); on etcd taken down when it stops acting as master (`release`: deposed, or a
    clean stop that hands the lease over at once), so the master IP follows the lease."""

    def __init__(self, master: Master) -> None:
        self.master = master
        self.up: MasterIp | None = None  # what this masterd brings or brought up
        # set once the master IP is up here, or there is none to bring up: what the etcd
        # master's maintd start waits for (`etcd_master.start_maintd`: maintd listens on the
        # master IP only when it is up as maintd starts)
        self.settled = asyncio.Event()

    async def hold(self, stop: asyncio.Event) -> None:
        try:
            await self._bring_up(stop)
        finally:
            if self.master.deposed is None and not stop.is_set():
                self.settled.set()

    async def _bring_up(self, stop: asyncio.Event) -> None:
        config = self.master.store.snapshot()
        net = floating_master_ip(config, self.master.me)
        node = find_me(config, self.master.me)
        if net is None or node is None:
            return
        if not is_local_address(node.primary_ip):
            log.warning("master: %s: the master IP %s is not brought up: this host does not "
                        "have the node's primary IP %s", self.master.me, net.ip,
                        node.primary_ip)
            return
        # set first: a stop while the activation runs still takes it down (`release`; an
        # address that is not there is left alone)
        self.up = net
        while not stop.is_set() and self.master.deposed is None:
            try:
                said = await asyncio.to_thread(master_daemons.daemon_util,
                                               "activate-master-ip", *net.options(),
                                               timeout=MASTER_IP_TIMEOUT)
            except HerderError as err:
                log.warning("master: %s: %s (trying again in %g s)", self.master.me,
                            err, MASTER_IP_RETRY)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=MASTER_IP_RETRY)
                continue
            log.info("master: %s: %s", self.master.me, said)
            return

    async def release(self) -> None:
        net, self.up = self.up, None
        if net is None:
            return
        try:
            said = await asyncio.to_thread(master_daemons.daemon_util, "deactivate-master-ip",
                                           *net.options(), timeout=MASTER_IP_TIMEOUT)
        except HerderError as err:
            log.warning("master: %s: cannot take the master IP down: %s",
                        self.master.me, err)
            return
        log.info("master: %s: %s", self.master.me, said)


async def release_if_here(master: Master) -> None:
    """A standby on etcd takes down a floating master IP this host still has before it
    campaigns: its masterd stopped acting as master without taking it down (a crash, a
    SIGKILL; the supervisor restarted it as a standby), and while this host answers for the
    address the elected master cannot bring it up (`activate-master-ip` refuses an address
    another machine answers for), so the nodes' heartbeats to the master IP and the cluster's
    address would reach a standby. The IP follows the lease: the master elected brings it up
    again, here too if it is this node."""
    config = master.store.snapshot()
    net = floating_master_ip(config, master.me)
    if net is None or not net.ip or not is_local_address(net.ip):
        return
    log.warning("master: %s: a standby with the master IP %s up here (its masterd stopped "
                "as master without taking it down): taking it down", master.me, net.ip)
    holder = MasterIpHolder(master)
    holder.up = net
    await holder.release()
