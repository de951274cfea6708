"""Interoperability with Ganeti 3.0.2 (../shared/peers): its Python confd client against herder
confd, and herder's client against its Haskell ganeti-confd, on the same cluster (Ganeti's own
test config, imported into herder). Skipped cleanly when the peers are absent."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.cli.ganeti_import import import_ganeti_file
from herder.core import confd, envelope, model
from tests.confd.confd_support import Servers, static_processor
from tests.conftest import SHARED

pytestmark = pytest.mark.peer

GROOT = Path(os.environ.get("GROOT", "/tmp/groot"))
PEER_ROOT = Path(os.environ.get("PEER_ROOT", "/tmp/gpeers/node1.example.com"))
PEERS = SHARED / "peers"
GANETI_DATA = PEER_ROOT / "var/lib/ganeti"
PYTHON = "/usr/bin/python3"
# Where herder deliberately differs from Ganeti 3.0 (docs/compat.md C-rows).
DIFFERENT = {"cluster_master_fields_str", "data_collectors"}


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def peer_cluster() -> tuple[model.ConfigData, bytes]:
    """Ganeti's virtual node (peers/mkcluster.sh): its config imported, and its HMAC key."""
    if not SHARED.is_dir() or not GROOT.is_dir() or not Path(PYTHON).exists():
        pytest.skip("Ganeti peers absent (../shared/peers, /tmp/groot)")
    if not (GANETI_DATA / "config.data").exists():
        proc = subprocess.run(["bash", str(PEERS / "mkcluster.sh")], capture_output=True,
                              timeout=300)
        if proc.returncode or not (GANETI_DATA / "config.data").exists():
            pytest.skip("peers/mkcluster.sh failed")
    config, _ = import_ganeti_file(GANETI_DATA / "config.data")
    return config, envelope.load_key(GANETI_DATA / "hmac.key")


@pytest.fixture(scope="module")
def herder_confd(peer_cluster: tuple[model.ConfigData, bytes]) -> Iterator[int]:
    config, key = peer_cluster
    servers = Servers()
    (addr,) = servers.start(static_processor(config, key))
    yield addr[1]
    servers.stop()


@pytest.fixture(scope="module")
def ganeti_confd(peer_cluster: tuple[model.ConfigData, bytes]) -> Iterator[int]:
    """Ganeti's ganeti-confd on a free port; skipped when another instance already runs."""
    port = _free_udp_port()
    env = {**os.environ, "CONFD_PORT": str(port)}
    script = str(PEERS / "confd.sh")
    proc = subprocess.run(["bash", script, "start"], capture_output=True, text=True, env=env,
                          timeout=60)
    if "already running" in proc.stdout:
        pytest.skip("Ganeti's confd is already running (one instance at a time)")
    if proc.returncode:
        pytest.skip(f"Ganeti's confd did not start: {proc.stdout[-300:]}")
    try:
        yield port
    finally:
        subprocess.run(["bash", script, "stop"], capture_output=True, env=env, timeout=60)


def ganeti_client(port: int, key_file: Path, *args: str) -> str:
    proc = subprocess.run(
        [PYTHON, str(PEERS / "confd_query.py"), "--port", str(port), "--hmac-file",
         str(key_file), "--timeout", "1", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def run_suite(port: int, out: Path) -> dict[str, dict[str, Any]]:
    ganeti_client(port, GANETI_DATA / "hmac.key", "--suite", "--out", str(out))
    suite = {}
    for path in sorted(out.glob("*.json")):
        reply = json.loads(path.read_text())["reply"]
        suite[path.stem] = {k: v for k, v in reply.items() if not k.startswith("_")}
    return suite


@pytest.fixture(scope="module")
def herder_suite(herder_confd: int, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_suite(herder_confd, tmp_path_factory.mktemp("herder-suite"))


def test_ganeti_client_gets_correct_answers_from_herder(
        herder_suite: dict[str, Any], peer_cluster: tuple[model.ConfigData, bytes]) -> None:
    config, _ = peer_cluster
    s = herder_suite
    assert len(s) == 31 and not [n for n, r in s.items() if "error" in r]
    assert s["ping"] == {"protocol": 1, "status": 0, "answer": 3_000_000, "serial": 0}
    serial = config.cluster.serial_no
    assert s["cluster_master"] == {"protocol": 1, "status": 0, "answer": "node1.example.com",
                                   "serial": serial}
    fields = ["node1.example.com", "127.0.0.1", "127.0.0.1"]
    assert s["cluster_master_fields"]["answer"] == fields
    assert s["cluster_master_fields_str"]["answer"] == fields  # Ganeti drops this one
    assert s["cluster_master_badquery"] == {"protocol": 1, "status": 1, "answer": 2, "serial": 0}
    assert s["node_role_master"]["answer"] == 0 and s["node_role_candidate"]["answer"] == 1
    assert s["node_role_unknown"]["status"] == 1
    assert s["node_pip_list"]["answer"] == ["127.0.0.1", "127.0.0.3", "127.0.0.2"]
    assert s["mc_pip_list"]["answer"] == ["127.0.0.1", "127.0.0.3", "127.0.0.2"]
    ips = ["198.51.100.11", "198.51.100.12", "198.51.100.13"]
    assert s["instances_ips_list_default"]["answer"] == ips
    assert s["instances_ips_list_nolink"]["answer"] == []
    assert s["node_pip_by_instance_ip_one"]["answer"] == "127.0.0.3"
    assert s["node_pip_by_instance_ip_list"]["answer"] == [
        [0, "127.0.0.1", serial], [0, "127.0.0.2", serial], [1, 0, 0]]
    assert s["node_pip_by_instance_ip_unknown"] == {"protocol": 1, "status": 1, "answer": 0,
                                                    "serial": 0}
    node1 = config.find_node("node1.example.com")
    assert s["node_drbd_node1"] == {"protocol": 1, "status": 0, "serial": node1.serial_no,
                                    "answer": [["node1.example.com", 0, "instance1.example.com",
                                                "disk/0", "primary", "node3.example.com"]]}
    inst1 = config.find_instance("instance1.example.com")
    disks = s["instance_disks_instance1"]
    assert disks["serial"] == inst1.serial_no and disks["answer"][0]["dev_type"] == "drbd"
    assert s["config_query_cluster_name"]["answer"] == config.cluster.name
    assert s["config_query_master_node"]["answer"] == node1.uuid
    assert s["data_collectors"]["answer"]["drbd"] == {"active": True, "interval": 5_000_000}
    primary, secondary = s["node_instances_node1"]["answer"]
    assert [i["name"] for i in primary] == ["instance1.example.com"] and secondary == []
    assert s["node_instances_node1"]["serial"] == node1.serial_no


def test_raw_type_8_refused_by_ganeti_client_is_answered(
        herder_confd: int, peer_cluster: tuple[model.ConfigData, bytes]) -> None:
    out = json.loads(ganeti_client(herder_confd, GANETI_DATA / "hmac.key", "--raw", "8",
                                   "node3.example.com"))
    assert out["_salt_matches"] and out["status"] == 0
    primary, secondary = out["answer"]
    assert [i["name"] for i in primary] == ["instance2.example.com"]
    assert [i["name"] for i in secondary] == ["instance1.example.com"]
    node3 = peer_cluster[0].find_node("node3.example.com")
    assert out["serial"] == node3.serial_no


def test_same_answers_as_ganeti_confd(herder_suite: dict[str, Any], ganeti_confd: int,
                                      tmp_path: Path) -> None:
    ganeti = run_suite(ganeti_confd, tmp_path / "ganeti-suite")
    assert set(ganeti) == set(herder_suite)
    for name, theirs in ganeti.items():
        if name not in DIFFERENT:
            assert herder_suite[name] == theirs, name
    # the documented differences
    assert "error" in ganeti["cluster_master_fields_str"]
    theirs, ours = ganeti["data_collectors"], herder_suite["data_collectors"]
    assert theirs["serial"] == ours["serial"]
    assert {k: ours["answer"][k] for k in theirs["answer"]} == theirs["answer"]


def test_herder_client_decodes_every_ganeti_answer(
        ganeti_confd: int, herder_confd: int, peer_cluster: tuple[model.ConfigData, bytes]) -> None:
    _, key = peer_cluster
    queries: list[tuple[int, Any]] = [
        (0, None), (1, "node2.example.com"), (2, {"1": "198.51.100.12"}),
        (2, {"2": ["198.51.100.11", "203.0.113.9"]}), (3, None), (3, {"3": [0, 1, 2]}), (4, None),
        (5, None), (6, None), (6, "br974"), (7, "node1.example.com"), (7, "node3.example.com"),
        (8, "node1.example.com"), (8, "node2.example.com"), (9, "instance1.example.com"),
        (9, "instance2.example.com"), (10, "/cluster/cluster_name"), (10, "/cluster/master_ip"),
        (11, None), (1, "nosuch"), (9, "nosuch"),
    ]
    ganeti = confd.ConfdClient(["127.0.0.1"], key, port=ganeti_confd, timeout=2)
    ours = confd.ConfdClient([("127.0.0.1", herder_confd)], key, timeout=2)
    for rtype, query in queries:
        theirs = ganeti.query(rtype, query)
        assert theirs.received == 1 and theirs.consistent, (rtype, query)
        mine = ours.query(rtype, query)
        if rtype == confd.REQ_DATA_COLLECTORS:
            assert {k: mine.answer[k] for k in theirs.answer} == theirs.answer
        else:
            assert (mine.status, mine.answer, mine.serial) == (
                theirs.status, theirs.answer, theirs.serial), (rtype, query)
    # both at once: same serial and answer, so consistent
    both = confd.ConfdClient([("127.0.0.1", ganeti_confd), ("127.0.0.1", herder_confd)], key)
    result = both.query(confd.REQ_NODE_DRBD, "node1.example.com", coverage=-1)
    assert result.received == 2 and result.consistent
    # herder's own types: Ganeti stays silent
    with pytest.raises(confd.ConfdTimeoutError):
        ganeti.query(confd.REQ_MC_LIST, timeout=0.3)


def test_mond_view_of_a_ganeti_cluster(ganeti_confd: int,
                                       peer_cluster: tuple[model.ConfigData, bytes]) -> None:
    """What herder's mond asks when it has no config: collector settings, DRBD minors mapped to
    instances, a node's instances and an instance's disks, straight from Ganeti's confd."""
    client = confd.ConfdClient(["127.0.0.1"], peer_cluster[1], port=ganeti_confd, timeout=2)
    collectors = client.data_collectors()
    assert collectors["drbd"] == (True, 5.0) and "lv" in collectors
    assert client.node_drbd("node3.example.com") == [
        ["node3.example.com", 0, "instance1.example.com", "disk/0", "secondary",
         "node1.example.com"]]
    primary, secondary = client.node_instances("node1.example.com")
    assert [i["name"] for i in primary] == ["instance1.example.com"] and secondary == []
    (disk,) = client.instance_disks("instance1.example.com")
    assert disk["dev_type"] == "drbd" and disk["logical_id"][3:5] == [0, 0]
    with pytest.raises(confd.ConfdError, match="not found"):
        client.node_drbd("nosuch.example.com")
