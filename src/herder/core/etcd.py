"""A small etcd v3 client over etcd's JSON gateway (issue: high availability).

etcd serves its v3 API as JSON on the client port (`POST /v3/kv/range`, `/v3/kv/txn`,
`/v3/lease/grant`, ...; keys and values base64, 64-bit integers as strings, zero values
omitted). That is all herder needs: ranges, puts, deletes, transactions with compares, and
leases. We talk to it with httpx (already a dependency) rather than a gRPC client: python-etcd3
is unmaintained and drags in grpcio and protobuf.

Several endpoints: a request that cannot reach a member (connection refused, timeout, "no
leader", "leader changed") is tried on the next one, round-robin, until `retry_for` seconds have
passed, so a killed member does not stop the client. A request that timed out may still have been
applied: callers that write make their writes conditional (a transaction's compare) and check the
result, so a retry never applies a change twice.
"""

from __future__ import annotations

import base64
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from herder.core import untrusted
from herder.core.errors import HerderError

DEFAULT_TIMEOUT = 2.0
DEFAULT_RETRY_FOR = 8.0

# gRPC codes that mean "this member cannot answer now; another one may"
_RETRY_CODES = {4, 14}  # DEADLINE_EXCEEDED, UNAVAILABLE
_RETRY_MESSAGES = ("no leader", "leader changed", "timed out", "not capable", "stopped")


class EtcdError(HerderError):
    """etcd refused a request, or no endpoint could answer."""


def b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: bytes) -> bytes:
    """The range_end that selects every key starting with `prefix`."""
    for i in range(len(prefix) - 1, -1, -1):
        if prefix[i] < 0xFF:
            return prefix[:i] + bytes([prefix[i] + 1])
    return b"\0"


@dataclass(frozen=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> KeyValue:
        return cls(
            key=unb64(doc.get("key")),
            value=unb64(doc.get("value")),
            create_revision=int(doc.get("create_revision", 0)),
            mod_revision=int(doc.get("mod_revision", 0)),
            version=int(doc.get("version", 0)),
            lease=int(doc.get("lease", 0)),
        )


@dataclass(frozen=True)
class RangeResult:
    revision: int
    kvs: list[KeyValue]
    count: int

    @property
    def first(self) -> KeyValue | None:
        return self.kvs[0] if self.kvs else None


@dataclass(frozen=True)
class TxnResult:
    revision: int
    succeeded: bool
    # the range results of the branch that ran (one per request_range, in order)
    ranges: list[RangeResult] = field(default_factory=list)


@dataclass(frozen=True)
class Lease:
    id: int
    ttl: int  # seconds; 0 or less: the lease no longer exists


# --- transaction building blocks (JSON of etcdserverpb.Compare / RequestOp) ---------------------


def cmp_create(key: bytes | str, revision: int, result: str = "EQUAL") -> dict[str, Any]:
    """create_revision of `key` compared with `revision` (0: the key does not exist)."""
    return {"key": b64(key), "target": "CREATE", "result": result,
            "create_revision": str(revision)}


def cmp_mod(key: bytes | str, revision: int, result: str = "EQUAL") -> dict[str, Any]:
    return {"key": b64(key), "target": "MOD", "result": result, "mod_revision": str(revision)}


def cmp_value(key: bytes | str, value: bytes | str, result: str = "EQUAL") -> dict[str, Any]:
    return {"key": b64(key), "target": "VALUE", "result": result, "value": b64(value)}


def op_put(key: bytes | str, value: bytes | str, lease: int = 0) -> dict[str, Any]:
    req: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        req["lease"] = str(lease)
    return {"request_put": req}


def op_range(key: bytes | str) -> dict[str, Any]:
    return {"request_range": {"key": b64(key)}}


def op_delete(key: bytes | str) -> dict[str, Any]:
    return {"request_delete_range": {"key": b64(key)}}


def _range_result(doc: dict[str, Any]) -> RangeResult:
    return RangeResult(
        revision=int(doc.get("header", {}).get("revision", 0)),
        kvs=[KeyValue.from_json(kv) for kv in doc.get("kvs", [])],
        count=int(doc.get("count", 0)),
    )


class EtcdClient:
    """The v3 API of an etcd cluster, through whichever member answers."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
    ) -> None:
        if not endpoints:
            raise EtcdError("no etcd endpoints given")
        self.endpoints = [e if "://" in e else f"http://{e}" for e in endpoints]
        self.endpoints = [e.rstrip("/") for e in self.endpoints]
        self.timeout = timeout
        self.retry_for = retry_for
        self._current = 0
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=timeout)

    def __repr__(self) -> str:
        return f"EtcdClient({self.endpoints!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EtcdClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport ------------------------------------------------------------------------------

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` to `path` on a member; on an unreachable member try the next one."""
        deadline = time.monotonic() + self.retry_for
        problems: list[str] = []
        attempt = 0
        while True:
            with self._lock:
                index = self._current
            endpoint = self.endpoints[index]
            try:
                reply = self._http.post(endpoint + path, json=body)
            except (httpx.TransportError, httpx.TimeoutException) as err:
                problem = f"{endpoint}: {type(err).__name__}: {err}"
            else:
                doc = self._decode(endpoint, path, reply)
                error = doc.get("error") or doc.get("message")
                if "error" in doc and isinstance(doc["error"], dict):  # streaming replies
                    error = doc["error"].get("message")
                if not error and reply.status_code == 200:
                    return doc
                code = doc.get("code")
                message = str(error or f"HTTP {reply.status_code}")
                retryable = code in _RETRY_CODES or any(m in message for m in _RETRY_MESSAGES)
                if not retryable:
                    raise EtcdError(f"etcd {path} at {endpoint}: {message}")
                problem = f"{endpoint}: {message}"
            problems.append(problem)
            with self._lock:
                if self._current == index:
                    self._current = (index + 1) % len(self.endpoints)
            attempt += 1
            if time.monotonic() >= deadline:
                raise EtcdError(
                    f"etcd {path}: no member answered within {self.retry_for:g} s "
                    f"({'; '.join(problems[-len(self.endpoints):])})"
                )
            if attempt % len(self.endpoints) == 0:  # every member tried: wait a little
                time.sleep(min(0.5, 0.05 * attempt) * (0.5 + random.random()))

    @staticmethod
    def _decode(endpoint: str, path: str, reply: httpx.Response) -> dict[str, Any]:
        try:
            doc = untrusted.loads(reply.content)
        except ValueError:
            # keepalive streams one JSON object per line; the first is what we asked for
            text = reply.text.strip().splitlines()
            try:
                doc = untrusted.loads(text[0]) if text else {}
            except ValueError:
                raise EtcdError(
                    f"etcd {path} at {endpoint}: HTTP {reply.status_code}, not JSON: "
                    f"{reply.text[:200]!r}"
                ) from None
        if not isinstance(doc, dict):
            raise EtcdError(f"etcd {path} at {endpoint}: unexpected reply {doc!r:.200}")
        return doc

    # --- key-value ------------------------------------------------------------------------------

    def get(self, key: bytes | str) -> KeyValue | None:
        return self.range(key).first

    def range(self, key: bytes | str, *, prefix: bool = False) -> RangeResult:
        body: dict[str, Any] = {"key": b64(key)}
        if prefix:
            raw = key.encode() if isinstance(key, str) else key
            body["range_end"] = b64(prefix_end(raw))
        return _range_result(self.call("/v3/kv/range", body))

    def put(self, key: bytes | str, value: bytes | str, lease: int = 0) -> int:
        """Store `value`; returns the new revision."""
        body = op_put(key, value, lease)["request_put"]
        doc = self.call("/v3/kv/put", body)
        return int(doc.get("header", {}).get("revision", 0))

    def delete(self, key: bytes | str, *, prefix: bool = False) -> int:
        """Delete `key` (or every key under it); returns how many were deleted."""
        body: dict[str, Any] = {"key": b64(key)}
        if prefix:
            raw = key.encode() if isinstance(key, str) else key
            body["range_end"] = b64(prefix_end(raw))
        return int(self.call("/v3/kv/deleterange", body).get("deleted", 0))

    def txn(
        self,
        compare: Sequence[dict[str, Any]],
        success: Sequence[dict[str, Any]] = (),
        failure: Sequence[dict[str, Any]] = (),
    ) -> TxnResult:
        doc = self.call(
            "/v3/kv/txn",
            {"compare": list(compare), "success": list(success), "failure": list(failure)},
        )
        ranges = [
            _range_result(resp["response_range"])
            for resp in doc.get("responses", [])
            if "response_range" in resp
        ]
        return TxnResult(
            revision=int(doc.get("header", {}).get("revision", 0)),
            succeeded=bool(doc.get("succeeded", False)),
            ranges=ranges,
        )

    # --- leases ---------------------------------------------------------------------------------

    def lease_grant(self, ttl: int) -> Lease:
        doc = self.call("/v3/lease/grant", {"TTL": str(int(ttl))})
        if doc.get("error"):
            raise EtcdError(f"etcd refused a lease: {doc['error']}")
        return Lease(id=int(doc["ID"]), ttl=int(doc.get("TTL", 0)))

    def lease_keepalive(self, lease_id: int) -> Lease:
        """Renew the lease once; `ttl` <= 0 in the result means it has expired."""
        doc = self.call("/v3/lease/keepalive", {"ID": str(lease_id)})
        result = doc.get("result", doc)
        return Lease(id=int(result.get("ID", lease_id)), ttl=int(result.get("TTL", 0)))

    def lease_revoke(self, lease_id: int) -> None:
        """Drop the lease and every key attached to it (a lease that is gone is fine)."""
        try:
            self.call("/v3/lease/revoke", {"ID": str(lease_id)})
        except EtcdError as err:
            if "lease not found" not in str(err):
                raise

    def healthy(self, endpoint: str) -> bool:
        """Whether one member answers its health check (and has a leader)."""
        try:
            reply = self._http.get(endpoint.rstrip("/") + "/health", timeout=1.0)
            return reply.status_code == 200 and \
                untrusted.loads(reply.content).get("health") == "true"
        except (httpx.HTTPError, ValueError, AttributeError):
            return False
