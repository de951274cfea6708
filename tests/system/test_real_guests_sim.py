"""Real guests on a simulated cluster (`herder cluster simulate --guests qemu`): each node's
libvirtd runs the QEMU driver, TLS only between the nodes; the `herder-guest` OS boots a tiny
Linux whose serial console says `herder-guest boot_id=.. uptime=.. disk=..` every second.

One cluster and one guest for the module, driven as an operator does (the CLI through the
client profile); the tests run in order: the domain from the config, a live migration (the
heartbeat goes on: same boot id, growing uptime), a failover (a new boot on the other node), a
changed hvparam and a rename applied at the next start, the target's libvirtd killed during a
migration (the guest stays on the source, the job says why, one domain remains), and maintd
evacuating a broken node without rebooting its guest.

The disk hash is compared whenever the instance's disk is the same file on both nodes (a
sharedfile disk under /srv/herder/shared-file-storage; the disks work makes it so)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.simhelpers import client_env, herder, running_sim, wait_for, where, worker_offset

NAME = "g1"  # renamed to g2 by the rename test
BOOT = 180.0  # a TCG guest boots in ~10 s idle; the machine is a loaded 2-core one
NODE1, NODE2 = "node1.sim.herder.test", "node2.sim.herder.test"
SHARED = "/srv/herder/shared-file-storage"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("libvirt")
    from herder.sim import guest

    try:
        guest.ensure_guest()
    except guest.GuestBuildError as err:
        pytest.skip(str(err))
    yield from running_sim(tmp_path_factory.mktemp("guests"), 2, guests="qemu",
                           first_ip=140 + worker_offset(4, 2))


def serial(state: Any, node: str) -> str:
    done = state.host(node).run(["cat", f"/var/log/herder/instances/{NAME}.serial.log"],
                                timeout=30)
    return done.stdout if done.returncode == 0 else ""


def beat(state: Any, node: str, after: float = -1.0, boot_id: str | None = None,
         timeout: float = BOOT) -> Any:
    """The newest heartbeat on `node`'s serial log with an uptime above `after` (and of the
    boot `boot_id`, when given)."""
    from herder.sim import guest

    def newest() -> Any:
        beats = [b for b in guest.parse_heartbeats(serial(state, node))
                 if b.uptime > after and (boot_id is None or b.boot_id == boot_id)]
        return beats[-1] if beats else None

    return wait_for(newest, timeout, f"a heartbeat of {NAME} on {node}", interval=1.0)


def domain_xml(state: Any, node: str) -> ET.Element:
    done = state.host(node).run(["virsh", "-c", "qemu:///system", "dumpxml", NAME], timeout=60)
    assert done.returncode == 0, done.stderr
    return ET.fromstring(done.stdout)


def defined(state: Any, node: str) -> list[str]:
    done = state.host(node).run(["virsh", "-q", "-c", "qemu:///system", "list", "--all",
                                 "--name"], timeout=60)
    return sorted(line for line in done.stdout.split() if line)


def rapi_job(state: Any, submit: Any, timeout: float = 300) -> None:
    """Run a RAPI job (`submit(api)` returns its id) to success."""
    with state.rapi() as api:
        job = submit(api)
        status = wait_for(lambda: (found := api.get_job_status(job))["status"] in (
            "success", "error", "canceled") and found, timeout, f"job {job}")
    assert status["status"] == "success", status["opresult"]


def shared_disk(state: Any, node: str) -> bool:
    source = domain_xml(state, node).find("devices/disk/source")
    return source is not None and str(source.get("file", "")).startswith(SHARED)


def test_the_domain_comes_from_the_config(sim: Any) -> None:
    from herder.sim import guest

    herder(sim, "instance", "add", NAME, "--no-name-check", "-t", "sharedfile", "-o",
           "herder-guest", "--disk", "64M", "-n", NODE1, timeout=300)
    first = beat(sim, NODE1)
    if shared_disk(sim, NODE1):
        assert first.disk == guest.disk_pattern_hash(NAME)
    root = domain_xml(sim, NODE1)
    assert root.get("type") in ("qemu", "kvm")  # the node's KVM probe decides
    assert root.findtext("os/kernel", "").endswith("/vmlinuz")
    assert root.find("devices/interface/source").get("bridge") == "br0"
    assert root.find("devices/serial/log").get("file").endswith(f"{NAME}.serial.log")
    # libvirtd listens on TLS only, never on plain TCP
    listening = sim.host(NODE1).run(["ss", "-ltnH"], timeout=30).stdout
    assert ":16514 " in listening and ":16509 " not in listening


def test_live_migration_keeps_the_guest_running(sim: Any) -> None:
    before = beat(sim, NODE1)
    done = herder(sim, "instance", "migrate", NAME, "--target-node", NODE2, timeout=600)
    assert "Migrated" in done.stdout
    assert where(sim, NAME) == [NODE2]
    assert defined(sim, NODE1) == [] and defined(sim, NODE2) == [NAME]
    after = beat(sim, NODE2, after=before.uptime)
    assert after.boot_id == before.boot_id  # the same boot: its memory travelled
    assert after.uptime > before.uptime
    if shared_disk(sim, NODE2):
        assert after.disk == before.disk


def test_failover_starts_it_on_the_other_node(sim: Any) -> None:
    before = beat(sim, NODE2)
    herder(sim, "instance", "failover", NAME, "--target-node", NODE1, timeout=600)
    after = wait_for(lambda: next((b for b in reversed(_beats(sim, NODE1))
                                   if b.boot_id != before.boot_id), None), BOOT,
                     "a new boot on node1")
    assert where(sim, NAME) == [NODE1] and defined(sim, NODE2) == []
    if shared_disk(sim, NODE1):
        assert after.disk == before.disk


def _beats(sim: Any, node: str) -> list[Any]:
    from herder.sim import guest

    return guest.parse_heartbeats(serial(sim, node))


def test_a_changed_hvparam_and_a_rename_apply_at_the_next_start(sim: Any) -> None:
    global NAME
    herder(sim, "instance", "shutdown", NAME, timeout=300)
    rapi_job(sim, lambda api: api.modify_instance(NAME, beparams={"maxmem": 160,
                                                                  "minmem": 160}))
    rapi_job(sim, lambda api: api.rename_instance(NAME, "g2"))
    NAME = "g2"
    herder(sim, "instance", "start", NAME, timeout=300)
    beat(sim, NODE1)
    root = domain_xml(sim, NODE1)
    assert root.findtext("name") == "g2" and defined(sim, NODE1) == ["g2"]
    assert int(root.findtext("memory", "0")) == 160 * 1024  # KiB


@pytest.mark.skip(reason="under load, libvirt's calls on the source can block for minutes after "
                  "the target's libvirtd is killed, and herder's migrate job waits with them "
                  "(open in issue 17: a bounded wait on the source's job status)")
def test_killing_the_targets_libvirtd_leaves_the_guest_on_the_source(sim: Any) -> None:
    # slow enough to be caught half way: 1 MiB/s for the guest's 160 MiB
    # (migration_bandwidth is cluster-wide in Ganeti)
    rapi_job(sim, lambda api: api.modify_cluster(hvparams={"kvm": {"migration_bandwidth": 1}}))
    before = beat(sim, NODE1)
    job = subprocess.Popen([sys.executable, "-m", "herder.cli.main", "instance", "migrate",
                            NAME, "--target-node", NODE2], env=client_env(sim),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    target = sim.host(NODE2)
    # the incoming QEMU appears on the target: the memory transfer has begun
    wait_for(lambda: NAME in defined(sim, NODE2), 120, "the incoming domain on node2")
    time.sleep(3)
    pid = int(target.run(["cat", "/run/libvirtd.pid"], timeout=30).stdout.strip())
    target.run(["kill", f"-{int(signal.SIGKILL)}", str(pid)], timeout=30)
    output, _ = job.communicate(timeout=600)
    assert job.returncode != 0, output
    assert re.search(r"Could not migrate instance g2: .+; it stays on " + NODE1, output), output
    after = beat(sim, NODE1, after=before.uptime)
    assert after.boot_id == before.boot_id  # it never stopped
    # the target's libvirtd comes back (its supervisor) and drops the unfinished copy
    wait_for(lambda: where(sim, NAME) == [NODE1] and defined(sim, NODE2) == [], 120,
             "exactly one domain, on node1")
    rapi_job(sim, lambda api: api.modify_cluster(hvparams={"kvm": {"migration_bandwidth": 32}}))


def test_maintd_evacuates_a_broken_node_without_rebooting_its_guest(sim: Any) -> None:
    from herder.sim import cluster

    before = beat(sim, NODE1)
    # node1 runs the master: the guest goes to node2, whose diagnose then says "evacuate",
    # and maintd migrates it back to node1, live
    herder(sim, "instance", "migrate", NAME, "--target-node", NODE2, timeout=600)
    cluster.break_node(Path(sim.directory), NODE2, "evacuate")
    try:
        wait_for(lambda: where(sim, NAME) == [NODE1], 300, "maintd moving g2 to node1")
        after = beat(sim, NODE1, after=before.uptime)
        assert after.boot_id == before.boot_id
    finally:
        cluster.break_node(Path(sim.directory), NODE2, "Ok")
