"""Namespaced simulated hosts (herder.sim.host): three real hosts of their own, each with its
name, private directories, disks, network and supervisor; what they share; what nobody
reaches; the supervisor and daemon-util on them; libvirtd on one."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from herder.core.errors import HerderError
from herder.core.supervise_control import (
    NOT_MY_ROLE,
    RUNNING,
    STOPPED,
    DaemonStatus,
)
from herder.sim import hostfiles, hoststate, loopdev
from herder.sim.host import (
    FILE_STORAGE,
    PRIVATE_DIRS,
    SHARED_FILE_STORAGE,
    HostConfig,
    HostSimulation,
    SimHost,
    run_on,
)
from tests.sim.hosts_fixture import (
    can_connect,
    connect,
    host_configs,
    running_hosts,
    start_name_server,
)
from tests.simhelpers import wait_for

NAME_PORT = 7000
SETTINGS = hostfiles.node_toml(
    ["sleeper", "notmine"],
    commands={"sleeper": ["sleep", "100000"], "notmine": ["sh", "-c", "exit 11"]},
    restart_delay=0.2, restart_delay_max=1.0)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostSimulation]:
    directory = tmp_path_factory.mktemp("hosts")
    yield from running_hosts(directory, lambda s: host_configs(
        s, 3, node_settings=SETTINGS, vg_mib=10 * 1024, file_storage_mib=1024))


@pytest.fixture(scope="module")
def hosts(sim: HostSimulation) -> list[SimHost]:
    found = sorted(sim.hosts.values(), key=lambda h: h.name)
    for host in found:
        start_name_server(host, NAME_PORT)
    return found


def test_each_host_has_its_name(sim: HostSimulation, hosts: list[SimHost]) -> None:
    for host in hosts:
        short = host.name.split(".")[0]
        done = run_on(sim.directory, short, ["sh", "-c", "hostname; exit 3"])
        assert (done.returncode, done.stdout) == (3, f"{host.name}\n")
        assert host.run(["hostname"], check=True).stdout.strip() == host.name
        fqdn = host.run(["python3", "-c", "import socket; print(socket.getfqdn())"])
        assert fqdn.stdout.strip() == host.name


def test_private_directories_are_private(hosts: list[SimHost]) -> None:
    first, second = hosts[0], hosts[1]
    marker = f"marker-{uuid.uuid4().hex}"
    paths = [*PRIVATE_DIRS, "/run/herder", "/run/lvm", "/run/libvirt", "/run/lock",
             FILE_STORAGE, "/dev/shm"]
    for directory in paths:
        path = f"{directory}/{marker}"
        first.run(["sh", "-c", f"echo here > {path}"], check=True)
        assert second.run(["test", "-e", path]).returncode == 1, path
        assert not os.path.exists(path), f"{path} reached the machine"
        if directory != "/dev/shm":  # a tmpfs of the host's alone
            assert first.path(path).read_text() == "here\n"
        first.run(["rm", path], check=True)


def test_hosts_file_and_nfs_stand_in_are_shared(sim: HostSimulation,
                                                hosts: list[SimHost]) -> None:
    expected = sim.hosts_file.read_text()
    assert all(h.name in expected for h in hosts)
    for host in hosts:
        assert host.run(["cat", "/etc/hosts"]).stdout == expected
    name = f"shared-{uuid.uuid4().hex}"
    hosts[0].run(["sh", "-c", f"echo shared > {SHARED_FILE_STORAGE}/{name}"], check=True)
    for host in hosts[1:]:
        assert host.run(["cat", f"{SHARED_FILE_STORAGE}/{name}"]).stdout == "shared\n"
    assert (sim.shared_dir / name).read_text() == "shared\n"


def test_file_storage_is_the_hosts_own_ext4(hosts: list[SimHost]) -> None:
    for host in hosts:
        out = host.run(["findmnt", "--json", "-o", "SOURCE,FSTYPE", FILE_STORAGE], check=True)
        mount = json.loads(out.stdout)["filesystems"][0]
        assert (mount["source"], mount["fstype"]) == (host.record.loops[1], "ext4")


def test_hosts_reach_each_other_by_name(hosts: list[SimHost]) -> None:
    for source in hosts:
        for target in hosts:
            assert connect(source, target.name, NAME_PORT) == target.name
            assert connect(source, target.name.split(".")[0], NAME_PORT) == target.name


def _machine_connect(address: str, port: int) -> str:
    try:
        with socket.create_connection((address, port), timeout=1) as conn:
            conn.settimeout(1)
            return conn.recv(100).decode(errors="replace")
    except OSError as err:
        return type(err).__name__


def test_the_machine_does_not_reach_the_hosts(sim: HostSimulation,
                                              hosts: list[SimHost]) -> None:
    network = f"198.18.{sim.index}."
    addresses = json.loads(subprocess.run(["ip", "-j", "address", "show"], check=True,
                                          capture_output=True, text=True).stdout)
    assert not [a for link in addresses for a in link.get("addr_info", [])
                if a.get("local", "").startswith(network)]
    routes = subprocess.run(["ip", "route", "show"], capture_output=True, text=True).stdout
    assert network not in routes
    # Whatever the machine's default route leads to (some networks accept any connection), it
    # is not a host.
    with ThreadPoolExecutor(len(hosts)) as pool:
        answers = list(pool.map(lambda h: _machine_connect(h.address, NAME_PORT), hosts))
    assert not {h.name for h in hosts} & set(answers)


def test_hosts_reach_neither_the_machine_nor_beyond(hosts: list[SimHost]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        # The host's own loopback: nothing listens there.
        assert connect(hosts[0], "127.0.0.1", port).startswith("ConnectionRefusedError")
    outside = [a for a in socket.gethostbyname_ex(socket.gethostname())[2]
               if not a.startswith("127.")] + ["192.0.2.1", "1.1.1.1"]
    for address in outside:  # errno 101: network unreachable
        assert connect(hosts[0], address, 53) == "OSError 101", address
    routes = hosts[0].run(["ip", "route", "show"], check=True).stdout.strip().splitlines()
    assert len(routes) == 1 and "default" not in routes[0]


def test_a_published_port_reaches_a_host_from_the_loopback(sim: HostSimulation,
                                                           hosts: list[SimHost]) -> None:
    listen = f"127.0.{sim.index}.1:{NAME_PORT}"
    sim.publish(listen, f"{hosts[1].address}:{NAME_PORT}")

    def answer() -> str:
        with socket.create_connection((f"127.0.{sim.index}.1", NAME_PORT), 5) as conn:
            return conn.recv(100).decode()

    try:
        assert answer() == hosts[1].name
        assert sim.published() == {listen: f"{hosts[1].address}:{NAME_PORT}"}
        sim.retarget(listen, f"{hosts[2].address}:{NAME_PORT}")
        assert answer() == hosts[2].name
    finally:
        sim.unpublish(listen)
    with pytest.raises(ConnectionRefusedError):
        answer()
    assert sim.published() == {}


def test_the_supervisor_restarts_a_killed_daemon(hosts: list[SimHost]) -> None:
    host = hosts[0]
    before = host.supervisor("status", ["sleeper"]).daemons[0]
    assert before.state == RUNNING and before.pid
    host.run(["kill", "-9", str(before.pid)], check=True)

    def restarted() -> DaemonStatus | None:
        now = host.supervisor("status", ["sleeper"]).daemons[0]
        return now if now.state == RUNNING and now.pid != before.pid else None

    after = wait_for(restarted, 30, "sleeper restarted")
    assert isinstance(after, DaemonStatus)
    assert after.restarts == before.restarts + 1 and after.last_exit == -9
    # The killed process was reaped by the supervisor (PID 1): no zombie left.
    states = host.run(["sh", "-c", "cat /proc/[0-9]*/stat"]).stdout
    assert ") Z " not in states


def test_exit_code_11_is_not_restarted(hosts: list[SimHost]) -> None:
    for host in hosts:
        status = host.supervisor("status", ["notmine"]).daemons[0]
        assert (status.state, status.last_exit, status.restarts) == (
            NOT_MY_ROLE, 11, 0)


def test_daemon_util_master_role_and_master_ip(sim: HostSimulation,
                                               hosts: list[SimHost]) -> None:
    master, other, third = hosts
    master_ip = sim.address(2)
    master.herder("--offline", "cluster", "init", f"cluster.{master.name.split('.', 1)[1]}",
                  "--master-netdev", "br0", "--master-ip", master_ip, "--master-netmask", "24",
                  "--force", check=True)
    master.herder("--offline", "node", "add", other.name, "--ip", other.address,
                  "--no-node-check", check=True)
    shutil.copytree(master.path("/var/lib/herder"), other.path("/var/lib/herder"),
                    dirs_exist_ok=True)

    def has_master_ip(host: SimHost) -> bool:
        return master_ip in host.run(["ip", "-o", "address", "show", "dev", "br0"]).stdout

    # cluster init on the master brought the master IP up (Ganeti's master-IP setup)
    assert has_master_ip(master) and not has_master_ip(other)
    master.herder("daemon-util", "deactivate-master-ip", check=True)
    # The master IP, from the cluster config (no ssconf here yet).
    out = master.herder("daemon-util", "activate-master-ip", check=True).stdout
    assert "activated on br0" in out
    assert has_master_ip(master) and not has_master_ip(other)
    assert "already configured" in master.herder("daemon-util", "activate-master-ip").stdout
    taken = other.herder("daemon-util", "activate-master-ip")
    assert taken.returncode == 1 and "configured on another machine" in taken.stderr
    assert not has_master_ip(other)
    try:
        master.herder("daemon-util", "start-master", check=True)
        assert master.herder("daemon-util", "check", "masterd").returncode == 0
        # masterd serves on the master IP, which the other hosts reach.
        wait_for(lambda: can_connect(third, master_ip, 5080), 60, "masterd listening")
        # On a node that is not the master, masterd exits with 11 and stays down.
        other.herder("daemon-util", "start-master", check=True)
        wait_for(lambda: other.supervisor("status", ["masterd"]).daemons[0].state
                 == NOT_MY_ROLE, 60, "masterd on a non-master exits 11")
        check = other.herder("daemon-util", "check", "masterd")
        assert check.returncode == 1 and "not-my-role" in check.stdout
    finally:
        master.herder("daemon-util", "stop-master", check=True)
        other.herder("daemon-util", "stop-master", check=True)
    states = {d.name: d.state for d in master.supervisor("status", ["masterd", "maintd"]).daemons}
    assert states == {"masterd": STOPPED, "maintd": STOPPED}
    assert master.herder("daemon-util", "check", "masterd").returncode == 1
    out = master.herder("daemon-util", "deactivate-master-ip", check=True).stdout
    assert "deactivated" in out and not has_master_ip(master)
    assert "not configured" in master.herder("daemon-util", "deactivate-master-ip").stdout


def test_each_hosts_lvm_sees_only_its_own_volume_group(hosts: list[SimHost]) -> None:
    for host in hosts:
        pvs = host.run(["pvs", "--noheadings", "-o", "pv_name,vg_name"], check=True).stdout
        assert pvs.split() == [host.record.loops[0], "xenvg"]
    lv = f"lv{uuid.uuid4().hex[:8]}"
    hosts[0].run(["lvcreate", "-L", "64m", "-n", lv, "xenvg"], check=True)
    try:
        assert lv in hosts[0].run(["lvs", "--noheadings", "-o", "lv_name"]).stdout
        for host in hosts[1:]:
            assert lv not in host.run(["lvs", "--noheadings", "-o", "lv_name"]).stdout
    finally:
        hosts[0].run(["lvremove", "-f", f"xenvg/{lv}"], check=True)


def _listening_ports(host: SimHost) -> set[int]:
    """The TCP ports something listens on in the host (/proc/net/tcp*, state 0A)."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in host.run(["cat", table]).stdout.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_libvirtd_on_a_host(hosts: list[SimHost]) -> None:
    if not os.access("/usr/sbin/libvirtd", os.X_OK):
        pytest.skip("libvirtd is not installed")
    host = hosts[2]
    host.herder("daemon-util", "start", "libvirtd", check=True)
    probe = ("import libvirt\n"
             "conn = libvirt.open()\n"
             "print(conn.getURI(), conn.getHostname())\n"
             "test = libvirt.open('test+unix:///default')\n"
             "print(','.join(d.name() for d in test.listAllDomains()))\n")
    try:
        wait_for(lambda: host.run(["python3", "-c", probe]).returncode == 0, 60,
                 "libvirtd answers")
        lines = host.run(["python3", "-c", probe], check=True).stdout.split()
        assert lines == ["qemu:///system", host.name, "test"]
        assert not _listening_ports(host) & {16509, 16514}, "libvirtd listens on TCP"
        assert host.path("/run/libvirt/libvirt-sock").exists()
    finally:
        host.herder("daemon-util", "stop", "libvirtd", check=True)


def _commands(host: SimHost) -> list[list[str]]:
    """The command lines of every process on the host."""
    script = ("import glob, json\n"
              "found = []\n"
              "for path in glob.glob('/proc/[0-9]*/cmdline'):\n"
              "    try:\n"
              "        found.append(open(path, 'rb').read().decode().split('\\0')[:-1])\n"
              "    except OSError:\n"
              "        pass\n"
              "print(json.dumps(found))\n")
    return json.loads(host.run(["python3", "-c", script], check=True).stdout)


def test_a_command_is_killed_on_timeout(hosts: list[SimHost]) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        hosts[0].run(["sleep", "987"], timeout=0.5)
    wait_for(lambda: ["sleep", "987"] not in _commands(hosts[0]), 10, "sleep gone")


def test_power_cycle(sim: HostSimulation, hosts: list[SimHost]) -> None:
    host = hosts[2]
    old_pid = host.pid
    host.power_off(grace=0)
    assert not host.running and hoststate.start_time(old_pid) is None
    assert connect(hosts[0], host.name, NAME_PORT) != host.name
    host.power_on()
    assert host.run(["hostname"]).stdout.strip() == host.name
    assert "xenvg" in host.run(["vgs", "--noheadings", "-o", "vg_name"]).stdout
    start_name_server(host, NAME_PORT)
    assert connect(hosts[0], host.name, NAME_PORT) == host.name
    assert host.supervisor("status", ["sleeper"]).daemons[0].state == RUNNING


def test_a_host_that_fails_to_boot_leaves_nothing(sim: HostSimulation) -> None:
    before = set(sim.hosts)
    loops_before = loopdev.list_loops()
    config = HostConfig("broken.sim.herder.test", sim.address(99),
                        node_settings="[supervise\n", vg_mib=256, file_storage_mib=64)
    with pytest.raises(HerderError, match="broken.sim.herder.test stopped while booting: .*"
                       "node settings /etc/herder/node.toml: not valid TOML"):
        sim.add_hosts([config])
    assert set(sim.hosts) == before
    # this simulation's loop devices only: other test workers attach their own meanwhile
    mine = str(sim.directory)
    assert {loop for loop in loopdev.list_loops() if loop.backing_file.startswith(mine)} \
        <= set(loops_before)
    assert not (sim.directory / "nodes" / config.name).exists()
    assert "broken" not in sim.hosts_file.read_text()
    with pytest.raises(HerderError, match="is no host address of this simulation"):
        sim.add_hosts([HostConfig("elsewhere.sim.herder.test", "192.0.2.9")])
    with pytest.raises(HerderError, match="exists already"):
        sim.add_hosts([HostConfig(next(iter(before)), sim.address(98))])


# --- teardown, also after the simulator crashed ---------------------------------------------

CRASHING_SIMULATOR = """
import sys
from pathlib import Path
from herder.sim.host import HostConfig, HostSimulation
sim = HostSimulation.create(Path(sys.argv[1]))
hosts = sim.add_hosts([HostConfig(f"node{i}.sim.herder.test", sim.address(10 + i),
                                  vg_mib=1024, file_storage_mib=256) for i in (1, 2)])
sim.publish(f"127.0.{sim.index}.1:7001", f"{hosts[0].address}:7001")
# A loop device the host attached itself, on an image in its own file storage.
hosts[0].run(["truncate", "-s", "16M", "/srv/herder/file-storage/disk.img"], check=True)
hosts[0].run(["losetup", "--find", "--show", "/srv/herder/file-storage/disk.img"], check=True)
print(sim.index, flush=True)
sys.stdin.read()
"""


def _machine_links() -> set[str]:
    links = json.loads(subprocess.run(["ip", "-j", "link", "show"], check=True,
                                      capture_output=True, text=True).stdout)
    return {link["ifname"] for link in links}


def test_teardown_after_a_crash_leaves_nothing(sim: HostSimulation, tmp_path: Path) -> None:
    """A second simulation beside the module's: its simulator is killed, then torn down from
    its record; nothing of it is left, the first one is untouched."""
    links_before = _machine_links()
    directory = tmp_path / "crashing"
    proc = subprocess.Popen([sys.executable, "-c", CRASHING_SIMULATOR, str(directory)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        index = int(proc.stdout.readline())
    finally:
        proc.kill()  # the simulator crashes
        proc.wait()
    assert index != sim.index
    record = hoststate.load(index)
    assert record is not None and len(record.hosts) == 2
    inits = [h.init for h in record.hosts.values()]
    assert all(hoststate.alive(p) for p in inits)
    files = {i for h in record.hosts.values() for i in h.images} | loopdev.files_under(directory)
    ours = loopdev.owned(loopdev.list_loops(), files)
    assert len(ours) == 5  # two per host, and the one inside the first host's file storage

    from herder.sim.host import teardown

    assert teardown(directory, grace=2.0)
    assert not any(hoststate.alive(p) for p in inits)
    assert f"hsim-{index}" not in subprocess.run(["ip", "netns", "list"],
                                                  capture_output=True, text=True).stdout
    assert not loopdev.owned(loopdev.list_loops(), files)
    mounts = Path("/proc/mounts").read_text()
    assert str(directory) not in mounts and f"hsim-{index}" not in mounts
    assert _machine_links() <= links_before
    assert hoststate.load(index) is None
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((f"127.0.{index}.1", 7001), 2).close()
    assert not teardown(directory)
    # The module's simulation still runs.
    assert all(h.running for h in sim.hosts.values())
