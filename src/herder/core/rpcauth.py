"""Signing node RPC requests with the cluster HMAC key (the envelope module), and checking them.

A request body is an envelope: `msg` = the call's JSON, `salt` = the sender's unix time,
`hmac` over both. The receiver refuses a bad signature or a time outside ±`MAX_SKEW` seconds,
so only holders of the cluster secret can call a node, and an old request cannot be replayed
later than the window.
"""

from __future__ import annotations

import time
from typing import Any

from herder.core import envelope
from herder.core.errors import SignatureError

MAX_SKEW = 300


def sign_call(key: bytes, args: Any, now: float | None = None) -> bytes:
    return envelope.sign_data(args, key, str(int(time.time() if now is None else now)))


def check_call(key: bytes, body: bytes, now: float | None = None) -> Any:
    """The call's arguments; SignatureError when unsigned, forged or outside the window."""
    data, salt = envelope.verify_data(body, key)
    try:
        sent = int(salt)
    except ValueError:
        raise SignatureError("request salt is not a timestamp") from None
    if abs((time.time() if now is None else now) - sent) > MAX_SKEW:
        raise SignatureError("request timestamp outside the allowed window")
    return data
