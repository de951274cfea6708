"""The node's side of a join (`herder node add NAME --join-token TOKEN`; docs/real-nodes.md
"Joining a node"). Served by noded on a node that has not joined, over TLS with the bootstrap
certificate the token pins (the master checks it before sending anything), no client
certificate (the node cannot know the cluster's yet):

    POST /join/hello    {}                                   -> {challenge, node}
    POST /join/request  {challenge, proof}                   -> {csr, challenge}
    POST /join/install  {challenge, proof, payload}          -> {digest}

`proof` is the HMAC with the token's secret over the step, the challenge and (install) the
payload (`core.node_certs.proof`): the caller knows the token. Each challenge is good for one
step and `CHALLENGE_TTL` seconds. `request` makes this node's key (kept in memory) and
returns its CSR; `install` takes the payload (JSON text: the node certificate the master
signed, the cluster CA certificate, the HMAC key, the ssconf values), checks the certificate is
the CA's and for this key, writes the files (the HMAC key last: from then on the node has
joined), drops the token and switches noded's TLS to the node certificate and the cluster's
callers. A node that has joined answers 409 "this node already belongs to cluster NAME".
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from dataclasses import dataclass, field

from herder.core import node_certs, ssconf
from herder.core.errors import HerderError
from herder.core.store import atomic_write
from herder.noded.trust import NodeTrust

CHALLENGE_TTL = 300.0
MAX_CHALLENGES = 64  # open at once; the oldest go first (anyone may ask for one)
STEPS = ("hello", "request", "install")


class JoinRefused(HerderError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class JoinSteps:
    trust: NodeTrust
    node_name: str
    _challenges: dict[str, float] = field(default_factory=dict)
    _pending_key: bytes | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, step: str, body: bytes) -> dict[str, str]:
        if step not in STEPS:
            raise JoinRefused(404, f"no join step {step!r}")
        if self.trust.joined():
            name = ssconf.read("cluster_name", self.trust.config_dir) or "(unknown)"
            raise JoinRefused(409, f"this node already belongs to cluster {name}")
        try:
            args = json.loads(body or b"{}")
        except ValueError:
            raise JoinRefused(400, "the body is not JSON") from None
        if not isinstance(args, dict):
            raise JoinRefused(400, "the body is not an object")
        with self._lock:
            if step == "hello":
                return {"challenge": self._challenge(), "node": self.node_name}
            token = self.trust.token_secret()
            if token is None:
                raise JoinRefused(403, "this node has no join token (is noded starting?)")
            secret = token[0]
            challenge = str(args.get("challenge", ""))
            payload = str(args.get("payload", "")) if step == "install" else ""
            if not self._take(challenge) or not node_certs.proof_matches(
                    secret, str(args.get("proof", "")), step, challenge, payload):
                raise JoinRefused(403, "refused: wrong join token or stale challenge")
            if step == "request":
                key_pem, csr_pem = node_certs.new_request(self.node_name)
                self._pending_key = key_pem
                return {"csr": csr_pem.decode(), "challenge": self._challenge()}
            return self._install(payload)

    def _challenge(self) -> str:
        now = time.monotonic()
        live = sorted(((t, c) for c, t in self._challenges.items() if t > now), reverse=True)
        self._challenges = {c: t for t, c in live[:MAX_CHALLENGES - 1]}
        challenge = secrets.token_hex(16)
        self._challenges[challenge] = now + CHALLENGE_TTL
        return challenge

    def _take(self, challenge: str) -> bool:
        expires = self._challenges.pop(challenge, None)
        return expires is not None and expires > time.monotonic()

    def _install(self, payload_text: str) -> dict[str, str]:
        if self._pending_key is None:
            raise JoinRefused(409, "no certificate request is pending")
        try:
            payload = json.loads(payload_text)
            node_cert = str(payload["node_certificate"]).encode()
            ca_cert = str(payload["ca_certificate"]).encode()
            hmac_key = base64.b64decode(str(payload["hmac_key"]), validate=True)
            values = payload.get("ssconf") or {}
        except (ValueError, KeyError, TypeError) as err:
            raise JoinRefused(400, f"malformed install payload: {err}") from None
        if not isinstance(values, dict) or not hmac_key.strip():
            raise JoinRefused(400, "malformed install payload")
        if not node_certs.is_issued_by(node_cert, ca_cert):
            raise JoinRefused(400, "the node certificate is not the cluster CA's")
        if not node_certs.matches_key(node_cert, self._pending_key):
            raise JoinRefused(400, "the node certificate is not for this node's key")
        trust = self.trust
        directory = trust.config_dir
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in sorted(values.items()):
            if not name or not all(ch.isalnum() or ch == "_" for ch in name):
                raise JoinRefused(400, f"invalid ssconf name {name!r}")
            atomic_write(ssconf.path(name, directory), str(text).encode(), 0o644)
        atomic_write(trust.node_certificate, self._pending_key + node_cert, 0o600)
        atomic_write(trust.secrets.certificate, node_certs.certificate_pem(ca_cert), 0o600)
        atomic_write(trust.secrets.hmac_key, hmac_key, 0o600)  # last: now the node has joined
        self._pending_key = None
        trust.forget_join()  # the caller applies the new TLS state (trust.refresh)
        return {"digest": node_certs.digest(node_cert)}
