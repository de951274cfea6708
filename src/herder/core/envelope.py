"""Signed messages with the cluster HMAC key: Ganeti's confd envelope.

    {"msg": <JSON text>, "salt": <string>, "hmac": hex(HMAC-SHA1(key, salt + msg))}

The key is the key file's bytes used as-is, trailing newline included (as Ganeti does). The HMAC
is checked over the *received* `msg` text, never a re-serialisation, so any sender's formatting
verifies. confd, mond's self-diagnose report and maintd all use this module.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from herder.core import untrusted
from herder.core.errors import SignatureError

# confd's framing: a four-character code before the envelope ("plain json 0").
MAGIC = b"plj0"
# Largest UDP payload Ganeti sends or accepts, magic included.
MAX_UDP_DATA_SIZE = 61440

_compact = msgspec.json.Encoder(order="sorted")


def compute_hmac(key: bytes, salt: str, msg: str) -> str:
    """HMAC-SHA1 over salt + msg, as 40 lowercase hex digits."""
    return hmac.new(key, (salt + msg).encode(), hashlib.sha1).hexdigest()


def sign(msg: str, key: bytes, salt: str) -> dict[str, str]:
    """Wrap an already-serialised message."""
    return {"msg": msg, "salt": salt, "hmac": compute_hmac(key, salt, msg)}


def dumps(value: Any) -> str:
    """Compact JSON with sorted keys, as Ganeti 3 writes inner messages."""
    return _compact.encode(value).decode()


def sign_data(data: Any, key: bytes, salt: str) -> bytes:
    """Serialise `data`, sign it, and return the envelope as JSON bytes."""
    return _compact.encode(sign(dumps(data), key, salt))


def verify(envelope: Mapping[str, Any] | bytes | str, key: bytes) -> tuple[str, str]:
    """Check an envelope; return (msg text, salt). Raises SignatureError with the reason."""
    if isinstance(envelope, bytes | str):
        try:
            envelope = untrusted.decode(envelope, what="signed message")
        except untrusted.BadDocument as err:
            raise SignatureError(str(err)) from None
    if not isinstance(envelope, Mapping):
        raise SignatureError("invalid signed message: not a JSON object")
    msg, salt, mac = envelope.get("msg"), envelope.get("salt"), envelope.get("hmac")
    if not isinstance(msg, str) or not isinstance(salt, str) or not isinstance(mac, str):
        raise SignatureError("invalid signed message: needs string fields msg, salt and hmac")
    if not hmac.compare_digest(compute_hmac(key, salt, msg), mac.lower()):
        raise SignatureError("invalid signature")
    return msg, salt


def verify_data(envelope: Mapping[str, Any] | bytes | str, key: bytes) -> tuple[Any, str]:
    """Like `verify`, and decode the message: return (data, salt)."""
    msg, salt = verify(envelope, key)
    try:
        return untrusted.decode(msg, what="signed message body"), salt
    except untrusted.BadDocument as err:
        raise SignatureError(str(err)) from None


def pack(envelope_json: bytes) -> bytes:
    return MAGIC + envelope_json


def unpack(payload: bytes) -> bytes:
    """Strip confd's magic; raises SignatureError on a short or foreign packet."""
    if len(payload) < len(MAGIC) or not payload.startswith(MAGIC):
        raise SignatureError("not a confd packet (bad magic)")
    return payload[len(MAGIC) :]


# --- the key file ---------------------------------------------------------------------------


def generate_key() -> bytes:
    """A new cluster key in Ganeti's format: 40 hex digits and a newline."""
    return (secrets.token_hex(20) + "\n").encode()


def load_key(path: str | os.PathLike[str]) -> bytes:
    """The key file's exact bytes (newline kept: Ganeti signs with it)."""
    try:
        key = Path(path).read_bytes()
    except OSError as err:
        raise SignatureError(f"cannot read HMAC key {path}: {err.strerror}") from None
    if not key.strip():
        raise SignatureError(f"HMAC key file {path} is empty")
    return key
