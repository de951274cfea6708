"""Redistribution (issue 10, design-2.1 "Redistribute Config" and "VNC Console Password"): what
goes where (pure), noded's receiving RPCs, and on a simulated cluster of namespaced hosts: a VNC
password file set on an instance is on every node that can run it after `herder cluster
redist-conf`, ssconf files are on every node, the config copy (and the job queue) on every master
candidate where its readers find it (/var/lib/herder), and a config change reaches the
candidates' copies without redist-conf."""

from __future__ import annotations

import base64
import contextlib
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from herder.core import model, node_certs
from herder.core.errors import RpcError
from herder.core.noderpc import RpcTransport, UnreachableError
from herder.core.reachability import Reachability, ReachabilityRpc
from herder.core.store import FileStore
from herder.masterd import redist
from herder.noded import rpc as noded_rpc
from herder.noded.node import Node, NodeSettings, RpcFailure
from tests.conftest import build_config
from tests.rpcfakes import nothing_answer

CONFIG = Path("/var/lib/herder/config.json")
HV_DIR = "/var/lib/herder/hypervisor"  # masterd.hvfiles: beside CONFIG


def names(config: model.ConfigData) -> list[str]:
    return sorted(n.name for n in config.nodes.values())


def instance(config: model.ConfigData, name: str) -> model.Instance:
    return next(i for i in config.instances.values() if i.name == name)


def node(config: model.ConfigData, name: str) -> model.Node:
    return next(n for n in config.nodes.values() if n.name == name)


# --- what goes where -----------------------------------------------------------------------------

def test_ssconf_values_have_ganetis_names():
    config = build_config(4)
    node(config, "node4.example.com").offline = True
    config.cluster.uid_pool = [(1000, 1009), (2000, 2000)]
    values = redist.ssconf_values(config)
    for key in ("cluster_name", "master_node", "master_ip", "node_list", "node_primary_ips",
                "node_secondary_ips", "master_candidates", "master_candidates_ips",
                "online_nodes", "offline_nodes", "vm_capable_nodes", "uid_pool",
                "release_version", "hypervisor_list", "enabled_disk_templates"):
        assert key in values, key
    assert values["cluster_name"] == "cluster.example.com\n"
    assert values["master_node"] == "node1.example.com\n"
    assert values["node_list"].splitlines() == names(config)
    assert "node1.example.com 192.0.2.11" in values["node_primary_ips"].splitlines()
    assert "node2.example.com 198.51.100.12" in values["node_secondary_ips"].splitlines()
    assert values["offline_nodes"] == "node4.example.com\n"
    assert values["uid_pool"] == "1000-1009\n2000\n"
    assert values["master_candidates"].splitlines() == ["node1.example.com",
                                                         "node2.example.com"]
    rows = [json.loads(line) for line in values["herder_ndparams"].splitlines()]
    assert [r["name"] for r in rows] == names(config)
    assert all(r["ndparams"]["libvirt_uri"] == "qemu:///system" for r in rows)


def test_a_renewal_in_progress_lists_the_old_and_the_new_certificates():
    # a redistribution during `cluster renew-crypto` must not take the new certificates'
    # acceptance away (masterd.renew)
    config = build_config(2)
    first, second = (node(config, n) for n in names(config))
    config.cluster.node_certs = {first.uuid: "aa" * 32, second.uuid: "bb" * 32}
    alone = redist.ssconf_values(config)[node_certs.SSCONF_NAME]
    config.cluster.node_certs_renewing = {first.uuid: "cc" * 32, second.uuid: "dd" * 32}
    listed = node_certs.parse_list(redist.ssconf_values(config)[node_certs.SSCONF_NAME])
    assert set(listed) == {"aa" * 32, "bb" * 32, "cc" * 32, "dd" * 32}
    assert set(node_certs.parse_list(alone)) == {"aa" * 32, "bb" * 32}


def test_vnc_password_files_go_to_the_nodes_that_can_run_the_instance():
    config = build_config(4, drbd_instances=1, plain_instances=1)
    drbd, plain = instance(config, "drbd0.example.com"), instance(config, "plain0.example.com")
    drbd_pw, plain_pw = f"{HV_DIR}/drbd0.pw", f"{HV_DIR}/plain0.pw"
    drbd.hvparams["vnc_password_file"] = drbd_pw
    plain.hvparams["vnc_password_file"] = plain_pw
    plans = redist.plan(config, CONFIG)
    holders = {p: sorted(n for n, np in plans.items() if p in np.files)
               for p in (drbd_pw, plain_pw)}
    master = config.cluster.master_node  # it has the file: it is the master's

    def others(uuids: list[str]) -> list[str]:
        return sorted(config.node_name(u) for u in uuids if u != master)

    assert holders[drbd_pw] == others(drbd.all_nodes)
    assert holders[plain_pw] == others([plain.primary_node])
    # a diskless instance can run anywhere: every VM-capable node; the white-list has them all
    plain.disks = []
    node(config, "node4.example.com").vm_capable = False
    plans = redist.plan(config, CONFIG)
    assert sorted(n for n, np in plans.items() if plain_pw in np.files) \
        == ["node2.example.com", "node3.example.com"]
    allowed = plans["node4.example.com"].ssconf[redist.UPLOAD_LIST].splitlines()
    assert {drbd_pw, plain_pw} <= set(allowed)


def test_cluster_default_reaches_every_vm_capable_node_of_an_enabled_hypervisor():
    config = build_config(3, drbd_instances=0, plain_instances=0)
    cluster_pw = f"{HV_DIR}/vnc-cluster.pw"
    config.cluster.hvparams["kvm"] = {"vnc_password_file": cluster_pw}
    node(config, "node3.example.com").vm_capable = False
    plans = redist.plan(config, CONFIG)
    assert [n for n, np in plans.items() if cluster_pw in np.files] \
        == ["node2.example.com"]  # node1 is the master: it has the original
    config.cluster.enabled_hypervisors = ["fake"]
    plans = redist.plan(config, CONFIG)
    assert not any(cluster_pw in np.files for np in plans.values())


def test_candidates_secrets_user_list_and_offline_nodes(tmp_path):
    config = build_config(4, drbd_instances=0, plain_instances=0)
    node(config, "node4.example.com").offline = True
    config_path = tmp_path / "config.json"
    (tmp_path / redist.REDIST_FILES).write_text(
        "# shipped everywhere\n/etc/xen/xend.conf\n\nrelative/ignored\n/etc/../shadow\n")
    user = redist.read_user_list(tmp_path / redist.REDIST_FILES)
    assert user == ["/etc/xen/xend.conf"]
    plans = redist.plan(config, config_path, user_files=user)
    assert sorted(plans) == ["node1.example.com", "node2.example.com", "node3.example.com"]
    # the master keeps the originals: its ssconf only, no config copy, no files
    assert [n for n, p in plans.items() if p.candidate] == ["node2.example.com"]
    assert plans["node1.example.com"].files == [] and plans["node1.example.com"].ssconf
    for name, np in plans.items():
        if name == "node1.example.com":
            continue
        assert "/etc/xen/xend.conf" in np.files
        assert str(tmp_path / redist.REDIST_FILES) in np.files
        assert str(tmp_path / "hmac.key") not in np.files  # secrets on a full push only
    assert str(tmp_path / "rapi_users") in plans["node2.example.com"].files
    assert str(tmp_path / "rapi_users") not in plans["node3.example.com"].files
    full = redist.plan(config, config_path, full=True, only=["node3.example.com"])
    assert list(full) == ["node3.example.com"]
    assert {str(tmp_path / "hmac.key"), str(tmp_path / "server.pem")} \
        <= set(full["node3.example.com"].files)
    # the cluster domain secret with them, when the cluster has one
    assert str(tmp_path / "cluster-domain-secret") not in full["node3.example.com"].files
    (tmp_path / "cluster-domain-secret").write_text("ab" * 20 + "\n")
    full = redist.plan(config, config_path, full=True, only=["node3.example.com"])
    assert str(tmp_path / "cluster-domain-secret") in full["node3.example.com"].files
    assert str(tmp_path / "cluster-domain-secret") not in \
        redist.plan(config, config_path)["node3.example.com"].files


class RecordingRpc(RpcTransport):
    """Records the calls; `failing` answers with an error, `unreachable` cannot be reached."""

    def __init__(self, failing: str = "") -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.failing = failing
        self.unreachable: set[str] = set()

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        if node.name == self.failing:
            raise RpcError(f"node {node.name}: cannot reach its node daemon")
        if node.name in self.unreachable:
            raise UnreachableError(f"node {node.name}: {method} failed: connection refused")
        self.calls.append((node.name, method, dict(args)))
        return nothing_answer(method)


def test_push_collects_errors_per_node_and_sends_changed_job_files_only(tmp_path):
    config = build_config(3, drbd_instances=0, plain_instances=0)
    (tmp_path / "queue").mkdir()
    (tmp_path / "queue" / "job-1.json").write_text("{}")
    (tmp_path / "rapi_users").write_text("admin pw write\n")
    rpc = RecordingRpc(failing="node3.example.com")
    pusher = redist.Redistributor(rpc, tmp_path / "config.json", tmp_path / "queue")
    results = pusher.push(config)
    assert results["node3.example.com"].errors and not results["node1.example.com"].errors
    configs = [c for c in rpc.calls if c[1] == "write_config"]
    assert sorted(c[0] for c in configs) == ["node2.example.com"]  # not the master itself
    assert all(set(c[2]["queue"]["files"]) == {"job-1.json"} for c in configs)
    rpc.calls.clear()
    pusher.push(config)
    assert all(c[2]["queue"].get("files", {}) == {}
               for c in rpc.calls if c[1] == "write_config")
    pusher.push(config, full=True)
    assert all(set(c[2]["queue"]["files"]) == {"job-1.json"}
               for c in rpc.calls[-3:] if c[1] == "write_config")
    assert {c[0] for c in rpc.calls if c[1] == "write_ssconf"} == {"node1.example.com",
                                                                    "node2.example.com"}


def test_push_sends_the_archived_jobs_once_and_in_parts(tmp_path, monkeypatch):
    from herder.masterd.jobs.job import Job
    from herder.masterd.jobs.store_file import FileJobStorage

    config = build_config(3, drbd_instances=0, plain_instances=0)
    (tmp_path / "rapi_users").write_text("admin pw write\n")
    storage = FileJobStorage(tmp_path / "queue")
    storage.load()  # (makes the directory)
    jobs = [Job(id=n, ops=[], received_timestamp=[n, 0]) for n in range(1, 6)]
    for job in jobs:
        storage.save(job)
    rpc = RecordingRpc()
    pusher = redist.Redistributor(rpc, tmp_path / "config.json", tmp_path / "queue",
                                  archived_since=storage.archived_since)

    def archived_sent() -> list[str]:
        sent = [c[2]["queue"]["archived"] for c in rpc.calls if c[1] == "write_config"]
        rpc.calls.clear()
        assert len(sent) == 1  # node2 is the one candidate but the master
        return sorted(sent[0])

    pusher.push(config)
    assert archived_sent() == []
    monkeypatch.setattr(redist, "ARCHIVE_PER_PUSH", 2)
    storage.archive(jobs[:3])
    pusher.push(config)
    assert archived_sent() == ["job-1.json", "job-2.json"]
    assert pusher.archive_behind() == {node(config, "node2.example.com").uuid}
    pusher.push(config)
    assert archived_sent() == ["job-3.json"]
    assert pusher.archive_behind() == set()
    pusher.push(config)
    assert archived_sent() == []


# --- noded's side ---------------------------------------------------------------------------------

@pytest.fixture
def noded(tmp_path) -> Node:
    # the node's "/" is tmp_path/root: the test's files never touch this machine's
    return Node(NodeSettings(node_name="node2", state_dir=tmp_path / "state",
                                   run_dir=tmp_path / "run", hmac_key=b"k" * 40,
                                   libvirt_uri="test:///default", file_root=tmp_path / "root",
                                   config_dir=Path("/var/lib/herder")))


def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "root" / "var" / "lib" / "herder"


def upload(daemon: Node, path: str, data: bytes = b"secret\n") -> object:
    return noded_rpc.dispatch(daemon, "upload_file", {
        "path": path, "data": base64.b64encode(data).decode(), "mode": 0o640})


def test_noded_upload_is_white_listed_and_lands_under_its_root(noded, tmp_path):
    with pytest.raises(RpcFailure, match="not a file the cluster distributes"):
        upload(noded, "/etc/herder/vnc/web1.pw")
    for bad in ("relative/path", "/etc/../etc/passwd", "/proc/sys/kernel/x"):
        with pytest.raises(RpcFailure):
            upload(noded, bad)
    noded_rpc.dispatch(noded, "write_ssconf", {"values": {
        "cluster_name": "c\n", redist.UPLOAD_LIST: "/etc/herder/vnc/web1.pw\n"}})
    assert (data_dir(tmp_path) / "ssconf_cluster_name").read_text() == "c\n"
    upload(noded, "/etc/herder/vnc/web1.pw", b"pw\n")
    target = tmp_path / "root" / "etc" / "herder" / "vnc" / "web1.pw"
    assert target.read_bytes() == b"pw\n" and target.stat().st_mode & 0o777 == 0o640
    upload(noded, "/var/lib/herder/hmac.key")  # the cluster secrets are always allowed
    assert (tmp_path / "root" / "var" / "lib" / "herder" / "hmac.key").exists()
    with pytest.raises(noded_rpc.BadArguments, match="invalid ssconf name"):
        noded_rpc.dispatch(noded, "write_ssconf", {"values": {"../x": ""}})


def test_noded_config_copy_refuses_an_older_serial(noded, tmp_path):
    def write(serial: int, files: dict[str, bytes], names: list[str]) -> Any:
        return noded_rpc.dispatch(noded, "write_config", {
            "config": json.dumps({"serial_no": serial}), "serial": serial,
            "queue": {"files": {k: base64.b64encode(v).decode() for k, v in files.items()},
                      "names": names}})

    copy = data_dir(tmp_path)  # where confd, mond and a new master's masterd read it
    write(5, {"job-1.json": b"{}", "job-2.json": b"{}"}, ["job-1.json", "job-2.json"])
    assert json.loads((copy / "config.json").read_text())["serial_no"] == 5
    write(6, {}, ["job-2.json"])  # the master archived job 1: the copy files it so too
    assert sorted(p.name for p in (copy / "queue").glob("*.json")) == ["job-2.json"]
    assert (copy / "queue" / "archive" / "0" / "job-1.json").read_bytes() == b"{}"
    with pytest.raises(RpcFailure, match="refusing config serial 4"):
        write(4, {}, ["job-2.json"])
    with pytest.raises(noded_rpc.BadArguments, match="invalid job queue file name"):
        write(7, {"../x.json": b""}, [])


def test_noded_files_archived_jobs_and_moves_unlisted_job_files_to_the_archive(noded,
                                                                               tmp_path):
    def write(serial: int, files: dict[str, bytes], names: list[str],
              archived: dict[str, bytes]) -> Any:
        return noded_rpc.dispatch(noded, "write_config", {
            "config": json.dumps({"serial_no": serial}), "serial": serial,
            "queue": {"files": {k: base64.b64encode(v).decode() for k, v in files.items()},
                      "names": names,
                      "archived": {k: base64.b64encode(v).decode()
                                   for k, v in archived.items()}}})

    queue = data_dir(tmp_path) / "queue"
    write(1, {"job-1.json": b"running", "job-10001.json": b"queued", "drain.json": b"{}"},
          ["job-1.json", "job-10001.json", "drain.json"], {})
    # job 1 archived (its final state sent along), job 10001 gone from the master's list
    # before its final state came: kept in the archive as last seen, the drain flag removed
    write(2, {}, [], {"job-1.json": b"final"})
    assert not list(queue.glob("*.json"))
    assert (queue / "archive" / "0" / "job-1.json").read_bytes() == b"final"
    assert (queue / "archive" / "1" / "job-10001.json").read_bytes() == b"queued"
    write(3, {}, [], {"job-10001.json": b"final too"})  # its final state follows later
    assert (queue / "archive" / "1" / "job-10001.json").read_bytes() == b"final too"
    with pytest.raises(noded_rpc.BadArguments, match="invalid archived job file name"):
        write(4, {}, [], {"../job-1.json": b""})


def test_noded_follows_its_node_parameters(noded, tmp_path):
    """What differs between nodes (the libvirt URI) reaches a node as data: ssconf."""
    from herder.core import ssconf

    assert noded.hv.uri == "test:///default"
    noded_rpc.dispatch(noded, "write_ssconf", {"values": {ssconf.NDPARAMS: ssconf.format_ndparams([
        ("node1", {"libvirt_uri": "test:///node1"}), ("node2", {"libvirt_uri": "test:///own"})])}})
    assert noded.hv.uri == "test:///own"


def test_noded_config_copy_waits_for_the_writers_lock(noded, tmp_path):
    """The copy is written under the config's writer lock (a failover's `master-failover`
    writes the same file there)."""
    import threading
    import time

    from herder.core.store import FileStore

    store = FileStore(data_dir(tmp_path) / "config.json")
    done = threading.Event()

    def push() -> None:
        noded_rpc.dispatch(noded, "write_config", {"config": json.dumps({"serial_no": 1}),
                                             "serial": 1})
        done.set()

    with store.locked():
        worker = threading.Thread(target=push)
        worker.start()
        time.sleep(0.3)
        assert not done.is_set()
    worker.join(10)
    assert done.is_set() and json.loads(store.path.read_text())["serial_no"] == 1


# --- on a simulated cluster ---------------------------------------------------------------------

def first_ip() -> int:
    """This module's addresses (tests/simaddresses.py)."""
    from tests import simaddresses

    return simaddresses.first_ip("redist")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    from tests.simhelpers import running_sim

    yield from running_sim(tmp_path_factory.mktemp("redist-sim"), 4, first_ip=first_ip(),
                           mond=False, maintd=False)


@pytest.mark.slow
def test_redist_conf_ships_vnc_password_ssconf_and_config(sim):
    from tests.simhelpers import config, herder, on, wait_for

    master = sim.host("node1")
    # The master's file, made on the master (as an operator would), in its hypervisor file
    # directory beside its config (masterd.hvfiles)
    password = "/var/lib/herder/hypervisor/web1.pw"
    on(sim, "node1", "instance", "list")  # the CLI works on the master
    made = master.run(["sh", "-c", f"mkdir -p /var/lib/herder/hypervisor && printf "
                                   f"'s3cret-vnc\\n' > {password} && chmod 640 {password}"])
    assert made.returncode == 0, made.stderr
    herder(sim, "instance", "add", "web1", "--no-name-check",
           "-t", "diskless", "-o", "debootstrap+default",
           "--no-install", "--no-start", "-H", f"vnc_password_file={password}")
    done = herder(sim, "cluster", "redist-conf")
    for n in sim.nodes:
        assert f"{n.name}: sent" in done.stdout and "error" not in done.stdout, done.stdout

    cfg = config(sim)

    def node_path(name: str, path: str) -> Path:
        return sim.host(name).path(path)

    vm_capable = [n.name for n in cfg.nodes.values() if n.vm_capable]
    assert len(vm_capable) == 4
    key = node_path("node1", "/var/lib/herder/hmac.key").read_bytes()
    for name in vm_capable:
        copy = node_path(name, password)
        assert copy.read_bytes() == b"s3cret-vnc\n", name
        assert copy.stat().st_mode & 0o777 == 0o640
        # a full push also ships the cluster secrets
        assert node_path(name, "/var/lib/herder/hmac.key").read_bytes() == key
    for n in cfg.nodes.values():
        ssconf_dir = node_path(n.name, "/var/lib/herder")
        assert (ssconf_dir / "ssconf_master_node").read_text() == f"{sim.nodes[0].name}\n"
        assert (ssconf_dir / "ssconf_node_list").read_text().split() == \
            sorted(x.name for x in cfg.nodes.values())
    candidates = sorted(n.name for n in cfg.nodes.values() if n.master_candidate)
    assert len(candidates) == 3 and sim.nodes[3].name not in candidates
    assert candidates[0] == sim.nodes[0].name  # the master; the others hold copies

    def copies() -> dict[str, model.ConfigData]:
        out = {}
        for name in candidates:
            with contextlib.suppress(OSError, ValueError):
                # the store's reading: on the master, the snapshot and its journal
                out[name] = FileStore(node_path(name, "/var/lib/herder/config.json")).load()
        return out

    assert {name: c.serial_no for name, c in copies().items()} == \
        {name: cfg.serial_no for name in candidates}
    assert any(node_path(candidates[-1], "/var/lib/herder/queue").glob("job-*.json"))
    assert not node_path(sim.nodes[3].name, "/var/lib/herder/config.json").exists()

    # a config change reaches the candidates' copies without redist-conf
    herder(sim, "tags", "add", "cluster", "redist:auto")
    serial = config(sim).serial_no
    wait_for(lambda: all(c.serial_no >= serial and "redist:auto" in c.cluster.tags
                         for c in copies().values()) and len(copies()) == len(candidates),
             timeout=15, what="the tagged config on every master candidate")
    for n in cfg.nodes.values():
        wait_for(lambda n=n: "redist:auto" in node_path(n.name, "/var/lib/herder/"
                                                        "ssconf_cluster_tags").read_text(),
                 timeout=15, what=f"the cluster tags in {n.name}'s ssconf")

    # a demoted candidate's copy goes (Ganeti's node_demote_from_mc); node4 could take its
    # place in the pool of 3, so Ganeti's rule wants --auto-promote, and node4, promoted,
    # receives the whole config at once
    refused = herder(sim, "node", "modify", candidates[-1], "--master-candidate", "no",
                     check=False)
    assert refused.returncode != 0 and "Not enough master candidates" in refused.stderr
    assert node_path(candidates[-1], "/var/lib/herder/config.json").exists()
    assert not node_path(sim.nodes[3].name, "/var/lib/herder/config.json").exists()
    herder(sim, "node", "modify", candidates[-1], "--master-candidate", "no", "--auto-promote")
    assert not node_path(candidates[-1], "/var/lib/herder/config.json").exists()
    assert node_path(candidates[-1], "/var/lib/herder/config.json.demoted").exists()
    assert node_path(sim.nodes[3].name, "/var/lib/herder/config.json").exists()


class CandidateRpc(RpcTransport):
    """The candidates' noded for write_config (one real Node stands for each); other
    calls are recorded only."""

    def __init__(self, noded: Node) -> None:
        self.noded = noded
        self.configs: list[dict[str, Any]] = []

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        if method == "write_config":
            self.configs.append(dict(args))
            return msgspec.to_builtins(noded_rpc.dispatch(self.noded, method, dict(args)))
        return nothing_answer(method)


def test_candidates_receive_the_journal_records_not_the_document(noded, tmp_path):
    master_dir = tmp_path / "master"
    writer = FileStore(master_dir / "config.json")
    writer.create(build_config(3, drbd_instances=2, plain_instances=1))
    with writer.update() as config:  # a journal continuing the snapshot
        config.cluster.tags.append("first")
    rpc = CandidateRpc(noded)
    pusher = redist.Redistributor(rpc, master_dir / "config.json", None)
    copy = FileStore(data_dir(tmp_path) / "config.json")

    def pushed() -> dict[str, Any]:
        results = pusher.push(writer.snapshot())
        assert not [e for r in results.values() for e in r.errors if e.startswith("config")]
        assert model.encode(copy.load()) == model.encode(writer.load())
        return rpc.configs[-1]

    first = pushed()
    assert "config" in first and first["journal"]["offset"] == 0  # a new copy: everything
    size = len(first["config"])
    for n in range(3):
        with writer.update() as config:
            config.find_instance("drbd0").tags.append(f"t{n}")
        step = pushed()
        assert "config" not in step and step["journal"]["offset"] > 0
        assert len(base64.b64decode(step["journal"]["data"])) < size // 4
    # a copy out of step (its journal cut): the master sends the whole document again
    journal = copy.journal_path
    journal.write_bytes(journal.read_bytes()[:-10])
    with writer.update() as config:
        config.cluster.tags.append("second")
    pushed()
    assert "config" in rpc.configs[-1] and "config" not in rpc.configs[-2]
    # a compaction (a new snapshot): the whole document once, then records again
    writer.COMPACT_RECORDS = 1
    for n in range(2):
        with writer.update() as config:
            config.cluster.tags.append(f"c{n}")
    assert "config" in pushed()
    writer.COMPACT_RECORDS = FileStore.COMPACT_RECORDS
    with writer.update() as config:
        config.cluster.tags.append("after")
    assert "config" not in pushed()


def stored(tmp_path: Path, config: model.ConfigData) -> FileStore:
    """`config` in a file store: its changes replace the objects they touch, as masterd's do
    (the plan keeps its values per object, `redist.PlanMemo`)."""
    store = FileStore(tmp_path / "config.json")
    store.create(config)
    return store


def test_a_change_that_leaves_ssconf_and_files_sends_them_nowhere(tmp_path):
    store = stored(tmp_path, build_config(3, drbd_instances=1, plain_instances=0))
    (tmp_path / "rapi_users").write_text("admin pw write\n")
    rpc = RecordingRpc()
    pusher = redist.Redistributor(rpc, tmp_path / "config.json", None)

    def sent() -> list[tuple[str, str]]:
        calls = [(c[0], c[1]) for c in rpc.calls]
        rpc.calls.clear()
        return calls

    pusher.push(store.snapshot())
    first = sent()
    assert ("node3.example.com", "write_ssconf") in first
    with store.update() as config:  # in no ssconf value (but the serial), in no file
        config.find_instance("drbd0").tags.append("x")
    # only the candidate's config copy
    assert sent() == [] and pusher.push(store.snapshot()) and sent() == [
        ("node2.example.com", "write_config")]
    with store.update() as config:  # instance_list changes
        config.find_instance("drbd0").name = "renamed.example.com"
    pusher.push(store.snapshot())
    assert {n for n, m in sent() if m == "write_ssconf"} == {
        "node1.example.com", "node2.example.com", "node3.example.com"}
    (tmp_path / "rapi_users").write_text("admin other write\n")  # a candidate's file
    pusher.push(store.snapshot())
    assert {(n, m) for n, m in sent() if m != "write_config"} == {
        ("node2.example.com", "write_ssconf"), ("node2.example.com", "upload_file")}
    pusher.push(store.snapshot(), full=True)
    assert {n for n, m in sent() if m == "write_ssconf"} == {
        "node1.example.com", "node2.example.com", "node3.example.com"}


def test_a_tag_change_pushes_no_ssconf_and_an_instance_add_rename_or_removal_does(tmp_path):
    """Issue 36 goal 6: after a tag change no node is sent its ssconf again (its values are
    the same but the config serial), only the candidates their config copy; an instance
    added, renamed or removed changes `instance_list`: every node gets its ssconf, with the
    new serial."""
    store = stored(tmp_path, build_config(4, drbd_instances=2, plain_instances=1))
    (tmp_path / "rapi_users").write_text("admin pw write\n")
    rpc = RecordingRpc()
    pusher = redist.Redistributor(rpc, tmp_path / "config.json", None)
    everyone = {"node1.example.com", "node2.example.com", "node3.example.com",
                "node4.example.com"}

    def ssconf_to(change: Any) -> dict[str, dict[str, Any]]:
        with store.update() as config:
            change(config)
        rpc.calls.clear()
        config = store.snapshot()
        pusher.push(config)
        sent = {c[0]: c[2]["values"] for c in rpc.calls if c[1] == "write_ssconf"}
        for values in sent.values():
            assert values["config_serial"] == f"{config.serial_no}\n"
        return sent

    assert set(ssconf_to(lambda c: None)) == everyone  # the first push: everything
    assert ssconf_to(lambda c: c.find_instance("drbd0").tags.append("t")) == {}
    assert ssconf_to(lambda c: c.find_node("node3").tags.append("t")) == {}
    assert ssconf_to(lambda c: c.find_instance("plain0").beparams.update(maxmem=256)) == {}

    def add(config: model.ConfigData) -> None:
        plain = config.find_instance("plain0")
        copy = msgspec.structs.replace(plain, uuid=model.new_uuid(), name="new.example.com",
                                       disks=[], nics=[])
        config.instances[copy.uuid] = copy

    sent = ssconf_to(add)
    assert set(sent) == everyone and "new.example.com" in sent["node4.example.com"][
        "instance_list"].split()
    sent = ssconf_to(lambda c: setattr(c.find_instance("new"), "name", "other.example.com"))
    assert set(sent) == everyone and sent["node2.example.com"]["instance_list"].split() == [
        "drbd0.example.com", "drbd1.example.com", "other.example.com", "plain0.example.com"]
    sent = ssconf_to(lambda c: c.instances.pop(c.find_instance("other").uuid))
    assert set(sent) == everyone and "other.example.com" not in sent["node3.example.com"][
        "instance_list"]
    assert ssconf_to(lambda c: c.find_instance("drbd1").tags.append("t")) == {}
    assert set(ssconf_to(lambda c: c.cluster.tags.append("t"))) == everyone


def test_the_kept_plan_is_the_plan_of_the_whole_config_after_every_change(tmp_path):
    """`PlanMemo` recomputes only what a change touched: after each change of a sequence
    (through the store, as masterd's) its plan equals one made from nothing."""
    store = stored(tmp_path, build_config(5, drbd_instances=3, plain_instances=2))
    path = tmp_path / "config.json"
    memo = redist.PlanMemo()
    pw = f"{tmp_path}/hypervisor/x.pw"

    def add(config: model.ConfigData) -> None:
        plain = config.find_instance("plain1")
        copy = msgspec.structs.replace(plain, uuid=model.new_uuid(), name="new.example.com",
                                       disks=[], nics=[])
        config.instances[copy.uuid] = copy

    changes = [
        lambda c: None,
        lambda c: c.find_instance("drbd0").tags.append("t"),
        lambda c: c.find_instance("drbd1").hvparams.update(vnc_password_file=pw),
        lambda c: c.find_instance("plain0").hvparams.update(vnc_password_file=pw + "2"),
        add,
        lambda c: setattr(c.find_instance("new"), "name", "renamed.example.com"),
        lambda c: c.find_instance("renamed").hvparams.update(vnc_password_file=pw + "3"),
        lambda c: setattr(c.find_node("node4"), "vm_capable", False),
        lambda c: c.cluster.hvparams.update(kvm={"vnc_password_file": pw + "c"}),
        lambda c: c.instances.pop(c.find_instance("drbd1").uuid),
        lambda c: c.find_instance("plain0").hvparams.pop("vnc_password_file"),
        lambda c: setattr(c.find_node("node5"), "offline", True),
        lambda c: c.find_node("node2").ndparams.update(oob_program="/bin/true"),
        lambda c: setattr(c.cluster, "enabled_hypervisors", ["fake"]),
    ]
    for number, change in enumerate(changes):
        with store.update() as config:
            change(config)
        config = store.snapshot()
        kept = redist.plan(config, path, memo=memo)
        assert kept == redist.plan(config, path), f"change {number}"
        assert redist.ssconf_values(config, memo=memo) == redist.ssconf_values(config)


def test_a_node_in_backoff_is_skipped_and_gets_everything_once_seen_again(tmp_path):
    config = build_config(3, drbd_instances=0, plain_instances=0)
    (tmp_path / "rapi_users").write_text("admin pw write\n")
    rpc = RecordingRpc()
    record = Reachability(base=30.0)
    pusher = redist.Redistributor(ReachabilityRpc(rpc, record), tmp_path / "config.json", None,
                                  reachability=record)
    node2 = config.find_node("node2")  # a candidate: ssconf, files and the config copy
    pusher.push(config)
    rpc.unreachable.add(node2.name)
    config.cluster.tags.append("one")  # in ssconf: every node is sent it
    first = pusher.push(config)
    assert first[node2.name].errors and record.avoid(node2.uuid) is not None
    rpc.calls.clear()
    config.cluster.tags.append("two")
    owed_at = record.clock()
    skipped = pusher.push(config)
    # in back-off: not tried, the others get the change
    assert skipped[node2.name].errors[0].startswith("node unreachable (since ")
    assert {n for n, _, _ in rpc.calls} == {"node1.example.com", "node3.example.com"}
    assert not redist.due(record, node2.uuid, owed_at, owed_at + 10)
    # it is back, and seen: due at once, and it gets its ssconf, files and config
    rpc.unreachable.clear()
    record.seen(node2.uuid)
    assert redist.due(record, node2.uuid, owed_at, owed_at + 10)
    rpc.calls.clear()
    again = pusher.push(config, only=[node2.name])
    assert not again[node2.name].errors
    sent = {m: a for n, m, a in rpc.calls if n == node2.name}
    assert "two" in sent["write_ssconf"]["values"]["cluster_tags"]
    assert "upload_file" in sent and "write_config" in sent
    assert "two" in json.loads(sent["write_config"]["config"])["cluster"]["tags"]


def test_due_retries_a_node_after_its_backoff_or_another_error_after_the_retry_delay():
    clock = [100.0]
    record = Reachability(base=5.0, clock=lambda: clock[0])
    record.failed("down", "refused")
    assert not redist.due(record, "down", 100.0, 110.0)
    clock[0] = 105.0  # its back-off has passed: tried again (not waiting for retry at 110)
    assert redist.due(record, "down", 100.0, 110.0)
    # a node that answered with an error: at the retry delay, or once it answers anything
    assert not redist.due(record, "erred", 105.0, 110.0)
    record.answered("erred")
    assert redist.due(record, "erred", 105.0, 110.0)
    assert not redist.due(record, "erred2", 105.0, 110.0)
    clock[0] = 110.0
    assert redist.due(record, "erred2", 105.0, 110.0)


def test_a_node_not_heard_from_is_pinged_before_its_ssconf_is_signed(tmp_path):
    """A start among dead nodes: a node masterd has not heard from gets a small `ping` first,
    so one that cannot be reached costs no ssconf body (~470 KB signed at 1,000 nodes); once
    heard from, its pushes go without the ping."""
    config = build_config(3, drbd_instances=0, plain_instances=0)
    (tmp_path / "rapi_users").write_text("admin pw write\n")
    rpc = RecordingRpc()
    rpc.unreachable.add("node3.example.com")
    record = Reachability()
    signed: list[str] = []

    class Signing(ReachabilityRpc):  # what reaches the transport, in order
        def call(self, node, request, timeout=None):
            signed.append(f"{node.name}:{request.METHOD}")
            return super().call(node, request, timeout=timeout)

    pusher = redist.Redistributor(Signing(rpc, record), tmp_path / "config.json", None,
                                  reachability=record)
    results = pusher.push(config)
    assert "connection refused" in results["node3.example.com"].errors[0]
    assert [s for s in signed if s.startswith("node3.")] == ["node3.example.com:ping"]
    assert signed.index("node1.example.com:ping") < signed.index("node1.example.com:write_ssconf")
    signed.clear()
    config.cluster.tags.append("one")  # in ssconf: every node is sent it
    pusher.push(config, full=True)
    assert "node1.example.com:ping" not in signed and "node1.example.com:write_ssconf" in signed
