"""The node's liveness lease and its watchdog: self-fencing (docs/ha.md "Node failure").

An online, VM-capable node that has joined renews its lease every `RENEW_PERIOD` seconds with a
heartbeat to masterd at the master IP (`masterd.leases`); when masterd does not answer, with
the master candidates' noded (`POST /lease/NAME`, this module's route on them): the lease is
renewed when a strict majority of the master candidates (this node counted when it is one)
answered. A renewal keeps the lease until `LEASE_TIME` after it was *sent*. An answer that
says the node is offline renews nothing: the node stands down at once, as when its ssconf no
longer has it online (every domain destroyed, none started; the watchdog disarmed once none
runs: a node the operator or maintd took offline alive, say for a repair, is not reset).

While the lease is valid noded pets the watchdog the node parameters name (`watchdog_device`,
`watchdog_timeout`) every second. When it runs out, noded destroys every domain on the node at
once, refuses to start one (`refusal`) until it holds the lease again, and stops petting: the
watchdog resets the node.

Every renewal carries a counter (`rpcauth.CounterSource`: strictly increasing), which the
master and each candidate take only above the node's last one (`rpcauth.Counters`), and is
sent over TLS with the node's own certificate, which they check against NAME: only the node
itself keeps its lease alive.

The candidates' side: `POST /lease/NAME` takes a call of `node_lease` signed for NAME with the
node-lease key from a caller showing NAME's own node certificate, refuses a node the ssconf has
offline, and records when NAME asked (`witness`); `node_reachable` (a node RPC, the master's)
answers whether this node reaches another one's noded and how long ago that node asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import ssl
import stat
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, as_completed, wait
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import msgspec
from aiohttp import web

from herder.core import access, node_certs, ports, purpose_keys, rpcauth, ssconf
from herder.core.errors import HerderError, SignatureError

if TYPE_CHECKING:
    from herder.noded.node import Node

log = logging.getLogger("herder.noded")
_encode = msgspec.json.Encoder().encode
METHOD = "node_lease"  # masterd.leases.METHOD
LEASE_TIME = 6.0  # masterd.leases.LEASE_TIME
RENEW_PERIOD = 2.0
PET_PERIOD = 1.0
OFFLINE_ANSWER = "refused: the master has this node offline"
CALL_TIMEOUT = 2.0  # the master's answer, and each candidate's (asked in parallel)
WDIOC_SETTIMEOUT = 0xC0045706  # _IOWR('W', 6, int): linux/watchdog.h
MAGIC_CLOSE = b"V"


class Watchdog:
    """A Linux watchdog device: any write pets it, `V` then close disarms it; closed
    without `V` it keeps counting (and resets the machine at its timeout)."""

    def __init__(self, path: str, timeout: int) -> None:
        self.path = path
        self.timeout = timeout
        self._fd: int | None = None

    @property
    def armed(self) -> bool:
        return self._fd is not None

    def open(self) -> None:
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        if stat.S_ISCHR(os.fstat(fd).st_mode):
            try:
                fcntl.ioctl(fd, WDIOC_SETTIMEOUT, struct.pack("i", self.timeout))
            except OSError as err:
                log.warning("watchdog %s: cannot set its timeout to %d s: %s", self.path,
                            self.timeout, err.strerror)
        self._fd = fd
        self.pet()
        log.info("watchdog %s armed (timeout %d s)", self.path, self.timeout)

    def pet(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(BlockingIOError):
            os.write(self._fd, b"1")

    def close(self, disarm: bool) -> None:
        """Close the device; `disarm`: with the magic `V` first (it stops counting)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        if disarm:
            with contextlib.suppress(OSError):
                os.write(fd, MAGIC_CLOSE)
        os.close(fd)
        log.info("watchdog %s %s", self.path, "disarmed" if disarm
                 else "closed armed (the node resets unless noded opens it again in time)")


def majority(answered: int, candidates: int) -> bool:
    """Whether `answered` of `candidates` master candidates is a strict majority."""
    return candidates > 0 and 2 * answered > candidates


class LeaseKeeper:
    """The node's lease and watchdog (two threads: renewals, petting)."""

    def __init__(self, daemon: Node, *, clock: Callable[[], float] = time.monotonic,
                 master_port: int = ports.MASTERD, noded_port: int = ports.NODED) -> None:
        self.daemon = daemon
        self.clock = clock
        self.master_port = master_port
        self.noded_port = noded_port
        self.valid_until = 0.0  # monotonic
        self.holding = False
        self.fenced = False  # the lease ran out: no domain starts until it is held again
        self.last_renewal = ""  # how the last renewal went (master, candidates, refused)
        self.watchdog: Watchdog | None = None
        self._no_watchdog = ""  # why the watchdog could not be opened (said once)
        self.counter = rpcauth.CounterSource()
        # the master did not answer the last heartbeat: the next round asks it and the
        # candidates at once (`_ask_round`)
        self.master_missed = False
        self._stop = threading.Event()
        self._expiry = threading.Lock()  # both threads check the lease's end
        self._threads: list[threading.Thread] = []

    # --- what the node is ----------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.daemon.settings.node_name

    @property
    def data_dir(self) -> Path:
        return self.daemon.data_dir

    def participates(self) -> bool:
        """A joined node the ssconf has online and VM-capable holds a lease."""
        if not self.daemon.trust.joined() or ssconf.master_ip(self.data_dir) is None:
            return False
        online = ssconf.read_lines("online_nodes", self.data_dir) or []
        capable = ssconf.read_lines("vm_capable_nodes", self.data_dir) or []
        return self.name in online and self.name in capable

    def refusal(self) -> str | None:
        """Why no domain may start here now (None: it may)."""
        if self.fenced:
            return ("this node lost its liveness lease and fenced itself (its domains were "
                    "stopped); it starts none until it holds the lease again")
        return None

    # --- running ----------------------------------------------------------------------------

    def start(self) -> None:
        for target, name in ((self._renew_loop, "lease-renew"), (self._pet_loop, "watchdog")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """noded stops: the watchdog is disarmed only when no domain runs here."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=CALL_TIMEOUT * 3)
        if self.watchdog is not None:
            running = self._running_domains()
            self.watchdog.close(disarm=not running)

    def _running_domains(self) -> list[str]:
        try:
            return [name for name, state in self.daemon.hv.list_domains().items()
                    if state in ("running", "paused", "blocked")]
        except HerderError as err:
            log.warning("lease: cannot list the domains: %s", err)
            return ["?"]  # cannot tell: keep the watchdog armed

    def _pet_loop(self) -> None:
        while not self._stop.wait(PET_PERIOD):
            self.check_expiry()
            if self.watchdog is not None and self.holding:
                self.watchdog.pet()

    def _renew_loop(self) -> None:
        while not self._stop.is_set():
            started = self.clock()
            try:
                self.renew_once()
            except Exception:  # a bug must not end the lease thread: logged, tried again
                log.exception("lease renewal failed")
            self._stop.wait(max(0.0, RENEW_PERIOD - (self.clock() - started)))

    # --- one renewal ------------------------------------------------------------------------

    def renew_once(self) -> None:
        if not self.participates():
            self._stand_down("this node is no longer online and VM-capable in ssconf")
            return
        sent = self.clock()
        how = self._ask_round()
        if how == OFFLINE_ANSWER:
            # the master answered, alive, before this node's ssconf says so (Ganeti sends
            # no ssconf to an offline node): the same as above, not a lease running out
            self._stand_down(how)
            if how != self.last_renewal:
                log.info("lease: %s", how)
                self.last_renewal = how
            return
        if how is not None and how.startswith("renewed"):
            self.valid_until = sent + LEASE_TIME
            if not self.holding:
                log.info("lease: held (%s)", how)
            self._arm()
            self.holding = True
            self.fenced = False
        if how != self.last_renewal:
            log.info("lease: %s", how or "no renewal")
            self.last_renewal = how or ""
        self.check_expiry()

    def _ask_round(self) -> str | None:
        """One renewal's answer: the master's; when it does not answer, the candidates'.
        While the master answers, only it is asked. Once it missed a heartbeat (down, or this
        node cut off from it), the next rounds ask it and the candidates at once and take the
        first renewal: asked one after the other, a dead master's timeout and then a dead
        candidate's (the master is one) made a round last about 2 x CALL_TIMEOUT, longer than
        LEASE_TIME - RENEW_PERIOD, so every node's lease ran out between two rounds and
        destroyed its domains whenever the master died."""
        if not self.master_missed:
            how = self._ask_master()
            if how is not None:
                return how
            self.master_missed = True
            return self._ask_candidates()
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lease-round")
        master = pool.submit(self._ask_master)
        master.add_done_callback(self._master_answered)
        candidates = pool.submit(self._ask_candidates)
        pool.shutdown(wait=False)  # a call still running ends within its timeout
        pending: set[Future[str | None]] = {master, candidates}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            if master in done and master.result() is not None:
                return master.result()  # the master answered: its word (offline, refused)
            if candidates in done and candidates.result() is not None:
                return candidates.result()
        return None

    def _master_answered(self, call: Future[str | None]) -> None:
        if call.exception() is None and call.result() is not None:
            self.master_missed = False

    def _stand_down(self, why: str) -> None:
        """The cluster counts this node out while it lives: it runs nothing any more, and
        the watchdog is disarmed once no domain runs (nothing left for a reset to stop)."""
        if self.holding:
            log.error("lease: %s", why)
            self.fence()
        if self.watchdog is not None and not self._running_domains():
            self.watchdog.close(disarm=True)
            self.watchdog = None

    def _arm(self) -> None:
        values = self.daemon.node_params()
        device = str(values.get("watchdog_device") or "")
        timeout = int(values.get("watchdog_timeout") or 10)
        if not device or self.watchdog is not None:
            return
        dog = Watchdog(device, timeout)
        try:
            dog.open()
        except OSError as err:
            why = f"{device}: {err.strerror or err}"
            if why != self._no_watchdog:
                log.warning("lease: no watchdog (%s); the lease still stops the domains; "
                            "tried again at every renewal", why)
            self._no_watchdog = why
            return
        self._no_watchdog = ""
        self.watchdog = dog

    def check_expiry(self) -> None:
        if self.holding and self.clock() >= self.valid_until:
            self.fence()

    def fence(self) -> None:
        """The lease ran out: destroy every domain, stop petting (the watchdog resets us)."""
        with self._expiry:
            if not self.holding:
                return  # the other thread did it
            self.holding = False
            self.fenced = True
        log.error("lease: not renewed within %.0f s: destroying every domain and no longer "
                  "petting the watchdog", LEASE_TIME)
        try:
            domains = self.daemon.hv.list_domains()
        except HerderError as err:
            log.error("lease: cannot list the domains (%s): the watchdog must reset the node",
                      err)
            return
        for name, state in sorted(domains.items()):
            if state in ("running", "paused", "blocked", "pmsuspended"):
                try:
                    self.daemon.hv.destroy(name)
                    log.error("lease: destroyed %s", name)
                except HerderError as err:
                    log.error("lease: cannot destroy %s: %s", name, err)

    # --- the calls ---------------------------------------------------------------------------

    def _body(self) -> bytes:
        keys = self.daemon.hmac_keys()
        if not keys:
            raise HerderError("the node has no cluster key")
        return rpcauth.sign_call(keys[0], METHOD, self.name, {"counter": self.counter.next()},
                                 purpose=purpose_keys.NODE_LEASE)

    def _caught_up(self, answer: httpx.Response) -> bool:
        """A 409 naming the last counter taken (this node's clock went back): count on from
        it; whether it was one."""
        if answer.status_code != 409:
            return False
        try:
            last = answer.json().get("counter")
        except ValueError:
            return False
        if not isinstance(last, int) or isinstance(last, bool):
            return False
        self.counter.catch_up(last)
        return True

    def _client(self) -> httpx.Client:
        trust = self.daemon.trust
        context = ssl.create_default_context(cafile=str(trust.secrets.certificate))
        context.check_hostname = False  # the cluster certificate names the cluster
        with contextlib.suppress(OSError, ssl.SSLError):
            context.load_cert_chain(node_certs.node_certificate_beside(
                trust.secrets.certificate))
        return httpx.Client(verify=context, timeout=CALL_TIMEOUT)

    def _ask_master(self) -> str | None:
        """"renewed by the master", "refused: ..." (it answered: no renewal), or None
        (no answer: ask the candidates)."""
        ip = ssconf.master_ip(self.data_dir)
        if ip is None:
            return None
        host = f"[{ip}]" if ":" in ip else ip
        url = f"https://{host}:{self.master_port}/2/herder/nodes/{self.name}/heartbeat"
        try:
            with self._client() as http:
                answer = http.post(url, content=self._body())
                if self._caught_up(answer):  # once more, above the counter it named
                    answer = http.post(url, content=self._body())
        except (httpx.HTTPError, OSError, ssl.SSLError, HerderError):
            return None
        if answer.status_code != 200:
            return f"refused by the master ({answer.status_code}): {answer.text.strip()[:200]}"
        try:
            offline = bool(answer.json().get("offline"))
        except ValueError:
            return None
        return OFFLINE_ANSWER if offline else "renewed by the master"

    def _candidates(self) -> dict[str, str]:
        """name -> primary IP of every master candidate but this node."""
        names = ssconf.read_lines("master_candidates", self.data_dir) or []
        ips = dict(line.split(None, 1) for line in
                   ssconf.read_lines("node_primary_ips", self.data_dir) or [] if " " in line)
        return {n: ips[n] for n in names if n in ips}

    def _ask_candidate(self, ip: str) -> bool:
        """Whether the master candidate at `ip` renewed this node's lease (its witness)."""
        host = f"[{ip}]" if ":" in ip else ip
        url = f"https://{host}:{self.noded_port}/lease/{self.name}"
        try:
            with self._client() as http:
                answer = http.post(url, content=self._body())
                if self._caught_up(answer):
                    answer = http.post(url, content=self._body())
        except (httpx.HTTPError, OSError, ssl.SSLError, HerderError):
            return False
        return answer.status_code == 200

    def _ask_candidates(self) -> str | None:
        """Every other master candidate asked at once; renewed as soon as a strict majority
        of the candidates (this node counting when it is one) answered, without waiting for
        one that does not (a dead candidate costs its whole timeout)."""
        names = ssconf.read_lines("master_candidates", self.data_dir) or []
        others = {n: ip for n, ip in self._candidates().items() if n != self.name}
        answered = 1 if self.name in names else 0
        if others and not majority(answered, len(names)):
            pool = ThreadPoolExecutor(max_workers=len(others), thread_name_prefix="lease-ask")
            try:
                for call in as_completed([pool.submit(self._ask_candidate, ip)
                                          for ip in others.values()]):
                    answered += call.result()
                    if majority(answered, len(names)):
                        break
            finally:
                pool.shutdown(wait=False)  # a call still running ends within its timeout
        if majority(answered, len(names)):
            return f"renewed by {answered} of {len(names)} master candidates"
        return None


# --- the candidates' side --------------------------------------------------------------------

class Witness:
    """When each node last asked this node for its lease (monotonic), in memory."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.counters = rpcauth.Counters()  # node name -> its last renewal's counter
        self._asked: dict[str, float] = {}
        self._lock = threading.Lock()

    def asked(self, node: str) -> None:
        with self._lock:
            self._asked[node] = self.clock()

    def age(self, node: str) -> float | None:
        with self._lock:
            when = self._asked.get(node)
        return None if when is None else self.clock() - when


def reachable(address: str, port: int, timeout: float) -> tuple[bool, str]:
    """Whether a TCP connection to the node's noded opens within `timeout`."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True, "noded answers"
    except OSError as err:
        return False, err.strerror or str(err)


def add_routes(app: web.Application, daemon: Node, routes: access.Routes) -> None:
    async def lease(request: web.Request) -> web.Response:
        name = request.match_info["name"]

        def refuse(status: int, why: str) -> web.Response:
            log.warning("refused a lease renewal for %s from %s: %s", name, request.remote, why)
            return web.Response(status=status, body=_encode({"error": why}),
                                content_type="application/json")

        tls = request.transport.get_extra_info("ssl_object") \
            if request.transport is not None else None
        if tls is not None:
            problem, caller = daemon.trust.node_refusal(tls.getpeercert(binary_form=True))
            if problem is not None:
                return refuse(403, f"refused: {problem}")
            if caller is not None and caller != name:
                return refuse(403, f"refused: the certificate is node {caller}'s, not {name}'s")
        try:
            args = rpcauth.check_call(daemon.hmac_keys(), await request.read(), method=METHOD,
                                      node=name, replay=None, purpose=purpose_keys.NODE_LEASE)
            daemon.witness.counters.admit(name, args.get("counter")
                                          if isinstance(args, dict) else None)
        except rpcauth.StaleCounter as err:  # the node counts on from this one
            log.warning("refused a lease renewal for %s from %s: %s", name, request.remote, err)
            return web.Response(status=409, body=_encode({"error": f"refused: {err}",
                                                          "counter": err.last}),
                                content_type="application/json")
        except SignatureError as err:
            return refuse(403, f"refused: {err}")
        candidates = ssconf.read_lines("master_candidates", daemon.data_dir) or []
        if daemon.settings.node_name not in candidates:
            return refuse(409, f"{daemon.settings.node_name} is not a master candidate")
        if name in (ssconf.read_lines("offline_nodes", daemon.data_dir) or []):
            return refuse(409, f"{name} is offline")
        daemon.witness.asked(name)
        return web.Response(body=_encode({"result": {"candidate": daemon.settings.node_name}}),
                            content_type="application/json")

    app.router.add_post("/lease/{name}", lease)
    routes.declare(lease, access.NODE_LEASE)


async def keep_lease(daemon: Node, stop: asyncio.Event) -> None:
    """noded's task: the lease and watchdog threads while noded serves."""
    daemon.lease.start()
    try:
        await stop.wait()
    finally:
        await asyncio.to_thread(daemon.lease.stop)
