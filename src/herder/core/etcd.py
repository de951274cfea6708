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

A secured etcd (docs/ha.md "etcd with TLS and authentication"): `EtcdTls` (HTTPS, the CA that
signed the members' certificates, this client's certificate for etcd's `--client-cert-auth`) and
`EtcdAuth` (etcd's user and password: a token from `/v3/auth/authenticate`, sent in the
`Authorization` header and fetched again whenever etcd says it is no longer valid, i.e. expired
or older than the last change of etcd's users and roles). A TLS failure (an untrusted server, a
refused client certificate) and refused credentials are not member trouble: they fail at once,
in one line, instead of being retried on the next member.
"""

from __future__ import annotations

import base64
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from herder.core import randomness, untrusted
from herder.core.errors import HerderError

DEFAULT_TIMEOUT = 2.0
DEFAULT_RETRY_FOR = 8.0

# gRPC codes that mean "this member cannot answer now; another one may"
_RETRY_CODES = {4, 14}  # DEADLINE_EXCEEDED, UNAVAILABLE
_RETRY_MESSAGES = ("no leader", "leader changed", "timed out", "not capable", "stopped")
# etcd's answers when a token is no longer good: expired (or unknown), or issued before the last
# change of its users and roles; a new token fixes both
_STALE_TOKEN_MESSAGES = ("invalid auth token", "revision of auth store is old")
_UNAUTHENTICATED = 16
_AUTHENTICATE = "/v3/auth/authenticate"
_AUTH_NOT_ENABLED = "authentication is not enabled"
_REAUTH_LIMIT = 3  # fresh tokens one request may ask for before giving up


class EtcdError(HerderError):
    """etcd refused a request, or no endpoint could answer."""


class _MemberTrouble(Exception):
    """This member cannot answer now (another one may): try the next."""


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


@dataclass(frozen=True)
class EtcdTls:
    """HTTPS to etcd: the CA that signed the members' certificates, and this client's
    certificate and key (etcd's `--client-cert-auth`; None: present none)."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None

    def context(self) -> ssl.SSLContext:
        """The client's TLS context: the members' certificates checked against `ca`, host
        names included (they must name the address each endpoint is given as)."""
        try:
            context = ssl.create_default_context(cafile=str(self.ca))
        except (OSError, ssl.SSLError) as err:
            raise EtcdError(f"etcd CA {self.ca}: {_ssl_reason(err)}") from None
        if self.cert is not None:
            try:
                context.load_cert_chain(str(self.cert), str(self.key) if self.key else None)
            except (OSError, ssl.SSLError) as err:
                raise EtcdError(f"etcd client certificate {self.cert} (key {self.key}): "
                                f"{_ssl_reason(err)}") from None
        return context


class EtcdAuth:
    """etcd's user and password authentication, shared by a client and its clones: one token at
    a time, fetched from `/v3/auth/authenticate` when there is none and again when etcd says it
    is stale (`invalidate`).

    `required`: refuse an etcd whose authentication is off (herder's own clients: a cluster set
    up for a user must not silently run without one); `herder etcd setup`, which turns it on,
    says False.
    """

    def __init__(self, user: str, password: str, *, source: str = "",
                 required: bool = True) -> None:
        self.user = user
        self._password = password
        self.source = source  # where the password came from, for messages
        self.required = required
        self._lock = threading.Lock()
        self._token: str | None = None
        self.authentications = 0  # tokens fetched so far

    def __repr__(self) -> str:
        return f"EtcdAuth({self.user!r})"

    @property
    def password(self) -> str:
        return self._password

    def token(self) -> str | None:
        """The current token ("": etcd's authentication is off), None when there is none."""
        with self._lock:
            return self._token

    def store(self, token: str) -> None:
        with self._lock:
            self._token = token
            self.authentications += 1

    def invalidate(self, token: str | None = None) -> None:
        """Forget the token (only if it is still `token`, when given: another thread may have
        fetched a fresh one meanwhile)."""
        with self._lock:
            if token is None or self._token == token:
                self._token = None


def _retryable(code: object, message: str) -> bool:
    """etcd's answer means "this member cannot answer now; another one may"."""
    return code in _RETRY_CODES or any(m in message for m in _RETRY_MESSAGES)


def _ssl_error(err: BaseException) -> ssl.SSLError | None:
    """The TLS error behind a transport error (httpx wraps httpcore's, which carries it)."""
    pending: list[BaseException] = [err]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLError):
            return current
        pending += [e for e in (current.__cause__, current.__context__, *current.args)
                    if isinstance(e, BaseException)]
    return None


def _ssl_reason(err: BaseException) -> str:
    """An SSL (or file) error in words: "certificate verify failed: unable to get local issuer
    certificate", "sslv3 alert bad certificate", "No such file or directory"."""
    if isinstance(err, ssl.SSLCertVerificationError) and err.verify_message:
        return f"certificate verify failed: {err.verify_message}"
    if isinstance(err, ssl.SSLError) and err.reason:
        return str(err.reason).replace("_", " ").lower()
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err)


class EtcdClient:
    """The v3 API of an etcd cluster, through whichever member answers."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
        tls: EtcdTls | None = None,
        auth: EtcdAuth | None = None,
        _context: ssl.SSLContext | None = None,
    ) -> None:
        if not endpoints:
            raise EtcdError("no etcd endpoints given")
        scheme = "https" if tls is not None else "http"
        self.endpoints = [e if "://" in e else f"{scheme}://{e}" for e in endpoints]
        self.endpoints = [e.rstrip("/") for e in self.endpoints]
        if tls is None and any(e.startswith("https://") for e in self.endpoints):
            raise EtcdError("https:// etcd endpoints need TLS settings (a CA)")
        self.timeout = timeout
        self.retry_for = retry_for
        self.tls = tls
        self.auth = auth
        self._context = _context if _context is not None or tls is None else tls.context()
        self._current = 0
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=timeout, verify=self._context or True)

    def clone(self, *, timeout: float, retry_for: float) -> EtcdClient:
        """The same cluster, TLS settings and credentials (one token shared), other patience."""
        return EtcdClient(self.endpoints, timeout=timeout, retry_for=retry_for, tls=self.tls,
                          auth=self.auth, _context=self._context)

    @property
    def secure(self) -> bool:
        return self.tls is not None

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
        fresh_tokens = 0
        while True:
            with self._lock:
                index = self._current
            endpoint = self.endpoints[index]
            token: str | None = None
            try:
                token = self._token(endpoint)
                headers = {"Authorization": token} if token else {}
                reply = self._http.post(endpoint + path, json=body, headers=headers)
            except (httpx.TransportError, httpx.TimeoutException) as err:
                self._refuse_tls(endpoint, err)
                problem = f"{endpoint}: {type(err).__name__}: {err}"
            except _MemberTrouble as err:
                problem = f"{endpoint}: {err}"
            else:
                doc = self._decode(endpoint, path, reply)
                error = doc.get("error") or doc.get("message")
                if "error" in doc and isinstance(doc["error"], dict):  # streaming replies
                    error = doc["error"].get("message")
                if not error and reply.status_code == 200:
                    return doc
                code = doc.get("code")
                message = str(error or f"HTTP {reply.status_code}")
                if self.auth is not None and (code == _UNAUTHENTICATED or any(
                        m in message for m in _STALE_TOKEN_MESSAGES)):
                    self.auth.invalidate(token)  # expired or outdated: fetch a new one
                    fresh_tokens += 1
                    if fresh_tokens <= _REAUTH_LIMIT:
                        continue
                if not _retryable(code, message):
                    raise EtcdError(self._refusal(endpoint, path, message))
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
                time.sleep(randomness.spread(min(0.5, 0.05 * attempt)))

    def _refusal(self, endpoint: str, path: str, message: str) -> str:
        """etcd's refusal of a request, in one line; what to do about it where herder knows."""
        message = message.removeprefix("etcdserver: ")
        if "user name is empty" in message:
            return (f"etcd at {endpoint} requires authentication and this client has no user "
                    "(an etcds:// location and its client settings file: docs/ha.md)")
        if "permission denied" in message and self.auth is not None:
            return (f"etcd {path} at {endpoint}: permission denied for user "
                    f"{self.auth.user!r}")
        return f"etcd {path} at {endpoint}: {message}"

    def _token(self, endpoint: str) -> str | None:
        """The Authorization header's token (None: no header), authenticating when needed."""
        if self.auth is None:
            return None
        token = self.auth.token()
        if token is not None:
            return token
        reply = self._http.post(endpoint + _AUTHENTICATE,
                                json={"name": self.auth.user, "password": self.auth.password})
        doc = self._decode(endpoint, _AUTHENTICATE, reply)
        if reply.status_code == 200 and doc.get("token"):
            token = str(doc["token"])
        else:
            message = str(doc.get("error") or doc.get("message") or f"HTTP {reply.status_code}")
            message = message.removeprefix("etcdserver: ")
            if _retryable(doc.get("code"), message):  # e.g. no leader during an election
                raise _MemberTrouble(message)
            if _AUTH_NOT_ENABLED not in message:
                source = f" (password from {self.auth.source})" if self.auth.source else ""
                raise EtcdError(f"etcd at {endpoint} refused user {self.auth.user!r}: "
                                f"{message}{source}")
            if self.auth.required:
                raise EtcdError(f"etcd at {endpoint} has authentication turned off; herder "
                                f"expects user {self.auth.user!r} (herder etcd setup)")
            token = ""  # authentication is off: no header
        self.auth.store(token)
        return token

    def _refuse_tls(self, endpoint: str, err: Exception) -> None:
        """A refused TLS handshake is no member trouble (every member would refuse alike): one
        line, now. Other TLS errors (a member dying mid-stream: an unexpected EOF) are."""
        failure = _ssl_error(err)
        if failure is None or self.tls is None:
            return
        if isinstance(failure, ssl.SSLCertVerificationError):
            raise EtcdError(f"etcd at {endpoint}: TLS: the server's certificate is not trusted "
                            f"with CA {self.tls.ca} ({_ssl_reason(failure)})") from None
        if "ALERT" in str(failure.reason or ""):  # the server ended the handshake: it refused
            mine = (f"certificate {self.tls.cert}" if self.tls.cert is not None  # our cert
                    else "no client certificate")
            raise EtcdError(f"etcd at {endpoint}: TLS: the server refused this client "
                            f"({mine}): {_ssl_reason(failure)}") from None

    @staticmethod
    def _decode(endpoint: str, path: str, reply: httpx.Response) -> dict[str, Any]:
        if reply.status_code == 400 and "CommonName of client" in reply.text:
            raise EtcdError(
                f"etcd at {endpoint} refuses client certificates that carry a CommonName on its "
                "JSON gateway while authentication is on: issue herder's without one (docs/ha.md)")
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

    def range(self, key: bytes | str, *, prefix: bool = False, range_end: bytes | None = None,
              limit: int = 0, revision: int = 0, min_mod_revision: int = 0,
              keys_only: bool = False, count_only: bool = False) -> RangeResult:
        """The keys from `key` (with `prefix`: every key under it; `range_end`: up to that key,
        excluded), at most `limit` of them (0: all), as of `revision` (0: the newest); only
        those changed at or after `min_mod_revision`; without values (`keys_only`), or only
        their count (`count_only`)."""
        body: dict[str, Any] = {"key": b64(key)}
        if min_mod_revision:
            body["min_mod_revision"] = str(min_mod_revision)
        if keys_only:
            body["keys_only"] = True
        if count_only:
            body["count_only"] = True
        if prefix:
            raw = key.encode() if isinstance(key, str) else key
            body["range_end"] = b64(prefix_end(raw))
        elif range_end is not None:
            body["range_end"] = b64(range_end)
        if limit:
            body["limit"] = str(limit)
        if revision:
            body["revision"] = str(revision)
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

    def revision(self, key: bytes | str) -> int:
        """etcd's current revision (the header of a count of `key`: one this client may read,
        as etcd's authentication grants reads per key)."""
        return self.range(key, count_only=True).revision

    def compact(self, revision: int) -> bool:
        """Drop the history before `revision` (etcd's compaction: older revisions cannot be
        read any more, and their space is reused). False when it already was (by another
        compactor, or etcd's own auto-compaction)."""
        try:
            self.call("/v3/kv/compaction", {"revision": str(revision)})
        except EtcdError as err:
            if "compacted" in str(err):
                return False
            raise
        return True

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
