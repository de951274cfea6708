"""The etcd of a simulated cluster on the etcd backend (`herder cluster simulate --store etcd`).

An external etcd, as an operator runs one for a real cluster (docs/ha.md "etcd with TLS and
authentication"): one member in the simulation's network namespace at the simulator's address
(the machine's side of the network, like the BMCs and the Ceph), never inside a host, so that
powering off any host (the master's too) leaves the cluster's store running, as the members of
a real etcd run on machines of their own. HTTPS with client certificates (`--client-cert-auth`)
from a CA made here; herder's user and role are made with `herder etcd setup` and etcd's
authentication is on, so every node reaches it exactly as a production node does: its client
settings file (`/etc/herder/etcd-client.toml`), the CA, a client certificate without a
CommonName and herder's password under `/etc/herder/etcd/`.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from herder.core.errors import HerderError
from herder.sim import netns
from herder.sim.host import HostSimulation, SimHost, node_environment

ETCD = "/usr/bin/etcd"
CLIENT_PORT = 2379
PEER_PORT = 2380
START_TIMEOUT = 60.0
USER = "herder"
CLIENT_SETTINGS = "/etc/herder/etcd-client.toml"  # the default of core.etcd_settings
NODE_DIR = "/etc/herder/etcd"  # the CA, the client certificate and key, the password
CERT_DAYS = 3650


@dataclass(frozen=True)
class SimEtcd:
    """Where the simulation's etcd is: its directory (data, certificates, log) and address."""

    directory: Path
    address: str

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{CLIENT_PORT}"

    def location(self, cluster: str) -> str:
        """The config location every node uses (`HERDER_CONFIG`)."""
        return f"etcds://{self.endpoint}/{cluster}"

    @property
    def pki(self) -> Path:
        return self.directory / "pki"


def missing() -> str | None:
    """Why this machine cannot run the simulation's etcd (None: it can)."""
    if os.access(ETCD, os.X_OK):
        return None
    return f"{ETCD} is not installed (apt-get install etcd-server)"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_pair(directory: Path, name: str, key: ec.EllipticCurvePrivateKey,
                cert: x509.Certificate) -> None:
    (directory / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path = directory / f"{name}.key"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def make_pki(directory: Path, address: str) -> None:
    """A CA (`ca.pem`), the member's server certificate for `address` (`server.*`) and two
    client certificates without a CommonName (etcd's gateway refuses a CN while its
    authentication is on): herder's (`client.*`, every node's) and the administrator's
    (`root.*`, the machine's only)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "herder-sim etcd CA")])

    def builder(subject: x509.Name, key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=CERT_DAYS)))

    ca = builder(ca_name, ca_key).add_extension(
        x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(
        ca_key, hashes.SHA256())
    _write_pair(directory, "ca", ca_key, ca)
    server_key = _key()
    server = builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "etcd")]), server_key)
    server = server.add_extension(x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    server = server.add_extension(x509.SubjectAlternativeName(
        [x509.IPAddress(ipaddress.ip_address(address))]), critical=False)
    _write_pair(directory, "server", server_key, server.sign(ca_key, hashes.SHA256()))
    for name, organisation in (("client", "herder"), ("root", "etcd administrators")):
        key = _key()
        cert = builder(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organisation)]),
                       key).add_extension(x509.ExtendedKeyUsage(
                           [ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        _write_pair(directory, name, key, cert.sign(ca_key, hashes.SHA256()))


def client_settings(ca: str, cert: str, key: str, user: str, password_file: str) -> str:
    """A client settings file (core.etcd_settings)."""
    return (f'ca = "{ca}"\ncert = "{cert}"\nkey = "{key}"\nuser = "{user}"\n'
            f'password_file = "{password_file}"\n')


def attach(directory: Path, sim: HostSimulation) -> SimEtcd:
    """The etcd `start` started in `directory` for the simulation `sim`."""
    return SimEtcd(directory, sim.address(netns.SIMULATOR_HOST))


def start(directory: Path, sim: HostSimulation) -> SimEtcd:
    """Start the member in the simulation's network namespace and wait until it answers."""
    reason = missing()
    if reason is not None:
        raise HerderError(f"--store etcd: {reason}")
    found = attach(directory, sim)
    make_pki(found.pki, found.address)
    for name, user in (("herder", USER), ("root", "root")):
        password = found.pki / f"{name}.password"
        password.write_text(secrets.token_hex(16) + "\n")
        password.chmod(0o600)
        pair = "client" if name == "herder" else "root"
        (directory / f"{name}-client.toml").write_text(client_settings(
            str(found.pki / "ca.pem"), str(found.pki / f"{pair}.pem"),
            str(found.pki / f"{pair}.key"), user, str(password)))
    url = f"https://{found.endpoint}"
    pki = found.pki
    with open(directory / "etcd.log", "ab") as out:
        subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{sim.netns}", "--", ETCD, "--name", "sim",
             "--data-dir", str(directory / "data"), "--listen-client-urls", url,
             "--advertise-client-urls", url,
             "--listen-peer-urls", f"http://127.0.0.1:{PEER_PORT}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{PEER_PORT}",
             "--initial-cluster", f"sim=http://127.0.0.1:{PEER_PORT}",
             "--cert-file", str(pki / "server.pem"), "--key-file", str(pki / "server.key"),
             "--trusted-ca-file", str(pki / "ca.pem"), "--client-cert-auth"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env=node_environment(), cwd="/")
    _await_health(found, sim)
    return found


def _curl(found: SimEtcd, sim: HostSimulation, path: str) -> subprocess.CompletedProcess[str]:
    pki = found.pki
    return subprocess.run(
        ["nsenter", f"--net=/run/netns/{sim.netns}", "--", "curl", "-sS", "--max-time", "5",
         "--cacert", str(pki / "ca.pem"), "--cert", str(pki / "root.pem"), "--key",
         str(pki / "root.key"), f"https://{found.endpoint}{path}"],
        capture_output=True, text=True, timeout=30)


def _await_health(found: SimEtcd, sim: HostSimulation) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    last = ""
    while time.monotonic() < deadline:
        probe = _curl(found, sim, "/health")
        if probe.returncode == 0 and '"health":"true"' in probe.stdout.replace(" ", ""):
            return
        last = (probe.stderr or probe.stdout).strip()[:200]
        time.sleep(0.3)
    raise HerderError(f"the simulation's etcd at {found.endpoint} did not answer within "
                      f"{START_TIMEOUT:g} s: {last} (see {found.directory / 'etcd.log'})")


def setup_access(found: SimEtcd, sim: HostSimulation, location: str) -> str:
    """herder's user and role, etcd's authentication on: `herder etcd setup` run by the
    administrator (the machine, in the simulation's network) with etcd's root settings."""
    env = node_environment({"HERDER_CONFIG": location})
    done = subprocess.run(
        ["nsenter", f"--net=/run/netns/{sim.netns}", "--", sys.executable, "-m",
         "herder.cli.main", "etcd", "setup", "--admin", str(found.directory / "root-client.toml"),
         "--client", str(found.directory / "herder-client.toml")],
        capture_output=True, text=True, timeout=120, env=env, cwd="/")
    if done.returncode != 0:
        raise HerderError(f"herder etcd setup: {(done.stderr or done.stdout).strip()[-300:]}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


# What a node gets of the PKI (the file here, its name on the node): the files of the guide's
# `node-install.sh etcd-client` step
CLIENT_FILES = (("ca.pem", "ca.pem"), ("client.pem", "client.pem"),
                ("client.key", "client.key"), ("herder.password", "password"))


def install_client(found: SimEtcd, host: SimHost) -> None:
    """What an operator installs on a node for the etcd backend: the CA, herder's client
    certificate and key, its password (0600) and the client settings file naming them."""
    target = host.path(NODE_DIR)
    target.mkdir(parents=True, exist_ok=True)
    for source, name in CLIENT_FILES:
        shutil.copyfile(found.pki / source, target / name)
        (target / name).chmod(0o600 if name in ("client.key", "password") else 0o644)
    host.path(CLIENT_SETTINGS).write_text(client_settings(
        f"{NODE_DIR}/ca.pem", f"{NODE_DIR}/client.pem", f"{NODE_DIR}/client.key", USER,
        f"{NODE_DIR}/password"))
