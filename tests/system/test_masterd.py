"""The real masterd process over HTTPS: RAPI, authentication, errors, and kill -9 recovery."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from herder.core.noderpc import RpcTransport
from herder.core.rapi import RapiClient, RapiError
from herder.core.store import FileStore
from tests.rpcfakes import nothing_answer
from tests.system.masterd_fixture import RunningMaster, spawn, start_masterd


def wait_status(client: RapiClient, job_id: int, wanted: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while client.get_job_status(job_id)["status"] != wanted:
        assert time.monotonic() < deadline, client.get_job_status(job_id)["status"]
        time.sleep(0.05)


def test_rapi_reads_and_writes(tmp_path: Path) -> None:
    with start_masterd(tmp_path) as master:
        client = master.client
        assert client.get_version() == 2
        info = client.get_info()
        assert info["name"] == "cluster.example.com" and info["master"] == "node1.example.com"
        assert client.get_nodes() == [
            "node1.example.com", "node2.example.com", "node3.example.com"]
        bulk = {n["name"]: n for n in client.get_nodes(bulk=True)}
        assert bulk["node1.example.com"]["role"] == "M"
        uuid = bulk["node2.example.com"]["uuid"]
        assert client.get_node(uuid)["name"] == "node2.example.com"  # name or UUID
        job = client.set_node_role("node2", "drained")
        assert client.wait_for_job(job)["status"] == "success"
        assert client.get_node_role("node2.example.com") == "drained"
        assert FileStore(master.config_path).load().find_node("node2").drained
        job = client.add_cluster_tags(["env:test"])
        client.wait_for_job(job)
        assert client.get_cluster_tags() == ["env:test"]
        job = client.create_group("rack2")
        client.wait_for_job(job)
        assert set(client.get_groups()) == {"default", "rack2"}
        failing = client.set_node_role("node1", "drained")
        result = client.wait_for_job(failing)
        assert result["status"] == "error"
        assert "master-failover" in result["opresult"][0][1][0]


@pytest.fixture(scope="module")
def one_job_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningMaster]:
    """One masterd for the refused requests' cases (no credentials, malformed: each changes
    nothing), with job 1 done (the job the /2/jobs/1 cases name)."""
    with start_masterd(tmp_path_factory.mktemp("malformed")) as master:
        master.client.wait_for_job(master.client.add_cluster_tags(["x"]))
        yield master


def test_requests_without_valid_credentials_get_401(one_job_master: RunningMaster) -> None:
    master = one_job_master
    before = master.client.get_jobs(), FileStore(master.config_path).load().serial_no
    for auth in (None, ("admin", "wrong"), ("nobody", "x")):
        with httpx.Client(verify=False, auth=auth) as raw:
            response = raw.get(f"{master.url}/2/info")
            assert response.status_code == 401
            assert response.json()["code"] == 401
            assert "Basic" in response.headers["WWW-Authenticate"]
            assert raw.put(f"{master.url}/2/tags?tag=x").status_code == 401
    with pytest.raises(RapiError) as err:
        RapiClient(master.url, "admin", "wrong", verify=False).get_info()
    assert err.value.status == 401
    assert (master.client.get_jobs(), FileStore(master.config_path).load().serial_no) == before


def test_read_only_user_cannot_write_and_anonymous_reads(tmp_path: Path) -> None:
    with start_masterd(tmp_path, ("--anonymous-reads",)) as master:
        users = master.config_path.parent / "rapi_users"
        users.write_text(users.read_text() + "reader secret\n")
        reader = RapiClient(master.url, "reader", "secret", verify=False)
        assert reader.get_info()["name"] == "cluster.example.com"
        with pytest.raises(RapiError) as err:
            reader.add_cluster_tags(["nope"])
        assert err.value.status == 403
        with httpx.Client(verify=False) as anonymous:
            assert anonymous.get(f"{master.url}/2/nodes").status_code == 200
            assert anonymous.put(f"{master.url}/2/tags?tag=x").status_code == 401


@pytest.mark.parametrize(("method", "path", "body", "status", "fragment"), [
    ("GET", "/2/nodes/nosuch", None, 404, "node 'nosuch' not found"),
    ("GET", "/2/nosuch", None, 404, "Nothing matches"),
    ("PUT", "/2/nodes/node2/role", "boss", 400, "unknown node role 'boss'"),
    ("PUT", "/2/nodes/node2/role", "{not json", 400, "not valid JSON"),
    ("POST", "/2/nodes/node2/modify", {"colour": 1}, 400, "unknown field(s) colour"),
    ("PUT", "/2/tags", None, 400, "give the tags"),
    ("GET", "/2/jobs/abc", None, 400, "invalid job id"),
    ("GET", "/2/jobs/999", None, 404, "job 999 not found"),
    ("GET", "/2/jobs/1/wait", {"fields": "status"}, 400, "needs 'fields'"),
    ("DELETE", "/2/info", None, 405, "not supported"),
    ("POST", "/2/groups", {}, 400, "needs group_name"),
    ("PUT", "/2/modify", {"beparams": {"vcpus": 1}, "bogus": 2}, 400, "unknown field(s) bogus"),
])
def test_malformed_requests_get_4xx_with_a_message(one_job_master: RunningMaster, method: str,
                                                   path: str, body: object, status: int,
                                                   fragment: str) -> None:
    client = one_job_master.client
    before = client.get_jobs(), FileStore(one_job_master.config_path).load().serial_no
    content = body.encode() if isinstance(body, str) and body.startswith("{") else None
    with pytest.raises(RapiError) as err:
        if content is not None:
            raw = client.send(method, path, content=content)
            raise RapiError(json.loads(raw.content)["explain"], status=raw.status)
        client.request(method, path, None, body)
    assert err.value.status == status
    assert fragment in str(err.value)
    # refused: no job and no change (the next case finds the masterd as this one did)
    assert (client.get_jobs(), FileStore(one_job_master.config_path).load().serial_no) == before


def test_kill_9_with_jobs_queued_and_running(tmp_path: Path) -> None:
    """kill -9 the master with jobs running, waiting and queued; after a restart every job is
    accounted for and the config is intact."""
    with start_masterd(tmp_path, ("--workers", "2")) as master:
        client = master.client
        done = client.add_cluster_tags(["before"])
        client.wait_for_job(done)
        delay = {"OP_ID": "OP_TEST_DELAY", "duration": 30, "on_nodes": ["node2.example.com"]}
        queue = master.proc  # the process we will kill
        running = _submit_delay(client, master, delay)
        wait_status(client, running, "running")
        waiting = _submit_delay(client, master, {**delay, "duration": 0.1})
        wait_status(client, waiting, "waiting")
        queued = client.add_cluster_tags(["after"])
        time.sleep(0.2)
        assert client.get_job_status(queued)["status"] == "queued"  # both workers busy
        serial = FileStore(master.config_path).load().serial_no
        queue.kill()
        queue.wait(10)
        proc, url = spawn(master.config_path, ("--workers", "2"))
        try:
            again = RapiClient.for_herder_cluster(master.config_path.parent, url)
            failed = again.get_job_status(running)
            assert failed["status"] == "error"
            assert "master daemon stopped while this opcode was running" in \
                failed["opresult"][0][1][0]
            assert again.wait_for_job(waiting, timeout=30)["status"] == "success"
            assert again.wait_for_job(queued, timeout=30)["status"] == "success"
            assert again.wait_for_job(done)["status"] == "success"
            config = FileStore(master.config_path).load()  # intact
            assert config.cluster.tags == ["before", "after"]
            assert config.serial_no == serial + 1  # only the queued tag job changed it
            ids = [int(j) for j in again.get_jobs()]
            assert {done, running, waiting, queued} <= set(ids)
        finally:
            proc.terminate()
            proc.wait(10)


def _submit_delay(client: RapiClient, master, op: dict) -> int:
    """OP_TEST_DELAY has no Ganeti RAPI route: submit it through herder's raw-job route."""
    return int(client.request("POST", "/2/herder/jobs", None, {"ops": [op]}))


def _cli(config: Path, url: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HERDER_OFFLINE", "HERDER_MASTERD")}
    env["HERDER_CONFIG"] = str(config)
    if url:
        env["HERDER_MASTERD"] = url
    return subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_cli_changes_go_through_masterd_as_jobs(tmp_path: Path) -> None:
    with start_masterd(tmp_path) as master:
        done = _cli(master.config_path, master.url, "node", "modify", "node2", "--drained",
                    "yes")
        assert done.returncode == 0, done.stderr
        assert "drained -> True" in done.stdout
        done = _cli(master.config_path, master.url, "tags", "add", "cluster", "via-rapi")
        assert done.returncode == 0, done.stderr
        done = _cli(master.config_path, master.url, "cluster", "modify", "--add-uids", "5-9")
        assert done.returncode == 0, done.stderr
        config = FileStore(master.config_path).load()
        assert config.find_node("node2").drained and config.cluster.tags == ["via-rapi"]
        assert config.cluster.uid_pool == [(5, 9)]
        listed = json.loads(_cli(master.config_path, master.url, "job", "list", "--json").stdout)
        summaries = [j["summary"][0] for j in listed]
        assert summaries == ["NODE_SET_PARAMS(node2.example.com)", "TAGS_SET",
                             "CLUSTER_SET_PARAMS"]
        info = _cli(master.config_path, master.url, "job", "info", str(listed[0]["id"]))
        assert "OP_NODE_SET_PARAMS -> success" in info.stdout
        assert "reason: gnt:library:rlib2:nodes_name_modify" in info.stdout
        refused = _cli(master.config_path, master.url, "node", "modify", "node1", "--offline",
                       "yes")
        assert refused.returncode == 1
        line = refused.stderr.strip()
        assert "\n" not in line and line.startswith("herder: error: job ")
        assert "The master role can be changed only via master-failover" in line
        waited = _cli(master.config_path, master.url, "job", "wait", str(listed[0]["id"]))
        assert waited.returncode == 0 and "success" in waited.stdout
        cancel = _cli(master.config_path, master.url, "job", "cancel", str(listed[0]["id"]))
        assert cancel.returncode == 1 and "is finished" in cancel.stderr


def test_cli_without_masterd_says_what_to_do(tmp_path: Path) -> None:
    from tests.system.masterd_fixture import make_cluster

    config = make_cluster(tmp_path / "cluster")
    done = _cli(config, "https://127.0.0.1:9", "node", "modify", "node2", "--drained", "yes")
    assert done.returncode == 1
    line = done.stderr.strip()
    assert "cannot reach" in line and "--offline" in line and "\n" not in line
    offline = _cli(config, "https://127.0.0.1:9", "--offline", "node", "modify", "node2",
                   "--drained", "yes")
    assert offline.returncode == 0, offline.stderr
    assert FileStore(config).load().find_node("node2").drained


def test_maintenance_state_route(tmp_path: Path) -> None:
    with start_masterd(tmp_path) as master:
        client = master.client
        node = client.get_node("node2")["uuid"]
        incident = {"uuid": "5b0c0f00-0000-4000-8000-000000000001", "node": node,
                    "original": {"status": "evacuate"}, "action": "evacuate", "jobs": [3],
                    "repair-status": "pending", "tag": ""}
        answer = client.put_herder("maintenance/state", {"incidents": [incident], "jobs": [3]})
        assert answer["incidents"][0]["repair-status"] == "pending" and answer["jobs"] == [3]
        assert FileStore(master.config_path).load().maintenance.incidents[0].node == node
        assert client.get_herder("maintenance")["jobs"] == [3]
        with pytest.raises(RapiError) as err:
            client.put_herder("maintenance/state", {"incidents": [{"uuid": "x"}]})
        assert err.value.status == 400 and "node" in str(err.value)
        with pytest.raises(RapiError) as err:
            client.put_herder("maintenance/state", {"round": 1})
        assert err.value.status == 400


def test_maintenance_state_route_takes_instance_incidents(tmp_path: Path) -> None:
    """maintd's instance incidents (instmon) pass masterd's validation and round-trip."""
    with start_masterd(tmp_path) as master:
        client = master.client
        node = client.get_node("node2")["uuid"]
        incident = {"uuid": "5b0c0f00-0000-4000-8000-000000000002", "node": node,
                    "instance": "6c0c0f00-0000-4000-8000-000000000003",
                    "original": {"type": "VM", "hostname": "node2.example.com",
                                 "payload": {"event": "LIFECYCLE"}, "kind": "crash"},
                    "action": "relocate", "jobs": [], "repair-status": "noted", "tag": ""}
        answer = client.put_herder("maintenance/state", {"incidents": [incident]})
        assert answer["incidents"][0]["instance"] == incident["instance"]
        assert answer["incidents"][0]["action"] == "relocate"
        stored = FileStore(master.config_path).load().maintenance.incidents[0]
        assert stored.instance == incident["instance"] and stored.action == "relocate"
        for action in ("restart", "drain-relocate"):
            answer = client.put_herder("maintenance/state",
                                       {"incidents": [{**incident, "action": action}]})
            assert answer["incidents"][0]["action"] == action
        with pytest.raises(RapiError) as err:
            client.put_herder("maintenance/state",
                              {"incidents": [{**incident, "action": "reboot"}]})
        assert err.value.status == 400


class _AllocRpc(RpcTransport):
    """Node daemons for the failover tests: live figures, and every instance call recorded."""

    def __init__(self, dead: set[str] = frozenset()) -> None:
        self.calls: list[tuple[str, str]] = []
        self.dead = set(dead)

    def send(self, node, method, args, timeout=None):
        from herder.core.errors import RpcError

        self.calls.append((node.name, method))
        if node.name in self.dead:
            raise RpcError(f"node {node.name}: unreachable")
        if method == "node_info":
            free = 8192 if node.name == "node4.example.com" else 4096
            return {"bootid": "boot", "memory_total": 16384, "memory_free": free,
                    "memory_dom0": 0, "cpu_total": 8, "cpu_dom0": 1, "cpu_nodes": 1,
                    "cpu_sockets": 1, "instances": {},
                    "storage": [{"type": "file", "name": "/srv", "storage_size": 100000,
                                 "storage_free": 90000}]}
        if method == "migrate_prepare":
            return {"xml": "<domain/>", "state": "running"}
        if method == "instance_migratable":  # as the test driver's nodes answer
            return {"running": True, "state": "running", "method": "restart",
                    "reason": "test driver"}
        return nothing_answer(method)


def _alloc_master(tmp_path: Path, rpc: _AllocRpc, templates: tuple[str, ...]):
    from herder.core import model
    from herder.masterd import locking
    from herder.masterd.jobs.queue import JobQueue
    from herder.masterd.lu.base import MasterEnv
    from herder.masterd.processor import Processor
    from tests.conftest import build_config

    config = build_config(nodes=4)
    node2 = config.find_node("node2.example.com")
    for template in templates:
        disks = [] if template == "diskless" else [model.Disk(
            uuid=model.new_uuid(), dev_type=template, size=1024,
            logical_id=model.FileId(driver="loop", path=f"/srv/shared/{template}.disk0"))]
        inst = model.Instance(uuid=model.new_uuid(), name=f"{template}.example.com",
                              primary_node=node2.uuid, os="debootstrap", hypervisor="kvm",
                              admin_state="up", disks=disks,
                              beparams={"maxmem": 512, "minmem": 512, "vcpus": 1})
        config.instances[inst.uuid] = inst
    store = FileStore(tmp_path / "config.json")
    store.create(config)
    env = MasterEnv(store=store, rpc=rpc, locks=locking.LockManager(
        nodes=config.nodes, nodegroups=config.nodegroups, instances=config.instances))
    queue = JobQueue(tmp_path / "queue", Processor(env), workers=2)
    queue.recover()
    queue.start()
    return store, queue


@pytest.mark.parametrize("op_id", ["OP_INSTANCE_FAILOVER", "OP_INSTANCE_MIGRATE"])
@pytest.mark.parametrize("template", ["sharedfile", "diskless"])
def test_move_of_shared_instance_asks_the_iallocator(tmp_path: Path, op_id: str,
                                                     template: str) -> None:
    """No target node, iallocator herder: a relocate request away from the primary; the
    allocator's node (the emptiest, node4) becomes the primary."""
    rpc = _AllocRpc()
    store, queue = _alloc_master(tmp_path, rpc, (template,))
    try:
        name = f"{template}.example.com"
        op = {"OP_ID": op_id, "instance_name": name, "iallocator": "herder"}
        if op_id == "OP_INSTANCE_FAILOVER":
            op["ignore_consistency"] = True
        job = queue.submit([op])
        queue.wait(job, 20)
        info = queue.info(job)
        assert info["status"] == "success", info["opresult"]
        moved = store.load().find_instance(name)
        assert store.load().node_name(moved.primary_node) == "node4.example.com"
        assert any("iallocator herder chose node4" in m[3] for log in info["oplog"]
                   for m in log), info["oplog"]
        # a migration hands over (the test driver's stand-in), a failover starts it there
        started = "migrate_accept" if op_id == "OP_INSTANCE_MIGRATE" else "instance_start"
        assert ("node4.example.com", started) in rpc.calls
        # neither target nor iallocator: the cluster's default (here none: herder's own)
        job = queue.submit([{"OP_ID": op_id, "instance_name": name}])
        queue.wait(job, 20)
        info = queue.info(job)
        assert info["status"] == "success", info["opresult"]
        assert store.load().find_instance(name).primary_node != moved.primary_node
        job = queue.submit([{"OP_ID": op_id, "instance_name": name, "iallocator": "herder",
                             "target_node": "node3.example.com"}])
        queue.wait(job, 20)
        info = queue.info(job)
        assert info["status"] == "error" and "not both" in str(info["opresult"])
    finally:
        queue.stop()


def test_failover_with_iallocator_from_a_dead_node(tmp_path: Path) -> None:
    """maintd's relocate of an instance whose node died: the failover defines it afresh on
    the allocator's node (ignore_consistency), never on the dead one."""
    rpc = _AllocRpc(dead={"node2.example.com"})
    store, queue = _alloc_master(tmp_path, rpc, ("sharedfile",))
    try:
        job = queue.submit([{"OP_ID": "OP_INSTANCE_FAILOVER",
                             "instance_name": "sharedfile.example.com",
                             "ignore_consistency": True, "iallocator": "herder"}])
        queue.wait(job, 20)
        info = queue.info(job)
        assert info["status"] == "success", info["opresult"]
        inst = store.load().find_instance("sharedfile.example.com")
        assert store.load().node_name(inst.primary_node) == "node4.example.com"
        assert ("node4.example.com", "instance_start") in rpc.calls
    finally:
        queue.stop()
