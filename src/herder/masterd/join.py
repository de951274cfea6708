"""The master's side of a join (`herder node add NAME --join-token TOKEN`; docs/real-nodes.md
"Joining a node"; the node's side is `noded.join`).

One TLS connection to the node's noded: the certificate it shows must be the one the token
pins (by its SHA-256), checked before anything is sent; then the three steps, each proven
with the token's secret over the node's fresh challenge: `hello` (a challenge), `request`
(the node makes its key and returns a CSR, which the cluster CA signs here, for the name the
master gives the node), `install` (the node certificate, the CA certificate, the HMAC key and
the ssconf values the node needs to take the master's calls). Every failure is one line
(`JoinError`): the node cannot be reached, shows another certificate (a wrong token, or a
node of a cluster), refuses the secret, or already belongs to a cluster.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from herder.core import node_certs
from herder.core.errors import HerderError


class JoinError(HerderError):
    pass


@dataclass(frozen=True)
class JoinMaterial:
    """What the cluster gives a joining node."""

    ca_pem: bytes  # the cluster CA, key and certificate (server.pem): signs the node's
    hmac_key: bytes


class _Connection:
    """One pinned TLS connection to a noded's join steps."""

    def __init__(self, name: str, address: str, port: int, pinned: str, timeout: float) -> None:
        self.name = name
        self.where = f"{address}:{port}"
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # pinned by digest below, before anything is sent
        self.http = http.client.HTTPSConnection(address, port, timeout=timeout,
                                                context=context)
        try:
            self.http.connect()
        except (OSError, ssl.SSLError) as err:
            raise JoinError(f"cannot join {name}: its node daemon at {self.where} cannot be "
                            f"reached ({_reason(err)})") from None
        sock = self.http.sock
        shown = sock.getpeercert(binary_form=True) if isinstance(sock, ssl.SSLSocket) else None
        if shown is None or node_certs.digest_der(shown) != pinned:
            self.close()
            if shown is not None and node_certs.issued_by_another(shown):
                raise JoinError(f"cannot join {name}: it already belongs to a cluster (its "
                                f"node daemon at {self.where} shows a node certificate)")
            raise JoinError(f"cannot join {name}: wrong join token (the node daemon at "
                            f"{self.where} shows another certificate; `herder node "
                            "join-token` on the node prints its token)")

    def post(self, step: str, body: Mapping[str, object]) -> dict[str, Any]:
        try:
            self.http.request("POST", f"/join/{step}", body=json.dumps(body).encode(),
                              headers={"Content-Type": "application/json"})
            response = self.http.getresponse()
            text = response.read()
        except (OSError, ssl.SSLError, http.client.HTTPException) as err:
            raise JoinError(f"cannot join {self.name}: {step} at {self.where} failed "
                            f"({_reason(err)})") from None
        try:
            answer = json.loads(text)
        except ValueError:
            answer = {"error": text.decode(errors="replace").strip()[:200]}
        if response.status != 200 or not isinstance(answer.get("result"), dict):
            error = answer.get("error", f"HTTP {response.status}")
            raise JoinError(f"cannot join {self.name}: the node refused ({error})")
        result: dict[str, Any] = answer["result"]
        return result

    def close(self) -> None:
        self.http.close()


def _reason(err: BaseException) -> str:
    if isinstance(err, socket.timeout):
        return "timed out"
    return getattr(err, "strerror", None) or str(err) or type(err).__name__


def join(name: str, address: str, port: int, token: str, material: JoinMaterial, *,
         ssconf: Callable[[str], Mapping[str, str]], timeout: float = 30.0) -> str:
    """Join the node `name` at `address`; returns its node certificate's digest. `ssconf`:
    the ssconf values the node gets, given its certificate's digest."""
    try:
        secret, pinned = node_certs.parse_token(token)
    except node_certs.CertificateError as err:
        raise JoinError(f"cannot join {name}: {err}") from None
    connection = _Connection(name, address, port, pinned, timeout)
    try:
        challenge = str(connection.post("hello", {})["challenge"])
        requested = connection.post("request", {
            "challenge": challenge, "proof": node_certs.proof(secret, "request", challenge, "")})
        try:
            certificate = node_certs.sign_request(material.ca_pem,
                                                  str(requested["csr"]).encode(), name)
        except (node_certs.CertificateError, KeyError) as err:
            raise JoinError(f"cannot join {name}: its certificate request: {err}") from None
        payload = json.dumps({
            "node_certificate": certificate.decode(),
            "ca_certificate": node_certs.certificate_pem(material.ca_pem).decode(),
            "hmac_key": base64.b64encode(material.hmac_key).decode(),
            "ssconf": dict(ssconf(node_certs.digest(certificate)))}, sort_keys=True)
        challenge = str(requested.get("challenge", ""))
        installed = connection.post("install", {
            "challenge": challenge, "payload": payload,
            "proof": node_certs.proof(secret, "install", challenge, payload)})
    finally:
        connection.close()
    digest = node_certs.digest(certificate)
    if installed.get("digest") != digest:
        raise JoinError(f"cannot join {name}: the node installed another certificate")
    return digest
