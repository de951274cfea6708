"""The confd daemon: answers signed UDP queries from the cluster config (IPv4 and IPv6).

Every request that is not perfectly valid is dropped silently (never answered, never fatal): a
bad magic, envelope, JSON or HMAC; a timestamp that is not an integer or lies outside ±300 s
(`max_skew`); a body without protocol 1, an integer type or an rsalt; an unknown type; a packet
larger than 61440 bytes; and a repeat of a request already answered (same HMAC within the time
window; Ganeti 3.0 answers replays, herder does not: docs/compat.md). Replies are signed with the
request's rsalt. The config comes from a `ConfigCache`, checked at most every `reload_interval`
seconds, so a changed config file is answered within a second. Without a loadable config every
valid request gets status 1 with the reason (as Ganeti 3.0 does).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

import msgspec

from herder.confd import queries
from herder.core import confd, model
from herder.core import serve as serve_helper
from herder.core.errors import HerderError
from herder.core.serve import Address, os_reason

log = logging.getLogger("herder.confd")

ConfigSource = Callable[[], model.ConfigData | None]

# Answers are cached per (type, query) while the config object stays the same.
ANSWER_CACHE_SIZE = 4096
# Remembered request HMACs (replay protection); beyond this the oldest are forgotten early.
REPLAY_CACHE_SIZE = 200_000


class ConfdProcessor:
    """Turns one request packet into one reply packet, or None (drop). Never raises."""

    def __init__(self, config_source: ConfigSource, hmac_key: bytes, *,
                 max_skew: float = confd.MAX_CLOCK_SKEW, reload_interval: float = 0.25,
                 clock: Callable[[], float] = time.time,
                 error_source: Callable[[], str | None] | None = None) -> None:
        self.config_source = config_source
        self.hmac_key = hmac_key
        self.max_skew = max_skew
        self.reload_interval = reload_interval
        self.clock = clock
        self.error_source = error_source
        self._config: model.ConfigData | None = None
        self._checked = -1e18
        self._answers: dict[tuple[int, bytes], str] = {}
        self._seen: dict[str, float] = {}
        self._seen_order: collections.deque[tuple[float, str]] = collections.deque()
        self.stats = collections.Counter[str]()

    def config(self) -> model.ConfigData | None:
        now = time.monotonic()
        if now - self._checked >= self.reload_interval:
            self._checked = now
            try:
                config = self.config_source()
            except Exception:  # a broken source must not stop the daemon
                log.exception("loading the config failed")
                config = self._config
            if config is not self._config:
                self._config = config
                self._answers.clear()
        return self._config

    def _replayed(self, mac: str, now: float) -> bool:
        seen, order = self._seen, self._seen_order
        while order and (order[0][0] < now or len(order) > REPLAY_CACHE_SIZE):
            _, old = order.popleft()
            seen.pop(old, None)
        if mac in seen:
            return True
        # A request is valid for up to 2 * max_skew (its stamp may lie max_skew ahead).
        expiry = now + 2 * self.max_skew + 1
        seen[mac] = expiry
        order.append((expiry, mac))
        return False

    def _message(self, req: confd.Request) -> str | None:
        config = self.config()
        if config is None:
            reason = (self.error_source() if self.error_source else None) or "no config file"
            return confd.reply_message(confd.REPL_STATUS_ERROR, f"cannot load the configuration: "
                                       f"{reason}", 0)
        key = (req.type, msgspec.json.encode(req.query))
        msg = self._answers.get(key)
        if msg is None:
            result = queries.answer(config, req.type, req.query)
            if result is None:
                return None
            msg = confd.reply_message(*result)
            if len(self._answers) >= ANSWER_CACHE_SIZE:
                self._answers.clear()
            self._answers[key] = msg
        return msg

    def process(self, payload: bytes) -> bytes | None:
        try:
            now = self.clock()
            try:
                req = confd.parse_request(payload, self.hmac_key, now=now, max_skew=self.max_skew)
            except HerderError as err:
                self.stats["dropped"] += 1
                log.debug("dropped request: %s", err)
                return None
            if req.type not in queries.HANDLERS:
                self.stats["dropped"] += 1
                log.debug("dropped request of unknown type %s", req.type)
                return None
            if self._replayed(req.mac, now):
                self.stats["replayed"] += 1
                log.debug("dropped a replayed request")
                return None
            msg = self._message(req)
            if msg is None:
                return None
            reply = confd.build_reply(msg, self.hmac_key, req.rsalt)
            if len(reply) > confd.MAX_UDP_DATA_SIZE:
                self.stats["too_big"] += 1
                log.warning("reply to a type %d query too big for one UDP packet", req.type)
                return None
            self.stats["answered"] += 1
            return reply
        except Exception:  # never let a packet kill the daemon
            self.stats["errors"] += 1
            log.exception("internal error answering a confd request")
            return None


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, processor: ConfdProcessor) -> None:
        self.processor = processor
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if len(data) > confd.MAX_UDP_DATA_SIZE:
            self.processor.stats["dropped"] += 1
            return
        reply = self.processor.process(data)
        if reply is not None and self.transport is not None:
            with contextlib.suppress(OSError):
                self.transport.sendto(reply, addr)

    def error_received(self, exc: Exception) -> None:  # ICMP errors for earlier replies
        log.debug("socket error: %s", exc)


def open_socket(host: str, port: int) -> socket.socket:
    """A bound UDP socket; IPv6 sockets are v6-only so '::' and '0.0.0.0' can share a port."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_DGRAM,
                               flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError):  # more room for bursts
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
        sock.bind(sockaddr)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def default_binds(port: int) -> list[tuple[str, int]]:
    """All IPv4 addresses, and all IPv6 ones where the host has IPv6."""
    binds = [("0.0.0.0", port)]
    if socket.has_ipv6:
        try:
            probe = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            probe.close()
            binds.append(("::", port))
        except OSError:
            pass
    return binds


class UdpEndpoint:
    """confd's sockets, one per (host, port), for `core.serve`. With port 0 the IPv4 and IPv6
    sockets share the first socket's port."""

    def __init__(self, processor: ConfdProcessor, binds: Iterable[tuple[str, int]]) -> None:
        self.processor = processor
        self.binds = list(binds)
        self.transports: list[asyncio.DatagramTransport] = []

    async def open(self) -> list[Address]:
        loop = asyncio.get_running_loop()
        bound: list[Address] = []
        shared_port = 0
        for host, port in self.binds:
            try:
                sock = open_socket(host, port or shared_port)
            except OSError as err:
                raise HerderError(f"cannot listen on udp port {port}: "
                                  f"{os_reason(err)}") from None
            name = sock.getsockname()
            shared_port = shared_port or name[1]
            transport, _ = await loop.create_datagram_endpoint(
                lambda: _Protocol(self.processor), sock=sock)
            self.transports.append(transport)
            bound.append(Address(name[0], name[1]))
        return bound

    async def close(self) -> None:
        for transport in self.transports:
            transport.close()
        self.transports = []


async def serve(processor: ConfdProcessor, binds: Iterable[tuple[str, int]], *,
                stop: asyncio.Event | None = None,
                ready: Callable[[list[tuple[str, int]]], None] | None = None,
                run_dir: Path | None = None) -> None:
    """Serve on every (host, port) until `stop` is set. `ready` gets the bound addresses;
    `run_dir`: where confd.pid goes (None: no pid file)."""
    await serve_helper.serve(
        "confd", run_dir, endpoints=[UdpEndpoint(processor, binds)],
        ready=None if ready is None else lambda bound: ready([(a.host, a.port) for a in bound]),
        stop=stop)
