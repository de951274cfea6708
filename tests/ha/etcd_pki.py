"""Certificates for a secured test etcd, made with `cryptography`: a CA, the members' server
certificate (127.0.0.1 and localhost), client certificates without a CommonName (etcd's JSON
gateway refuses ones with a CN while its authentication is on), and, for refusals, a second CA
with a client certificate of its own and a client certificate that has a CN."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_NOW = datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class EtcdPki:
    ca: Path
    server: Pair
    herder: Pair  # herder's client certificate (no CN)
    root: Pair  # the administrator's (no CN)
    with_cn: Pair  # signed by the CA, but with a CommonName
    other_ca: Path
    rogue: Pair  # a client certificate signed by the other CA


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _builder(subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey,
             ) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public).serial_number(x509.random_serial_number())
            .not_valid_before(_NOW - datetime.timedelta(minutes=5))
            .not_valid_after(_NOW + datetime.timedelta(days=2)))


def _write(directory: Path, name: str, key: ec.EllipticCurvePrivateKey,
           cert: x509.Certificate) -> Pair:
    pair = Pair(directory / f"{name}.pem", directory / f"{name}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    pair.key.chmod(0o600)
    return pair


def _ca(directory: Path, name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, Path]:
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (_builder(subject, subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    path = _write(directory, name, key, cert).cert
    return key, cert, path


def _leaf(directory: Path, name: str, ca_key: ec.EllipticCurvePrivateKey,
          ca_cert: x509.Certificate, *, subject: x509.Name, server: bool = False) -> Pair:
    key = _key()
    usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server else [
        ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = _builder(subject, ca_cert.subject, key.public_key()).add_extension(
        x509.ExtendedKeyUsage(usage), critical=False)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return _write(directory, name, key, builder.sign(ca_key, hashes.SHA256()))


def make_pki(directory: Path) -> EtcdPki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert, ca = _ca(directory, "etcd-ca")
    other_key, other_cert, other_ca = _ca(directory, "other-ca")
    no_cn = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "herder")])
    return EtcdPki(
        ca=ca,
        server=_leaf(directory, "server", ca_key, ca_cert, server=True, subject=x509.Name(
            [x509.NameAttribute(NameOID.COMMON_NAME, "etcd")])),
        herder=_leaf(directory, "herder", ca_key, ca_cert, subject=no_cn),
        root=_leaf(directory, "root", ca_key, ca_cert, subject=x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "etcd administrators")])),
        with_cn=_leaf(directory, "with-cn", ca_key, ca_cert, subject=x509.Name(
            [x509.NameAttribute(NameOID.COMMON_NAME, "herder")])),
        other_ca=other_ca,
        rogue=_leaf(directory, "rogue", other_key, other_cert, subject=no_cn),
    )


def write_client_settings(path: Path, pki: EtcdPki, pair: Pair, user: str,
                          password: str) -> Path:
    """A client settings file (core.etcd_settings) and its password file beside it."""
    password_file = path.with_suffix(".password")
    password_file.write_text(password + "\n")
    password_file.chmod(0o600)
    path.write_text(f'ca = "{pki.ca}"\ncert = "{pair.cert}"\nkey = "{pair.key}"\n'
                    f'user = "{user}"\npassword_file = "{password_file}"\n')
    return path
