"""Node RPC signatures (`core.rpcauth`), the replay cache and the per-purpose keys."""

from __future__ import annotations

import json

import pytest

from herder.core import envelope, purpose_keys, rpcauth
from herder.core.errors import SignatureError

KEY = b"0123456789abcdef0123456789abcdef01234567\n"
NOW = 1_800_000_000.0


def check(body: bytes, method: str = "ping", node: str = "n1",
          replay: rpcauth.ReplayCache | None = None, now: float = NOW) -> object:
    return rpcauth.check_call(KEY, body, method=method, node=node, replay=replay, now=now)


def test_purpose_keys_are_hkdf_expand_and_differ() -> None:
    hkdf = pytest.importorskip("cryptography.hazmat.primitives.kdf.hkdf")
    from cryptography.hazmat.primitives import hashes

    keys = {p: purpose_keys.derive(KEY, p) for p in purpose_keys.PURPOSES}
    assert len(set(keys.values())) == len(keys) and KEY not in keys.values()
    for purpose, key in keys.items():
        expand = hkdf.HKDFExpand(hashes.SHA256(), 32, purpose_keys.INFO_PREFIX + purpose.encode())
        assert expand.derive(KEY) == key
    with pytest.raises(ValueError):
        purpose_keys.derive(KEY, "confd")


def test_the_signature_covers_method_node_time_nonce_and_arguments() -> None:
    body = rpcauth.sign_call(KEY, "ping", "n1", {"a": 1}, now=NOW)
    assert check(body) == {"a": 1}
    for method, node, why in [("node_powercycle", "n1", "method"), ("ping", "n2", "node")]:
        with pytest.raises(SignatureError, match=why):
            check(body, method, node)
    outer = json.loads(body)
    call = json.loads(outer["msg"])
    for field, value in [("args", {"a": 2}), ("method", "x"), ("node", "n2"),
                         ("time", NOW + 1), ("nonce", "0" * 32)]:
        tampered = {**outer, "msg": json.dumps({**call, field: value})}
        with pytest.raises(SignatureError, match="invalid signature"):
            check(json.dumps(tampered).encode())
    with pytest.raises(SignatureError, match="window"):
        check(body, now=NOW + rpcauth.MAX_SKEW + 1)
    # the cluster key itself (confd's, Ganeti's) does not sign node RPCs
    confd_style = envelope.sign_data({"method": "ping", "node": "n1", "time": NOW,
                                      "nonce": "s", "args": {}}, KEY, "s")
    with pytest.raises(SignatureError):
        check(confd_style)


def test_a_nonce_is_taken_once_within_the_window() -> None:
    cache = rpcauth.ReplayCache(floor=NOW - 1000)
    body = rpcauth.sign_call(KEY, "ping", "n1", {}, now=NOW, nonce="a" * 32)
    check(body, replay=cache)
    with pytest.raises(SignatureError, match="replayed"):
        check(body, replay=cache)
    # once outside the window the time check refuses it; the cache forgets it
    later = NOW + 2 * rpcauth.MAX_SKEW
    check(rpcauth.sign_call(KEY, "ping", "n1", {}, now=later), replay=cache, now=later)
    assert len(cache) == 1


def test_the_cache_is_bounded_and_refuses_what_it_forgot() -> None:
    cache = rpcauth.ReplayCache(capacity=3, floor=NOW - 1000)
    for index in range(5):
        cache.admit(f"n{index}", NOW + index, NOW + index)
    assert len(cache) == 3 and cache.floor == NOW + 1
    with pytest.raises(SignatureError, match="remembers"):
        cache.admit("n1", NOW + 1, NOW + 5)  # forgotten: refused by the floor
    cache.admit("fresh", NOW + 4.5, NOW + 5)


def test_calls_signed_before_the_start_are_refused() -> None:
    cache = rpcauth.ReplayCache(floor=NOW)
    with pytest.raises(SignatureError, match="started"):
        cache.admit("x", NOW - 1, NOW)


def test_a_non_ascii_signature_is_refused_as_invalid() -> None:
    """hmac.compare_digest raises TypeError on non-ASCII text: refused like any bad HMAC
    (a fuzzed envelope found it: noded answered 500)."""
    good = json.loads(rpcauth.sign_call(KEY, "ping", "node1.example.com", {}))
    forged = json.dumps({**good, "hmac": "é" * 64}).encode()
    with pytest.raises(SignatureError, match="invalid signature"):
        rpcauth.check_call(KEY, forged, method="ping", node="node1.example.com", replay=None)


def test_the_mac_is_hmac_sha256_of_salt_and_message_whatever_the_arguments() -> None:
    """The MAC is taken from the encoded call (not a copy of salt + message): the same value,
    non-ASCII and escaped characters included."""
    import hashlib
    import hmac

    args = {"config": '{"name": "nœud-ü", "quote": "\\"", "line": "a\\nb"}\n', "n": [1, 2]}
    body = rpcauth.sign_call(KEY, "write_config", "n1", args, now=NOW, nonce="f" * 32)
    outer = json.loads(body)
    node_key = purpose_keys.derive(KEY, purpose_keys.NODE_RPC)
    expected = hmac.new(node_key, (outer["salt"] + outer["msg"]).encode(), hashlib.sha256)
    assert outer["hmac"] == expected.hexdigest() and outer["salt"] == "f" * 32
    assert check(body, "write_config") == args
