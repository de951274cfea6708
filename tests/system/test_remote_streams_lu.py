"""The two jobs of a move between clusters failing on real node daemons in this process (the
real job queue, processor and LUs; noded's server on libvirt's test driver, file disks), whose
nodes have no node certificate, so no stream can be made: the target's remote-import fails in
one line and removes its partial instance (config entry and disk file); the source's remote
export fails in one line and leaves the instance as it was. Given a node certificate, the
node listens, and while the import waits for its slow stream, a job on another instance of
the target cluster completes (the import holds only its instance and node, issue 30); an OS
import script failing mid-stream fails the creation in one line and removes its instance;
the recovery's cleanup after a master died in an import removes only a half-made one. (The
streams themselves: tests/noded/test_remote_import.py; the whole move:
tests/system/test_move_cluster_sim.py.)"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from herder.core import node_certs, remote_export
from herder.core.cluster_secrets import DOMAIN_SECRET_FILE, self_signed_certificate
from herder.core.store import FileStore
from herder.masterd.jobs.queue import JobQueue
from herder.sim import guest
from tests.conftest import build_config
from tests.noded.test_disk_transfer import allow
from tests.system.inprocess_master import master_over_nodes

ADDRESSES = {"node1.example.com": "127.0.0.173"}
CDS = "0123456789abcdef0123456789abcdef"


@dataclass
class Cluster:
    store: FileStore
    queue: JobQueue
    storage: Path
    directory: Path

    def run(self, op: dict[str, Any]) -> tuple[str, Any, list[Any]]:
        job = self.queue.wait(self.queue.submit([op]), 120)
        return str(job.status), job.ops[0].result, job.ops[0].log


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("remote-streams")
    storage = directory / "file-storage"
    storage.mkdir()
    (directory / DOMAIN_SECRET_FILE).write_text(CDS + "\n")
    config = build_config(nodes=1, drbd_instances=0, plain_instances=0)
    config.cluster.enabled_disk_templates = ["file", "diskless"]
    config.cluster.file_storage_dir = str(storage)
    node = config.find_node("node1")
    node.primary_ip = ADDRESSES[node.name]
    config.cluster.node_certs[node.uuid] = "ab" * 32
    os_dir = guest.install_os_definition(directory / "os")
    allow(directory / node.name / "root", storage)
    with master_over_nodes(directory, config, ADDRESSES, os_path=(os_dir.parent,)) as master:
        yield Cluster(master.store, master.queue, storage, directory)


def signed_ca(name: str) -> str:
    return remote_export.sign_certificate(
        CDS, node_certs.certificate_pem(self_signed_certificate(name)).decode())


def test_a_remote_import_that_cannot_listen_removes_its_instance(cluster: Cluster) -> None:
    status, result, log = cluster.run({
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": "moved.example.com",
        "mode": "remote-import", "disk_template": "file", "disks": [{"size": 4}],
        "nics": [{}], "os_type": guest.OS_NAME, "pnode": "node1.example.com",
        "name_check": False, "ip_check": False, "start": False, "ignore_ipolicy": True,
        "source_handshake": list(remote_export.compute_handshake(CDS)),
        "source_x509_ca": signed_ca("source-cluster"),
        "source_instance_name": "web1.example.com"})
    assert status == "error", result
    kind, (message, *_) = result
    assert kind == "OpExecError" and "\n" not in message
    assert message.startswith("remote import of moved.example.com failed: ") and \
        "no node certificate" in message, message
    assert all(entry[2] != "remote-import" for entry in log)  # nothing announced
    assert "moved.example.com" not in {i.name for i in cluster.store.load().instances.values()}
    assert not list(cluster.storage.rglob("*")), "the partial instance's disk is left"


def test_a_remote_export_that_cannot_send_leaves_the_instance(cluster: Cluster) -> None:
    created = cluster.run({
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": "web1.example.com",
        "disk_template": "file", "disks": [{"size": 4}], "nics": [{}], "no_install": True,
        "pnode": "node1.example.com", "name_check": False, "ip_check": False,
        "start": False, "os_type": guest.OS_NAME, "ignore_ipolicy": True})
    assert created[0] == "success", created
    before = cluster.store.load()
    inst = before.find_instance("web1.example.com")
    key = list(remote_export.sign_key_name(CDS, before.cluster.node_certs[inst.primary_node]))
    status, result, _ = cluster.run({
        "OP_ID": "OP_BACKUP_EXPORT", "instance_name": "web1.example.com", "mode": "remote",
        "target_node": [list(remote_export.compute_disk_info(CDS, "s1", 0, "127.0.0.250",
                                                             40000, "magic-token"))],
        "x509_key_name": key, "destination_x509_ca": signed_ca("target-cluster")})
    assert status == "error", result
    kind, (message, *_) = result
    assert kind == "OpExecError" and "\n" not in message
    assert message.startswith("remote export of web1.example.com failed: ") and \
        "no node certificate" in message, message
    after = cluster.store.load().find_instance("web1.example.com")
    assert (after.admin_state, after.serial_no) == (inst.admin_state, inst.serial_no)
    assert list(cluster.storage.rglob("disk*")), "its disk is gone"


@contextmanager
def source_cluster_node(cluster: Cluster) -> Iterator[tuple[Path, str]]:
    """The target's node given a node certificate (so it listens) and the master its cluster
    CA; a source cluster's node certificate (its PEM file) and that CA, signed, for the
    creation's `source_x509_ca`; all removed afterwards."""
    # where the node daemon keeps it (its config_dir under its file root)
    own = cluster.directory / "node1.example.com"
    node_pem = own / "root" / str(own / "cluster").lstrip("/") / node_certs.NODE_CERT_FILE
    node_pem.parent.mkdir(parents=True, exist_ok=True)
    target_ca = self_signed_certificate("target-cluster")
    node_pem.write_bytes(node_certs.issue(target_ca, "node1.example.com"))
    cluster_pem = cluster.directory / "server.pem"  # the master signs it for the source
    cluster_pem.write_bytes(target_ca)
    source_ca = self_signed_certificate("source-cluster")
    client_pem = cluster.directory / "source-node.pem"
    client_pem.write_bytes(node_certs.issue(source_ca, "src1.example.com"))
    try:
        yield client_pem, remote_export.sign_certificate(
            CDS, node_certs.certificate_pem(source_ca).decode())
    finally:
        node_pem.unlink(missing_ok=True)
        cluster_pem.unlink(missing_ok=True)


def submit_import(cluster: Cluster, name: str, source_ca: str) -> int:
    return cluster.queue.submit([{
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "mode": "remote-import",
        "disk_template": "file", "disks": [{"size": 4}], "nics": [{}],
        "os_type": guest.OS_NAME, "pnode": "node1.example.com", "name_check": False,
        "ip_check": False, "start": False, "ignore_ipolicy": True,
        "source_handshake": list(remote_export.compute_handshake(CDS)),
        "source_x509_ca": source_ca, "source_instance_name": "web1.example.com"}])


def announced(cluster: Cluster, job_id: int) -> Any:
    """The creation's `remote-import` log entry, once it listens."""
    def entry() -> Any:
        job = cluster.queue.get(job_id)
        assert str(job.status) in ("queued", "waiting", "running"), job.ops[0].result
        return next((entry[3] for entry in job.ops[0].log if entry[2] == "remote-import"),
                    None)

    deadline = time.monotonic() + 60
    while (listening := entry()) is None:
        assert time.monotonic() < deadline, "the remote import never listened"
        time.sleep(0.2)
    return listening


def stream(client_pem: Path, listening: Any, data: bytes) -> httpx.Response:
    """The source cluster's node streaming `data` as disk/0 (its node certificate shown)."""
    from herder.core.rpcdefs import disk_calls

    [(host, port, magic, *_)] = listening["disks"]
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.load_cert_chain(str(client_pem))
    disk_calls.import_token(magic)
    with httpx.Client(verify=context, timeout=60) as client:
        return client.post(f"https://{host}:{port}/import/{magic}", content=data)


def test_a_slow_remote_import_does_not_stop_the_jobs_on_other_instances(
        cluster: Cluster) -> None:
    """Issue 30: the remote import's creation has placed and recorded its instance, then
    waits for the source cluster's stream holding only that instance and its node (the BGL
    shared): a tag change on another instance completes meanwhile. The stream then comes
    (with a certificate of the source cluster's CA) and the import succeeds."""
    with source_cluster_node(cluster) as (client_pem, source_ca):
        job_id = submit_import(cluster, "slow.example.com", source_ca)
        listening = announced(cluster, job_id)
        # the import waits for its stream: a job on another instance goes through
        tagged = cluster.queue.wait(cluster.queue.submit([{
            "OP_ID": "OP_TAGS_SET", "kind": "instance", "name": "web1.example.com",
            "tags": ["moving-next"]}]), 30)
        assert str(tagged.status) == "success", tagged.ops[0].result
        assert str(cluster.queue.get(job_id).status) == "running"
        # recorded, its disk not yet received: what the recovery's cleanup may remove
        assert cluster.store.load().find_instance("slow.example.com").incomplete
        assert "moving-next" in cluster.store.load().find_instance("web1.example.com").tags

        data = os.urandom(4 << 20)
        answer = stream(client_pem, listening, data)
        assert answer.status_code == 200, answer.text
        job = cluster.queue.wait(job_id, 120)
        assert str(job.status) == "success", job.ops[0].result
        made = cluster.store.load().find_instance("slow.example.com")
        assert not made.incomplete
        [disk_file] = [path for path in cluster.storage.rglob("*")
                       if path.is_file() and made.disks[0].uuid in str(path)] or \
            [path for path in cluster.storage.rglob("slow.example.com*/*") if path.is_file()]
        assert disk_file.read_bytes() == data


def test_an_os_import_script_failing_mid_stream_removes_the_instance(cluster: Cluster) -> None:
    """The OS `import` script fails after the stream began (a move between clusters failing
    midway: what tests/system/test_move_cluster_sim.py's move then does with the source):
    the stream is refused, the creation fails in one line naming the script, and the
    partial instance is removed with its disk."""
    script = cluster.directory / "os" / guest.OS_NAME / "import"
    kept = script.read_bytes()
    script.write_text("#!/bin/sh\nhead -c 1048576 >/dev/null\necho broken >&2\nexit 3\n")
    before = sorted(cluster.storage.rglob("*"))
    try:
        with source_cluster_node(cluster) as (client_pem, source_ca):
            job_id = submit_import(cluster, "broken.example.com", source_ca)
            listening = announced(cluster, job_id)
            assert cluster.store.load().find_instance("broken.example.com").incomplete
            try:
                answer: httpx.Response | None = stream(client_pem, listening,
                                                       os.urandom(4 << 20))
            except httpx.HTTPError:  # (the listener may cut the stream off instead)
                answer = None
            assert answer is None or answer.status_code != 200, answer.text
            job = cluster.queue.wait(job_id, 120)
    finally:
        script.write_bytes(kept)
    assert str(job.status) == "error", job.ops[0].result
    kind, (message, *_) = job.ops[0].result
    assert kind == "OpExecError" and "\n" not in message
    assert message.startswith("remote import of broken.example.com failed: disk/0: ") and \
        "OS import script" in message, message
    assert "broken.example.com" not in {i.name for i in cluster.store.load().instances.values()}
    assert sorted(cluster.storage.rglob("*")) == before, "the partial instance's disk is left"


def test_the_recovery_removes_only_a_half_made_instance(cluster: Cluster) -> None:
    """What the queue's recovery submits after the master died in a remote import
    (`after_master_death`; the kill itself: tests/system/test_move_cluster_sim.py): a
    removal with `cleanup`, which removes an instance still marked incomplete with its disk,
    and leaves alone a finished instance of that name and a name nothing recorded."""
    from herder.masterd.jobs import opcodes
    from herder.masterd.lu.create import InstanceCreate

    importing = opcodes.parse({
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": "slow.example.com",
        "mode": "remote-import", "disk_template": "file", "disks": [{"size": 4}],
        "nics": [{}], "os_type": guest.OS_NAME, "source_handshake": ["x"],
        "source_x509_ca": "ca", "source_instance_name": "web1.example.com"})
    assert isinstance(importing, opcodes.OpInstanceCreate)
    follow_up = InstanceCreate.after_master_death(importing)
    assert follow_up == [{"OP_ID": "OP_INSTANCE_REMOVE", "instance_name": "slow.example.com",
                          "cleanup": True}]
    creating = opcodes.parse({k: v for k, v in importing.to_dict().items()
                              if not k.startswith("source_")} | {"mode": "create"})
    assert isinstance(creating, opcodes.OpInstanceCreate)
    assert InstanceCreate.after_master_death(creating) == []  # (only a remote import's)

    def files(name: str) -> list[Path]:
        inst = cluster.store.load().find_instance(name)
        return [p for p in cluster.storage.rglob("*") if p.is_file()
                and (name in str(p) or any(d.uuid in str(p) for d in inst.disks))]

    for name in ("web1.example.com", "nosuch.example.com"):  # finished; never recorded
        before = {i.name: i.serial_no for i in cluster.store.load().instances.values()}
        status, result, _ = cluster.run({**follow_up[0], "instance_name": name})
        assert status == "success", result
        assert {i.name: i.serial_no for i in cluster.store.load().instances.values()} == before
    kept = files("web1.example.com")
    assert kept and files("slow.example.com")
    every = set(cluster.storage.rglob("*"))
    with cluster.store.update() as config:  # as a master that died mid-stream left it
        config.find_instance("slow.example.com").incomplete = True
    status, result, _ = cluster.run(follow_up[0])
    assert status == "success", result
    assert "slow.example.com" not in {i.name for i in cluster.store.load().instances.values()}
    assert [p for p in cluster.storage.rglob("*") if p.is_file()] == kept, every
