"""Instance consoles end to end, with one real guest (QEMU, TCG) on a private QEMU libvirtd:
a real `herder masterd` process, the node's noded in-process on TLS with the cluster's
certificate, the CLI as a process. The guest prints its heartbeat on the serial console; the
console object, `herder instance console --log/--show-cmd`, the serial websocket (the heartbeat
arrives as text) and the VNC websocket (the RFB greeting) are checked through RAPI; an
instance that does not run gets Ganeti's 503.

The domain is started from `noded.kvm.domain` directly through libvirt, with the serial log
and the VNC port noded gives it (`Node.serial_log`, the instance's `network_port`):
noded's own start builds the same InstanceSpec (issue 17's VM part).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from herder.core import cluster_secrets, model
from herder.core.rapi import RapiClient, RapiError
from herder.core.store import FileStore
from herder.masterd import portpool
from herder.noded.node import Node, NodeSettings
from tests.noded.noded_fixture import serving

NODE, NODE_IP, LIBVIRT_IP = "n1.console.test", "127.0.0.34", "127.0.0.35"
GUEST, STOPPED = "guest1.console.test", "stopped.console.test"
pytestmark = [pytest.mark.slow, pytest.mark.guests]

BOOT_DEADLINE = 180.0  # TCG on a loaded 2-core machine


@dataclass
class ConsoleCluster:
    directory: Path
    config: Path
    url: str
    client: RapiClient
    log: Path  # the guest's serial log on the node
    network_port: int

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "HERDER_CONFIG": str(self.config), "HERDER_MASTERD": self.url}
        return subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                              capture_output=True, text=True, timeout=120)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((NODE_IP, 0))
        return int(sock.getsockname()[1])


def _herder(config: Path, *args: str) -> None:
    env = {**os.environ, "HERDER_CONFIG": str(config), "HERDER_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env, check=True,
                   capture_output=True, text=True, timeout=120)


def _wait(predicate: Any, deadline: float, what: str) -> None:
    end = time.monotonic() + deadline
    while not predicate():
        assert time.monotonic() < end, f"no {what} within {deadline:g} s"
        time.sleep(0.5)


def _instance(config: model.ConfigData, name: str, hvparams: dict[str, Any]) -> model.Instance:
    inst = model.Instance(uuid=model.new_uuid(), name=name, os="none", hypervisor="kvm",
                          primary_node=config.find_node(NODE).uuid, admin_state="up",
                          beparams={"maxmem": 128, "minmem": 128, "vcpus": 1},
                          hvparams=hvparams)
    inst.network_port = portpool.allocate(config)
    config.instances[inst.uuid] = inst
    return inst


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleCluster]:
    libvirt = pytest.importorskip("libvirt")
    from herder.noded.kvm.domain import InstanceSpec, domain_xml
    from herder.sim import guest
    from herder.sim.libvirtd import LIBVIRTD, LibvirtdUnavailable, ensure_system_accounts
    from herder.sim.qemu_libvirtd import QemuLibvirtd, TestPki

    if os.geteuid() != 0 or not os.access(LIBVIRTD, os.X_OK) \
            or not shutil.which("qemu-system-x86_64"):
        pytest.skip("needs root, libvirtd and qemu-system-x86_64 (scripts/sysdeps.sh)")
    try:
        image = guest.ensure_guest()
    except guest.GuestBuildError as err:
        pytest.skip(str(err))
    directory = tmp_path_factory.mktemp("console")
    config = directory / "cluster" / "config.json"
    _herder(config, "cluster", "init", "cluster.console.test", "--master-node", NODE,
            "--primary-ip", NODE_IP, "--enabled-disk-templates", "diskless",
            "--enabled-hypervisors", "kvm", "--force")
    ensure_system_accounts()
    root = Path(tempfile.mkdtemp(prefix="hcon-", dir="/tmp"))
    os.chmod(root, 0o755)
    libvirtd = QemuLibvirtd(NODE, LIBVIRT_IP, TestPki(root / "pki").node(NODE, [LIBVIRT_IP]),
                            root / NODE, port=_free_port())
    stack = contextlib.ExitStack()
    proc: subprocess.Popen[str] | None = None
    daemon: Node | None = None
    try:
        try:
            libvirtd.start()
        except LibvirtdUnavailable as err:
            pytest.skip(str(err))
        hvparams = {"kernel_path": str(image.kernel), "initrd_path": str(image.initrd),
                    "root_path": "", "kernel_args": image.kernel_args,
                    "kvm_path": "/usr/bin/qemu-system-x86_64", "vnc_bind_address": "127.0.0.1",
                    "serial_console": True}
        with FileStore(config).update() as cfg:
            cfg.find_node(NODE).ndparams["libvirt_uri"] = libvirtd.uri
            # instances made by jobs boot the same guest (noded checks the files exist)
            cfg.cluster.hvparams.setdefault("kvm", {}).update(
                {key: value for key, value in hvparams.items() if key != "root_path"})
            inst = _instance(cfg, GUEST, hvparams)
            _instance(cfg, STOPPED, hvparams)
            filled = dict(cfg.filled_hvparams(inst))
        daemon = Node(NodeSettings(
            node_name=NODE, state_dir=directory / "node" / "state",
            run_dir=directory / "node" / "run", libvirt_uri=libvirtd.uri,
            hmac_key=(config.parent / cluster_secrets.HMAC_KEY_FILE).read_bytes(),
            config_dir=config.parent, file_root=directory / "node" / "root",
            serial_log_dir=directory / "node" / "log"))
        noded_port = _free_port()
        stack.enter_context(serving(daemon, NODE_IP, noded_port,
                                    config.parent / cluster_secrets.CERT_FILE))
        log = daemon.serial_log(GUEST)
        spec = InstanceSpec(GUEST, inst.uuid, 128, 1, filled, network_port=inst.network_port,
                            serial_log=str(log), kvm_usable=False)
        with contextlib.closing(libvirt.open(libvirtd.uri)) as conn:
            conn.createXML(domain_xml(spec), 0)
        masterd_log = directory / "masterd.log"
        with open(masterd_log, "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "herder.cli.main", "masterd", "--bind", "127.0.0.1",
                 "--port", "0", "--noded-port", str(noded_port), "--node", NODE,
                 "--run-dir", str(directory / "run")],
                env={**os.environ, "HERDER_CONFIG": str(config)}, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, text=True)
        _wait(lambda: "serving RAPI on" in masterd_log.read_text() or proc.poll() is not None,
              60, "masterd")
        url = next(word for word in masterd_log.read_text().split()
                   if word.startswith("https://")).rstrip("/")
        client = RapiClient.for_herder_cluster(config.parent, url)
        _wait(lambda: guest.last_heartbeat(log) is not None, BOOT_DEADLINE,
              "heartbeat in the serial log")
        assert inst.network_port is not None
        yield ConsoleCluster(directory, config, url, client, log, inst.network_port)
        client.close()
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, 15)
            proc.wait(30)
        stack.close()
        if daemon is not None:
            daemon.hv.close()
        libvirtd.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_network_port_comes_from_the_pool_and_shows(cluster: ConsoleCluster) -> None:
    first = cluster.client.get_instance(GUEST)["network_port"]
    second = cluster.client.get_instance(STOPPED)["network_port"]
    assert first == cluster.network_port and second == first + 1
    assert first > 11000  # above the cluster's highest used port, as Ganeti
    info = cluster.cli("instance", "info", GUEST)
    assert info.returncode == 0, info.stderr
    assert f"network_port: {first}" in info.stdout


def test_console_object_is_ganetis(cluster: ConsoleCluster) -> None:
    found = cluster.client.get_instance_console(GUEST)
    assert found == {"instance": GUEST, "kind": "ssh", "host": NODE, "port": 22,
                     "user": "root", "command": ["/usr/bin/virsh", "-c", found["command"][2],
                                                 "console", "--force", GUEST]}
    shown = cluster.cli("instance", "console", "--show-cmd", GUEST)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("ssh -oEscapeChar=none ")
    assert f"-oPort=22 -oBatchMode=yes -oStrictHostKeyChecking=yes -t -t root@{NODE} " \
           in shown.stdout and "console --force guest1.console.test" in shown.stdout


def test_a_stopped_instance_has_no_console(cluster: ConsoleCluster) -> None:
    with pytest.raises(RapiError) as refused:
        cluster.client.get_instance_console(STOPPED)
    assert refused.value.status == 503 and "Instance console unavailable" in str(refused.value)
    answer = cluster.cli("instance", "console", STOPPED)
    assert answer.returncode != 0
    assert f"Instance {STOPPED} is not running, can't get console" in answer.stderr


def test_console_log_shows_the_heartbeat(cluster: ConsoleCluster) -> None:
    shown = cluster.cli("instance", "console", "--log", "--lines", "5", GUEST)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert 1 <= len(lines) <= 5
    assert any(line.startswith("herder-guest boot_id=") for line in lines), shown.stdout
    with pytest.raises(RapiError) as refused:
        cluster.client.request("GET", f"/2/instances/{GUEST}/console/log", [("lines", "0")])
    assert refused.value.status == 400


async def _first_frames(cluster: ConsoleCluster, kind: str, until: Any,
                        deadline: float = 60.0) -> Any:
    url, headers, tls = cluster.client.websocket(f"/2/instances/{GUEST}/console/{kind}")
    async with aiohttp.ClientSession() as session, \
            session.ws_connect(url, headers=headers, ssl=tls) as ws:
        received: Any = "" if kind == "serial" else b""
        async with asyncio.timeout(deadline):
            async for message in ws:
                received += message.data
                if until(received):
                    return received, message.type
    raise AssertionError(f"the {kind} stream ended: {received!r}")


def test_serial_websocket_carries_the_heartbeat_as_text(cluster: ConsoleCluster) -> None:
    text, kind = asyncio.run(_first_frames(
        cluster, "serial", lambda got: "herder-guest boot_id=" in got and "disk=" in got))
    assert kind == aiohttp.WSMsgType.TEXT
    assert "uptime=" in text


def test_vnc_websocket_carries_the_rfb_greeting(cluster: ConsoleCluster) -> None:
    data, kind = asyncio.run(_first_frames(cluster, "vnc", lambda got: len(got) >= 12))
    assert kind == aiohttp.WSMsgType.BINARY
    assert data[:10] == b"RFB 003.00" and data[11:12] == b"\n"


def test_streams_of_a_stopped_instance_are_refused(cluster: ConsoleCluster) -> None:
    url, headers, tls = cluster.client.websocket(f"/2/instances/{STOPPED}/console/serial")

    async def attempt() -> int:
        async with aiohttp.ClientSession() as session:
            try:
                await session.ws_connect(url, headers=headers, ssl=tls)
            except aiohttp.WSServerHandshakeError as err:
                return err.status
        return 101

    assert asyncio.run(attempt()) == 503


def test_a_plain_get_of_a_stream_checks_and_opens_nothing(
        cluster: ConsoleCluster, caplog: pytest.LogCaptureFixture) -> None:
    """Without the upgrade (the web console's first question): noded's checks, 426 where a
    stream could open, its reason where not; no stream is opened on the node."""
    caplog.set_level(logging.INFO, logger="herder.noded.console")
    for kind in ("serial", "vnc"):
        with pytest.raises(RapiError) as answered:
            cluster.client.request("GET", f"/2/instances/{GUEST}/console/{kind}")
        assert answered.value.status == 426, answered.value
    with pytest.raises(RapiError) as refused:
        cluster.client.request("GET", f"/2/instances/{STOPPED}/console/serial")
    assert refused.value.status == 503
    assert f"instance {STOPPED} is not running on this node" in str(refused.value)
    assert not [r for r in caplog.records if "opened" in r.getMessage()]


def test_create_takes_a_port_and_remove_gives_it_back(cluster: ConsoleCluster) -> None:
    """Through the real jobs: OP_INSTANCE_CREATE (kvm, diskless, not started) gives the next
    port; OP_INSTANCE_REMOVE puts it into the cluster's port pool, and the next create takes
    it from there."""
    def create(name: str) -> int:
        job = cluster.client.request("POST", "/2/instances", None, {
            "__version__": 1, "name": name, "disk_template": "diskless", "disks": [],
            # routed: this node has no bridge (noded refuses a NIC on a missing one)
            "nics": [{"mode": "routed", "link": "100", "ip": "192.0.2.10"}], "pnode": NODE,
            "hypervisor": "kvm", "start": False,
            "no_install": True, "name_check": False, "ip_check": False})
        done = cluster.client.wait_for_job(job)
        assert done["status"] == "success", done
        return int(cluster.client.get_instance(name)["network_port"])

    highest = FileStore(cluster.config).load().cluster.highest_used_port
    port = create("made.console.test")
    assert port == highest + 1
    job = cluster.client.request("DELETE", "/2/instances/made.console.test")
    assert cluster.client.wait_for_job(job)["status"] == "success"
    config = FileStore(cluster.config).load()
    assert port in config.cluster.tcpudp_port_pool
    assert create("again.console.test") == port
    assert port not in FileStore(cluster.config).load().cluster.tcpudp_port_pool


def test_interactive_console_shows_the_guest_and_ctrl_bracket_leaves(
        cluster: ConsoleCluster) -> None:
    """`herder instance console NAME` on a terminal (a pty): the heartbeat appears, Ctrl-]
    ends the session and the terminal is given back."""
    import pty

    controller, terminal = pty.openpty()
    env = {**os.environ, "HERDER_CONFIG": str(cluster.config), "HERDER_MASTERD": cluster.url}
    proc = subprocess.Popen([sys.executable, "-m", "herder.cli.main", "instance", "console",
                             GUEST], stdin=terminal, stdout=terminal, stderr=subprocess.PIPE,
                            env=env)
    os.close(terminal)
    seen = b""
    try:
        deadline = time.monotonic() + 90
        while b"herder-guest boot_id=" not in seen:
            assert time.monotonic() < deadline and proc.poll() is None, seen[-500:]
            if select.select([controller], [], [], 1.0)[0]:
                with contextlib.suppress(OSError):
                    seen += os.read(controller, 4096)
        os.write(controller, b"\x1d")
        assert proc.wait(30) == 0
        assert proc.stderr is not None
        said = proc.stderr.read().decode()
        assert f"Connected to the serial console of {GUEST}; Ctrl-] leaves." in said
        assert f"Console of {GUEST}: left." in said
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(controller)
