"""Ganeti's export routes on a real masterd (127.0.0.1; its nodes answer nowhere): `PUT
/2/instances/I/prepare-export?mode=local` and `PUT /2/instances/I/export` with Ganeti's
bodies, `POST /2/instances` in mode import; every malformed request refused with one 4xx
line, no job submitted and nothing changed. (The export's data path runs on a simulated
cluster: tests/system/test_real_guests_sim.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from herder.core import cluster_secrets, model, node_certs, remote_export
from herder.core.rapi import RapiError
from herder.core.store import FileStore
from tests.system.masterd_fixture import RunningMaster, make_cluster, start_masterd

NAME = "web1.example.com"


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningMaster]:
    directory = tmp_path_factory.mktemp("backup")
    config_path = make_cluster(directory / "cluster")
    with FileStore(config_path).update() as config:
        # the nodes answer nowhere: at addresses of this machine where no noded listens
        # (refused at once), not at the fixture's unroutable ones, where every list asking
        # the nodes waited ~3 s for "no route to host"
        for name, address in (("node1", "127.0.0.248"), ("node2", "127.0.0.249"),
                              ("node3", "127.0.0.254")):
            config.find_node(name).primary_ip = address
        node = config.find_node("node2.example.com")
        disk = model.Disk(uuid=model.new_uuid(), dev_type="file", size=64, iv_name="disk/0",
                          logical_id=model.FileId(driver="loop", path=f"/srv/x/{NAME}/d0"))
        inst = model.Instance(uuid=model.new_uuid(), name=NAME, primary_node=node.uuid,
                              os="debootstrap+default", hypervisor="kvm", disks=[disk],
                              ctime=model.now(), mtime=model.now())
        config.instances[inst.uuid] = inst
        ca = (config_path.parent / cluster_secrets.CERT_FILE).read_bytes()
        config.cluster.node_certs[node.uuid] = node_certs.digest(node_certs.issue(ca, node.name))
    with start_masterd(directory) as running:
        yield running


def test_prepare_export_local_is_a_job_answering_none(master: RunningMaster) -> None:
    api = master.client
    job = api.request("PUT", f"/2/instances/{NAME}/prepare-export", [("mode", "local")])
    done = api.wait_for_job(job, timeout=30)
    assert done["status"] == "success" and done["opresult"] == [None]
    ops = api.request("GET", f"/2/jobs/{job}")["ops"]
    assert ops[0]["OP_ID"] == "OP_BACKUP_PREPARE" and ops[0]["mode"] == "local"


def test_prepare_export_remote_answers_ganetis_signed_triple(master: RunningMaster) -> None:
    """Ganeti's answer (handshake, x509_key_name, x509_ca), each checking under the cluster
    domain secret: the key is node2's certificate, the CA the cluster's; without the secret
    the job fails in one line."""
    api = master.client
    job = api.request("PUT", f"/2/instances/{NAME}/prepare-export", [("mode", "remote")])
    done = api.wait_for_job(job, timeout=30)
    assert done["status"] == "success", done
    (answer,) = done["opresult"]
    assert set(answer) == {"handshake", "x509_key_name", "x509_ca"}
    cds = remote_export.read_domain_secret(master.config_path.parent)
    remote_export.check_handshake(cds, answer["handshake"])
    config = FileStore(master.config_path).load()
    node2 = config.find_node("node2.example.com")
    assert remote_export.check_key_name(cds, answer["x509_key_name"]) == \
        config.cluster.node_certs[node2.uuid]
    ca = node_certs.certificate_pem(
        (master.config_path.parent / cluster_secrets.CERT_FILE).read_bytes()).decode()
    assert remote_export.sign_certificate(cds, ca, answer["x509_ca"].split()[1].split("/")[0]) \
        == answer["x509_ca"]
    with pytest.raises(remote_export.RemoteExportError, match="invalid"):
        remote_export.load_signed_certificate("not" + cds, answer["x509_ca"])
    secret = master.config_path.parent / cluster_secrets.DOMAIN_SECRET_FILE
    secret.rename(secret.with_suffix(".away"))
    try:
        job = api.request("PUT", f"/2/instances/{NAME}/prepare-export", [("mode", "remote")])
        done = api.wait_for_job(job, timeout=30)
    finally:
        secret.with_suffix(".away").rename(secret)
    assert done["status"] == "error"
    assert "cluster domain secret" in str(done["opresult"])
    assert "\n" not in str(done["opresult"])


def test_export_body_is_ganetis(master: RunningMaster) -> None:
    """Ganeti's client body (`destination` renamed to the opcode's target_node) and herder's
    `keep`; the job carries exactly what was asked."""
    api = master.client
    job = api.request("PUT", f"/2/instances/{NAME}/export", None, {
        "destination": "node3.example.com", "mode": "local", "shutdown": True,
        "remove_instance": False, "dry_run": True, "keep": 3})
    api.wait_for_job(job, timeout=30)
    (op,) = api.request("GET", f"/2/jobs/{job}")["ops"]
    assert (op["OP_ID"], op["instance_name"], op["target_node"], op["shutdown"],
            op["remove_instance"], op["mode"], op["keep"]) == (
        "OP_BACKUP_EXPORT", NAME, "node3.example.com", True, False, "local", 3)


IMPORT = {"__version__": 1, "name": "web2.example.com", "mode": "import",
          "name_check": False, "ip_check": False}


@pytest.mark.parametrize(("method", "path", "body", "status", "fragment"), [
    ("PUT", f"/2/instances/{NAME}/prepare-export", None, 400, "needs the export mode"),
    ("PUT", f"/2/instances/{NAME}/prepare-export?mode=elsewhere", None, 400, "mode"),
    ("PUT", "/2/instances/nosuch/export", {"destination": "node2"}, 404, "nosuch"),
    ("PUT", f"/2/instances/{NAME}/export", {}, 400, "needs the target node"),
    ("PUT", f"/2/instances/{NAME}/export", {"destination": "node2", "colour": 1}, 400,
     "unknown field(s) colour"),
    ("PUT", f"/2/instances/{NAME}/export", {"destination": "node2", "target_node": "node3"},
     400, "not both"),
    ("PUT", f"/2/instances/{NAME}/export", {"destination": "node2", "compress": "gzip"}, 400,
     "only 'none'"),
    ("PUT", f"/2/instances/{NAME}/export", {"destination": "node2", "keep": 0}, 400,
     "keep 0: 1 to 100 exports"),
    ("POST", "/2/instances", {**IMPORT, "src_node": "node2", "src_path": "web1@2027"}, 400,
     "@YYYYMMDD-HHMMSS"),
    ("PUT", f"/2/instances/{NAME}/export", {"destination": "node2", "mode": "remote"}, 400,
     "mode remote needs target_node (each disk's destination), x509_key_name"),
    ("PUT", f"/2/instances/{NAME}/export", {"destination": "node2", "x509_key_name": ["a"]},
     400, "are for mode remote"),
    ("POST", "/2/instances", IMPORT, 400, "mode import needs src_node and src_path"),
    ("POST", "/2/instances", {**IMPORT, "src_node": "node2", "src_path": "../x/web1"}, 400,
     "src_path"),
    ("POST", "/2/instances", {**IMPORT, "mode": "create", "src_node": "node2",
                              "disk_template": "file"}, 400, "for mode import"),
    ("POST", "/2/instances", {**IMPORT, "mode": "remote-import"}, 400,
     "mode remote-import needs source_handshake, source_x509_ca and source_instance_name"),
    ("POST", "/2/instances", {**IMPORT, "mode": "create", "source_instance_name": "a"}, 400,
     "are for mode remote-import"),
])
def test_bad_requests_get_one_4xx_line_and_change_nothing(
        master: RunningMaster, method: str, path: str, body: Any, status: int,
        fragment: str) -> None:
    api = master.client
    before = api.get_jobs(), FileStore(master.config_path).load().serial_no
    route, _, query = path.partition("?")
    with pytest.raises(RapiError) as err:
        api.request(method, route, [tuple(query.split("="))] if query else None, body)
    assert err.value.status == status
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert (api.get_jobs(), FileStore(master.config_path).load().serial_no) == before


def test_an_export_to_an_unknown_node_fails_with_one_line(master: RunningMaster) -> None:
    api = master.client
    before = FileStore(master.config_path).load().serial_no
    job = api.request("PUT", f"/2/instances/{NAME}/export", None, {"destination": "nosuch"})
    done = api.wait_for_job(job, timeout=30)
    assert done["status"] == "error"
    assert "nosuch" in str(done["opresult"])
    assert FileStore(master.config_path).load().serial_no == before





def _backup_cli(master: RunningMaster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HERDER_OFFLINE", "HERDER_MASTERD")}
    env.update(HERDER_CONFIG=str(master.config_path), HERDER_MASTERD=master.url)
    return subprocess.run([sys.executable, "-m", "herder.cli.main", "backup", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_backup_list_takes_ganetis_list_options(master: RunningMaster) -> None:
    """gnt-backup list's options (--node, -o, --no-headers, --separator, -v) and list-fields;
    these nodes answer nowhere, so each online node is one row without an export."""
    config = FileStore(master.config_path).load()
    online = sorted(n.name for n in config.nodes.values() if not n.offline)
    table = _backup_cli(master, "list")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == ["Node", "Export"]
    plain = _backup_cli(master, "list", "--no-headers", "--separator", "|", "-v")
    assert sorted(plain.stdout.splitlines()) == [f"{n}|(nodata)" for n in online]
    one = _backup_cli(master, "list", "--node", "node2", "--no-headers", "-o", "node")
    assert one.stdout.split() == ["node2.example.com"]
    rows = json.loads(_backup_cli(master, "list", "--json").stdout)
    assert sorted(rows, key=lambda r: r["node"]) == [{"node": n, "export": None}
                                                     for n in online]
    fields = _backup_cli(master, "list-fields", "--no-headers", "--separator", "|")
    assert [line.split("|")[0] for line in fields.stdout.splitlines()] == ["export", "node"]
    unknown = _backup_cli(master, "list", "-o", "node,size")
    assert unknown.returncode == 14 and "unknown fields size" in unknown.stderr
    extra = _backup_cli(master, "list", "web1")
    assert extra.returncode == 2 and "unexpected extra argument" in extra.stderr.lower()
    gone = _backup_cli(master, "list", "--node", "node9")
    assert gone.returncode == 1 and len(gone.stderr.strip().splitlines()) == 1


def other_cluster_ca(cds: str) -> str:
    """The destination cluster's CA, signed as its OP_BACKUP_PREPARE signs it."""
    both = cluster_secrets.self_signed_certificate("cluster-b.example.com").decode()
    return remote_export.sign_certificate(cds, both[both.index("-----BEGIN CERTIFICATE"):])


def remote_job_error(master: RunningMaster, method: str, path: str, body: dict[str, Any]
                     ) -> str:
    """A remote export's or import's job, which must fail at its checks: its one-line error;
    the config unchanged."""
    api = master.client
    before = FileStore(master.config_path).load().serial_no
    done = api.wait_for_job(api.request(method, path, None, body), timeout=30)
    assert done["status"] == "error", done
    assert FileStore(master.config_path).load().serial_no == before
    error = str(done["opresult"])
    assert "\n" not in error
    return error


def test_remote_export_and_import_check_the_other_clusters_credentials(
        master: RunningMaster) -> None:
    """Ganeti's checks of move-instance's messages: the key name this cluster signed for the
    primary's certificate, the other cluster's CA and each disk's destination, the source's
    handshake, all under the shared cluster domain secret; each wrong one fails the job in
    one line with nothing changed. Once every check passed the job goes on to its nodes
    (which answer nowhere here: the streams run in tests/sim/test_move_cluster_sim.py)."""
    cds = remote_export.read_domain_secret(master.config_path.parent)
    api = master.client
    prepared = api.wait_for_job(api.request(
        "PUT", f"/2/instances/{NAME}/prepare-export", [("mode", "remote")]), timeout=30)
    (answer,) = prepared["opresult"]
    dest = [list(remote_export.compute_disk_info(cds, "a1", 0, "192.0.2.5", 11000, "mg"))]
    export = {"mode": "remote", "target_node": dest, "x509_key_name": answer["x509_key_name"],
              "destination_x509_ca": other_cluster_ca(cds)}
    path = f"/2/instances/{NAME}/export"
    wrong_key = list(remote_export.sign_key_name("x" + cds, answer["x509_key_name"][0]))
    assert "HMAC for X509 key name is wrong" in remote_job_error(
        master, "PUT", path, {**export, "x509_key_name": wrong_key})
    other_key = list(remote_export.sign_key_name(cds, "0" * 64))
    assert "not the certificate of its primary node" in remote_job_error(
        master, "PUT", path, {**export, "x509_key_name": other_key})
    assert "signature is invalid" in remote_job_error(
        master, "PUT", path, {**export, "destination_x509_ca": other_cluster_ca("x" + cds)})
    moved = [["192.0.2.66", *dest[0][1:]]]
    assert "disk 0: HMAC is wrong" in remote_job_error(
        master, "PUT", path, {**export, "target_node": moved})
    assert "2 destinations for 1 disks" in remote_job_error(
        master, "PUT", path, {**export, "target_node": dest * 2})
    passed = remote_job_error(master, "PUT", path, export)  # every check passed
    assert f"remote export of {NAME} failed: node node2.example.com: blockdev_export " \
        "failed" in passed
    remote = {**IMPORT, "mode": "remote-import", "disk_template": "plain",
              "disks": [{"size": 64}], "os": "debootstrap+default",
              "source_instance_name": NAME, "source_x509_ca": answer["x509_ca"],
              "source_handshake": list(remote_export.compute_handshake("x" + cds))}
    assert "don't share the same domain secret" in remote_job_error(
        master, "POST", "/2/instances", remote)
    remote["source_handshake"] = answer["handshake"]
    assert "signature is invalid" in remote_job_error(
        master, "POST", "/2/instances", {**remote, "source_x509_ca": other_cluster_ca("x" + cds)})
    passed = remote_job_error(master, "POST", "/2/instances", remote)
    assert "no nodes given and no iallocator" in passed  # the placement, after the checks
