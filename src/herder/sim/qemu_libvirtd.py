"""A private libvirtd running the QEMU driver, listening on TLS only, for tests and benchmarks.

A system-mode libvirtd (root) in its own mount namespace (`unshare -m`): per-daemon
directories under its work directory are bind-mounted over /etc/libvirt, /run/libvirt,
/var/lib/libvirt, /var/cache/libvirt and /var/log/libvirt, so several daemons run side by side
and the host's own libvirt is untouched. Its configuration is the production one
(`herder.core.libvirtd_conf`): TLS on `<address>:<port>` with certificates of a cluster CA,
the unix socket in the work directory for local clients. QEMU processes outlive a killed
libvirtd, as on a real host; `stop()` destroys the domains and kills what is left of them.

`TestPki` makes a cluster CA and node certificates with `cryptography`.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from herder.core import libvirt_host, libvirtd_conf
from herder.core.libvirtd_conf import LibvirtPki
from herder.sim import procgroup
from herder.sim.libvirtd import LIBVIRTD, LibvirtdUnavailable, ensure_system_accounts

if TYPE_CHECKING:
    from cryptography import x509

START_TIMEOUT = 30.0
MOUNTED = ("etc", "run", "lib", "cache", "log")
MOUNT_POINTS = {"etc": "/etc/libvirt", "run": "/run/libvirt", "lib": "/var/lib/libvirt",
                "cache": "/var/cache/libvirt", "log": "/var/log/libvirt"}


class TestPki:
    """A cluster CA and certificates for nodes, in libvirt's pkipath layout."""

    __test__ = False  # not a pytest class

    def __init__(self, directory: Path, cluster_name: str = "cluster.sim.herder.test") -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"herder CA {cluster_name}")])
        now = datetime.datetime.now(datetime.UTC)
        self._ca = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256()))
        self.ca_pem = self._pem(self._ca)

    @staticmethod
    def _pem(cert: x509.Certificate) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return cert.public_bytes(serialization.Encoding.PEM)

    def node(self, name: str, addresses: list[str], issuer: TestPki | None = None) -> LibvirtPki:
        """A node's pkipath directory; `issuer` signs with another CA (a stranger's cert)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        signer = issuer or self
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        alt_names: list[x509.GeneralName] = [x509.DNSName(name)]
        alt_names += [x509.IPAddress(ipaddress.ip_address(address)) for address in addresses]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(signer._ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=True, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
            .sign(signer._key, hashes.SHA256()))
        key_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.TraditionalOpenSSL,
                                    serialization.NoEncryption())
        pki = LibvirtPki(self.directory / name)
        pki.directory.mkdir(parents=True, exist_ok=True)
        pki.ca_cert.write_bytes(self.ca_pem)
        for path, data in ((pki.server_cert, self._pem(cert)), (pki.client_cert, self._pem(cert)),
                           (pki.server_key, key_pem), (pki.client_key, key_pem)):
            path.write_bytes(data)
        for path in (pki.server_key, pki.client_key):
            os.chmod(path, 0o600)
        return pki


@dataclass
class QemuLibvirtd:
    """One private libvirtd; `uri` for local clients, `tls_uri` for peers."""

    name: str
    address: str
    pki: LibvirtPki
    workdir: Path
    port: int = libvirtd_conf.LIBVIRT_TLS_PORT
    host_uuid: str = field(default_factory=lambda: str(uuid.uuid4()))
    proc: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        return self.workdir / "sock" / "libvirt-sock"

    @property
    def uri(self) -> str:
        return f"qemu+unix:///system?socket={self.socket}"

    @property
    def tls_uri(self) -> str:
        return libvirtd_conf.tls_uri(self.address, self.port)

    @property
    def log(self) -> Path:
        return self.workdir / "log" / "libvirtd.log"

    def _prepare(self) -> None:
        for name in (*MOUNTED, "sock"):
            (self.workdir / name).mkdir(parents=True, exist_ok=True)
        etc = self.workdir / "etc"
        (etc / "libvirtd.conf").write_text(libvirtd_conf.libvirtd_conf(
            listen_address=self.address, pki=self.pki,
            tls_port=self.port, unix_sock_dir=self.workdir / "sock", host_uuid=self.host_uuid,
            log_file=self.log))
        (etc / "qemu.conf").write_text(libvirtd_conf.qemu_conf())

    def _argv(self) -> list[str]:
        mounts = " && ".join(
            f"mkdir -p {MOUNT_POINTS[name]} && mount --bind {self.workdir / name} "
            f"{MOUNT_POINTS[name]}" for name in MOUNTED)
        script = (f"{mounts} && exec {LIBVIRTD} --listen -f "
                  f"{MOUNT_POINTS['etc']}/libvirtd.conf -p {self.workdir / 'libvirtd.pid'}")
        return [shutil.which("unshare") or "unshare", "-m", "--propagation", "private",
                "sh", "-c", script]

    def start(self, timeout: float = START_TIMEOUT) -> None:
        self._prepare()
        with open(self.workdir / "libvirtd.out", "ab") as out:
            self.proc = subprocess.Popen(
                self._argv(), env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"},
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        deadline = time.monotonic() + timeout
        last = "its socket never appeared"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LibvirtdUnavailable(
                    f"libvirtd {self.name} exited with {self.proc.returncode}: "
                    f"{self._tail()}")
            if self.socket.exists():
                try:
                    libvirt_host.open_connection(self.uri).close()
                    return
                except libvirt_host.Unreachable as err:
                    last = str(err)
            time.sleep(0.1)
        self.kill()
        raise LibvirtdUnavailable(f"libvirtd {self.name} did not answer within {timeout:g}s "
                                  f"({last}): {self._tail()}")

    def _tail(self) -> str:
        text = ""
        for path in (self.workdir / "libvirtd.out", self.log):
            with contextlib.suppress(OSError):
                text += path.read_text(errors="replace")
        return " | ".join(text.strip().splitlines()[-4:])

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill libvirtd only (its QEMU processes go on running, as on a real host)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        # stop() may have reaped a libvirtd that died (poll): not a recycled pid's group
        procgroup.signal_group(proc, sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            procgroup.signal_group(proc, signal.SIGKILL)
            proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            self.socket.unlink()

    def qemu_pids(self) -> list[int]:
        """QEMU processes of this daemon's domains (libvirt's pid files)."""
        pids = []
        for pidfile in (self.workdir / "run" / "qemu").glob("*.pid"):
            with contextlib.suppress(OSError, ValueError):
                pids.append(int(pidfile.read_text().strip()))
        alive = []
        for pid in pids:
            with contextlib.suppress(OSError):
                # a stale pid file may name a recycled pid: only QEMU processes count
                if b"qemu" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    alive.append(pid)
        return alive

    def stop(self) -> None:
        """Destroy the domains, stop the daemon, kill leftover QEMUs, remove the directory."""
        import libvirt

        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(libvirt.libvirtError, libvirt_host.Unreachable):
                conn = libvirt_host.open_connection(self.uri)
                for domain in conn.listAllDomains():
                    with contextlib.suppress(libvirt.libvirtError):
                        if domain.isActive():
                            domain.destroy()
                conn.close()
        self.kill(signal.SIGTERM)
        for pid in self.qemu_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass
class QemuLibvirtdPair:
    """Two nodes' libvirtds of one test cluster (CA, certificates, TLS on 127.0.0.x)."""

    root: Path
    source: QemuLibvirtd
    target: QemuLibvirtd
    pki: TestPki

    def stop(self) -> None:
        for daemon in (self.source, self.target):
            daemon.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def start_pair(addresses: tuple[str, str] = ("127.0.0.61", "127.0.0.62"),
               port: int = libvirtd_conf.LIBVIRT_TLS_PORT) -> QemuLibvirtdPair:
    """Start two private QEMU-driver libvirtds that trust each other's node certificates."""
    if os.geteuid() != 0:
        raise LibvirtdUnavailable("system-mode libvirtds need root")
    if not os.access(LIBVIRTD, os.X_OK):
        raise LibvirtdUnavailable(f"{LIBVIRTD} is not installed")
    if not shutil.which("qemu-system-x86_64"):
        raise LibvirtdUnavailable("qemu-system-x86_64 is not installed (scripts/sysdeps.sh)")
    ensure_system_accounts()  # the QEMU driver resolves its default user even when unused
    root = Path(tempfile.mkdtemp(prefix="hqlv-", dir="/tmp"))
    os.chmod(root, 0o755)
    pki = TestPki(root / "pki")
    names = ["node1.sim.herder.test", "node2.sim.herder.test"]
    daemons = [QemuLibvirtd(name, address, pki.node(name, [address]), root / name, port=port)
               for name, address in zip(names, addresses, strict=True)]
    started: list[QemuLibvirtd] = []
    try:
        for daemon in daemons:
            daemon.start()
            started.append(daemon)
    except BaseException:
        for daemon in started:
            daemon.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    return QemuLibvirtdPair(root, daemons[0], daemons[1], pki)
