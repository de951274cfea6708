"""Live figures end to end: a real masterd and node daemons report Ganeti's node figures and
instance statuses on RAPI (bulk, single objects, `/2/query`) and in `herder node list` /
`instance list`, place instances on them, and answer like the real Ganeti 3.0.2 cluster.

The cluster: n1 (master) and n2 run `herder noded`, each with its own libvirtd on libvirt's
test driver (so the test can change domains behind herder's back, as a crash or an operator
would); n3's address takes connections and never answers (a dead node daemon); n4 is marked
offline. Its instances cover Ganeti's statuses: running, ADMIN_down, ADMIN_offline, ERROR_down
(its domain destroyed), ERROR_up (a stopped instance's domain started), ERROR_wrongnode
(running on n2 instead of n1), ERROR_nodedown (on n3), ERROR_nodeoffline (on n4).

Ganeti's answers come from the snapshot `tests/data/ganeti_live_figures.json` (taken with
`python -m tests.system.capture_live_figures`), and live from the vcluster
(`../shared/peers/vcluster`, marked `peer`, skipped without it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from herder.core import cluster_secrets, model
from herder.core.rapi import RapiClient
from herder.core.store import FileStore
from herder.noded.node import Node, NodeSettings
from tests.noded.noded_fixture import serving
from tests.simhelpers import wait_for
from tests.system.rapi_shapes import (
    LIVE_SNAPSHOT,
    compare_answers,
    field_kinds,
    live_problems,
    load_live_snapshot,
    run_live_sequence,
    scrub,
)
from tests.system.test_rapi_shapes import HERDER_SHAPE_IGNORE

NODES = {"n1.live.test": "127.0.0.250", "n2.live.test": "127.0.0.251",
         "n3.live.test": "127.0.0.252", "n4.live.test": "127.0.0.253"}
# Where herder's answers may differ from Ganeti's, beyond test_rapi_shapes' list:
# hypervisor parameters (herder's "fake" and Ganeti's fake hypervisor differ), the vcluster's
# openvswitch NICs vs herder's bridged ones (shapes of the same lists agree)
LIVE_IGNORE = (*HERDER_SHAPE_IGNORE, "hvparams.*", "custom_hvparams.*",
               "*custom_nicparams[].*")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DeadNode:
    """An address that takes TCP connections and never says a word (a hung node daemon);
    counts the connections."""

    def __init__(self, address: str, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, port))
        self.sock.listen(64)
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def connections(self) -> int:
        return len(self.held)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@dataclass
class LiveCluster:
    directory: Path
    config: Path
    url: str
    client: RapiClient
    uris: dict[str, str]  # node -> its libvirtd's URI
    dead: DeadNode
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "HERDER_OFFLINE"}
        env.update(HERDER_CONFIG=str(self.config), HERDER_MASTERD=self.url)
        return subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                              capture_output=True, text=True, timeout=120)

    def create(self, name: str, node: str, maxmem: int = 128, vcpus: int = 1,
               iallocator: str | None = None) -> dict[str, Any]:
        return self.finish(self.submit_create(name, node, maxmem, vcpus, iallocator))

    def submit_create(self, name: str, node: str, maxmem: int = 128, vcpus: int = 1,
                      iallocator: str | None = None) -> Any:
        body: dict[str, Any] = {"__version__": 1, "name": name, "disk_template": "diskless",
                                "disks": [], "nics": [], "no_install": True,
                                "name_check": False, "ip_check": False,
                                "beparams": {"maxmem": maxmem, "minmem": maxmem,
                                             "vcpus": vcpus}}
        body.update({"iallocator": iallocator} if iallocator else {"pnode": node})
        return self.client.request("POST", "/2/instances", None, body)

    def finish(self, job: Any) -> dict[str, Any]:
        done = self.client.wait_for_job(int(job), timeout=120)
        assert done["status"] == "success", done
        return done

    def instances(self) -> dict[str, dict[str, Any]]:
        return {i["name"]: i for i in self.client.request("GET", "/2/instances", {"bulk": 1})}

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {n["name"]: n for n in self.client.request("GET", "/2/nodes", {"bulk": 1})}

    def domain(self, node: str) -> Any:
        import libvirt

        return contextlib.closing(libvirt.open(self.uris[node]))


def _herder(config: Path, *args: str) -> None:
    env = {**os.environ, "HERDER_CONFIG": str(config), "HERDER_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env, check=True,
                   capture_output=True, text=True, timeout=60)


def _offline_instance(config: model.ConfigData, name: str, node: str) -> model.Instance:
    return model.Instance(uuid=model.new_uuid(), name=name, os="none", hypervisor="fake",
                          primary_node=config.find_node(node).uuid, admin_state="up",
                          beparams={"maxmem": 128, "minmem": 128, "vcpus": 1})


def _wait_line(log: Path, proc: subprocess.Popen[Any], text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in (log.read_text() if log.exists() else ""):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no {text!r} in {log}: {log.read_text()[-1500:]}")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(15)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    from herder.sim.libvirtd import LibvirtdUnavailable, start_libvirtd

    if os.geteuid() != 0:
        pytest.skip("the node daemons' private libvirtds need root here")
    directory = tmp_path_factory.mktemp("live")
    config = directory / "cluster" / "config.json"
    names = list(NODES)
    _herder(config, "cluster", "init", "cluster.live.test", "--master-node", names[0],
            "--primary-ip", NODES[names[0]], "--enabled-disk-templates", "diskless,file",
            "--enabled-hypervisors", "fake", "--default-iallocator", "herder",
            "--candidate-pool-size", "1",  # n2-n4 regular nodes, as Ganeti's snapshot's
            "--force")  # the test's names are in no DNS
    for name in names[1:]:
        _herder(config, "node", "add", name, "--ip", NODES[name], "--no-node-check")
    storage = directory / "file-storage"  # the file storage whose figures the nodes report
    storage.mkdir()
    with FileStore(config).update() as cfg:  # n4 offline; an instance on n3, one on n4
        cfg.cluster.file_storage_dir = str(storage)
        # the test's instances are diskless and have no NIC: a policy that lets them in
        cfg.cluster.ipolicy.minmax[0].min.disk_count = 0
        cfg.cluster.ipolicy.minmax[0].min.nic_count = 0
        cfg.find_node("n4").offline = True
        for inst in (_offline_instance(cfg, "lost", "n3.live.test"),
                     _offline_instance(cfg, "away", "n4.live.test")):
            cfg.instances[inst.uuid] = inst
    port = _free_port()
    daemons, procs, dead = [], [], None
    nodeds: list[Node] = []
    stack = contextlib.ExitStack()
    try:
        uris = {}
        for name in names[:2]:
            try:
                libvirtd = start_libvirtd()
            except LibvirtdUnavailable as err:
                pytest.skip(f"no private libvirtd here: {err}")
            daemons.append(libvirtd)
            uris[name] = libvirtd.uri
            node_dir = directory / name
            with FileStore(config).update() as cfg:  # what differs between nodes: ndparams
                cfg.find_node(name).ndparams["libvirt_uri"] = libvirtd.uri
            daemon = Node(NodeSettings(
                node_name=name, state_dir=node_dir / "state", run_dir=node_dir / "run",
                hmac_key=(config.parent / cluster_secrets.HMAC_KEY_FILE).read_bytes(),
                libvirt_uri=libvirtd.uri, config_dir=config.parent, file_root=node_dir / "root"))
            nodeds.append(daemon)
            stack.enter_context(serving(daemon, NODES[name], port,
                                        config.parent / cluster_secrets.CERT_FILE))
            import libvirt  # noded holds a connection now: removing the default domain lasts

            with contextlib.closing(libvirt.open(libvirtd.uri)) as conn:
                for dom in conn.listAllDomains():
                    if dom.isActive():
                        dom.destroy()
                    dom.undefine()
        dead = DeadNode(NODES[names[2]], port)
        log = directory / "masterd.log"
        with open(log, "w") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "herder.cli.main", "masterd", "--bind", "127.0.0.1",
                 "--port", "0", "--noded-port", str(port), "--node", names[0],
                 "--run-dir", str(directory / "run")],
                env={**os.environ, "HERDER_CONFIG": str(config)}, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True))
        _wait_line(log, procs[-1], "serving RAPI on")
        url = next(word for word in log.read_text().split() if word.startswith("https://"))
        client = RapiClient.for_herder_cluster(config.parent, url.rstrip("/"))
        yield LiveCluster(directory, config, url.rstrip("/"), client, uris, dead, procs)
        client.close()
    finally:
        for proc in reversed(procs):
            _stop(proc)
        stack.close()
        for daemon in nodeds:
            daemon.hv.close()
        if dead is not None:
            dead.close()
        for libvirtd in daemons:
            libvirtd.stop()


@pytest.fixture(autouse=True)
def masterd_running(live: LiveCluster) -> Iterator[None]:
    """A masterd that ends while a test runs fails that test with its exit code and its log's
    end (CI once saw it go mid-answer and nothing of why)."""
    def check(when: str) -> None:
        code = live.procs[0].poll()
        if code is not None:
            tail = (live.directory / "masterd.log").read_text(errors="replace")[-3000:]
            pytest.fail(f"masterd exited with {code} {when}; its log ends:\n{tail}")

    check("before this test")
    yield
    check("during this test")


# The tests of this module run in this order, on one cluster.


def test_no_reader_waits_for_a_dead_node(live: LiveCluster) -> None:
    """n3 takes connections and never answers. masterd asks every node as it starts; no
    reader waits for a node it has not heard from (n3's figures are null at once), and once
    n3's call has failed its failure is what readers get, without asking it again."""
    def failures() -> int:  # masterd logs every node_info call that got no answer
        return (live.directory / "masterd.log").read_text().count(
            "no live figures from n3.live.test")

    started = time.monotonic()
    first = live.nodes()
    assert time.monotonic() - started < 2.5  # masterd gives a node 3 s: not waited for
    assert first["n3.live.test"]["mtotal"] is None and first["n4.live.test"]["mtotal"] is None
    wait_for(lambda: failures() == 1, 30, "masterd's log of n3's failed node_info")
    assert live.dead.connections >= 1
    wait_for(lambda: live.nodes()["n1.live.test"]["mtotal"] == 3072, 30,
             "the test driver's host's figures")
    started = time.monotonic()
    again = live.nodes()
    assert time.monotonic() - started < 2.5  # its failure is remembered: no wait
    assert failures() == 1  # and n3 was not asked again
    assert again["n3.live.test"]["mtotal"] is None  # no answer: no figures
    assert again["n4.live.test"]["mtotal"] is None  # offline: not asked
    assert again["n1.live.test"]["mtotal"] == 3072  # the test driver's host


def test_node_figures(live: LiveCluster) -> None:
    node = live.client.request("GET", "/2/nodes/n2.live.test")
    # libvirt's test driver: 3 GiB, 16 CPUs in 2 NUMA cells of 2 sockets, no domain yet
    assert {k: node[k] for k in ("mtotal", "mnode", "mfree", "ctotal", "cnos", "cnodes",
                                 "csockets")} == {
        "mtotal": 3072, "mnode": 0, "mfree": 3072, "ctotal": 16, "cnos": 16, "cnodes": 2,
        "csockets": 4}
    assert 0 < node["dfree"] <= node["dtotal"]
    assert node["spfree"] is None and node["sptotal"] is None  # no exclusive storage


def test_instances_in_every_state(live: LiveCluster) -> None:
    live.create("web", "n1.live.test", maxmem=256, vcpus=2)
    for name, node in (("idle", "n2.live.test"), ("crashed", "n1.live.test"),
                       ("sneaky", "n2.live.test"), ("moved", "n1.live.test"),
                       ("retired", "n2.live.test")):
        live.create(name, node)
    for name in ("idle", "sneaky", "retired"):
        live.finish(live.client.request("PUT", f"/2/instances/{name}/shutdown", None, {}))
    live.finish(live.client.request("PUT", "/2/instances/retired/modify", None,
                                    {"offline": True}))
    assert {n: i["status"] for n, i in live.instances().items()} == {
        "web": "running", "idle": "ADMIN_down", "crashed": "running", "sneaky": "ADMIN_down",
        "moved": "running", "retired": "ADMIN_offline", "lost": "ERROR_nodedown",
        "away": "ERROR_nodeoffline"}
    with live.domain("n1.live.test") as n1, live.domain("n2.live.test") as n2:
        n1.lookupByName("crashed").destroy()  # as if it crashed
        n2.lookupByName("sneaky").create()  # started behind herder's back
        moved = n1.lookupByName("moved")
        xml = moved.XMLDesc()
        moved.destroy()
        n2.defineXML(xml).create()  # now runs on the other node
    expected = {"web": "running", "idle": "ADMIN_down", "crashed": "ERROR_down",
                "sneaky": "ERROR_up", "moved": "ERROR_wrongnode", "retired": "ADMIN_offline",
                "lost": "ERROR_nodedown", "away": "ERROR_nodeoffline"}
    # the cache may hold figures from before for up to its 10 s
    wait_for(lambda: {n: i["status"] for n, i in live.instances().items()} == expected,
             timeout=60, what="the new run states")
    insts = live.instances()
    assert (insts["web"]["oper_state"], insts["web"]["oper_ram"], insts["web"]["oper_vcpus"]) \
        == (True, 256, 2)
    assert (insts["sneaky"]["oper_state"], insts["sneaky"]["oper_ram"]) == (True, 128)
    assert (insts["moved"]["oper_state"], insts["moved"]["oper_ram"]) == (True, 128)
    for name in ("idle", "crashed", "retired"):
        assert (insts[name]["oper_state"], insts[name]["oper_ram"]) == (False, None), name
    for name in ("lost", "away"):  # no answer / offline: unknown, not "not running"
        assert insts[name]["oper_state"] is None and insts[name]["oper_ram"] is None
    # n1: web (256) runs; n2: sneaky and moved (128 each)
    nodes = live.nodes()
    assert nodes["n1.live.test"]["mfree"] == 3072 - 256
    assert nodes["n2.live.test"]["mfree"] == 3072 - 256


def test_query_resource_gives_ganetis_result_statuses(live: LiveCluster) -> None:
    nodes = live.client.request("GET", "/2/query/node", {"fields": "name,mfree,bootid,bogus"})
    assert [f["kind"] for f in nodes["fields"]] == ["text", "unit", "text", "unknown"]
    rows = {row[0][1]: row[1:] for row in nodes["data"]}
    assert rows["n1.live.test"][0] == [0, 3072 - 256] and rows["n1.live.test"][1][0] == 0
    assert rows["n3.live.test"] == [[2, None], [2, None], [1, None]]  # no data
    assert rows["n4.live.test"] == [[4, None], [4, None], [1, None]]  # offline
    insts = live.client.request("PUT", "/2/query/instance", None,
                                {"fields": ["name", "status", "oper_state", "oper_ram"]})
    rows = {row[0][1]: row[1:] for row in insts["data"]}
    assert rows["idle"] == [[0, "ADMIN_down"], [0, False], [3, None]]
    assert rows["lost"] == [[0, "ERROR_nodedown"], [2, None], [2, None]]
    assert rows["away"] == [[0, "ERROR_nodeoffline"], [2, None], [4, None]]


def test_query_result_statuses_are_ganetis_in_the_same_situations(live: LiveCluster) -> None:
    """Ganeti's rows (snapshot) where its node daemon was killed or its node marked offline,
    against herder's for the same situations: values and result statuses alike."""
    ganeti = load_live_snapshot()
    fields = json.loads(LIVE_SNAPSHOT.read_text())["query_fields"]

    def rows(answer: dict[str, Any]) -> dict[str, list[Any]]:
        return {row[0][1]: row[1:] for row in answer["data"]}

    def ours(resource: str, step: str) -> dict[str, list[Any]]:
        return rows(live.client.request("GET", f"/2/query/{resource}",
                                        {"fields": fields[step]}))

    nodedown, offline = rows(ganeti["query_instance_nodedown"]), \
        rows(ganeti["query_instance_offline"])
    insts = ours("instance", "query_instance_nodedown")
    assert insts["lost"] == nodedown["inst1.vcluster.test"]  # primary's daemon gone
    assert insts["retired"] == nodedown["inst4.vcluster.test"]  # admin offline
    assert ours("instance", "query_instance_offline")["away"] == \
        offline["inst2.vcluster.test"]  # primary offline
    nodes, theirs = ours("node", "query_node_offline"), rows(ganeti["query_node_offline"])
    assert nodes["n3.live.test"] == theirs["node2.vcluster.test"]  # no answer
    assert nodes["n4.live.test"] == theirs["node3.vcluster.test"]  # offline
    assert [cell[0] for cell in nodes["n1.live.test"]] == \
        [cell[0] for cell in theirs["node1.vcluster.test"]]


def test_placement_uses_the_live_figures(live: LiveCluster) -> None:
    """After `big`, n1 keeps 1316 MiB free, n2 2816 (n3 does not answer and n4 is offline, so
    neither is a candidate): the allocator places `placed` on n2, and refuses an instance that
    fits no node's free memory (the nodes' total would hold it)."""
    live.create("big", "n1.live.test", maxmem=1500)
    too_big = live.client.wait_for_job(
        int(live.submit_create("huge", "", maxmem=2900, iallocator="herder")), timeout=120)
    assert too_big["status"] == "error" and "FailMem: 2" in json.dumps(too_big)
    # diskless instances move when their node fails, so the allocator keeps the cluster N+1
    # redundant, as Ganeti's does: n2 must stay able to take n1's 2012 MiB of instances
    job = live.create("placed", "", maxmem=500, iallocator="herder")
    assert live.instances()["placed"]["pnode"] == "n2.live.test", job
    # the crashed instance keeps its memory reserved on n1 (admin up: it may restart)
    nodes = live.nodes()
    assert nodes["n1.live.test"]["mfree"] == 3072 - 256 - 1500
    assert nodes["n2.live.test"]["mfree"] == 3072 - 256 - 500


def test_cli_lists_show_the_figures(live: LiveCluster) -> None:
    nodes = {n["name"]: n for n in json.loads(live.cli("node", "list", "--json").stdout)}
    assert nodes["n2.live.test"]["mfree"] == 3072 - 256 - 500
    assert nodes["n2.live.test"]["mtotal"] == 3072 and nodes["n3.live.test"]["mfree"] is None
    table = live.cli("node", "list").stdout.splitlines()
    # Ganeti's gnt-node list defaults, in its units (h)
    assert table[0].split() == ["Node", "DTotal", "DFree", "MTotal", "MNode", "MFree", "Pinst",
                                "Sinst"]
    n2 = next(line.split() for line in table if line.startswith("n2.live.test"))
    assert (n2[3], n2[5]) == ("3.0G", "2.3G")  # 2316 MiB free
    insts = {i["name"]: i for i in json.loads(live.cli("instance", "list", "--json").stdout)}
    assert (insts["sneaky"]["status"], insts["sneaky"]["oper_ram"]) == ("ERROR_up", 128)
    table = live.cli("instance", "list").stdout.splitlines()
    assert table[0].split() == ["Instance", "Hypervisor", "OS", "Primary_node", "Status",
                                "Memory"]  # Ganeti's gnt-instance list defaults
    web = next(line.split() for line in table if line.startswith("web "))
    assert web[4] == "running" and web[-1] == "256M"
    # masterd gone (or --offline): the config's view, and why there are no figures
    offline = live.cli("--offline", "node", "list", "--json")
    assert offline.returncode == 0 and json.loads(offline.stdout)[0]["mfree"] is None


# ---- compared with Ganeti ----


def _herder_live_answers(live: LiveCluster) -> dict[str, Any]:
    return run_live_sequence(live.client, "n2.live.test", "web")


def _compare(herder: dict[str, Any], ganeti: dict[str, Any]) -> None:
    extras: list[str] = []
    problems = compare_answers(herder, ganeti, LIVE_IGNORE, extras=extras)
    assert not problems, "herder's live answers differ from Ganeti's:\n" + "\n".join(problems)
    assert live_problems(herder) == []
    # titles and kinds of the fields both know are Ganeti's
    for step in ("query_node", "query_instance", "query_node_fields",
                 "query_instance_fields"):
        ours, theirs = field_kinds(herder[step]), field_kinds(ganeti[step])
        assert {k: ours[k] for k in theirs} == theirs, step


def test_live_answers_match_ganetis_snapshot(live: LiveCluster) -> None:
    ganeti = load_live_snapshot()
    assert live_problems({**ganeti, "instances_bulk": [
        *ganeti["instances_bulk"], *ganeti["instances_states"], *ganeti["instances_nodedown"],
        *ganeti["instances_nodeoffline"]]}) == []
    # every status herder gave here, Ganeti gave for the same situation (but for wrongnode:
    # Ganeti asks only nodes that are some instance's primary, compat row 46)
    seen = {i["status"] for step in ("instances_bulk", "instances_states",
                                     "instances_nodedown", "instances_nodeoffline")
            for i in ganeti[step]}
    ours = {i["status"] for i in live.instances().values()}
    assert ours - seen == {"ERROR_wrongnode"}
    # shapes: Ganeti's instances merged over all its states
    merged = {**ganeti, "instances_bulk": [
        *ganeti["instances_bulk"], *ganeti["instances_states"], *ganeti["instances_nodedown"],
        *ganeti["instances_nodeoffline"]],
        "nodes_bulk": [*ganeti["nodes_bulk"], *ganeti["nodes_nodeoffline"]]}
    _compare(_herder_live_answers(live), {k: merged[k] for k in (
        "nodes_bulk", "node", "instances_bulk", "instance", "query_node", "query_instance",
        "query_node_fields", "query_instance_fields")})


@pytest.mark.peer
def test_live_answers_match_the_vcluster(live: LiveCluster) -> None:
    """The same kind of node and instance on the real Ganeti 3.0.2 cluster, now: a running
    diskless instance and a stopped one (on a vcluster as freshly started, or as the module
    before left it; the two are removed again and it is passed on to the next module)."""
    from tests.ganeti.vcluster import remove_instances, running_vcluster, vc_together

    names = ("inst1.vcluster.test", "inst2.vcluster.test")
    with running_vcluster(reuse=True, keep=True) as vcl:
        vc_together(vcl, "node1.vcluster.test", *(
            ("gnt-instance", "add", "-t", "diskless", "-o", "noop+default", "--no-ip-check",
             "-n", "node2.vcluster.test", "-B", "memory=128",
             *(() if start else ("--no-start",)), name)
            for name, start in zip(names, (True, False), strict=True)))
        client = RapiClient(vcl.url, vcl.user, vcl.password, verify=False)
        with client:
            ganeti = run_live_sequence(client, "node2.vcluster.test", "inst1.vcluster.test")
        remove_instances(vcl, list(names))
    statuses = {i["name"]: i["status"] for i in ganeti["instances_bulk"]}
    assert statuses == {"inst1.vcluster.test": "running", "inst2.vcluster.test": "ADMIN_down"}
    assert live_problems(ganeti) == []
    _compare(_herder_live_answers(live), scrub(ganeti))
    ours = live.instances()
    assert (ours["web"]["status"], ours["idle"]["status"]) == ("running", "ADMIN_down")
