"""What noded trusts and what it shows (docs/real-nodes.md "noded authenticates callers").

All of it lives beside the config (`/var/lib/herder`), the files the master pushes:

- `hmac.key`: the cluster key (the node-RPC key is derived from it). A node without it has not
  joined: noded then serves the join steps only (`noded.join`), with a bootstrap certificate
  (`join.pem`) whose digest is in the join token (`join-token`, mode 0600).
- `node.pem`: this node's key and certificate, signed by the cluster CA: what noded shows.
  A node set up before node certificates (none there) shows the cluster certificate.
- `server.pem`: the cluster CA; a caller's certificate must be issued by it.
- ssconf `herder_node_certs`: the digests of the cluster's node certificates; a caller's must be
  listed (a removed node's is not), and be the master's or a master candidate's (ssconf
  `master_node`, `master_candidates`). A node that never received the list (set up by hand
  before node certificates) accepts any certificate the CA issued.
- During a rotation (`herder cluster renew-crypto`): `hmac.key.retiring` and
  `server.pem.retiring`, the previous key and CA, accepted beside the new ones until retired.

One TLS context serves all along: when the node joins, it gets the node certificate, the CA
and `CERT_REQUIRED` in place (OpenSSL applies them to the next handshakes), so noded keeps its
socket. A CA once loaded stays in the context until noded restarts, but no certificate of a
retired CA is listed, so none is accepted.
"""

from __future__ import annotations

import logging
import ssl
import threading
from pathlib import Path

from herder.core import cluster_secrets, node_certs, ssconf
from herder.core.cluster_secrets import SecretPaths, write_secret
from herder.core.errors import HerderError
from herder.core.store import atomic_write

log = logging.getLogger("herder.noded")


class NodeTrust:
    def __init__(self, config_dir: Path) -> None:
        self.config_dir = config_dir
        self.secrets = SecretPaths.beside(config_dir / "config.json")
        self.node_certificate = config_dir / node_certs.NODE_CERT_FILE
        self.join_certificate = config_dir / node_certs.JOIN_CERT_FILE
        self.join_token = config_dir / node_certs.JOIN_TOKEN_FILE
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None

    # --- state -----------------------------------------------------------------------------------

    def joined(self) -> bool:
        return self.secrets.hmac_key.exists()

    def retiring(self, path: Path) -> Path:
        """Where a rotation keeps the previous file, accepted until it is retired."""
        return cluster_secrets.retiring(path)

    def keys(self) -> list[bytes]:
        """The HMAC keys a call may be signed with (none before the node joined): the key,
        and during a rotation the previous one."""
        if not self.joined():
            return []
        return self.secrets.hmac_keys()

    def rotate(self, ca_pem: bytes, node_pem: bytes, hmac_key: bytes) -> None:
        """A rotation's first half (`herder cluster renew-crypto`): the new CA, node
        certificate and key replace the current ones, which stay accepted as retiring (the
        caller then `refresh`es, so the next handshakes show the new certificate)."""
        if not node_certs.is_issued_by(node_pem, ca_pem) or \
                not node_certs.matches_key(node_pem, node_pem):
            raise HerderError("the new node certificate is not the new CA's, or not for its key")
        for path in (self.secrets.hmac_key, self.secrets.certificate):
            if not self.retiring(path).exists():  # a repeated call keeps the first old one
                atomic_write(self.retiring(path), path.read_bytes(), 0o600)
        atomic_write(self.secrets.certificate, ca_pem, 0o600)
        atomic_write(self.node_certificate, node_pem, 0o600)
        atomic_write(self.secrets.hmac_key, hmac_key, 0o600)

    def retire(self) -> list[str]:
        """A rotation's second half: the previous key and CA are no longer accepted."""
        gone = []
        for path in (self.secrets.hmac_key, self.secrets.certificate):
            old = self.retiring(path)
            if old.exists():
                old.unlink()
                gone.append(str(old))
        return gone

    def shown_certificate(self) -> Path:
        if not self.joined():
            return self.join_certificate
        return self.node_certificate if self.node_certificate.exists() \
            else self.secrets.certificate

    def prepare_join(self, node_name: str) -> str | None:
        """On a node that has not joined: the bootstrap certificate and the join token (made
        once, kept across restarts); returns the token. None when the node has joined."""
        if self.joined():
            return None
        from herder.core.cluster_secrets import self_signed_certificate

        if not self.join_certificate.exists():
            write_secret(self.join_certificate, self_signed_certificate(node_name))
        if not self.join_token.exists():
            write_secret(self.join_token, (node_certs.make_token(
                self.join_certificate.read_bytes()) + "\n").encode())
        return self.join_token.read_text().strip()

    def token_secret(self) -> tuple[str, str] | None:
        """(secret, pinned digest) of the join token, None when there is none."""
        try:
            return node_certs.parse_token(self.join_token.read_text())
        except (OSError, HerderError):
            return None

    def forget_join(self) -> None:
        """The join is done: the bootstrap certificate and the token go."""
        for path in (self.join_token, self.join_certificate):
            path.unlink(missing_ok=True)

    # --- TLS ----------------------------------------------------------------------------------

    def server_context(self) -> ssl.SSLContext:
        """The one context noded serves with (built on first use, updated by `refresh`)."""
        with self._lock:
            if self._context is None:
                self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                self._load(self._context)
            return self._context

    def refresh(self) -> None:
        """Apply the files as they are now (after the join, a rotation) to the next handshakes."""
        with self._lock:
            if self._context is not None:
                self._load(self._context)

    def _load(self, context: ssl.SSLContext) -> None:
        shown = self.shown_certificate()
        try:
            context.load_cert_chain(shown)
            if self.joined():
                context.load_verify_locations(cafile=str(self.secrets.certificate))
                retiring = self.retiring(self.secrets.certificate)
                if retiring.exists():
                    context.load_verify_locations(cafile=str(retiring))
        except (OSError, ssl.SSLError) as err:
            raise HerderError(f"cannot load noded's certificates ({shown}, "
                              f"{self.secrets.certificate}): {err}") from None
        # Before the join nobody can show a certificate of the cluster: the join steps prove
        # the caller by the token instead (noded.join).
        context.verify_mode = ssl.CERT_REQUIRED if self.joined() else ssl.CERT_NONE

    # --- callers --------------------------------------------------------------------------------

    def accepted(self) -> dict[str, str] | None:
        """digest -> node name of the cluster's node certificates; None: no list here, or an
        empty one (a cluster without node certificates, e.g. imported from Ganeti: its master
        issues none, and an empty list must not lock every caller out)."""
        text = ssconf.read(node_certs.SSCONF_NAME, self.config_dir)
        return (node_certs.parse_list(text) or None) if text is not None else None

    def node_refusal(self, peer_der: bytes | None) -> tuple[str | None, str | None]:
        """(why a caller showing this certificate (DER) is no node of the cluster, or None;
        the node's name when the list names it). The TLS handshake already checked it was
        issued by the cluster CA."""
        if peer_der is None:  # before the join too: nobody shows one then
            return "no client certificate", None
        listed = self.accepted()
        if listed is None:
            return None, None
        caller = listed.get(node_certs.digest_der(peer_der))
        if caller is None:
            return "client certificate is not one of the cluster's node certificates " \
                   "(revoked or unknown)", None
        return None, caller

    def refusal(self, peer_der: bytes | None) -> str | None:
        """Why a caller of node RPCs showing this certificate (DER) is refused; None:
        accepted."""
        problem, caller = self.node_refusal(peer_der)
        if problem is not None or caller is None:
            return problem
        # Node RPCs are the master's (and, in a failover, a candidate's): not any node's
        callers = ssconf.read_lines("master_candidates", self.config_dir)
        master = ssconf.master_node(self.config_dir)
        if callers is not None and master is not None and caller not in {master, *callers}:
            return f"client certificate is node {caller}'s, which is neither the master nor " \
                   "a master candidate"
        return None
