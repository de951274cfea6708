"""The master's host dies on the etcd backend and nobody acts (issue 29 point 3, docs/ha.md
"When the dead node was the master"), on one simulated cluster of real guests for the module
(`herder cluster simulate --hosts debian --store etcd`: an external etcd in the simulation's
network, masterd campaigning on every node).

One guest on the master's host writes a numbered sequence to its disk (`herder.sim.guest`);
the master's host is powered off by its BMC (no grace). A candidate's masterd wins the master
lease by itself, brings the floating master IP up on its br0 (the cluster's published address
reaches it), its maintd fences the old master through its BMC (power-off confirmed by
power-status) and recovers the guest on another node: its disk shows one writer at a time and
no acknowledged record lost. While the guest boots there, the new master's masterd is stopped
cleanly and hands the master IP and the lease to the last candidate (a second takeover); then
etcd's administrator takes that master's key away (a third takeover): its masterd exits 75 and
systemd restarts it, a standby. The seconds from the power-off to the
RAPI at the master IP, to the incident's end and to the guest's first heartbeat elsewhere are
printed.

The nodes are Debian 12 hosts (`hosts="debian"`, issue 34): each got the etcd client's files
and the config location by the guide's own step (`scripts/node-install.sh etcd-client`:
`/etc/herder/etcd-client.toml`, `/etc/herder/etcd/`, `HERDER_CONFIG` in
`/etc/herder/environment`, which every unit reads), so masterd campaigns under systemd on every
candidate, the elected one starts maintd's unit, and its daemons' logs are their units'
journals."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests import simaddresses
from tests.simhelpers import daemon_log, herder, running_sim, wait_for
from tests.simhelpers import on as on_node
from tests.system.test_node_failure_sim import (
    BOOT,
    NODE1,
    NODE2,
    NODE3,
    RECOVERED,
    add_guest,
    assert_one_writer,
    boots,
    maintd_status,
    new_boot,
    node_failed,
    primary,
    running_on,
    shortened,
)

pytestmark = [pytest.mark.slow, pytest.mark.guests]

MASTER_IP_DEVICE = "br0"
# the election: the lease TTL (10 s by default) + about 2 s; twice that and the master IP's
# activation (a daemon-util start) under load
ELECTED = 60.0


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("libvirt")
    from herder.sim import debroot

    reason = debroot.unsupported()
    if reason:
        pytest.skip(reason)
    for state in running_sim(tmp_path_factory.mktemp("etcdmaster"), 3, guests="qemu",
                             store="etcd", hosts="debian",
                             first_ip=simaddresses.first_ip("etcd_master_death")):
        yield shortened(state)  # the shorter detection time of test_node_failure_sim


def masterd_log(state: Any, node: str) -> str:
    """Every run of the node's masterd since its host booted (its unit's journal)."""
    return daemon_log(state, node, "masterd")


def has_master_ip(state: Any, node: str) -> bool:
    done = state.host(node).run(["ip", "-4", "-o", "address", "show", "dev", MASTER_IP_DEVICE],
                                timeout=30, check=True)
    return f" {state.master_ip}/" in done.stdout


def master_by_rapi(state: Any) -> str | None:
    """The master as the masterd behind the cluster's published address (the master IP)
    says, None while none answers there."""
    try:
        with state.rapi(timeout=5.0) as api:
            return str(api.get_info()["master"])
    except Exception:
        return None


def maintd_running(state: Any, node: str) -> bool:
    """maintd's unit runs on the node (a standby's exited 11, or was never started)."""
    done = state.host(node).run(["systemctl", "is-active", "herder-maintd.service"],
                                timeout=30)
    return bool(done.stdout.strip() == "active")


def test_the_cluster_runs_on_etcd(sim: Any) -> None:
    """node1 elected: it alone serves RAPI (at the master IP, on its br0) and runs maintd;
    the other nodes' masterd are standbys."""
    assert sim.etcd.startswith("etcds://") and sim.etcd.endswith("/sim")
    assert master_by_rapi(sim) == NODE1
    assert has_master_ip(sim, NODE1)
    assert not has_master_ip(sim, NODE2) and not has_master_ip(sim, NODE3)
    assert "took over at epoch" in masterd_log(sim, NODE1)
    for node in (NODE2, NODE3):
        assert "standby, campaigning for the master lease" in masterd_log(sim, node)
        assert "took over" not in masterd_log(sim, node)
        assert not maintd_running(sim, node)
    assert maintd_running(sim, NODE1)


def maintd_answers(state: Any) -> bool:
    """maintd answers at the master IP (the published address), where the operator's
    `herder maintd status` asks; polled from this process (a CLI process per poll took CPU
    from the guest's boot), the CLI itself asked once it answers."""
    if maintd_status(state) is None:
        return False
    return herder(state, "maintd", "status", "--json", check=False).returncode == 0


def elected_other_than(state: Any, old: str) -> str:
    """The candidate that serves RAPI at the master IP once `old` no longer does."""
    def found() -> str | None:
        master = master_by_rapi(state)
        return master if master not in (None, old) else None

    master = wait_for(found, ELECTED, f"a master other than {old} at the master IP")
    assert master is not None
    return master


# m1's first heartbeat after the power-off: (node, seconds from it), awaited in the background
# while the next case runs (its boot under TCG is the longest wait)
RECOVERED_M1: list[Future[tuple[str, float]]] = []


@pytest.fixture(scope="module")
def background() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(1) as pool:
        yield pool


def test_the_masters_power_off_is_recovered_by_a_candidate(
        sim: Any, background: ThreadPoolExecutor) -> None:
    """The master's host (with the guest) powered off by its BMC: a candidate takes over by
    itself, its maintd fences the old master (OOB power-off, confirmed) and recovers the
    guest elsewhere (its boot is awaited by the last test)."""
    master = master_by_rapi(sim)
    assert master is not None
    add_guest(sim, "m1", "sharedfile", master)
    new_boot(sim, "m1", set(), BOOT)
    old = boots(sim, "m1")
    assert primary(sim, "m1") == master

    herder(sim, "cluster", "simulate", "--dir", sim.directory, "--power-off", master)
    began = time.monotonic()
    assert not sim.host(master).running

    def first_heartbeat() -> tuple[str, float]:
        node, _ = new_boot(sim, "m1", old, RECOVERED + BOOT)
        return node, time.monotonic() - began

    RECOVERED_M1.append(background.submit(first_heartbeat))
    new_master = elected_other_than(sim, master)
    serving = time.monotonic() - began
    others = [n for n in (NODE1, NODE2, NODE3) if n not in (master, new_master)]
    assert has_master_ip(sim, new_master)
    assert not any(has_master_ip(sim, n) for n in others)
    wait_for(lambda: maintd_running(sim, new_master), ELECTED, "the new master's maintd")
    assert not any(maintd_running(sim, n) for n in others)  # one maintd acts
    # started once the master IP is up, so it listens there (CI saw it on the primary IP)
    wait_for(lambda: maintd_answers(sim), ELECTED, "maintd status at the master IP")
    incident = wait_for(lambda: (i := node_failed(sim, master)) and i["repair-status"] ==
                        "completed" and i, ELECTED + 2 * RECOVERED,
                        "the node-failed incident completed")
    assert incident["original"]["fence"] == "oob"  # powered off through its BMC, confirmed
    assert "m1" in incident["original"]["recovered"]
    assert primary(sim, "m1") != master
    nodes = {n["name"]: n for n in json.loads(herder(sim, "node", "list", "--json").stdout)}
    assert nodes[master]["offline"] is True
    assert not sim.host(master).running  # fenced: it stays off
    print(f"master {master} powered off: {new_master} serving RAPI at the master IP after "
          f"{serving:.1f} s, the incident done after {time.monotonic() - began:.1f} s")


def test_a_master_that_stops_hands_the_master_ip_over(sim: Any) -> None:
    """While m1 boots elsewhere: the master's masterd stopped (SIGTERM: it takes the master
    IP down, then hands the lease over): the other candidate takes over with the master IP
    on its br0; the old one's masterd, started again, is a standby without it."""
    old = master_by_rapi(sim)
    assert old is not None
    standbys = masterd_log(sim, old).count("standby, campaigning")
    on_node(sim, old, "daemon-util", "stop", "masterd")
    began = time.monotonic()
    new_master = elected_other_than(sim, old)
    print(f"{new_master} serving RAPI at the master IP {time.monotonic() - began:.1f} s after "
          f"{old}'s masterd stopped")
    assert not has_master_ip(sim, old) and has_master_ip(sim, new_master)
    assert f"Master IP address {sim.master_ip}/24 deactivated" in masterd_log(sim, old)
    wait_for(lambda: maintd_running(sim, new_master), ELECTED, "the new master's maintd")
    wait_for(lambda: not maintd_running(sim, old), ELECTED, "the old master's maintd stopped")
    # started once the master IP is up, so it listens there (CI saw it on the primary IP)
    wait_for(lambda: maintd_answers(sim), ELECTED, "maintd status at the master IP")
    on_node(sim, old, "daemon-util", "start", "masterd")
    wait_for(lambda: masterd_log(sim, old).count("standby, campaigning") > standbys, ELECTED,
             f"{old}'s masterd a standby again")
    assert master_by_rapi(sim) == new_master and not has_master_ip(sim, old)


def unit_property(state: Any, node: str, name: str) -> str:
    done = state.host(node).run(["systemctl", "show", "-P", name, "herder-masterd.service"],
                                timeout=30, check=True)
    return str(done.stdout.strip())


# The etcd administrator deletes the cluster's master key (etcd's root user, from the
# simulation's network): the master's lease is no longer its own.
TAKE_MASTER_KEY = """
import sys
from pathlib import Path
from herder.core import etcd_settings
from herder.core.fence import master_key
from herder.core.store_etcd import parse_location
endpoints, cluster = parse_location(sys.argv[1])
with etcd_settings.client(endpoints, Path(sys.argv[2])) as admin:
    print(admin.delete(master_key(cluster)))
"""


def take_master_key(state: Any) -> None:
    done = subprocess.run(
        ["nsenter", f"--net=/run/netns/{state.simulation().netns}", "--", sys.executable, "-c",
         TAKE_MASTER_KEY, state.etcd, str(Path(state.directory) / "etcd" / "root-client.toml")],
        capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr


def test_a_master_that_loses_its_lease_is_restarted_a_standby(sim: Any) -> None:
    """The master key taken away in etcd (the lease no longer the master's): the master's
    masterd stops acting, takes the master IP down, exits 75 (EX_TEMPFAIL), and its unit's
    `Restart=on-failure` starts it again after `RestartSec=`, a standby (11 is the unit's only
    clean exit, docs/install.md); the other candidate takes over. (A masterd frozen past its
    lease instead keeps the master IP until its host is fenced: docs/ha.md.)"""
    old = master_by_rapi(sim)
    assert old is not None
    restarts = int(unit_property(sim, old, "NRestarts"))
    standbys = masterd_log(sim, old).count("standby, campaigning")
    pid = unit_property(sim, old, "MainPID")
    take_master_key(sim)
    began = time.monotonic()
    new_master = elected_other_than(sim, old)
    elected = time.monotonic() - began
    wait_for(lambda: int(unit_property(sim, old, "NRestarts")) > restarts, ELECTED,
             f"{old}'s masterd restarted by systemd")
    wait_for(lambda: masterd_log(sim, old).count("standby, campaigning") > standbys, ELECTED,
             f"{old}'s masterd a standby again")
    print(f"{old}'s master key taken: {new_master} serving RAPI after {elected:.1f} s; {old}'s "
          f"masterd a standby again after {time.monotonic() - began:.1f} s")
    log = masterd_log(sim, old)
    assert "no longer the master" in log and "status=75/TEMPFAIL" in log
    assert unit_property(sim, old, "ActiveState") == "active"
    assert unit_property(sim, old, "MainPID") != pid
    assert master_by_rapi(sim) == new_master
    assert not has_master_ip(sim, old) and has_master_ip(sim, new_master)
    wait_for(lambda: maintd_running(sim, new_master), ELECTED, "the new master's maintd")
    wait_for(lambda: not maintd_running(sim, old), ELECTED, "the old master's maintd stopped")
    wait_for(lambda: maintd_answers(sim), ELECTED, "maintd status at the master IP")


def test_the_recovered_guest_runs_once(sim: Any) -> None:
    """m1 heartbeats on another node than the dead master, one writer at a time, no
    acknowledged record lost; the incident is still in the status of the maintd that runs
    now (the second takeover's)."""
    (heartbeat,) = RECOVERED_M1
    node, took = heartbeat.result()
    dead = next(n for n in (NODE1, NODE2, NODE3) if not sim.host(n).running)
    assert node != dead
    assert "m1" in running_on(sim, primary(sim, "m1"))
    incident = node_failed(sim, dead)
    assert incident is not None and "m1" in incident["original"]["recovered"]
    assert_one_writer(sim, "m1")
    print(f"m1 heartbeating on {node} {took:.1f} s after the power-off of {dead}")
