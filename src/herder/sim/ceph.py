"""A real, small Ceph cluster on this machine: one monitor, one or more OSDs, cephx on, one
pool for herder's `rbd` disks and a cephx user restricted to it (`client.herder`, `profile rbd`).

Built from Debian's `ceph-mon`/`ceph-osd`/`ceph-common` (16.2) as the manual deployment guide
describes it (monmaptool, `ceph-mon --mkfs`, `ceph osd new`, `ceph-osd --mkfs`), no manager and
no orchestrator. Everything lives under one directory: the configuration, the keyrings, each
daemon's data, logs, sockets. OSDs use BlueStore on a sparse file (`bluestore_block_path` inside
the OSD's directory), the store Ceph's own development clusters use: no loop device, no
device-mapper. The daemons listen on one address (the tests' loopback address, or the
simulator's address inside a simulation's network namespace, `netns`), the monitor on Ceph's
ports 3300 (msgr2) and 6789 (msgr1), the OSDs in 6800-7300.

`start(...)` returns a `CephCluster` once the pool is usable; `stop()` ends the daemons it
started. What a node needs to use the pool, as an operator installs it, is
`client_conf()` (its /etc/ceph/ceph.conf) and `client_keyring()` (its
/etc/ceph/ceph.client.herder.keyring); the node's tools then run as `client.herder`
(`CEPH_ARGS=--id herder`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from herder.core.errors import HerderError

PACKAGES = {"ceph-mon": "ceph-mon", "ceph-osd": "ceph-osd", "ceph": "ceph-common",
            "rbd": "ceph-common", "monmaptool": "ceph-common", "ceph-authtool": "ceph-common"}
MON_V2_PORT = 3300
MON_V1_PORT = 6789
OSD_BLOCK_BYTES = 4 * 2**30  # each OSD's sparse BlueStore file
START_TIMEOUT = 120.0
COMMAND_TIMEOUT = 60.0
CLIENT = "herder"
POOL = "herder"
CLIENT_KEYRING = f"/etc/ceph/ceph.client.{CLIENT}.keyring"


class CephError(HerderError):
    """The local Ceph cannot be started (or a command of it failed); one line."""


def missing_packages() -> list[str]:
    """The Debian packages whose programs are not installed (empty: Ceph can run here)."""
    return sorted({package for program, package in PACKAGES.items()
                   if shutil.which(program) is None})


def mon_host(address: str) -> str:
    """The monitor's addresses as `mon host` spells them (both protocols)."""
    return f"[v2:{address}:{MON_V2_PORT},v1:{address}:{MON_V1_PORT}]"


@dataclass
class CephCluster:
    directory: Path
    address: str
    fsid: str
    pool: str
    client_key: str
    netns: str | None = None
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    start_seconds: float = 0.0

    @property
    def conf(self) -> Path:
        """The administrator's configuration (client.admin, its keyring in the directory)."""
        return self.directory / "ceph.conf"

    @property
    def admin_env(self) -> dict[str, str]:
        return {**os.environ, "CEPH_CONF": str(self.conf)}

    @property
    def client_env(self) -> dict[str, str]:
        """The environment a node's tools get: its configuration and user (tests on this
        machine; a node has /etc/ceph and CEPH_ARGS instead)."""
        return {"CEPH_CONF": str(self.directory / "client.conf"),
                "CEPH_ARGS": f"--id {CLIENT}"}

    def prefix(self) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--"] if self.netns else []

    def run(self, argv: Sequence[str], *, what: str, timeout: float = COMMAND_TIMEOUT,
            stdin: bytes | None = None) -> str:
        """An administrator's command against the cluster; its stdout, or CephError."""
        try:
            done = subprocess.run([*self.prefix(), *argv], env=self.admin_env, input=stdin,
                                  capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise CephError(f"{what}: `{' '.join(argv[:3])}` timed out after {timeout:g}s") \
                from None
        if done.returncode != 0:
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            raise CephError(f"{what}: {lines[-1] if lines else f'exit {done.returncode}'}")
        return done.stdout.decode(errors="replace")

    def client_conf(self, keyring: str = CLIENT_KEYRING) -> str:
        """A node's /etc/ceph/ceph.conf: the cluster's fsid and monitor, cephx."""
        return (f"[global]\nfsid = {self.fsid}\nmon host = {mon_host(self.address)}\n"
                "auth cluster required = cephx\nauth service required = cephx\n"
                f"auth client required = cephx\nkeyring = {keyring}\n")

    def client_keyring(self) -> str:
        return f"[client.{CLIENT}]\n\tkey = {self.client_key}\n"

    def images(self) -> list[str]:
        return [str(name) for name in json.loads(
            self.run(["rbd", "ls", "-p", self.pool, "--format", "json"], what="rbd ls"))]

    def read_image(self, image: str, length: int) -> bytes:
        """The first `length` bytes of an image (`rbd export` to stdout)."""
        done = subprocess.run([*self.prefix(), "rbd", "export", "-p", self.pool, image, "-"],
                              env=self.admin_env, capture_output=True, timeout=COMMAND_TIMEOUT,
                              check=False)
        if done.returncode != 0:
            raise CephError(f"rbd export {image}: {done.stderr.decode().strip()}")
        return done.stdout[:length]

    def stop(self, grace: float = 10.0) -> None:
        """End the daemons (OSDs first), SIGKILL after `grace` seconds."""
        for proc in reversed(self.processes):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in reversed(self.processes):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.processes.clear()


def _admin_conf(directory: Path, fsid: str, address: str) -> str:
    # size 1 pools and no manager: a test cluster; small caches for a 2-core machine
    return f"""[global]
fsid = {fsid}
mon host = {mon_host(address)}
public addr = {address}
cluster addr = {address}
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = {directory}/ceph.client.admin.keyring
run dir = {directory}/run
admin socket = {directory}/run/$name.asok
log file = {directory}/log/$name.log
ms bind port min = 6800
ms bind port max = 7300
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
mon osd down out interval = 0
[mon]
mon data = {directory}/mon.$id
# one monitor, no peers to batch proposals for: commit each map change at once. Ceph's
# default (1 s between proposals) made every `rbd snap create`/`snap rm` (a pool snap id from
# the monitor) take 1.0 s and the start 13.7 s; with these 0.1 s and 7.2 s (issue 30's budget)
paxos propose interval = 0.05
paxos min wait = 0.01
[osd]
osd data = {directory}/osd.$id
osd objectstore = bluestore
bluestore block create = true
bluestore block size = {OSD_BLOCK_BYTES}
bluestore cache size = 67108864
bluestore fsck on mount = false
osd memory target = 536870912
"""


def start(directory: Path, address: str, *, osds: int = 1, pool: str = POOL,
          netns: str | None = None, pgs: int = 8) -> CephCluster:
    """A fresh Ceph in `directory` (emptied) listening on `address`; `netns`: the network
    namespace the daemons and commands run in. CephError (after stopping what started)
    when it does not come up within START_TIMEOUT."""
    missing = missing_packages()
    if missing:
        raise CephError(f"Ceph is not installed here (apt-get install {' '.join(missing)})")
    if netns is None:
        _check_free(address)
    began = time.monotonic()
    shutil.rmtree(directory, ignore_errors=True)
    for sub in ("run", "log"):
        (directory / sub).mkdir(parents=True)
    fsid = str(uuid.uuid4())
    cluster = CephCluster(directory, address, fsid, pool, "", netns)
    cluster.conf.write_text(_admin_conf(directory, fsid, address))
    try:
        _start_monitor(cluster)
        for osd in range(osds):
            _start_osd(cluster, osd)
        _await_osds(cluster, osds)
        cluster.run(["ceph", "osd", "pool", "create", pool, str(pgs), str(pgs)],
                    what="pool create")
        cluster.run(["rbd", "pool", "init", pool], what="rbd pool init")
        cluster.run(["ceph", "auth", "get-or-create", f"client.{CLIENT}", "mon", "profile rbd",
                     "osd", f"profile rbd pool={pool}"], what="client user")
        cluster.client_key = cluster.run(["ceph", "auth", "print-key", f"client.{CLIENT}"],
                                         what="client key").strip()
        keyring = directory / f"ceph.client.{CLIENT}.keyring"
        keyring.write_text(cluster.client_keyring())
        keyring.chmod(0o600)
        (directory / "client.conf").write_text(cluster.client_conf(str(keyring)))
    except BaseException:
        cluster.stop(grace=2)
        raise
    cluster.start_seconds = time.monotonic() - began
    return cluster


def _check_free(address: str) -> None:
    """The monitor's ports on `address` are free (else: a Ceph left running, one line)."""
    for port in (MON_V2_PORT, MON_V1_PORT):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            # as the monitor binds: connections of a stopped one in TIME_WAIT do not count
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as err:
                raise CephError(f"{address}:{port} is taken ({err.strerror}): another Ceph "
                                "(left running?) listens there") from None


def attach(directory: Path, *, netns: str | None = None, pool: str = POOL) -> CephCluster:
    """The administrator's view of a Ceph another process started in `directory` (its daemons
    are not this object's to stop)."""
    fsid = address = ""
    for line in (directory / "ceph.conf").read_text().splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "fsid":
            fsid = value.strip()
        elif name.strip() == "public addr":
            address = value.strip()
    key = (directory / f"ceph.client.{CLIENT}.keyring").read_text().split("key = ", 1)[-1]
    return CephCluster(directory, address, fsid, pool, key.strip(), netns)


def _daemon(cluster: CephCluster, argv: list[str], name: str) -> None:
    log = open(cluster.directory / "log" / f"{name}.out", "ab")  # noqa: SIM115 (the child's)
    with log:
        proc = subprocess.Popen([*cluster.prefix(), *argv, "-f", "-c", str(cluster.conf)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
    cluster.processes.append(proc)


def _start_monitor(cluster: CephCluster) -> None:
    directory, conf = cluster.directory, str(cluster.conf)
    mon_keyring = directory / "mon.keyring"
    admin_keyring = directory / "ceph.client.admin.keyring"
    cluster.run(["ceph-authtool", "--create-keyring", str(mon_keyring), "--gen-key", "-n",
                 "mon.", "--cap", "mon", "allow *"], what="monitor key")
    cluster.run(["ceph-authtool", "--create-keyring", str(admin_keyring), "--gen-key", "-n",
                 "client.admin", "--cap", "mon", "allow *", "--cap", "osd", "allow *",
                 "--cap", "mgr", "allow *"], what="admin key")
    cluster.run(["ceph-authtool", str(mon_keyring), "--import-keyring", str(admin_keyring)],
                what="monitor keyring")
    cluster.run(["monmaptool", "--create", "--addv", "a", mon_host(cluster.address),
                 "--fsid", cluster.fsid, str(directory / "monmap")], what="monmap")
    cluster.run(["ceph-mon", "-c", conf, "--mkfs", "-i", "a", "--monmap",
                 str(directory / "monmap"), "--keyring", str(mon_keyring)], what="ceph-mon mkfs")
    _daemon(cluster, ["ceph-mon", "-i", "a"], "mon.a")
    _await(cluster, lambda: _quorum(cluster), "the monitor did not form a quorum")


def _quorum(cluster: CephCluster) -> bool:
    try:
        status = json.loads(cluster.run(["ceph", "quorum_status", "--connect-timeout", "5"],
                                        what="quorum", timeout=10))
    except (CephError, ValueError):
        return False
    return bool(status.get("quorum"))


def _start_osd(cluster: CephCluster, number: int) -> None:
    osd_uuid = str(uuid.uuid4())
    key = cluster.run(["ceph-authtool", "--gen-print-key"], what="OSD key").strip()
    secrets = cluster.directory / f"osd.{number}.json"
    secrets.write_text(json.dumps({"cephx_secret": key}))
    osd_id = cluster.run(["ceph", "osd", "new", osd_uuid, "-i", str(secrets)],
                         what="ceph osd new").strip()
    secrets.unlink()
    data = cluster.directory / f"osd.{osd_id}"
    data.mkdir()
    keyring = data / "keyring"
    cluster.run(["ceph-authtool", "--create-keyring", str(keyring), "--name", f"osd.{osd_id}",
                 "--add-key", key], what="OSD keyring")
    cluster.run(["ceph-osd", "-c", str(cluster.conf), "-i", osd_id, "--mkfs", "--osd-uuid",
                 osd_uuid, "--keyring", str(keyring)], what=f"ceph-osd {osd_id} mkfs",
                timeout=START_TIMEOUT)
    _daemon(cluster, ["ceph-osd", "-i", osd_id, "--keyring", str(keyring)], f"osd.{osd_id}")


def _await_osds(cluster: CephCluster, count: int) -> None:
    def up() -> bool:
        try:
            stat = json.loads(cluster.run(["ceph", "osd", "stat", "--format", "json"],
                                          what="osd stat", timeout=10))
        except (CephError, ValueError):
            return False
        return int(stat.get("num_up_osds", 0)) >= count

    _await(cluster, up, f"{count} OSD(s) did not come up")


def _await(cluster: CephCluster, ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not ready():
        dead = [proc.args for proc in cluster.processes if proc.poll() is not None]
        if dead:
            raise CephError(f"{what}: a daemon exited (logs in {cluster.directory}/log)")
        if time.monotonic() > deadline:
            raise CephError(f"{what} within {START_TIMEOUT:g}s (logs in "
                            f"{cluster.directory}/log)")
        time.sleep(0.3)
