"""Keys of their own for the protocols only herder speaks, derived from the cluster HMAC key.

confd and mond's self-diagnose signature sign with the cluster key itself, as Ganeti does (its
daemons and clients interoperate with them). Every protocol only herder speaks signs with a key
derived for it alone, so that no message of one protocol verifies in another, nor in confd:

    key(purpose) = HKDF-Expand(PRK = cluster key, info = "herder purpose key v1/" + purpose,
                               L = 32) = HMAC-SHA256(cluster key, info || 0x01)

(RFC 5869 with a single output block; the cluster key is already a random secret, so the
extract step is left out.) Nothing new is distributed: every holder of the cluster key can
derive every purpose key, nobody else can.
"""

from __future__ import annotations

import functools
import hashlib
import hmac

NODE_RPC = "node-rpc"  # masterd (and the CLI's node calls) -> noded
MOND_REPAIR = "mond-repair"  # maintd -> mond's POST /1/repair
NOTIFICATION = "instmon-notification"  # instmon -> maintd's POST /1/notifications (the token)
NODE_ANNOUNCE = "node-announce"  # noded -> masterd's POST /2/herder/nodes/NAME/announce
# noded -> masterd's POST /2/herder/nodes/NAME/heartbeat and the candidates' POST /lease/NAME
NODE_LEASE = "node-lease"
PURPOSES = (NODE_RPC, MOND_REPAIR, NOTIFICATION, NODE_ANNOUNCE, NODE_LEASE)
INFO_PREFIX = b"herder purpose key v1/"


@functools.lru_cache(maxsize=64)
def derive(cluster_key: bytes, purpose: str) -> bytes:
    """The 32-byte key of `purpose` (one of PURPOSES) derived from the cluster key."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown key purpose {purpose!r}")
    return hmac.new(cluster_key, INFO_PREFIX + purpose.encode() + b"\x01",
                    hashlib.sha256).digest()
