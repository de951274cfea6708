"""End to end on a simulated cluster: separate noded/masterd processes, one libvirtd per node
serving the test driver, each node on its own loopback address."""

from __future__ import annotations

import json
import os
import signal
import ssl
import time
from pathlib import Path

import httpx
import pytest

from herder.core import envelope, rpcauth
from herder.core.store import FileStore
from tests.simhelpers import domains, herder, running_sim, worker_offset

# The tests share one simulated cluster and build on each other (pytest runs with
# --dist loadfile, so they stay on one worker, in order).
pytestmark = pytest.mark.slow

if not Path("/usr/sbin/libvirtd").exists():
    pytest.skip("libvirtd is not installed", allow_module_level=True)


def worker_first_ip() -> int:
    """Distinct addresses per xdist worker (and away from the vcluster's 127.0.0.10-13)."""
    return 100 + worker_offset(10, 6)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    yield from running_sim(tmp_path_factory.mktemp("sim"), 3, mond=False,
                           first_ip=worker_first_ip())


def where(state, name: str) -> list[str]:
    return [n.name for n in state.nodes if domains(n.libvirt_uri).get(name)]


def config(state):
    return FileStore(state.config).load()


def test_create_with_the_allocator_and_move(sim) -> None:
    dry = herder(sim, "instance", "add", "web1", "--no-name-check",
                 "-t", "drbd", "-o", "debootstrap+default", "--disk", "1G", "--dry-run")
    assert "would be placed on" in dry.stdout
    assert "web1" not in {i.name for i in config(sim).instances.values()}  # nothing changed
    assert not any(domains(n.libvirt_uri) for n in sim.nodes)
    herder(sim, "instance", "add", "web1", "--no-name-check",
           "-t", "drbd", "-o", "debootstrap+default", "--disk", "1G")
    herder(sim, "instance", "add", "db1", "--no-name-check",
           "-t", "plain", "-o", "debootstrap+minimal", "--disk", "1G")
    cfg = config(sim)
    web, db = cfg.find_instance("web1"), cfg.find_instance("db1")
    assert web.admin_state == "up" and web.disk_template == "drbd"
    assert len(set(web.all_nodes)) == 2
    assert where(sim, "web1") == [cfg.node_name(web.primary_node)]
    assert where(sim, "db1") == [cfg.node_name(db.primary_node)]
    secondary = cfg.node_name(web.secondary_nodes[0])
    herder(sim, "instance", "migrate", "web1")
    assert where(sim, "web1") == [secondary]
    assert config(sim).find_instance("web1").primary_node == web.secondary_nodes[0]
    herder(sim, "instance", "failover", "web1")
    assert where(sim, "web1") == [cfg.node_name(web.primary_node)]
    # Each node knows which instance its disks belong to (the creating RPCs named it).
    from herder.core.noderpc import HttpNodeRpc

    rpc = HttpNodeRpc(envelope.load_key(Path(sim.config).parent / "hmac.key"),
                      Path(sim.config).parent / "server.pem")
    primary = cfg.nodes[web.primary_node]
    disk_map = rpc.call(primary, "disk_map", {})
    assert disk_map[web.disks[0].uuid]["instance"] == "web1"
    rpc.close()
    # The OS install really ran on the instance's disk.
    node_dir = Path(sim.directory) / "nodes" / cfg.node_name(db.primary_node) / "noded"
    disk = node_dir / "disks" / f"{db.disks[0].uuid}.img"
    assert disk.read_bytes()[:40].startswith(b"herder-demo-os minimal db1")


def test_evacuate_a_node(sim) -> None:
    cfg = config(sim)
    web = cfg.find_instance("web1")
    node = cfg.node_name(web.secondary_nodes[0])
    before = {i.name for i in cfg.instances.values()}
    herder(sim, "node", "evacuate", node)
    cfg = config(sim)
    node_uuid = cfg.find_node(node).uuid
    assert {i.name for i in cfg.instances.values()} == before
    assert not any(node_uuid in i.all_nodes for i in cfg.instances.values())
    for inst in cfg.instances.values():
        assert where(sim, inst.name) == [cfg.node_name(inst.primary_node)]
    assert not domains(next(n for n in sim.nodes if n.name == node).libvirt_uri)


def test_unknown_os_variant_is_refused_and_nothing_is_left(sim) -> None:
    done = herder(sim, "instance", "add", "bad1", "--no-name-check",
                  "-t", "plain", "-o", "debootstrap+nosuch", "--disk", "1G", check=False)
    assert done.returncode == 1
    assert "unsupported OS variant 'nosuch'" in done.stderr and "--force-variant" in done.stderr
    assert "bad1" not in {i.name for i in config(sim).instances.values()}
    assert not any(domains(n.libvirt_uri).get("bad1") for n in sim.nodes)


def test_external_iallocator_matches_the_builtin(sim, tmp_path: Path) -> None:
    hail = Path("/tmp/groot/bin/hail")
    hail_sh = Path(__file__).resolve().parents[3] / "shared" / "peers" / "hail.sh"
    if not hail.exists() or not hail_sh.exists():
        pytest.skip("Ganeti's hail is not installed (../shared/peers/setup.sh)")
    wrapper = Path("/usr/lib/herder/iallocators/hail")
    created = not wrapper.exists()
    if created:
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        wrapper.write_text(f"#!/bin/sh\nexec {hail_sh} \"$@\"\n")
        wrapper.chmod(0o755)
    try:
        builtin = herder(sim, "instance", "add", "x1", "--no-name-check", "-t", "drbd", "-o",
                         "debootstrap+default", "--disk", "1G", "--dry-run", "-I", "herder")
        external = herder(sim, "instance", "add", "x1", "--no-name-check", "-t", "drbd", "-o",
                          "debootstrap+default", "--disk", "1G", "--dry-run", "-I", "hail")
        assert builtin.stdout == external.stdout
    finally:
        if created:
            wrapper.unlink()


def test_dead_node_fails_cleanly_and_a_restarted_noded_rejoins(sim) -> None:
    cfg = config(sim)
    web = cfg.find_instance("web1")
    victim = next(n for n in sim.nodes if n.name == cfg.node_name(web.primary_node))
    os.killpg(victim.pids["noded"], signal.SIGKILL)
    time.sleep(0.3)
    before = Path(sim.config).read_bytes()
    done = herder(sim, "instance", "reboot", "web1", check=False)
    assert done.returncode == 1 and "cannot reach its node daemon" in done.stderr
    assert Path(sim.config).read_bytes() == before  # config consistent: nothing written
    from herder.sim import cluster

    proc = cluster.spawn_noded(Path(sim.directory), Path(sim.config), victim)
    victim.pids["noded"] = proc.pid
    sim.save()  # keep sim.json right for the teardown
    deadline = time.monotonic() + 20
    while True:
        done = herder(sim, "instance", "reboot", "web1", check=False)
        if done.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert done.returncode == 0, done.stderr
    assert where(sim, "web1") == [victim.name]


def test_noded_refuses_requests_without_the_secret_and_locks_memory(sim) -> None:
    node = sim.nodes[1]
    url = f"https://{node.ip}:1811/rpc/ping"
    cluster_pem = Path(sim.config).parent / "server.pem"
    tls = ssl.create_default_context(cafile=str(cluster_pem))
    tls.check_hostname = False
    tls.load_cert_chain(cluster_pem)  # noded takes only clients with the cluster certificate
    with httpx.Client(verify=tls) as http:
        assert http.post(url, content=b'{"msg": "{}", "salt": "1", "hmac": "x"}').status_code \
            == 403
        forged = rpcauth.sign_call(b"wrong key\n", "ping", node.name, {})
        assert http.post(url, content=forged).status_code == 403
        key = envelope.load_key(Path(sim.config).parent / "hmac.key")
        old = rpcauth.sign_call(key, "ping", node.name, {}, now=time.time() - 3600)
        assert http.post(url, content=old).status_code == 403
        ok = http.post(url, content=rpcauth.sign_call(key, "ping", node.name, {}))
        assert ok.status_code == 200 and ok.json()["result"]["node"] == node.name
    status = Path(f"/proc/{node.pids['noded']}/status").read_text()
    vmlck = int(next(line for line in status.splitlines() if line.startswith("VmLck:")).split()[1])
    assert vmlck > 0


def test_powercycle_is_simulated_and_recorded(sim) -> None:
    node = sim.nodes[2]
    done = herder(sim, "node", "powercycle", node.name)
    assert "simulated" in done.stdout
    log = Path(sim.directory) / "nodes" / node.name / "noded" / "powercycle.log"
    assert "powercycle requested" in log.read_text()


def test_os_list_shows_variants(sim) -> None:
    listed = herder(sim, "os", "list", "--json")
    offered = json.loads(listed.stdout)
    names = {n.name for n in sim.nodes}
    assert set(offered["debootstrap+default"]) == names
    assert set(offered["debootstrap+minimal"]) == names


def test_reinstall_with_another_variant_and_activate_disks(sim) -> None:
    cfg = config(sim)
    db = cfg.find_instance("db1")
    herder(sim, "instance", "shutdown", "db1")
    herder(sim, "instance", "reinstall", "db1", "-o", "debootstrap+default")
    disk = (Path(sim.directory) / "nodes" / cfg.node_name(db.primary_node) / "noded" / "disks"
            / f"{db.disks[0].uuid}.img")
    assert disk.read_bytes()[:40].startswith(b"herder-demo-os default db1")
    assert config(sim).find_instance("db1").os == "debootstrap+default"
    herder(sim, "instance", "start", "db1")
    refused = herder(sim, "instance", "reinstall", "db1", check=False)
    assert refused.returncode == 1 and "shut it down first" in refused.stderr
    herder(sim, "instance", "activate-disks", "db1")
    assert config(sim).find_instance("db1").disks_active


def test_replace_disks_moves_the_mirror(sim) -> None:
    cfg = config(sim)
    web = cfg.find_instance("web1")
    spare = next(n for n in cfg.nodes.values() if n.uuid not in web.all_nodes)
    herder(sim, "instance", "replace-disks", "web1", "-n", spare.name)
    assert config(sim).find_instance("web1").secondary_nodes == [spare.uuid]
    disk = (Path(sim.directory) / "nodes" / spare.name / "noded" / "disks"
            / f"{web.disks[0].uuid}.img")
    assert disk.exists()


def test_repair_command_runs_white_listed_with_stdin(sim) -> None:
    node = sim.nodes[1]
    repair_dir = Path(sim.directory) / "nodes" / node.name / "repair"
    repair_dir.mkdir(exist_ok=True)
    script = repair_dir / "fix-disk"
    script.write_text('#!/bin/sh\necho "fixed: $(cat)"\n')
    script.chmod(0o755)
    data = Path(sim.directory) / "diag.json"
    data.write_text('{"status": "live-repair", "command": "fix-disk"}')
    done = herder(sim, "node", "repair-command", node.name, "fix-disk", "--input", str(data))
    assert done.stdout.startswith("fixed: ")
    assert json.loads(done.stdout.removeprefix("fixed: ")) == {"status": "live-repair",
                                                                "command": "fix-disk"}
    script.chmod(0o777)  # writable by others: no longer white-listed
    refused = herder(sim, "node", "repair-command", node.name, "fix-disk", check=False)
    assert refused.returncode == 1 and "not white-listed" in refused.stderr


def test_storage_units_are_listed(sim) -> None:
    done = herder(sim, "storage", "list", "-t", "file", "--json")
    rows = json.loads(done.stdout)
    assert {r["node"] for r in rows} == {n.name for n in sim.nodes}
    assert all(r["size"] > 0 for r in rows)


def test_libvirtd_restart_is_survived(sim) -> None:
    """The test driver forgets every domain when libvirtd restarts; noded defines them again
    (and the instance can be started again)."""
    cfg = config(sim)
    db = cfg.find_instance("db1")
    node = next(n for n in sim.nodes if n.name == cfg.node_name(db.primary_node))
    from herder.sim.libvirtd import PrivateLibvirtd

    os.killpg(node.libvirtd_pid, signal.SIGKILL)
    time.sleep(0.3)
    home = Path(node.libvirtd_dir)
    daemon = PrivateLibvirtd(home, Path(node.libvirt_uri.split("socket=")[1]),
                             ["/usr/sbin/libvirtd"], {})
    import shutil as _shutil

    from herder.sim.libvirtd import _session_command

    _shutil.rmtree(home / "home", ignore_errors=True)
    argv, env, sock = _session_command(home)
    daemon.argv, daemon.env, daemon.socket = argv, env, sock
    daemon.start()
    assert daemon.proc is not None
    node.libvirtd_pid = daemon.proc.pid
    node.libvirt_uri = daemon.uri
    sim.save()  # so the teardown stops this libvirtd too
    deadline = time.monotonic() + 15
    while "db1" not in domains(node.libvirt_uri) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "db1" in domains(node.libvirt_uri)  # defined again by noded
    herder(sim, "instance", "start", "db1")
    assert where(sim, "db1") == [node.name]
