"""The signed messages of a remote export/import (`core.remote_export`): what one cluster
signs checks under the same cluster domain secret, and every change or another secret is
refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from herder.core import cluster_secrets, remote_export
from herder.core.remote_export import RemoteExportError

CDS = "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e"
OTHER = "6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f"


def ca_pem() -> str:
    both = cluster_secrets.self_signed_certificate("cluster-a.example.com").decode()
    return both[both.index("-----BEGIN CERTIFICATE"):]


def test_handshake_checks_only_under_the_same_secret() -> None:
    handshake = remote_export.compute_handshake(CDS)
    remote_export.check_handshake(CDS, handshake)
    with pytest.raises(RemoteExportError, match="same domain secret"):
        remote_export.check_handshake(OTHER, handshake)
    with pytest.raises(RemoteExportError, match="invalid handshake"):
        remote_export.check_handshake(CDS, "hello")
    version_1 = (1, remote_export.sha1_hmac(CDS, f"1:{remote_export.RIE_HANDSHAKE}", "ab"),
                 "ab")
    with pytest.raises(RemoteExportError, match="protocol"):
        remote_export.check_handshake(CDS, version_1)


def test_key_name_and_disk_info_refuse_tampering() -> None:
    name, digest, salt = remote_export.sign_key_name(CDS, "k1")
    assert remote_export.check_key_name(CDS, [name, digest, salt]) == "k1"
    with pytest.raises(RemoteExportError, match="HMAC"):
        remote_export.check_key_name(CDS, ["k2", digest, salt])
    info = remote_export.compute_disk_info(CDS, "00ff", 1, "192.0.2.1", 1234, "mg")
    assert remote_export.check_disk_info(CDS, 1, info) == ("192.0.2.1", 1234, "mg")
    with pytest.raises(RemoteExportError, match="disk 0: HMAC is wrong"):
        remote_export.check_disk_info(CDS, 0, info)  # signed for disk 1
    with pytest.raises(RemoteExportError, match="HMAC is wrong"):
        remote_export.check_disk_info(CDS, 1, ("192.0.2.66", *info[1:]))
    with pytest.raises(RemoteExportError, match="missing"):
        remote_export.check_disk_info(CDS, 1, ("", *info[1:]))


def test_signed_certificate_checks_and_refuses_changes() -> None:
    pem = ca_pem()
    signed = remote_export.sign_certificate(CDS, pem)
    assert signed.startswith(f"{remote_export.SIGNATURE_HEADER}: ")
    cert = remote_export.load_signed_certificate(CDS, signed)
    assert "cluster-a.example.com" in cert.subject.rfc4514_string()
    with pytest.raises(RemoteExportError, match="signature is invalid"):
        remote_export.load_signed_certificate(OTHER, signed)
    with pytest.raises(RemoteExportError, match="signature is missing"):
        remote_export.load_signed_certificate(CDS, pem)
    other_cert = remote_export.sign_certificate(CDS, ca_pem())
    forged = signed.split("\n\n")[0] + "\n\n" + other_cert.split("\n\n", 1)[1]
    with pytest.raises(RemoteExportError, match="signature is invalid"):
        remote_export.load_signed_certificate(CDS, forged)
    with pytest.raises(RemoteExportError, match="not a PEM"):
        remote_export.sign_certificate(CDS, "garbage")


def test_domain_secret_file(tmp_path: Path) -> None:
    with pytest.raises(RemoteExportError, match="cannot read the cluster domain secret"):
        remote_export.read_domain_secret(tmp_path)
    paths = cluster_secrets.SecretPaths.beside(tmp_path / "config.json")
    cluster_secrets.create_all(paths, "cluster-a.example.com")
    path = tmp_path / cluster_secrets.DOMAIN_SECRET_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    secret = remote_export.read_domain_secret(tmp_path)
    assert len(secret) == 40 and int(secret, 16) >= 0
    # another cluster's secret copied here before the init is kept
    other = tmp_path / "other"
    other.mkdir()
    (other / cluster_secrets.DOMAIN_SECRET_FILE).write_text(secret + "\n")
    cluster_secrets.create_all(cluster_secrets.SecretPaths.beside(other / "config.json"), "b")
    assert remote_export.read_domain_secret(other) == secret
    path.write_text("two\nlines\n")
    with pytest.raises(RemoteExportError, match="not one line"):
        remote_export.read_domain_secret(tmp_path)
