"""Signing node RPC requests (the master) and checking them (noded).

A request body is a signed envelope of the call, with the node-RPC key (`core.purpose_keys`,
derived from the cluster HMAC key: no confd packet, repair request or diagnose report
verifies here, and no node RPC verifies there):

    {"msg": <JSON text>, "salt": <nonce>, "hmac": hex(HMAC-SHA256(node-RPC key, salt + msg))}
    msg = {"method": "instance_start", "node": "node2.example.com", "time": 1767225600.25,
           "nonce": "<32 hex digits>", "args": {...}}

The receiver refuses (`SignatureError`) a bad signature, a call signed for another method or
another node, a time outside ±`MAX_SKEW` seconds of its clock, and a nonce it has seen within
that window (`ReplayCache`): a captured request cannot be replayed, redirected to another node
or turned into another call.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from herder.core import purpose_keys, untrusted
from herder.core.errors import SignatureError

MAX_SKEW = 300  # seconds between the signer's clock and the receiver's
REPLAY_CAPACITY = 65536  # nonces remembered at most (about 100 calls a second over the window)

_compact = msgspec.json.Encoder(order="sorted")


class SignedCall(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """What the signature covers."""

    method: str
    node: str
    time: float
    nonce: str
    args: Any


class _Envelope(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    msg: str
    salt: str
    hmac: str


def _mac(key: bytes, salt: str, msg: str | bytes, purpose: str = purpose_keys.NODE_RPC) -> str:
    node_key = purpose_keys.derive(key, purpose)
    mac = hmac.new(node_key, salt.encode(), hashlib.sha256)
    mac.update(msg if isinstance(msg, bytes) else msg.encode())  # salt + msg, not joined
    return mac.hexdigest()


def sign_call(key: bytes, method: str, node: str, args: Any, *, now: float | None = None,
              nonce: str | None = None, purpose: str = purpose_keys.NODE_RPC) -> bytes:
    """The body of a call of `method` on `node` (its name in the config); `key` is the
    cluster HMAC key. `purpose`: the derived key signing it (a node's announcement to the
    master is signed with its own, `purpose_keys.NODE_ANNOUNCE`)."""
    nonce = nonce or secrets.token_hex(16)
    # a whole config (16 MB at 10,000 instances) is in `args`: the MAC is taken from the
    # encoded bytes and they are dropped before the envelope is encoded (2 copies at most
    # alive here, not 4)
    encoded = _compact.encode({"method": method, "node": node,
                               "time": time.time() if now is None else now,
                               "nonce": nonce, "args": args})
    mac = _mac(key, nonce, encoded, purpose)
    msg = encoded.decode()
    del encoded
    return _compact.encode({"msg": msg, "salt": nonce, "hmac": mac})


class ReplayCache:
    """The nonces accepted within the time window, in bounded memory.

    A nonce is kept until its call's time leaves the window (the time check refuses it then).
    When `capacity` nonces are kept, the oldest is dropped and calls signed at or before its
    time are refused from then on (`floor`), so a dropped nonce cannot be replayed either.
    `floor` starts at the daemon's start: a call signed before it may have been accepted by
    an earlier run of the daemon, whose nonces are gone.
    """

    def __init__(self, *, window: float = MAX_SKEW, capacity: int = REPLAY_CAPACITY,
                 floor: float | None = None) -> None:
        self.window = window
        self.capacity = capacity
        self.floor = time.time() if floor is None else floor
        self._seen: set[str] = set()
        self._by_time: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, nonce: str, sent: float, now: float) -> None:
        """Remember a call's nonce; SignatureError when it was seen or cannot be told apart."""
        with self._lock:
            while self._by_time and self._by_time[0][0] < now - self.window:
                self._seen.discard(heapq.heappop(self._by_time)[1])
            if sent <= self.floor:
                raise SignatureError("request signed before this daemon started or older than "
                                     "the calls it remembers (replay protection)")
            if nonce in self._seen:
                raise SignatureError("replayed request (nonce already used)")
            self._seen.add(nonce)
            heapq.heappush(self._by_time, (sent, nonce))
            while len(self._seen) > self.capacity:
                oldest, dropped = heapq.heappop(self._by_time)
                self._seen.discard(dropped)
                self.floor = max(self.floor, oldest)


def check_call(key: bytes | Sequence[bytes], body: bytes, *, method: str, node: str,
               replay: ReplayCache | None, now: float | None = None,
               purpose: str = purpose_keys.NODE_RPC) -> Any:
    """The arguments of a call of `method` signed for `node`; SignatureError (the reason) when
    the body is unsigned, forged, for another method or node, outside the window or replayed.
    `key`: the cluster key, or the keys accepted side by side (during a key rotation).
    `replay` None: no replay check (tools checking a body they hold)."""
    try:
        outer = untrusted.decode(body, _Envelope, what="node RPC request")
    except (untrusted.BadDocument, msgspec.ValidationError):
        raise SignatureError("not a signed node RPC request") from None
    keys = [key] if isinstance(key, bytes) else list(key)
    given = outer.hmac.lower()
    if not given.isascii():  # compare_digest refuses non-ASCII text: no HMAC of ours anyway
        raise SignatureError("invalid signature")
    if not any(hmac.compare_digest(_mac(one, outer.salt, outer.msg, purpose), given)
               for one in keys):
        raise SignatureError("invalid signature")
    try:
        call = untrusted.decode(outer.msg, SignedCall, what="signed call")
    except (untrusted.BadDocument, msgspec.ValidationError) as err:
        raise SignatureError(f"malformed signed call: {err}") from None
    if call.nonce != outer.salt or not call.nonce:
        raise SignatureError("malformed signed call: the nonce is not the salt")
    if call.method != method:
        raise SignatureError(f"request signed for method {call.method!r}, not {method!r}")
    if call.node != node:
        raise SignatureError(f"request signed for node {call.node!r}, not this node ({node})")
    current = time.time() if now is None else now
    if abs(current - call.time) > MAX_SKEW:
        raise SignatureError("request timestamp outside the allowed window")
    if replay is not None:
        replay.admit(call.nonce, call.time, current)
    return call.args


class StaleCounter(SignatureError):
    """A sender's counter is not above the last one accepted from it (`last`: that one)."""

    def __init__(self, sender: str, counter: int, last: int) -> None:
        super().__init__(f"counter {counter} of {sender} is not above the last one accepted "
                         f"({last}): replayed or out of order")
        self.last = last


class Counters:
    """The newest counter accepted from each sender, in place of a nonce cache for calls one
    sender repeats all the time (a node's lease renewals: one number a node, whatever the
    rate). A call is taken only with a counter above its sender's last one: a captured call
    cannot be replayed, an older one not slipped in after a newer one. The sender counts up
    from its clock in nanoseconds; one whose clock went back is refused with the last counter
    (`StaleCounter.last`) and counts on from there."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._last)

    def admit(self, sender: str, counter: object) -> None:
        """Take `counter` of `sender` (from its signed arguments); SignatureError when it is
        no counter, StaleCounter when it is not above the last one."""
        if not isinstance(counter, int) or isinstance(counter, bool) or counter < 0:
            raise SignatureError("malformed signed call: its counter is not a natural number")
        with self._lock:
            last = self._last.get(sender)
            if last is not None and counter <= last:
                raise StaleCounter(sender, counter, last)
            self._last[sender] = counter


class CounterSource:
    """A sender's side of `Counters`: strictly increasing, from its clock in nanoseconds."""

    def __init__(self, clock: Callable[[], int] = time.time_ns) -> None:
        self.clock = clock
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, self.clock())
            return self._last

    def catch_up(self, last: int) -> None:
        """A receiver accepted `last` already (this clock went back): count on from it."""
        with self._lock:
            self._last = max(self._last, last)
