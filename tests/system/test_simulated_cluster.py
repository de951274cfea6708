"""End to end on a simulated cluster of namespaced hosts: every node its own processes, network,
mounts and libvirtd (the test driver), its daemons started by its supervisor with the defaults
of a real host; the CLI runs on this machine through the client profile, as an operator's
workstation, or on a node (`--exec`)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.core import model
from herder.core.errors import HerderError
from herder.core.store import FileStore
from herder.sim import cluster
from herder.sim.host import SimHost
from tests import simaddresses
from tests.simhelpers import (
    config,
    domains,
    herder,
    on,
    running_sim,
    wait_for,
    where,
)

# The tests share one simulated cluster and build on each other (pytest runs with
# --dist loadfile, so they stay on one worker, in order).
pytestmark = pytest.mark.slow


def worker_first_ip() -> int:
    """This module's addresses (tests/simaddresses.py)."""
    return simaddresses.first_ip("simulated_cluster")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    # four nodes: nodes 1-3 master candidates, node 4 a node without a config copy
    yield from running_sim(tmp_path_factory.mktemp("sim"), 4, first_ip=worker_first_ip())


def node_file(sim, node: str, path: str) -> Path:
    """Where the machine sees a file of a node (the test looks; no node does)."""
    return sim.host(node).path(path)


def disk_file(sim, node: str, inst: str, index: int = 0) -> Path:
    """A file disk of an instance on its node (sharedfile ones are in the shared directory)."""
    return node_file(sim, node, f"/srv/herder/file-storage/{inst}/disk{index}")


NO_DEVICE_MAPPER = "LV activation is not available on this node (no device-mapper)"


def test_create_with_the_allocator_and_move(sim) -> None:
    dry = herder(sim, "instance", "add", "web1", "--no-name-check",
                 "-t", "sharedfile", "-o", "debootstrap+default", "--disk", "1G", "--dry-run")
    assert "would be placed on" in dry.stdout
    assert "web1" not in {i.name for i in config(sim).instances.values()}  # nothing changed
    assert not any(domains(sim, n.name) for n in sim.nodes)
    herder(sim, "instance", "add", "web1", "--no-name-check",
           "-t", "sharedfile", "-o", "debootstrap+default",
           "--disk", "1G")
    herder(sim, "instance", "add", "db1", "--no-name-check",
           "-t", "file", "-o", "debootstrap+minimal",
           "--disk", "1G")
    cfg = config(sim)
    web, db = cfg.find_instance("web1"), cfg.find_instance("db1")
    assert web.admin_state == "up" and web.disk_template == "sharedfile"
    assert where(sim, "web1") == [cfg.node_name(web.primary_node)]
    assert where(sim, "db1") == [cfg.node_name(db.primary_node)]
    # The OS install ran on the sharedfile disk, the file every node sees.
    shared = node_file(sim, "node1", "/srv/herder/shared-file-storage/web1/disk0")
    assert shared.read_bytes()[:40].startswith(b"herder-demo-os default web1")
    home = cfg.node_name(web.primary_node)
    herder(sim, "instance", "migrate", "web1")
    moved = config(sim).find_instance("web1")
    assert moved.primary_node != web.primary_node
    assert where(sim, "web1") == [cfg.node_name(moved.primary_node)] != [home]
    herder(sim, "instance", "failover", "web1")
    again = config(sim).find_instance("web1")
    assert where(sim, "web1") == [cfg.node_name(again.primary_node)]
    assert shared.read_bytes()[:40].startswith(b"herder-demo-os default web1")
    # Each node knows which instance its disks belong to (the assembling RPCs named it).
    disk_map = json.loads(node_file(sim, cfg.node_name(again.primary_node),
                                    "/var/lib/herder/noded/disk-map.json").read_text())
    assert disk_map[web.disks[0].uuid]["instance"] == "web1"
    # The OS install really ran on the instance's disk, on its node, under the file storage.
    assert disk_file(sim, cfg.node_name(db.primary_node), "db1") \
        .read_bytes()[:40].startswith(b"herder-demo-os minimal db1")
    assert not node_file(sim, cfg.node_name(db.primary_node),
                         "/var/lib/herder/noded/disks").exists()


@contextlib.contextmanager
def plain_and_drbd_enabled(sim: Any) -> Iterator[None]:
    """The simulated cluster does not enable plain and drbd, which its hosts cannot run (no
    device-mapper); a test that asks for them enables them for the while."""
    herder(sim, "cluster", "modify", "--enabled-disk-templates",
           cluster.SIM_DISK_TEMPLATES + ",plain,drbd")
    try:
        yield
    finally:
        herder(sim, "cluster", "modify", "--enabled-disk-templates",
               cluster.SIM_DISK_TEMPLATES)


def test_plain_and_drbd_are_refused_by_the_nodes_in_one_line(sim) -> None:
    """No device-mapper here: an LV could hold no data, and the node says so; nothing is
    left (no instance, no LV)."""
    with plain_and_drbd_enabled(sim):
        for template, nodes in (("plain", "node2"), ("drbd", "node2:node3")):
            done = herder(sim, "instance", "add", f"x{template}", "--no-name-check", "-t",
                          template, "-o", "debootstrap+default", "--disk", "64M",
                          "--ignore-ipolicy", "-n",
                          ":".join(f"{n}.sim.herder.test" for n in nodes.split(":")),
                          check=False)
            assert done.returncode == 1 and NO_DEVICE_MAPPER in done.stderr, done.stderr
            assert f"x{template}" not in {i.name for i in config(sim).instances.values()}
    listed = sim.host("node2").run(["lvs", "--noheadings", "-o", "lv_name"], timeout=60)
    assert listed.stdout.strip() == ""


def test_read_commands_work_from_this_machine_without_a_config(sim) -> None:
    """The workstation has no config file: lists and infos come through masterd."""
    listed = herder(sim, "node", "list")
    assert all(n.name in listed.stdout for n in sim.nodes)
    info = json.loads(herder(sim, "instance", "info", "web1", "--json").stdout)
    assert info[0]["name"] == "web1"
    assert herder(sim, "job", "list").stdout.strip()
    assert herder(sim, "cluster", "info").stdout.startswith("name: cluster.")
    offline = herder(sim, "--offline", "node", "modify", sim.nodes[3].name, "--drained",
                     "yes", check=False)
    assert offline.returncode == 1 and "run it on the master" in offline.stderr
    # the same on the master node, where the config is
    assert "web1" in on(sim, "node1", "instance", "list").stdout


def test_mond_on_a_node_without_the_config_knows_its_instances(sim) -> None:
    """node4 is no master candidate: no config copy, its mond asks the candidates' confd."""
    node4 = sim.nodes[3]
    assert not node_file(sim, node4.name, "/var/lib/herder/config.json").exists()
    herder(sim, "instance", "add", "app4", "--no-name-check",
           "-t", "file", "-o", "debootstrap+default",
           "--disk", "1G", "-n", node4.name)

    def reported():
        done = herder(sim, "mond", "report", "instance", "inst-status", "--verbose",
                      "--node", node4.name, check=False)
        if done.returncode != 0:
            return None
        found = {i["name"]: i for i in json.loads(done.stdout)["data"].get("instances", [])}
        return found.get("app4")

    app4 = wait_for(reported, 60, "app4 in node4's inst-status")
    assert app4["admin_state"] == "up" and app4["actual_state"] == "up"
    daemons = json.loads(herder(sim, "mond", "report", "all", "--verbose", "--node",
                                node4.name).stdout)
    expected = {r["name"]: r["data"]["expected"] for r in daemons
                if r["category"] == "daemon"}
    assert expected["noded"] and expected["mond"] and not expected["confd"]
    assert not expected["masterd"]


def test_config_copies_are_what_each_candidates_confd_answers(sim) -> None:
    herder(sim, "tags", "add", "cluster", "copy:check")
    serial = config(sim).serial_no
    candidates = [n for n in sim.nodes[:3]]

    def copy(node) -> dict:
        try:
            # the store's reading: on the master, the snapshot and its journal
            return model.to_builtins(FileStore(node_file(
                sim, node.name, "/var/lib/herder/config.json")).load())
        except (OSError, HerderError):
            return {"serial_no": -1}

    wait_for(lambda: all(copy(n)["serial_no"] >= serial for n in candidates), 30,
             "the tagged config on every master candidate")
    for node in candidates:
        # ask this candidate's confd alone, from node4 (which has no copy of its own)
        done = on(sim, sim.nodes[3].name, "confd", "query", "config_query", "/cluster/tags",
                  "--peer", node.address, "--json")
        answer = json.loads(done.stdout)
        assert "copy:check" in answer["answer"], answer
        assert answer["peer"].startswith(node.address)
        assert answer["serial"] == copy(node)["cluster"]["serial_no"]
    # node4's confd has no copy: it answers nothing that a client would keep
    lone = on(sim, "node1", "confd", "query", "ping", "--peer", sim.nodes[3].address,
              "--timeout", "1", check=False)
    assert lone.returncode != 0


def machine_pids_of(host: SimHost) -> list[int]:
    """Every process of the host's PID namespace, as the machine numbers them."""
    namespace = os.readlink(f"/proc/{host.pid}/ns/pid")
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "pid") == namespace:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_no_node_touches_another_nodes_tree(sim) -> None:
    """Every daemon's open files and working directory are its own host's (or the shared NFS
    stand-in, or the machine's system files), never another host's or the simulator's."""
    hosts = {n.name: sim.host(n.name) for n in sim.nodes}
    owner: dict[tuple[int, int], str] = {}
    for name, host in hosts.items():
        for path in host.layout.directory.rglob("*"):
            try:
                st = path.lstat()
            except OSError:
                continue
            owner[(st.st_dev, st.st_ino)] = name
        storage = os.stat(f"/proc/{host.pid}/root/srv/herder/file-storage")
        owner[(storage.st_dev, 0)] = name  # the device of its own file storage
    machine_side = [Path(sim.directory) / "client", Path(sim.directory) / "sim.json"]
    machine_inodes = {(p.stat().st_dev, p.stat().st_ino) for p in machine_side if p.exists()}
    checked = 0
    for name, host in hosts.items():
        pids = machine_pids_of(host)
        assert len(pids) >= 5, f"{name}: {pids}"  # supervisor, libvirtd, noded, mond, ...
        for pid in pids:
            links = [Path(f"/proc/{pid}/cwd")]
            try:
                links += list(Path(f"/proc/{pid}/fd").iterdir())
            except OSError:
                continue  # ended meanwhile
            for link in links:
                try:
                    st = os.stat(link)
                    target = os.readlink(link)
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                where_from = owner.get(key) or owner.get((st.st_dev, 0))
                assert where_from in (None, name), \
                    f"{name} pid {pid} has {target} open, a file of {where_from}"
                assert key not in machine_inodes, f"{name} pid {pid} has {target} open"
                if target != str(host.layout.console):  # PID 1's output: the host's console
                    assert str(sim.directory) not in target, f"{name} pid {pid}: {target}"
                checked += 1
    assert checked > 50


def test_unknown_os_variant_is_refused_and_nothing_is_left(sim) -> None:
    done = herder(sim, "instance", "add", "bad1", "--no-name-check",
                  "-t", "file", "-o", "debootstrap+nosuch", "--disk", "1G", check=False)
    assert done.returncode == 1
    assert "unsupported OS variant 'nosuch'" in done.stderr and "--force-variant" in done.stderr
    assert "bad1" not in {i.name for i in config(sim).instances.values()}
    assert not where(sim, "bad1")
    for node in sim.nodes:  # its disk and directory were removed again
        assert not node_file(sim, node.name, "/srv/herder/file-storage/bad1").exists()


def test_external_iallocator_matches_the_builtin(sim) -> None:
    htools = Path("/tmp/groot/usr/lib/ganeti/3.0/usr/bin/htools")
    if not htools.exists():
        pytest.skip("Ganeti's hail is not installed (../shared/peers/setup.sh)")
    # installed on the master as a package would be: the binary on the node, the iallocator
    # wrapper in the search path
    master = sim.host("node1")
    binary = master.path("/srv/herder/hail")
    binary.write_bytes(htools.read_bytes())
    binary.chmod(0o755)
    wrapper = Path("/usr/lib/herder/iallocators/hail")
    created = not wrapper.exists()
    if created:
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        wrapper.write_text("#!/bin/sh\nexec /srv/herder/hail \"$@\"\n")
        wrapper.chmod(0o755)
    try:
        with plain_and_drbd_enabled(sim):  # dry runs: the pair of nodes each allocator picks
            builtin = herder(sim, "instance", "add", "x1", "--no-name-check", "-t", "drbd",
                             "-o", "debootstrap+default", "--disk", "1G", "--dry-run", "-I",
                             "herder")
            external = herder(sim, "instance", "add", "x1", "--no-name-check", "-t", "drbd",
                              "-o", "debootstrap+default", "--disk", "1G", "--dry-run", "-I",
                              "hail")
        assert builtin.stdout == external.stdout
    finally:
        if created:
            wrapper.unlink()


def test_dead_node_daemon_fails_cleanly_and_rejoins(sim) -> None:
    cfg = config(sim)
    web = cfg.find_instance("web1")
    victim = cfg.node_name(web.primary_node)
    on(sim, victim, "daemon-util", "stop", "noded")
    before = config(sim).serial_no
    done = herder(sim, "instance", "reboot", "web1", check=False)
    assert done.returncode == 1 and "cannot reach its node daemon" in done.stderr
    assert config(sim).serial_no == before  # config consistent: nothing written
    on(sim, victim, "daemon-util", "start", "noded")
    deadline = time.monotonic() + 30
    while True:
        done = herder(sim, "instance", "reboot", "web1", check=False)
        if done.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert done.returncode == 0, done.stderr
    assert where(sim, "web1") == [victim]


PROBE = """
import json, ssl, sys, time, urllib.error, urllib.request
from herder.core import envelope, rpcauth
address, name = sys.argv[1:3]
key = envelope.load_key("/var/lib/herder/hmac.key")
def context(client_certificate):
    made = ssl.create_default_context(cafile="/var/lib/herder/server.pem")
    made.check_hostname = False
    if client_certificate:  # noded takes only clients with a node certificate of the cluster
        made.load_cert_chain("/var/lib/herder/node.pem")
    return made
def post(body, client_certificate=True):
    request = urllib.request.Request(f"https://{address}:1811/rpc/ping", data=body)
    try:
        with urllib.request.urlopen(request, context=context(client_certificate),
                                    timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, None
    except (urllib.error.URLError, OSError):
        return "refused", None
print(json.dumps([
    post(rpcauth.sign_call(key, "ping", name, {}), client_certificate=False)[0],
    post(b'{"msg": "{}", "salt": "1", "hmac": "x"}')[0],
    post(rpcauth.sign_call(b"wrong key\\n", "ping", name, {}))[0],
    post(rpcauth.sign_call(key, "ping", name, {}, now=time.time() - 3600))[0],
    post(rpcauth.sign_call(key, "ping", name, {}))]))
"""


def test_noded_refuses_requests_without_the_secret_and_locks_memory(sim) -> None:
    target = sim.nodes[1]
    done = sim.host("node1").run([sys.executable, "-c", PROBE, target.address, target.name])
    assert done.returncode == 0, done.stderr
    bare, bad, forged, old, (status, answer) = json.loads(done.stdout)
    assert (bare, bad, forged, old, status) == ("refused", 403, 403, 403, 200)
    assert answer["result"]["node"] == target.name
    host = sim.host(target.name)
    noded = next(d for d in host.supervisor("status", ["noded"]).daemons)
    status_text = host.run(["cat", f"/proc/{noded.pid}/status"]).stdout
    vmlck = int(next(line for line in status_text.splitlines()
                     if line.startswith("VmLck:")).split()[1])
    assert vmlck > 0


def test_powercycle_reboots_the_node_and_only_it(sim) -> None:
    """noded's real power cycle: reboot(2) ends the host's PID namespace; the simulation's
    keeper boots it again, and its daemons come back from node.toml."""
    node = sim.nodes[3]
    host = sim.host(node.name)
    before = host.pid
    others = {n.name: sim.host(n.name).pid for n in sim.nodes if n is not node}
    machine_init = os.stat("/proc/1").st_ctime
    done = herder(sim, "node", "powercycle", node.name)
    assert "rebooting" in done.stdout
    wait_for(lambda: sim.host(node.name).running and sim.host(node.name).pid != before, 60,
             f"{node.name} booted again")
    assert {n: sim.host(n).pid for n in others} == others  # the others ran on
    assert os.stat("/proc/1").st_ctime == machine_init
    log = node_file(sim, node.name, "/var/lib/herder/noded/powercycle.log")
    assert "powercycle requested" in log.read_text()

    def node_daemon_back() -> bool:
        listed = herder(sim, "os", "list", "--json", check=False)
        return listed.returncode == 0 and \
            node.name in json.loads(listed.stdout).get("debootstrap+default", [])

    wait_for(node_daemon_back, 60, f"{node.name}'s noded answering again")


def test_os_list_shows_variants(sim) -> None:
    offered = json.loads(herder(sim, "os", "list", "--json").stdout)
    names = {n.name for n in sim.nodes}
    assert set(offered["debootstrap+default"]) == names
    assert set(offered["debootstrap+minimal"]) == names


def test_reinstall_with_another_variant_and_activate_disks(sim) -> None:
    cfg = config(sim)
    db = cfg.find_instance("db1")
    herder(sim, "instance", "shutdown", "db1")
    herder(sim, "instance", "reinstall", "db1", "-o", "debootstrap+default")
    disk = disk_file(sim, cfg.node_name(db.primary_node), "db1")
    assert disk.read_bytes()[:40].startswith(b"herder-demo-os default db1")
    assert config(sim).find_instance("db1").os == "debootstrap+default"
    herder(sim, "instance", "start", "db1")
    refused = herder(sim, "instance", "reinstall", "db1", check=False)
    assert refused.returncode == 1 and "shut it down first" in refused.stderr
    activated = herder(sim, "instance", "activate-disks", "db1")
    assert activated.stdout.splitlines() == [
        f"{cfg.node_name(db.primary_node)}:disk/0:/srv/herder/file-storage/db1/disk0"]
    assert config(sim).find_instance("db1").disks_active
    refused = herder(sim, "instance", "deactivate-disks", "db1", check=False)
    assert refused.returncode == 1 and "shut it down before" in refused.stderr


def test_replace_disks_needs_a_mirror(sim) -> None:
    cfg = config(sim)
    web = cfg.find_instance("web1")
    spare = next(n for n in cfg.nodes.values() if n.uuid not in web.all_nodes)
    done = herder(sim, "instance", "replace-disks", "web1", "-n", spare.name, check=False)
    assert done.returncode == 1 and "not DRBD-mirrored" in done.stderr


def test_repair_command_runs_white_listed_with_stdin(sim, tmp_path: Path) -> None:
    node = sim.nodes[1]
    script = node_file(sim, node.name, "/etc/ganeti/node-repair-commands/fix-disk")
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text('#!/bin/sh\necho "fixed: $(cat)"\n')
    script.chmod(0o755)
    data = tmp_path / "diag.json"
    data.write_text('{"status": "live-repair", "command": "fix-disk"}')
    done = herder(sim, "node", "repair-command", node.name, "fix-disk", "--input", str(data))
    assert done.stdout.startswith("fixed: ")
    assert json.loads(done.stdout.removeprefix("fixed: ")) == {"status": "live-repair",
                                                                "command": "fix-disk"}
    script.chmod(0o777)  # writable by others: no longer white-listed
    refused = herder(sim, "node", "repair-command", node.name, "fix-disk", check=False)
    assert refused.returncode == 1 and "not white-listed" in refused.stderr


def test_storage_units_are_listed(sim) -> None:
    rows = json.loads(herder(sim, "storage", "list", "-t", "file", "--json").stdout)
    assert {r["node"] for r in rows} == {n.name for n in sim.nodes}
    assert all(r["size"] > 0 for r in rows)


def test_libvirtd_restart_is_survived(sim) -> None:
    """The test driver forgets every domain when libvirtd restarts; noded defines them again
    (and the instance can be started again)."""
    cfg = config(sim)
    db = cfg.find_instance("db1")
    node = cfg.node_name(db.primary_node)
    on(sim, node, "daemon-util", "stop", "libvirtd")
    on(sim, node, "daemon-util", "start", "libvirtd")
    cluster.remove_default_domain(sim.host(node))
    wait_for(lambda: "db1" in domains(sim, node), 30, "db1 defined again by noded")
    herder(sim, "instance", "start", "db1")
    assert where(sim, "db1") == [node]


def test_issue32_operations(sim, tmp_path: Path) -> None:
    """Ganeti's operations herder lacked (issue 32) on real node daemons: multi-allocation
    (batch-create), node failover, assign-nodes, change-group and group evacuate, hidden OSes
    (os modify/info, /2/os), search-tags, repair-disk-sizes, node volumes, list-drbd."""
    spec = tmp_path / "batch.json"
    spec.write_text(json.dumps([
        {"name": name, "disk_template": "sharedfile", "disks": [{"size": 1024}], "nics": [],
         "os": "debootstrap+default", "name_check": False, "ip_check": False}
        for name in ("mw1", "mw2")]))
    done = herder(sim, "instance", "batch-create", str(spec))
    assert done.stdout.startswith("Created: mw1"), done.stdout
    cfg = config(sim)
    for name in ("mw1", "mw2"):
        inst = cfg.find_instance(name)
        assert inst.admin_state == "up" and where(sim, name) == [cfg.node_name(inst.primary_node)]
    # node failover: every sharedfile primary of mw1's node leaves it (one job each)
    home = cfg.node_name(cfg.find_instance("mw1").primary_node)
    herder(sim, "node", "failover", home, check=False)
    cfg = config(sim)
    assert all(cfg.node_name(i.primary_node) != home for i in cfg.instances.values()
               if i.disk_template == "sharedfile"), home
    # node groups: two nodes holding no instance that cannot move (file) in rack2 (two: the
    # allocator keeps a failover target, N+1); mw2 changes group, rack2 is evacuated
    cfg = config(sim)
    fixed = {i.primary_node for i in cfg.instances.values() if i.disk_template != "sharedfile"}
    rack2 = [n.name for n in sim.nodes if cfg.find_node(n.name).uuid not in fixed][:2]
    assert len(rack2) == 2, rack2
    herder(sim, "group", "add", "rack2")
    herder(sim, "group", "assign-nodes", "rack2", *rack2)
    # mw2 to the group it is not in (its node was chosen by the allocator)
    inside = config(sim).node_name(config(sim).find_instance("mw2").primary_node) in rack2
    herder(sim, "instance", "change-group", "mw2", "--to", "default" if inside else "rack2")
    cfg = config(sim)
    assert (cfg.node_name(cfg.find_instance("mw2").primary_node) in rack2) is not inside
    assert where(sim, "mw2") == [cfg.node_name(cfg.find_instance("mw2").primary_node)]
    herder(sim, "group", "evacuate", "rack2")
    cfg = config(sim)
    assert not any(cfg.node_name(i.primary_node) in rack2 for i in cfg.instances.values())
    assert where(sim, "mw2") == [cfg.node_name(cfg.find_instance("mw2").primary_node)]
    # hidden OSes (by OS name, as Ganeti): out of Ganeti's /2/os, still in os info
    herder(sim, "os", "modify", "debootstrap", "--hidden", "yes")
    (info,) = json.loads(herder(sim, "os", "info", "debootstrap", "--json").stdout)
    assert info["hidden"] is True and info["variants"] == ["default", "minimal"], info
    with sim.rapi() as api:
        assert not any(name.startswith("debootstrap") for name in api.request("GET", "/2/os"))
    herder(sim, "os", "modify", "debootstrap", "--hidden", "no")
    with sim.rapi() as api:
        assert "debootstrap+minimal" in api.request("GET", "/2/os")
    # tags, disk sizes, volumes, DRBD minors
    herder(sim, "tags", "add", "instance", "mw1", "issue32:probe")
    found = herder(sim, "cluster", "search-tags", "^issue32:")
    assert found.stdout.split() == [f"/instances/{config(sim).find_instance('mw1').name}",
                                    "issue32:probe"], found.stdout
    sizes = herder(sim, "cluster", "repair-disk-sizes", "mw1")
    assert "No disk sizes needed changing." in sizes.stdout
    assert json.loads(herder(sim, "node", "volumes", "--json").stdout) == []
    # list-drbd asks confd (the master candidates of the node's own config, as gnt-node's)
    assert json.loads(on(sim, "node1", "node", "list-drbd", sim.nodes[0].name,
                         "--json").stdout) == []
    # leave the cluster as found
    for name in ("mw1", "mw2"):
        herder(sim, "instance", "remove", name)
    herder(sim, "group", "assign-nodes", "default", *rack2)
    herder(sim, "group", "remove", "rack2")


def test_cluster_verify_checks_each_nodes_prerequisites(sim) -> None:
    """The simulated cluster verifies clean (it enables only what its hosts can run); a bridge
    the NICs need that one node lacks, and an OS one node lost, are reported with Ganeti's
    codes and messages (`--error-codes`: ERROR:CODE:node:NAME:message); put back, clean again."""
    clean = herder(sim, "cluster", "verify", check=False, timeout=300)
    assert clean.returncode == 0 and "0 error(s)" in clean.stdout, clean.stdout
    node4 = "node4.sim.herder.test"
    os_dir, away = f"{cluster.OS_DIR}/{cluster.DEMO_OS}", f"{cluster.OS_DIR}.away"
    for node in ("node1", "node2", "node3"):
        sim.host(node).run(["ip", "link", "add", "hvtest0", "type", "bridge"], timeout=60)
    herder(sim, "cluster", "modify", "-N", "link=hvtest0")
    assert sim.host("node4").run(["mv", os_dir, away], timeout=60).returncode == 0
    try:
        broken = herder(sim, "cluster", "verify", "--error-codes", check=False, timeout=300)
        assert broken.returncode == 1, broken.stdout
        assert set(broken.stdout.splitlines()) == {
            f"ERROR:ENODENET:node:{node4}:missing bridges: hvtest0",
            f"ERROR:ENODEOS:node:{node4}:OSes present on reference node node1.sim.herder.test "
            f"but missing on this node: {cluster.DEMO_OS}",
            "2 error(s), 0 warning(s)"}, broken.stdout
    finally:
        sim.host("node4").run(["mv", away, os_dir], timeout=60)
        herder(sim, "cluster", "modify", "-N", "link=br0")
        for node in ("node1", "node2", "node3"):
            sim.host(node).run(["ip", "link", "del", "hvtest0"], timeout=60)
    again = herder(sim, "cluster", "verify", check=False, timeout=300)
    assert again.returncode == 0, again.stdout
