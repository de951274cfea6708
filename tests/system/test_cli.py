"""The `herder` command line: every model command, its errors, its help."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import click
import msgspec
import pytest

from herder.cli.main import COMMANDS, cli
from herder.core import envelope
from herder.core.store import FileStore
from tests.conftest import stored_files
from tests.httpserver import threaded_http

INIT = ("cluster", "init", "cluster.example.com", "--master-node", "node1.example.com",
        "--primary-ip", "192.0.2.11", "--force", "--uid-pool", "1000-1009,2000")


@pytest.fixture
def cluster(herder):
    result = herder(*INIT)
    assert result.code == 0, result.err
    return herder


def assert_one_line_error(result, fragment: str) -> None:
    assert result.code != 0
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1, result.err
    assert fragment in lines[0]
    assert "Traceback" not in result.err


def test_init_creates_config_and_private_secrets(cluster) -> None:
    directory = cluster.config_path.parent
    for name in ("config.json", "hmac.key", "server.pem", "rapi_users",
                 "cluster-domain-secret"):
        path = directory / name
        assert path.exists(), name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, name
    key = (directory / "hmac.key").read_bytes()
    assert len(key) == 41 and key.endswith(b"\n")
    pem = (directory / "server.pem").read_text()
    assert "PRIVATE KEY" in pem and "BEGIN CERTIFICATE" in pem
    assert "admin " in (directory / "rapi_users").read_text()
    domain_secret = (directory / "cluster-domain-secret").read_text()  # Ganeti's format
    assert len(domain_secret) == 41 and int(domain_secret, 16) >= 0
    config = FileStore(cluster.config_path).load()
    assert config.cluster.name == "cluster.example.com"
    assert config.find_node("node1").uuid == config.cluster.master_node


def test_init_certificate_works_for_tls(cluster) -> None:
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cluster.config_path.parent / "server.pem")
    # the master's own node certificate, issued by the cluster's, listed in the config
    from herder.core import node_certs

    node_pem = (cluster.config_path.parent / "node.pem").read_bytes()
    context.load_cert_chain(cluster.config_path.parent / "node.pem")
    ca = (cluster.config_path.parent / "server.pem").read_bytes()
    assert node_certs.is_issued_by(node_pem, ca)
    config = FileStore(cluster.config_path).load()
    assert config.cluster.node_certs == {config.cluster.master_node: node_certs.digest(node_pem)}


def test_init_refuses_to_overwrite(cluster) -> None:
    before = stored_files(cluster.config_path)
    result = cluster(*INIT)
    assert_one_line_error(result, "already exists")
    assert stored_files(cluster.config_path) == before


def test_init_adopts_an_hmac_key(herder, tmp_path: Path) -> None:
    key_file = tmp_path / "ganeti.key"
    key_file.write_bytes(b"0123456789abcdef0123456789abcdef01234567\n")
    assert herder(*INIT, "--hmac-key", str(key_file)).code == 0
    assert (herder.config_path.parent / "hmac.key").read_bytes() == key_file.read_bytes()


def test_init_with_bad_parameter_writes_nothing(herder) -> None:
    result = herder(*INIT, "-B", "vcpus=lots")
    assert_one_line_error(result, "'vcpus': expected an integer")
    assert not herder.config_path.parent.exists() or not any(herder.config_path.parent.iterdir())


def test_info_prints_uid_pool_in_range_syntax(cluster) -> None:
    result = cluster("cluster", "info")
    assert result.code == 0
    assert "uid pool: 1000-1009, 2000" in result.out
    assert "master node: node1.example.com" in result.out
    data = json.loads(cluster("cluster", "info", "--json").out)
    assert data["uid_pool"] == [[1000, 1009], [2000, 2000]]
    assert data["uid_pool_text"] == "1000-1009, 2000"


def test_uid_pool_modify_round_trips_through_info(cluster) -> None:
    assert cluster("cluster", "modify", "--add-uids", "1010-1019,3000").code == 0
    assert cluster("cluster", "modify", "--remove-uids", "1005").code == 0
    out = cluster("cluster", "info").out
    assert "uid pool: 1000-1004, 1006-1019, 2000, 3000" in out
    # what info prints is accepted back by --uid-pool
    text = json.loads(cluster("cluster", "info", "--json").out)["uid_pool_text"]
    assert cluster("cluster", "modify", "--uid-pool", text).code == 0
    assert json.loads(cluster("cluster", "info", "--json").out)["uid_pool_text"] == text
    assert_one_line_error(cluster("cluster", "modify", "--remove-uids", "5000"),
                          "5000 is not in the uid pool")
    assert_one_line_error(cluster("cluster", "modify", "--uid-pool", "9-1"), "upper bound")


def test_modify_parameters_and_serial(cluster) -> None:
    serial = FileStore(cluster.config_path).load().serial_no
    result = cluster("cluster", "modify", "-H", "kvm:kernel_args=console=ttyS0,no_acpi",
                     "-B", "vcpus=2,maxmem=1G", "--data-collector", "drbd:interval=10",
                     "--default-iallocator", "hail", "--default-iallocator",
                     "relocate=hail,other")
    assert result.code == 0, result.err
    config = FileStore(cluster.config_path).load()
    assert config.serial_no == serial + 1
    assert config.cluster.hvparams["kvm"] == {"kernel_args": "console=ttyS0", "acpi": False}
    assert config.cluster.beparams == {"vcpus": 2, "maxmem": 1024}
    drbd = config.cluster.data_collectors["drbd"]
    assert (drbd.interval, drbd.min_interval, drbd.max_interval) == (10.0, 5.0, 40.0)
    assert config.cluster.default_iallocators["allocate"] == ["hail"]
    assert config.cluster.default_iallocators["relocate"] == ["hail", "other"]
    assert cluster("cluster", "modify", "-B", "vcpus=default").code == 0
    assert FileStore(cluster.config_path).load().cluster.beparams == {"maxmem": 1024}


def test_modify_maintenance_balance_settings(cluster) -> None:
    maint = FileStore(cluster.config_path).load().maintenance
    assert (maint.balance, maint.balance_disk_moves, maint.balance_dynamic_load) == (
        False, True, False)  # the default: no balancing
    result = cluster("cluster", "modify", "--auto-balance-cluster", "yes",
                     "--auto-balance-threshold", "0.3", "--auto-balance-disk-moves", "no",
                     "--auto-balance-dynamic-load", "yes")
    assert result.code == 0, result.err
    maint = FileStore(cluster.config_path).load().maintenance
    assert (maint.balance, maint.balance_threshold, maint.balance_disk_moves,
            maint.balance_dynamic_load) == (True, 0.3, False, True)
    out = cluster("cluster", "info").out
    assert "balance disk moves: N" in out and "balance dynamic load: Y" in out
    # node recovery: on by default, the cluster's switch beside maintd's flag
    assert maint.node_recovery is True and "node recovery: Y" in out
    assert cluster("cluster", "modify", "--maintenance-node-recovery", "no").code == 0
    assert FileStore(cluster.config_path).load().maintenance.node_recovery is False
    assert "node recovery: N" in cluster("cluster", "info").out
    # ... and its detection time (None: maintd's --node-failure-time), at least the lease's
    assert maint.node_failure_time is None
    assert cluster("cluster", "modify", "--maintenance-node-failure-time", "8").code == 0
    assert FileStore(cluster.config_path).load().maintenance.node_failure_time == 8.0
    assert "node failure time: 8" in cluster("cluster", "info").out
    refused = cluster("cluster", "modify", "--maintenance-node-failure-time", "3")
    assert refused.code != 0 and "nodeFailureTime must be 6 to 600 seconds" in refused.err
    assert FileStore(cluster.config_path).load().maintenance.node_failure_time == 8.0
    assert cluster("cluster", "modify", "--maintenance-node-failure-time", "0").code == 0
    assert FileStore(cluster.config_path).load().maintenance.node_failure_time is None


def test_modify_master_lease_ttl(cluster) -> None:
    """The etcd master lease's TTL is a cluster setting (docs/ha.md): 10 s by default."""
    assert FileStore(cluster.config_path).load().cluster.master_lease_ttl == 10
    assert "master lease ttl: 10" in cluster("cluster", "info").out
    assert cluster("cluster", "modify", "--master-lease-ttl", "4").code == 0
    assert FileStore(cluster.config_path).load().cluster.master_lease_ttl == 4
    assert "master lease ttl: 4" in cluster("cluster", "info").out


@pytest.mark.parametrize(("args", "message"), [
    (("--master-lease-ttl", "1"), "master_lease_ttl must be 2-3600 seconds"),
    (("-B", "colour=red"), "unknown backend parameter 'colour'"),
    (("-H", "kvm:bogus=1"), "unknown hypervisor kvm parameter 'bogus'"),
    (("-H", "vmware:x=1"), "unknown hypervisor 'vmware'"),
    (("-D", "drbd:protocol=Z"), "not one of A, B, C"),
    (("-N", "mode=routed"), "routed mode and needs an IP"),
    (("--default-iallocator", "sideways=hail"), "unknown iallocator request type"),
    (("--data-collector", "drbd:interval=-1"), "collector"),
    (("--data-collector", "drbd:speed=3"), "unknown data collector setting"),
    (("--enabled-hypervisors", "kvm,vmware"), "unknown hypervisor 'vmware'"),
    (("--diagnose-data-collector-filename", "../x"), "without path separators"),
])
def test_modify_errors_are_one_line_and_write_nothing(cluster, args, message: str) -> None:
    if args[0] == "-N":  # a routed default needs every NIC to have an IP: add one without
        config = FileStore(cluster.config_path)
        from tests.conftest import build_config
        demo = build_config()
        config.path.unlink()
        config.create(demo)
    before = stored_files(cluster.config_path)
    result = cluster("cluster", "modify", *args)
    assert_one_line_error(result, message)
    assert stored_files(cluster.config_path) == before


def test_node_lifecycle_keeps_uuid_across_rename(cluster) -> None:
    assert cluster("node", "add", "node2.example.com", "--ip", "192.0.2.12",
                   "--secondary-ip", "198.51.100.12", "--no-node-check").code == 0
    uuid = json.loads(cluster("node", "info", "node2", "--json").out)[0]["uuid"]
    assert cluster("node", "modify", "node2", "--rename", "node9.example.com").code == 0
    info = json.loads(cluster("node", "info", uuid, "--json").out)[0]
    assert info["name"] == "node9.example.com" and info["uuid"] == uuid
    assert cluster("node", "modify", uuid, "--drained", "yes").code == 0
    listed = json.loads(cluster("node", "list", "--json").out)
    assert {n["name"]: n["drained"] for n in listed} == {
        "node1.example.com": False, "node9.example.com": True}
    # offline (a dead node's mark) demotes it; online again, it is promoted again (Ganeti's
    # auto-promotion: the pool of 10 wants both nodes)
    assert cluster("node", "modify", uuid, "--offline", "yes").code == 0
    assert not FileStore(cluster.config_path).load().nodes[uuid].master_candidate
    back = cluster("node", "modify", uuid, "--offline", "no")
    assert back.code == 0, back.err
    node = FileStore(cluster.config_path).load().nodes[uuid]
    assert node.master_candidate and not node.offline and not node.drained
    assert cluster("node", "modify", uuid, "--drained", "yes").code == 0
    table = cluster("node", "list", "-o", "name,role,group").out.splitlines()
    assert table[0].split() == ["Node", "Role", "Group"]
    assert any(line.split()[:2] == ["node9.example.com", "D"] for line in table)
    assert cluster("node", "remove", "node9").code == 0
    assert_one_line_error(cluster("node", "info", uuid), "not found")


def test_node_errors(cluster) -> None:
    assert_one_line_error(cluster("node", "add", "node1.example.com", "--ip", "192.0.2.99"),
                          "already exists")
    assert_one_line_error(cluster("node", "add", "n3", "--ip", "192.0.2.11"),
                          "already node node1.example.com's primary IP")
    assert_one_line_error(cluster("node", "add", "n3", "--ip", "not-an-ip"),
                          "is not an IP address")
    assert_one_line_error(cluster("node", "add", "n3", "--ip", "192.0.2.3", "--group", "x"),
                          "node group 'x' not found")
    assert_one_line_error(cluster("node", "remove", "node1"), "is the master")
    assert_one_line_error(cluster("node", "modify", "node1", "--offline", "yes"),
                          "The master role can be changed only via master-failover")
    assert_one_line_error(cluster("node", "modify", "nosuch", "--drained", "yes"),
                          "node 'nosuch' not found")
    result = cluster("node", "add", "n3")
    assert result.code == 2 and "Missing option '--ip'" in result.err


def test_groups(cluster) -> None:
    assert cluster("group", "add", "rack2", "--alloc-policy", "last_resort",
                   "--node-parameters", "spindle_count=4").code == 0
    assert cluster("node", "add", "node2.example.com", "--ip", "192.0.2.12",
                   "--group", "rack2", "--no-node-check").code == 0
    assert cluster("group", "modify", "rack2", "--ipolicy-vcpu-ratio", "2",
                   "--rename", "rack-two").code == 0
    info = json.loads(cluster("group", "info", "rack-two", "--json").out)[0]
    assert info["nodes"] == ["node2.example.com"]
    assert info["filled_ipolicy"]["vcpu-ratio"] == 2.0
    assert info["filled_ndparams"]["spindle_count"] == 4
    assert_one_line_error(cluster("group", "remove", "rack-two"), "still has nodes")
    assert cluster("node", "modify", "node2", "--group", "default").code == 0
    assert cluster("group", "remove", "rack-two").code == 0
    assert_one_line_error(cluster("group", "remove", "default"), "still has nodes")


def test_ipolicy_bounds_specs(cluster) -> None:
    """gnt-cluster's --ipolicy-bounds-specs: min/max pairs with every key, sizes with units; a
    partial or unknown spec is one line and changes nothing."""
    bounds = ("min:memory-size=16,cpu-count=1,disk-count=0,disk-size=1,nic-count=0,"
              "spindle-use=0/max:memory-size=4G,cpu-count=4,disk-count=8,disk-size=2T,"
              "nic-count=4,spindle-use=6")
    assert cluster("cluster", "modify", "--ipolicy-bounds-specs", bounds).code == 0
    policy = json.loads(cluster("cluster", "info", "--json").out)["ipolicy"]
    assert policy["minmax"] == [{
        "min": {"memory-size": 16, "cpu-count": 1, "disk-count": 0, "disk-size": 1,
                "nic-count": 0, "spindle-use": 0},
        "max": {"memory-size": 4096, "cpu-count": 4, "disk-count": 8,
                "disk-size": 2 * 1024 * 1024, "nic-count": 4, "spindle-use": 6}}]
    assert_one_line_error(
        cluster("cluster", "modify", "--ipolicy-bounds-specs", "min:disk-size=1/max:disk-size=2"),
        "Missing parameters in ipolicy spec min: memory-size")
    assert_one_line_error(
        cluster("cluster", "modify", "--ipolicy-bounds-specs", bounds.replace("min:", "low:")),
        "Invalid key in bounds instance specifications: 'low'")
    assert_one_line_error(
        cluster("cluster", "modify", "--ipolicy-bounds-specs", bounds.replace("cpu-count=4",
                                                                              "cpu-count=x")),
        "cpu-count='x'")
    # min above max: the policy's own check, at the edge
    assert_one_line_error(
        cluster("cluster", "modify", "--ipolicy-bounds-specs",
                bounds.replace("cpu-count=1", "cpu-count=6")), "cpu-count")
    after = json.loads(cluster("cluster", "info", "--json").out)["ipolicy"]
    assert after == policy


def test_tags(cluster) -> None:
    assert cluster("tags", "add", "cluster", "env:prod", "owner:ops").code == 0
    assert cluster("tags", "list", "cluster").out.split() == ["env:prod", "owner:ops"]
    assert cluster("tags", "add", "node", "node1", "rack:a1").code == 0
    assert json.loads(cluster("tags", "list", "node", "node1", "--json").out) == ["rack:a1"]
    assert cluster("tags", "remove", "cluster", "env:prod").code == 0
    assert cluster("tags", "list", "cluster").out.split() == ["owner:ops"]
    assert_one_line_error(cluster("tags", "remove", "cluster", "nope"), "not present")
    assert_one_line_error(cluster("tags", "add", "node", "node1", "bad tag"), "only letters")
    assert_one_line_error(cluster("tags", "add", "instance", "ghost", "x"), "not found")


def test_verify_and_instances_on_imported_ganeti_config(herder, shared: Path) -> None:
    sample = shared / "conformance" / "ganeti" / "cluster_config_3.0.json"
    result = herder("cluster", "import-ganeti", str(sample))
    assert result.code == 0, result.err
    assert "3 nodes, 3 instances, 2 groups" in result.out
    ganeti = json.loads(sample.read_text())
    listed = json.loads(herder("instance", "list", "--json").out)
    assert sorted(i["name"] for i in listed) == sorted(
        i["name"] for i in ganeti["instances"].values())
    drbd = next(i for i in ganeti["instances"].values()
                if ganeti["disks"][i["disks"][0]]["dev_type"] == "drbd")
    info = json.loads(herder("instance", "info", drbd["name"], "--json").out)[0]
    disk = ganeti["disks"][drbd["disks"][0]]
    assert info["disks"][0]["logical_id"]["port"] == disk["logical_id"][2]
    assert info["secondary_node_names"] == [ganeti["nodes"][disk["logical_id"][1]]["name"]]
    verify = herder("cluster", "verify")
    assert "error(s)" in verify.out
    again = herder("cluster", "import-ganeti", str(sample))
    assert_one_line_error(again, "already exists; use --force")


def test_import_with_ganeti_hmac_key(herder, tmp_path: Path, shared: Path) -> None:
    key = tmp_path / "hmac.key"
    key.write_bytes(envelope.generate_key())
    sample = shared / "conformance" / "ganeti" / "cluster_config_2.16.json"
    assert herder("cluster", "import-ganeti", str(sample), "--hmac-key", str(key)).code == 0
    assert (herder.config_path.parent / "hmac.key").read_bytes() == key.read_bytes()


def test_bad_config_file_is_a_clear_error(herder) -> None:
    herder.config_path.parent.mkdir(parents=True)
    herder.config_path.write_text('{"version": 1, "clus')
    result = herder("node", "list")
    assert_one_line_error(result, "not valid JSON")
    assert str(herder.config_path) in result.err
    assert_one_line_error(herder("node", "add", "x", "--ip", "192.0.2.5"), "not valid JSON")
    assert herder.config_path.read_text() == '{"version": 1, "clus'


def test_missing_config_says_what_to_do(herder) -> None:
    assert_one_line_error(herder("cluster", "info"), "herder cluster init")


def test_config_option_beats_environment(herder, tmp_path: Path) -> None:
    other = tmp_path / "other" / "config.json"
    assert herder("--config", str(other), *INIT).code == 0
    assert other.exists()
    assert not herder.config_path.exists()


def _all_commands(group: click.Group, prefix: tuple[str, ...] = ()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from _all_commands(command, (*prefix, name))


def test_every_command_has_useful_help(herder) -> None:
    top = herder("--help")
    assert top.code == 0 and "herder cluster init" in top.out
    seen = 0
    for path, command in _all_commands(cli):
        result = herder(*path, "--help")
        assert result.code == 0, path
        assert "Usage: herder " + " ".join(path) in result.out
        summary = (command.help or "").strip()
        assert len(summary) > 15, f"{' '.join(path)} needs a real help text"
        seen += 1
    assert seen >= 25
    for name in ("cluster", "group", "node", "instance", "tags"):
        assert name in COMMANDS


def test_installed_entry_point_runs(tmp_path: Path) -> None:
    exe = shutil.which("herder", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("the herder console script is not installed in this environment")
    env = {**os.environ, "HERDER_CONFIG": str(tmp_path / "c" / "config.json")}
    done = subprocess.run([exe, *INIT], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    info = subprocess.run([exe, "cluster", "info", "--json"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert json.loads(info.stdout)["name"] == "cluster.example.com"
    bad = subprocess.run([exe, "node", "info", "ghost"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert bad.returncode == 1
    assert bad.stderr.strip() == "herder: error: node 'ghost' not found (give a name or a UUID)"


@pytest.mark.parametrize(("args", "fragment"), [
    (("maintd", "status", "--url", "http://127.0.0.1:1"), "cannot reach maintd at"),
    (("maintd", "cancel", "--url", "https://127.0.0.1:1", "x"), "RAPI users file"),
    (("mond", "status", "--url", "http://127.0.0.1:1"), "cannot reach the agent at"),
])
def test_status_commands_without_their_daemon_fail_in_one_line(herder, args,
                                                                fragment: str) -> None:
    assert_one_line_error(herder(*args), fragment)


def test_status_command_reports_the_daemons_http_error_in_one_line(cluster) -> None:
    from http.server import BaseHTTPRequestHandler

    class Refuses(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = b'{"message": "no incident abc"}'
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with threaded_http(Refuses) as url:
        # (a cancel is a change: it carries the cluster's RAPI credentials)
        assert_one_line_error(cluster("maintd", "cancel", "--url", url, "abc"),
                              "no incident abc")
        assert_one_line_error(cluster("maintd", "cancel", "--url", "https://127.0.0.1:1",
                                      "abc"), "cannot reach maintd at")


def test_verify_exits_1_when_it_finds_an_error(cluster) -> None:
    """The exit code of a command that fails without an exception (click's Exit) reaches the
    shell: herder's main runs click without standalone mode, where click returns that code."""
    assert cluster("cluster", "verify").code == 0
    with FileStore(cluster.config_path).update() as config:
        master = config.nodes[config.cluster.master_node]
        twin = msgspec.structs.replace(master, uuid="00000000-0000-4000-8000-000000000002",
                                       name="node2.example.com")
        config.nodes[twin.uuid] = twin
    result = cluster("cluster", "verify")
    assert result.code == 1, result.out
    assert "duplicate-ip" in result.out or "192.0.2.11" in result.out


def test_init_refuses_a_name_that_does_not_resolve_or_is_loopback(herder, tmp_path) -> None:
    """Ganeti's init: the cluster's name must resolve, and not to a loopback address; no
    silent fall-back to 127.0.0.1 (--force for a cluster on one machine)."""
    base = ("cluster", "init", "--master-node", "node1.example.com", "--primary-ip",
            "192.0.2.11")
    unresolved = herder(*base[:2], "no-such-name.invalid", *base[2:])
    assert_one_line_error(unresolved, "does not resolve")
    loopback = herder(*base[:2], "localhost", *base[2:])
    assert_one_line_error(loopback, "loopback")
    directory = tmp_path / "cluster"
    assert not directory.exists() or not list(directory.iterdir())  # nothing was created
    forced = herder(*base[:2], "localhost", *base[2:], "--force")
    assert forced.code == 0, forced.err


def test_node_join_token_prints_the_token_of_a_node_that_has_not_joined(herder,
                                                                       tmp_path) -> None:
    directory = tmp_path / "cluster"
    directory.mkdir(exist_ok=True)
    assert_one_line_error(herder("node", "join-token"), "start noded on this node")
    (directory / "join-token").write_text(f"s3cret.{'a' * 64}\n")
    shown = herder("node", "join-token")
    assert shown.code == 0 and shown.out.strip() == f"s3cret.{'a' * 64}"
    (directory / "join-token").unlink()
    (directory / "hmac.key").write_text("0" * 40 + "\n")
    assert_one_line_error(herder("node", "join-token"), "has joined a cluster")


def test_node_add_refuses_a_malformed_join_token(cluster) -> None:
    result = cluster("node", "add", "node9.example.com", "--ip", "192.0.2.99",
                     "--join-token", "not-a-token")
    assert result.code != 0 and "not a join token" in result.err
    assert "node9" not in cluster("node", "list").out
