"""A simulated cluster of real Debian 12 hosts (`herder cluster simulate --hosts debian`, issue 34
item 1): each node boots systemd (systemd-nspawn) from the cached debootstrapped root with
Debian's own libvirt-daemon-system and bookworm-backports' QEMU, herder installed from this
checkout's wheel into /opt/herder by the guide's script (scripts/node-install.sh) and its units
enabled; the nodes joined with the cluster's join flow, libvirt's TLS set up by the script's
libvirt-tls step.

One two-node cluster for the module; the tests run in order: herder runs from the wheel under
systemd, a local user cannot reach libvirt, libvirt's TLS port listens on the primary IP only, a
real guest is created and live-migrated with its disk intact (each node's libvirt sees only its
own domains), and a node's power is cut and restored through its BMC. A failure of herder's
own start-up on these hosts fails the module (the fixture raises), it never skips.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import simaddresses
from tests.simhelpers import herder, running_sim, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.guests]

NAME = "d1"
BOOT = 180.0
NODE1, NODE2 = "node1.sim.herder.test", "node2.sim.herder.test"
SHARED = "/srv/herder/shared-file-storage"
TLS_PORT = 16514
STARTED: dict[str, float] = {}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from herder.sim import debroot, guest

    reason = debroot.unsupported()
    if reason:
        pytest.skip(reason)
    guest.ensure_guest()
    began = time.monotonic()
    for state in running_sim(tmp_path_factory.mktemp("debian"), 2, guests="qemu",
                             hosts="debian", first_ip=simaddresses.first_ip("debian_hosts")):
        STARTED["cluster"] = time.monotonic() - began
        print(f"the 2-node Debian-host cluster came up in {STARTED['cluster']:.0f} s")
        yield state


def sh(state: Any, node: str, command: str, timeout: float = 60) -> str:
    done = state.host(node).run(["sh", "-c", command], timeout=timeout)
    assert done.returncode == 0, f"{node}: {command}: {done.stderr or done.stdout}"
    return str(done.stdout).strip()


def serial(state: Any, node: str) -> str:
    done = state.host(node).run(["cat", f"/var/log/herder/instances/{NAME}.serial.log"],
                                timeout=30)
    return str(done.stdout) if done.returncode == 0 else ""


def beat(state: Any, node: str, after: float = -1.0, boot_id: str | None = None) -> Any:
    from herder.sim import guest

    def newest() -> Any:
        beats = [b for b in guest.parse_heartbeats(serial(state, node))
                 if b.uptime > after and (boot_id is None or b.boot_id == boot_id)]
        return beats[-1] if beats else None

    return wait_for(newest, BOOT, f"a heartbeat of {NAME} on {node}", interval=1.0)


def domains(state: Any, node: str) -> list[str]:
    return sorted(sh(state, node, "virsh -q -c qemu:///system list --all --name").split())


def test_herder_runs_from_the_wheel_under_systemd(sim: Any) -> None:
    for node in (NODE1, NODE2):
        assert sh(sim, node, "cat /proc/1/comm") == "systemd"
        assert sh(sim, node, "hostname") == node
        assert sh(sim, node, "systemctl is-active herder-noded") == "active"
        pid = sh(sim, node, "systemctl show -P MainPID herder-noded")
        command = sh(sim, node, f"tr '\\0' ' ' </proc/{pid}/cmdline")
        assert "/opt/herder/bin/herder noded" in command
        # the current build's virtualenv (docs/install.md: versions/<version>, current -> it)
        where = sh(sim, node,
                   "/opt/herder/current/bin/python -c 'import herder; print(herder.__file__)'")
        assert where.startswith("/opt/herder/current/lib/python3"), where  # not the checkout
        assert sh(sim, node, "readlink /opt/herder/bin") == "current/bin"
        assert sh(sim, node, "readlink /opt/herder/current").startswith("versions/")
        assert sh(sim, node, "readlink /usr/local/sbin/herder") == "/opt/herder/bin/herder"
        assert sh(sim, node, "systemctl is-enabled herder.target") == "enabled"
    # the master's daemons under systemd; masterd not on the other node (exit 11, no restart)
    assert sh(sim, NODE1, "systemctl is-active herder-masterd") == "active"
    assert sh(sim, NODE2, "systemctl is-failed herder-masterd || true") != "failed"


def test_only_runnable_templates_and_verify_finds_no_error(sim: Any) -> None:
    with sim.rapi() as api:
        info = api.get_info()
    # no device-mapper, no DRBD in the containers; loop devices for the sharedimg provider
    assert sorted(info["enabled_disk_templates"]) == ["diskless", "ext", "file", "sharedfile"]
    verify = herder(sim, "cluster", "verify", "--json", check=False)
    found = json.loads(verify.stdout)
    assert [f for f in found if f["severity"] == "error"] == [], found


def test_a_local_user_cannot_reach_libvirt(sim: Any) -> None:
    for uri_args in (["-c", "qemu:///system"], ["-r", "-c", "qemu:///system"]):
        refused = sim.host(NODE1).run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "virsh",
             *uri_args, "list", "--all"], timeout=60)
        assert refused.returncode != 0, refused.stdout
    assert sh(sim, NODE1, "virsh -c qemu:///system uri") == "qemu:///system"  # root may


def test_libvirt_tls_listens_on_the_primary_ip_only(sim: Any) -> None:
    for node in sim.nodes:
        listening = sh(sim, node.name, f"ss -Hltn 'sport = :{TLS_PORT}'").splitlines()
        assert [line.split()[3] for line in listening] == [f"{node.address}:{TLS_PORT}"], \
            listening


def test_a_real_guest_lives_and_migrates_with_its_disk(sim: Any) -> None:
    from herder.sim import guest

    herder(sim, "instance", "add", NAME, "--no-name-check", "-t", "sharedfile", "-o",
           "herder-guest", "--disk", "64M", "--ignore-ipolicy", "-n", NODE1, "--net",
           "link=br0", timeout=300)
    first = beat(sim, NODE1)
    assert first.disk == guest.disk_pattern_hash(NAME)
    assert sh(sim, NODE1, "ps -o user= -C qemu-system-x86_64") == "libvirt-qemu"
    assert domains(sim, NODE1) == [NAME] and domains(sim, NODE2) == []
    herder(sim, "instance", "migrate", NAME, "--target-node", NODE2, timeout=600)
    after = beat(sim, NODE2, after=first.uptime, boot_id=first.boot_id)  # the same boot goes on
    assert after.disk == first.disk
    assert domains(sim, NODE2) == [NAME] and domains(sim, NODE1) == []


def test_power_cut_and_restored_through_the_bmc(sim: Any) -> None:
    from herder.sim import cluster

    host = sim.host(NODE1)
    before = host.pid
    sh(sim, NODE1, "echo kept > /var/lib/herder/power-test && sync")
    cluster.power(Path(sim.directory), NODE1, on=False)
    wait_for(lambda: not host.running, 60, f"{NODE1} off")
    cluster.power(Path(sim.directory), NODE1, on=True)
    wait_for(lambda: host.running and host.pid != before, 120, f"{NODE1} on again")
    wait_for(lambda: host.run(["systemctl", "is-active", "herder-noded"],
                              timeout=30).stdout.strip() == "active", 180,
             f"herder-noded on {NODE1} after the power cycle")
    assert sh(sim, NODE1, "cat /var/lib/herder/power-test") == "kept"  # its disk kept
