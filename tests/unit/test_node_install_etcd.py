"""The guide's etcd step (`scripts/node-install.sh etcd-client LOCATION DIR [USER]`, which the
simulated Debian hosts of `--store etcd` run): the client's files under /etc/herder/etcd with
private modes, a client settings file herder accepts, and the config location in
/etc/herder/environment, replacing an earlier one and keeping the file's other lines; an
argument that is no etcd location, or a missing file, changes nothing.

The script writes the real /etc/herder: it runs in a mount namespace of its own whose /etc is
an overlay of this machine's, so its writes land in a directory of the test's."""

from __future__ import annotations

import datetime
import os
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from herder.core import etcd_settings

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "node-install.sh"
LOCATION = "etcds://198.18.0.1:2379/prod"


def _client_files(directory: Path) -> Path:
    """What the operator copied to the node: a CA and a client certificate without a
    CommonName (etcd_settings refuses one with it), its key, the password."""
    directory.mkdir()
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "herder")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (directory / "ca.pem").write_bytes(pem)
    (directory / "client.pem").write_bytes(pem)
    (directory / "client.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (directory / "password").write_text("s3cret\n")
    return directory


def run_step(tmp_path: Path, *args: str,
             environment: str | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The step run with /etc an overlay (its changes in `tmp_path/upper`); what it printed
    and the overlay's view of /etc/herder as it left it (`tmp_path/upper/herder`)."""
    upper, work = tmp_path / "upper", tmp_path / "work"
    for path in (upper, work):
        path.mkdir(exist_ok=True)
    if environment is not None:
        (upper / "herder").mkdir(exist_ok=True)
        (upper / "herder" / "environment").write_text(environment)
    script = ('set -e; mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc; '
              'shift 2; exec bash "$@"')
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           script, "step", str(upper), str(work), str(SCRIPT), "etcd-client",
                           *args], capture_output=True, text=True, timeout=60)
    return done, upper / "herder"


@pytest.fixture()
def files(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.fail("the step writes /etc/herder: run the unit tests as root, as the suite does")
    return _client_files(tmp_path / "copied")


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_step_installs_the_client_and_the_location(tmp_path: Path, files: Path) -> None:
    done, etc = run_step(tmp_path, LOCATION, str(files), "herder-prod",
                         environment="HERDER_CONFIG=etcds://old:2379/x\nLANG=C.UTF-8\n")
    assert done.returncode == 0, done.stderr
    assert mode(etc / "etcd") == 0o700
    for name in ("ca.pem", "client.pem"):
        assert (etc / "etcd" / name).read_bytes() == (files / name).read_bytes()
        assert mode(etc / "etcd" / name) == 0o644
    for name in ("client.key", "password"):
        assert (etc / "etcd" / name).read_bytes() == (files / name).read_bytes()
        assert mode(etc / "etcd" / name) == 0o600
    # the earlier location replaced, the other line kept, one HERDER_CONFIG
    lines = (etc / "environment").read_text().splitlines()
    assert sorted(lines) == ["HERDER_CONFIG=" + LOCATION, "LANG=C.UTF-8"]
    assert mode(etc / "environment") == 0o644
    # herder accepts the settings file; it names the node's files, and the user given
    text = (etc / "etcd-client.toml").read_text()
    assert 'user = "herder-prod"' in text
    relocated = tmp_path / "check.toml"
    relocated.write_text(text.replace("/etc/herder/", f"{etc}/"))
    settings = etcd_settings.load(relocated)
    assert settings.user == "herder-prod"
    assert settings.ca == f"{etc}/etcd/ca.pem" and settings.key == f"{etc}/etcd/client.key"
    assert etcd_settings.read_password(settings, relocated) == "s3cret"


def test_the_user_defaults_to_herder(tmp_path: Path, files: Path) -> None:
    done, etc = run_step(tmp_path, LOCATION, str(files))
    assert done.returncode == 0, done.stderr
    assert 'user = "herder"' in (etc / "etcd-client.toml").read_text()
    assert (etc / "environment").read_text() == f"HERDER_CONFIG={LOCATION}\n"


@pytest.mark.parametrize("location", ["/var/lib/herder/config.json", "https://h:2379/x", ""])
def test_a_location_that_is_no_etcd_is_refused(tmp_path: Path, files: Path,
                                              location: str) -> None:
    done, etc = run_step(tmp_path, location, str(files))
    assert done.returncode != 0  # 2: no etcd location; 1: none given (bash's ${1:?})
    assert "node-install.sh" in done.stderr
    assert not etc.exists()  # nothing written


def test_a_missing_file_is_refused(tmp_path: Path, files: Path) -> None:
    (files / "password").unlink()
    done, etc = run_step(tmp_path, LOCATION, str(files))
    assert done.returncode == 2
    assert f"{files}/password is missing" in done.stderr
    assert not etc.exists()
