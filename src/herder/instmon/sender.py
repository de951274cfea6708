"""Deliver the spool to the receiver (maintd, or masakari's API), in order, never dropping.

One daemon thread takes the oldest spooled notification and POSTs its wire body to `url`
(`Content-Type: application/json`, `X-Auth-Token` when a token is set) over one keep-alive
connection, one request in flight, so the receiver sees notifications in the order they
happened. The entry leaves the spool only once the receiver has answered for it:

- 2xx: delivered.
- 400: refused for good (e.g. "host not in a failover segment"); logged as a WARNING with the
  receiver's reason and removed, as masakari's monitor has done since 2023.
- 409: the receiver has it already (our earlier attempt got through but its answer was lost) or
  the host is in maintenance; logged at INFO and removed, masakari's duplicate semantics.
- 401/403: our token was refused: an ERROR, and retried (a fixed token must not lose failures).
- anything else, connection refused, timeout, TLS failure: retried.

Retries differ from masakari's monitor (../shared/reference/masakari.md §2.4), which sleeps a
fixed interval for about two minutes and then drops the event: here the delay is exponential
with full jitter, `uniform(0, min(backoff_max, backoff_base * 2**attempt))`, so that all nodes
recovering from one receiver outage do not retry in step, and retries go on forever (the spool
is bounded and persistent; the receiver's duplicate check answers a re-sent one with 409).

Logs stay readable during an outage: each distinct error text is logged once per streak of
failures (repeats go to DEBUG), then "delivery resumed after N failures" when the receiver
answers. A TLS verification failure names the URL and the CA file it was checked against.

TLS: with `ca_file` the server must present a certificate signed by exactly that CA/certificate
(herder pins its self-signed cluster certificate, so the hostname is not checked unless
`check_hostname`); without it, the system CAs are used and the hostname is always checked.
With `client_cert` (the node's `node.pem`, towards the cluster's own maintd) the node shows its
node certificate: maintd takes a notification only from the node it names (issue 35).
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
import time
from pathlib import Path
from typing import Any, TypeVar

import httpx

from herder.core.notification import TOKEN_HEADER, Notification
from herder.instmon.spool import Spool

log = logging.getLogger("herder.instmon.sender")

IDLE_POLL = 5.0  # safety net only: put() is followed by wake()
MAX_EXPONENT = 62  # 2**attempt beyond this only overflows a float; backoff_max rules anyway
BODY_EXCERPT = 300  # characters of a receiver's answer quoted in a log line

_E = TypeVar("_E", bound=BaseException)

# The outcomes of one attempt.
DELIVERED, REFUSED, DUPLICATE, RETRY = "delivered", "refused", "duplicate", "retry"


def tls_context(ca_file: Path | None, check_hostname: bool = False,
                client_cert: Path | None = None) -> ssl.SSLContext:
    """The client context: pinned to `ca_file` when given, else the system CAs; showing
    `client_cert` (a PEM with its key: the node's `node.pem`) when given."""
    if ca_file is None:
        ctx = ssl.create_default_context()  # hostname checked: any public cert would pass
    else:
        ctx = ssl.create_default_context(cafile=str(ca_file))
        ctx.check_hostname = check_hostname
        # The pinned file is the whole trust: X.509 strictness (Python 3.13's default) adds
        # nothing and would refuse herder's minimal self-signed certificate.
        ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    if client_cert is not None:
        ctx.load_cert_chain(client_cert)
    return ctx


class Sender:
    """The delivery thread (see the module docstring)."""

    def __init__(self, spool: Spool, url: str, token: str | None = None,
                 ca_file: Path | None = None, check_hostname: bool = False,
                 client_cert: Path | None = None,
                 timeout: float = 10.0, backoff_base: float = 0.5, backoff_max: float = 60.0,
                 rng: random.Random | None = None) -> None:
        self.spool = spool
        self.url = url
        self.token = token
        self.ca_file = ca_file
        self.client_cert = client_cert  # the node's certificate maintd binds notifications to
        self.check_hostname = check_hostname
        self.timeout = timeout
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.rng = rng or random.Random()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards the counters read by stats()
        self.sent = 0
        self.refused_400 = 0
        self.duplicate_409 = 0
        self.retries = 0
        self.consecutive_failures = 0
        self.last_error: str | None = None
        self.last_success: float | None = None  # time.time() of the last answered POST
        self._logged: set[str] = set()  # the error texts already logged in this streak

    # -- public API ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the sender is started already")
        self._thread = threading.Thread(target=self._run, name="instmon-sender", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop the thread; True when it has ended within `timeout`. Prompt while backing off
        or idle; a request in flight is waited for (at most the HTTP timeout), and an entry
        is removed only after its answer, so stopping never loses one."""
        self._stop.set()
        self._wake.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def wake(self) -> None:
        """Something was put in the spool: send it now rather than at the next poll."""
        self._wake.set()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "sent": self.sent,
                "refused_400": self.refused_400,
                "duplicate_409": self.duplicate_409,
                "retries": self.retries,
                "consecutive_failures": self.consecutive_failures,
                "last_error": self.last_error,
                "last_success": self.last_success,
                "queued": len(self.spool),
            }

    # -- the thread ---------------------------------------------------------------------------

    def _client(self) -> httpx.Client:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers[TOKEN_HEADER] = self.token
        verify: ssl.SSLContext | bool = True
        if self.url.startswith("https:"):
            verify = tls_context(self.ca_file, self.check_hostname, self.client_cert)
        return httpx.Client(headers=headers, timeout=self.timeout, verify=verify,
                            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))

    def _run(self) -> None:
        try:
            with self._client() as client:
                while not self._stop.is_set():
                    # Clear before peeking: a put+wake after the peek then ends the wait.
                    self._wake.clear()
                    batch = self.spool.peek(1)
                    if not batch:
                        self._wake.wait(IDLE_POLL)
                        continue
                    seq, note = batch[0]
                    if self._attempt(client, note) == RETRY:
                        self._stop.wait(self._backoff())  # a wake must not cut the backoff
                    else:
                        self.spool.remove(seq)
        except Exception:  # a bug must be visible; the entries stay spooled for a restart
            log.exception("instmon sender for %s stopped by an unexpected error", self.url)
            raise

    def _backoff(self) -> float:
        attempt = min(self.consecutive_failures - 1, MAX_EXPONENT)
        return self.rng.uniform(0, min(self.backoff_max, self.backoff_base * 2**attempt))

    def _attempt(self, client: httpx.Client, note: Notification) -> str:
        try:
            resp = client.post(self.url, content=note.to_json())
        except httpx.HTTPError as err:
            return self._failed(*self._describe_error(err))
        status = resp.status_code
        text = resp.text[:BODY_EXCERPT].strip()
        if 200 <= status < 300:
            self._answered(DELIVERED)
            return DELIVERED
        if status == 400:
            log.warning("receiver refused the notification (400): %s", text)
            self._answered(REFUSED)
            return REFUSED
        if status == 409:
            log.info("receiver already has it or the host is in maintenance (409): %s", text)
            self._answered(DUPLICATE)
            return DUPLICATE
        if status in (401, 403):
            return self._failed(logging.ERROR,
                                f"receiver refused our token ({status}) at {self.url}: {text}; "
                                "check the cluster key; retrying")
        return self._failed(logging.WARNING,
                            f"receiver {self.url} answered {status}: {text}; retrying")

    def _answered(self, outcome: str) -> None:
        with self._lock:
            if self.consecutive_failures:
                log.info("delivery to %s resumed after %d failures", self.url,
                         self.consecutive_failures)
            self.consecutive_failures = 0
            self._logged.clear()
            self.last_success = time.time()
            if outcome == DELIVERED:
                self.sent += 1
            elif outcome == REFUSED:
                self.refused_400 += 1
            else:
                self.duplicate_409 += 1

    def _failed(self, level: int, message: str) -> str:
        with self._lock:
            self.consecutive_failures += 1
            self.retries += 1
            self.last_error = message
            repeat = message in self._logged
            if len(self._logged) >= 64:  # answers that quote request ids: stay bounded
                self._logged.clear()
            self._logged.add(message)
        # Each text once per streak; repeats at DEBUG.
        log.log(logging.DEBUG if repeat else level, "%s", message)
        return RETRY

    def _describe_error(self, err: httpx.HTTPError) -> tuple[int, str]:
        """The log level and text for a request that got no answer."""
        verify = _find(err, ssl.SSLCertVerificationError)
        if verify is not None:
            reason = verify.verify_message or str(verify)
            if self.ca_file is None:
                where = f"not signed by a system CA: {reason}"
            elif "hostname" in reason.lower():
                where = f"{reason}; CA file {self.ca_file}"
            else:
                where = f"not signed by the CA in {self.ca_file}: {reason}"
            # An ERROR: a wrong certificate or CA file does not heal by waiting.
            return logging.ERROR, (f"TLS verification of {self.url}: certificate verify failed "
                                   f"({where}); nothing sent, retrying")
        tls = _find(err, ssl.SSLError)
        if tls is not None:
            return logging.ERROR, (f"TLS handshake with {self.url} failed: {tls}; nothing "
                                   "sent, retrying")
        if isinstance(err, httpx.TimeoutException):
            return logging.WARNING, (f"no answer from {self.url} within {self.timeout} s "
                                     f"({type(err).__name__}); retrying")
        # Receiver down or restarting: expected now and then, and it heals.
        return logging.WARNING, (f"cannot deliver to {self.url}: "
                                 f"{err or type(err).__name__}; retrying")


def _find(err: BaseException, kind: type[_E]) -> _E | None:
    """The first exception of `kind` in `err`'s chain of causes (httpx wraps ssl's errors)."""
    seen: set[int] = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, kind):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None
