"""confd over real UDP (127.0.0.1 and ::1): answers, silent drops, fuzzing, reloads, the client."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herder.core import confd, envelope, model
from herder.core.errors import SignatureError
from herder.core.store import FileStore
from tests.confd.confd_support import (
    KEY,
    Servers,
    exchange,
    file_processor,
    has_ipv6,
    static_processor,
    write_config,
)
from tests.conftest import build_config

DATA = Path(__file__).resolve().parents[1] / "data"
KEY21 = b"mykeydata"
RSALT21 = "9aa6ce92-8336-11de-af38-001d093e835f"


@pytest.fixture
def servers() -> Iterator[Servers]:
    group = Servers()
    yield group
    group.stop()


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    return write_config(tmp_path)


@pytest.fixture
def addr(servers: Servers, config_path: Path) -> tuple[str, int]:
    binds = [("127.0.0.1", 0)] + ([("::1", 0)] if has_ipv6() else [])
    return servers.start(file_processor(config_path), binds)[0]


def ping(addr: tuple[str, int], key: bytes = KEY) -> confd.Reply | None:
    rsalt, packet = confd.build_request(confd.REQ_PING, None, key)
    data = exchange(packet, addr)
    if data is None:
        return None
    reply, salt = confd.parse_reply(data, key)
    assert salt == rsalt
    return reply


def signed(body: object, key: bytes = KEY, salt: str | None = None) -> bytes:
    msg = body if isinstance(body, str) else json.dumps(body)
    stamp = salt if salt is not None else str(int(time.time()))
    return envelope.MAGIC + json.dumps(envelope.sign(msg, key, stamp)).encode()


# --- packets: Ganeti's vectors and captures --------------------------------------------------


def test_parses_ganeti_21_request_and_reply_packets() -> None:
    ping_wire = (
        b'plj0{"hmac": "dfc6c75d33d02a8570aee961071a7189a9f99524", "msg": "{\\"protocol\\": 1, '
        b'\\"rsalt\\": \\"9aa6ce92-8336-11de-af38-001d093e835f\\", \\"type\\": 0}\\n", '
        b'"salt": "1254213006"}\n'
    )
    req = confd.parse_request(ping_wire, KEY21, now=1254213006.5)
    assert (req.type, req.query, req.rsalt) == (0, None, RSALT21)
    with pytest.raises(confd.ConfdError, match="window"):
        confd.parse_request(ping_wire, KEY21)  # 2009: far outside the window today
    reply_wire = (
        b'plj0{"hmac": "1629b59f06b73915b957bb5910374ef94aba81ad", "msg": "{\\"answer\\": \\"ok\\",'
        b' \\"protocol\\": 1, \\"serial\\": 42, \\"status\\": 0}\\n", '
        b'"salt": "9aa6ce92-8336-11de-af38-001d093e835f"}\n'
    )
    assert confd.parse_reply(reply_wire, KEY21) == (confd.Reply(status=0, answer="ok", serial=42),
                                                    RSALT21)
    # NODE_ROLE_BYNAME request and reply of §1.10, framed by hand
    msg = ('{"protocol": 1, "query": "node1.example.com", '
           '"rsalt": "9aa6ce92-8336-11de-af38-001d093e835f", "type": 1}\n')
    packet = signed(msg, KEY21, "1254213006")
    assert b"5b52f39cc6e74541c828e9984b1419fd26389ecd" in packet
    req = confd.parse_request(packet, KEY21, now=1254213006)
    assert (req.type, req.query) == (1, "node1.example.com")
    rep = signed('{"answer": 0, "protocol": 1, "serial": 42, "status": 0}\n', KEY21, RSALT21)
    assert b"4d9f2bcae72328e8fd731aad706dc75996a24517" in rep
    assert confd.parse_reply(rep, KEY21)[0] == confd.Reply(status=0, answer=0, serial=42)


def ganeti_like_config() -> model.ConfigData:
    """The node names, IPs, UUIDs and serial of the cluster the capture was taken from."""
    config = build_config(nodes=3, drbd_instances=0, plain_instances=0)
    ids = {"node1.example.com": ("9a12d554-75c0-4cb1-8064-103365145db0", "127.0.0.1"),
           "node2.example.com": ("2ae3d962-2dad-44f2-bdb1-85f77107f907", "127.0.0.2"),
           "node3.example.com": ("41f9c238-173c-4120-9e41-04ad379b647a", "127.0.0.3")}
    nodes = {}
    for node in config.nodes.values():
        node.uuid, node.primary_ip = ids[node.name]
        node.master_candidate = True
        nodes[node.uuid] = node
    config.nodes = nodes
    config.cluster.master_node = ids["node1.example.com"][0]
    config.cluster.serial_no = 3189
    return model.revalidate(config)


def test_answers_captured_ganeti_requests_byte_for_byte() -> None:
    capture = json.loads((DATA / "ganeti_confd_capture.json").read_text())
    key = bytes.fromhex(capture["hmac_key_hex"])
    config = ganeti_like_config()
    for packet in capture["packets"]:
        request, reply = packet["request"].encode(), packet["reply"].encode()
        stamp = int(json.loads(request[4:])["salt"])
        req = confd.parse_request(request, key, now=stamp + 1)
        assert req.type == packet["type"]
        ganeti_reply, salt = confd.parse_reply(reply, key)
        assert salt == req.rsalt
        processor = static_processor(config, key, clock=lambda s=stamp: s + 1.0)
        ours = processor.process(request)
        assert ours is not None
        assert confd.parse_reply(ours, key) == (ganeti_reply, salt)
        assert ours == reply  # same key order, same compact JSON: the same bytes


def test_build_and_parse_roundtrip() -> None:
    rsalt, packet = confd.build_request(confd.REQ_CLUSTER_MASTER, {"3": [0, 1]}, KEY,
                                        now=1_700_000_000)
    outer = json.loads(packet[4:])
    assert list(outer) == ["hmac", "msg", "salt"] and outer["salt"] == "1700000000"
    req = confd.parse_request(packet, KEY, now=1_700_000_100)
    assert (req.type, req.query, req.rsalt) == (3, {"3": [0, 1]}, rsalt)
    assert "query" not in json.loads(json.loads(confd.build_request(0, None, KEY)[1][4:])["msg"])
    with pytest.raises(SignatureError):
        confd.parse_request(packet, b"other key\n", now=1_700_000_000)
    reply = confd.build_reply(confd.reply_message(0, "x", 7), KEY, rsalt)
    assert confd.parse_reply(reply, KEY) == (confd.Reply(0, "x", 7), rsalt)
    assert json.loads(json.loads(reply[4:])["msg"]) == {
        "protocol": 1, "status": 0, "answer": "x", "serial": 7}


def test_needed_replies_and_coverage() -> None:
    assert [confd.needed_replies(n) for n in range(1, 9)] == [1, 2, 2, 3, 3, 4, 4, 5]
    assert confd.coverage_count(0, 9) == 6 and confd.coverage_count(0, 2) == 2
    assert confd.coverage_count(-1, 9) == 9 and confd.coverage_count(3, 9) == 3
    with pytest.raises(confd.ConfdError, match="not enough"):
        confd.coverage_count(15, 9)
    with pytest.raises(confd.ConfdError):
        confd.coverage_count(0, 0)
    assert confd.request_type("node-drbd") == 7 and confd.request_type("8") == 8
    with pytest.raises(confd.ConfdError):
        confd.request_type("nosuch")
    assert confd.parse_peer("::1") == ("::1", 1814)
    assert confd.parse_peer("[::1]:99") == ("::1", 99)
    assert confd.parse_peer("h:5") == ("h", 5)


def test_pick_best() -> None:
    a, b, c = confd.Reply(0, "a", 5), confd.Reply(0, "b", 5), confd.Reply(0, "c", 7)
    assert confd.pick_best({"p1": a, "p2": b, "p3": c}) == ("p3", c, True)
    assert confd.pick_best({"p1": a, "p2": b}) == ("p1", a, False)
    assert confd.pick_best({"p1": a, "p2": confd.Reply(0, "a", 5)}) == ("p1", a, True)
    assert confd.pick_best({"p1": a, "p2": confd.Reply(1, "a", 5)})[2] is False
    with pytest.raises(confd.ConfdError):
        confd.pick_best({})


def test_peers_from_config() -> None:
    config = build_config(nodes=4)
    assert confd.peers_from_config(config) == ["192.0.2.11", "192.0.2.12"]


# --- the server over UDP ----------------------------------------------------------------------


def test_answers_over_ipv4_and_ipv6(servers: Servers, config_path: Path) -> None:
    binds = [("127.0.0.1", 0)] + ([("::1", 0)] if has_ipv6() else [])
    bound = servers.start(file_processor(config_path), binds)
    for host, port in bound:
        client = confd.ConfdClient([host], KEY, port=port, timeout=2)
        result = client.query("cluster_master", {"3": [0, 1, 2]})
        assert result.answer == ["node1.example.com", "192.0.2.1", "192.0.2.11"]
        assert result.ok and result.consistent and not result.timed_out
        assert client.query(confd.REQ_PING).answer == confd.CONFIG_VERSION
    if not has_ipv6():
        pytest.skip("no IPv6 loopback here: only IPv4 tested")
    assert len(bound) == 2 and bound[0][1] == bound[1][1]


def test_string_and_int_field_ids(addr: tuple[str, int]) -> None:
    client = confd.ConfdClient([addr], KEY)
    a = client.query(3, {"3": ["0", "2"]}).answer
    assert a == client.query(3, {"3": [0, 2]}).answer == ["node1.example.com", "192.0.2.11"]


def _drops(addr: tuple[str, int]) -> list[tuple[str, bytes]]:
    now = int(time.time())
    good = {"protocol": 1, "type": 0, "rsalt": "r-1"}
    _, valid = confd.build_request(confd.REQ_PING, None, KEY)
    big = signed({**good, "query": "x" * 62000})
    return [
        ("empty", b""),
        ("short", b"plj"),
        ("bad magic", b"plj1" + valid[4:]),
        ("no magic", valid[4:]),
        ("not json", b"plj0{not json"),
        ("json list", b"plj0[1,2]"),
        ("no hmac", envelope.MAGIC + json.dumps({"msg": "{}", "salt": str(now)}).encode()),
        ("truncated", valid[:-5]),
        ("wrong key", signed(good, key=b"another key\n")),
        ("key without newline", signed(good, key=KEY.strip())),
        ("bad hmac", valid.replace(valid[12:16], b"0000")),
        ("skew +310", signed(good, salt=str(now + 310))),
        ("skew -310", signed(good, salt=str(now - 310))),
        ("float salt", signed(good, salt=f"{now}.5")),
        ("text salt", signed(good, salt="yesterday")),
        ("body not json", signed("{nope")),
        ("body a list", signed([1, 2])),
        ("no protocol", signed({"type": 0, "rsalt": "r"})),
        ("protocol 2", signed({**good, "protocol": 2})),
        ("protocol true", signed({**good, "protocol": True})),
        ("no rsalt", signed({"protocol": 1, "type": 0})),
        ("empty rsalt", signed({**good, "rsalt": ""})),
        ("rsalt not string", signed({**good, "rsalt": 5})),
        ("no type", signed({"protocol": 1, "rsalt": "r"})),
        ("type string", signed({**good, "type": "0"})),
        ("type 12", signed({**good, "type": 12})),
        ("type 99", signed({**good, "type": 99})),
        ("type -1", signed({**good, "type": -1})),
        ("oversized", big),
    ]


def test_drops_silently_and_keeps_serving(addr: tuple[str, int]) -> None:
    # All bad packets, then a valid ping, on one socket: the server handles datagrams in order,
    # so an answer to any bad packet would arrive before the ping's.
    rsalt, valid = confd.build_request(confd.REQ_PING, None, KEY)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        for _, packet in _drops(addr):
            sock.sendto(packet, addr)
        sock.sendto(valid, addr)
        data = sock.recvfrom(65536)[0]
        assert confd.parse_reply(data, KEY)[1] == rsalt
        sock.settimeout(0.1)
        with pytest.raises(TimeoutError):
            sock.recvfrom(65536)
    # and one by one, each dropped on its own
    for name, packet in _drops(addr)[:6]:
        assert exchange(packet, addr, timeout=0.05) is None, name
    assert ping(addr) is not None


def test_skew_window_is_inclusive(addr: tuple[str, int]) -> None:
    now = int(time.time())
    for delta in (-299, 299):
        body = {"protocol": 1, "type": 0, "rsalt": f"r{delta}"}
        data = exchange(signed(body, salt=str(now + delta)), addr)
        assert data is not None, delta
        assert confd.parse_reply(data, KEY)[1] == f"r{delta}"


def test_replayed_request_is_not_answered_again(addr: tuple[str, int]) -> None:
    _, packet = confd.build_request(confd.REQ_PING, None, KEY)
    assert exchange(packet, addr) is not None
    assert exchange(packet, addr, timeout=0.2) is None
    assert ping(addr) is not None


def test_garbage_burst_then_valid(addr: tuple[str, int]) -> None:
    import random

    rng = random.Random(9)
    family = socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        for _ in range(300):
            size = rng.choice([0, 1, 4, 10, 100, 1000, 61440])
            sock.sendto(envelope.MAGIC + rng.randbytes(size), addr)
    assert ping(addr) is not None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_mutated_packets_never_answered_unless_still_authentic(data: st.DataObject) -> None:
    processor = static_processor(build_config())
    req_type = data.draw(st.sampled_from(sorted(confd.REQ_NAMES)))
    query = data.draw(st.one_of(st.none(), st.text(max_size=20),
                                st.dictionaries(st.sampled_from("0123"), st.integers())))
    _, packet = confd.build_request(req_type, query, KEY)
    kind = data.draw(st.sampled_from(["flip", "truncate", "extend", "random", "splice"]))
    if kind == "flip":
        pos = data.draw(st.integers(0, len(packet) - 1))
        mutated = packet[:pos] + bytes([packet[pos] ^ data.draw(st.integers(1, 255))]) \
            + packet[pos + 1:]
    elif kind == "truncate":
        mutated = packet[:data.draw(st.integers(0, len(packet) - 1))]
    elif kind == "extend":
        mutated = packet + data.draw(st.binary(min_size=1, max_size=64))
    elif kind == "splice":
        pos = data.draw(st.integers(0, len(packet)))
        mutated = packet[:pos] + data.draw(st.binary(min_size=1, max_size=32)) + packet[pos:]
    else:
        mutated = data.draw(st.binary(max_size=512))
    reply = processor.process(mutated)
    if reply is None:
        return
    # Answered: the mutation must have left the signed content intact (e.g. an upper-case hex
    # digit in the HMAC, or trailing whitespace) and the reply must verify.
    original = msgspec.json.decode(packet[4:])
    changed = msgspec.json.decode(mutated[4:])
    assert (changed["msg"], changed["salt"]) == (original["msg"], original["salt"])
    assert envelope.verify(reply[4:], KEY)


def _containers(inner: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.one_of(st.lists(inner, max_size=4),
                     st.dictionaries(st.text(max_size=5), inner, max_size=4))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    _containers, max_leaves=12)


@settings(max_examples=100, deadline=None)
@given(body=JSON_VALUES)
def test_fuzz_any_signed_body_never_crashes(body: object) -> None:
    processor = static_processor(build_config())
    for wrapped in (body, {"protocol": 1, "type": 1, "rsalt": "r", "query": body},
                    {"protocol": 1, "type": 10, "rsalt": "r", "query": body},
                    {"protocol": 1, "type": 2, "rsalt": "r", "query": body},
                    {"protocol": 1, "type": 3, "rsalt": "r", "query": body}):
        processor._seen.clear()
        reply = processor.process(signed(wrapped))
        if reply is not None:
            parsed, salt = confd.parse_reply(reply, KEY)
            assert salt == "r" and parsed.status in (0, 1)
    assert processor.stats["errors"] == 0


def test_config_change_visible_within_a_second(addr: tuple[str, int], config_path: Path) -> None:
    client = confd.ConfdClient([addr], KEY, timeout=1)
    before = client.query(confd.REQ_CLUSTER_MASTER, {"3": [confd.REQFIELD_IP]})
    assert before.answer == ["192.0.2.1"]
    with FileStore(config_path).update() as config:
        config.cluster.master_ip = "192.0.2.254"
        config.cluster.touch()
    changed = time.monotonic()
    while True:
        after = client.query(confd.REQ_CLUSTER_MASTER, {"3": [confd.REQFIELD_IP]})
        if after.answer == ["192.0.2.254"]:
            break
        # confd looks at the config every 0.25 s; 5 s leaves room for a loaded machine
        assert time.monotonic() - changed < 5.0, "change not visible within 5 s"
        time.sleep(0.05)
    assert after.serial > before.serial


def test_without_config_answers_the_reason(servers: Servers, tmp_path: Path) -> None:
    (addr,) = servers.start(file_processor(tmp_path / "missing.json"))
    reply = ping(addr)
    assert reply is not None and reply.status == 1 and reply.serial == 0
    assert "cannot load the configuration" in reply.answer


def test_too_big_reply_is_not_sent() -> None:
    config = build_config(drbd_instances=0, plain_instances=0)
    config.cluster.tags = [f"t{i:05d}" + "x" * 100 for i in range(700)]
    processor = static_processor(config)
    _, packet = confd.build_request(confd.REQ_CONFIG_QUERY, "/cluster/tags", KEY)
    assert processor.process(packet) is None
    assert processor.stats["too_big"] == 1


# --- the client against several servers -------------------------------------------------------


def _with_serial(serial: int, master_ip: str = "192.0.2.1") -> model.ConfigData:
    config = build_config(drbd_instances=0, plain_instances=0)
    config.cluster.serial_no = serial
    config.cluster.master_ip = master_ip
    return config


def test_client_keeps_highest_serial_and_flags_inconsistency(servers: Servers) -> None:
    # two peers: both must answer (2 → 2), the newer one wins
    peers = [servers.start(static_processor(cfg))[0] for cfg in (
        _with_serial(5, "192.0.2.5"), _with_serial(7, "192.0.2.7"))]
    client = confd.ConfdClient(peers, KEY, timeout=2)
    for _ in range(3):
        result = client.query(confd.REQ_CLUSTER_MASTER, {"3": [1]})
        assert result.answer == ["192.0.2.7"] and result.serial == 7
        assert result.consistent and result.sent == 2 == result.needed == result.received
    # three peers: two answers are enough (3 → 2); the best of those is kept
    peers.append(servers.start(static_processor(_with_serial(6, "192.0.2.6")))[0])
    result = confd.ConfdClient(peers, KEY).query(confd.REQ_CLUSTER_MASTER, {"3": [1]}, coverage=-1)
    assert result.sent == 3 and result.needed == 2 and result.received >= 2
    assert result.serial == max(r.serial for r in result.replies.values())
    # same serial, different answers: inconsistent
    peers = [servers.start(static_processor(cfg))[0] for cfg in (
        _with_serial(9, "192.0.2.1"), _with_serial(9, "192.0.2.2"))]
    result = confd.ConfdClient(peers, KEY).query(confd.REQ_CLUSTER_MASTER, {"3": [1]}, coverage=-1)
    assert result.serial == 9 and not result.consistent and result.received == 2


def test_client_drops_bad_hmac_and_times_out(servers: Servers) -> None:
    good = servers.start(static_processor(_with_serial(3)))[0]
    bad = servers.start(static_processor(_with_serial(99), key=b"wrong\n"))[0]
    client = confd.ConfdClient([good, bad], KEY, timeout=2.0)  # good's answer must come in time
    result = client.query(confd.REQ_PING, coverage=-1)
    assert result.received == 1 and result.needed == 2 and result.timed_out
    assert list(result.replies) == [f"127.0.0.1:{good[1]}"]
    with pytest.raises(confd.ConfdTimeoutError, match="no confd answer"):
        confd.ConfdClient([bad], KEY, timeout=0.2).query(confd.REQ_PING)
    # a port where nothing listens: a clean timeout too
    with pytest.raises(confd.ConfdTimeoutError):
        confd.ConfdClient([("127.0.0.1", 9)], KEY, timeout=0.2).query(confd.REQ_PING)
    with pytest.raises(confd.ConfdError, match="not enough"):
        client.query(confd.REQ_PING, coverage=3)


def test_client_asks_a_random_subset(servers: Servers) -> None:
    peers = [servers.start(static_processor(_with_serial(1)))[0] for _ in range(7)]
    client = confd.ConfdClient(peers, KEY, timeout=2)
    seen: set[str] = set()
    for _ in range(60):  # random subsets: every peer is asked sooner or later
        result = client.query(confd.REQ_PING)
        assert result.sent == 6 and result.needed == 4 and result.received >= 4
        seen |= set(result.replies)
        if len(seen) == 7:
            break
    assert len(seen) == 7
    assert client.query(confd.REQ_PING, coverage=1).sent == 1


def test_client_helpers_for_mond(addr: tuple[str, int]) -> None:
    client = confd.ConfdClient([addr], KEY)
    assert client.data_collectors()["lv"] == (True, model.DEFAULT_COLLECTOR_INTERVALS["lv"])
    rows = client.node_drbd("node2.example.com")
    assert [r[2] for r in rows] == ["drbd0.example.com", "drbd1.example.com"]
    primary, secondary = client.node_instances("node2.example.com")
    assert [i["name"] for i in primary] == ["drbd1.example.com"]
    assert [i["name"] for i in secondary] == ["drbd0.example.com"]
    assert client.instance_disks("plain0.example.com")[0]["dev_type"] == "plain"
    with pytest.raises(confd.ConfdError, match="not found"):
        client.instance_disks("nosuch")


# --- the CLI ------------------------------------------------------------------------------------


def test_cli_query(herder, servers: Servers) -> None:
    path = herder.config_path
    path.parent.mkdir(parents=True)
    write_config(path.parent)
    (addr,) = servers.start(file_processor(path))
    peer = f"--peer={addr[0]}:{addr[1]}"
    res = herder("confd", "query", "cluster_master", peer)
    assert res.code == 0 and res.out.strip() == "node1.example.com"
    assert "serial" in res.err
    res = herder("confd", "query", "3", '{"3": [0, 1]}', peer, "--json")
    data = json.loads(res.out)
    assert data["answer"] == ["node1.example.com", "192.0.2.1"] and data["consistent"]
    res = herder("confd", "query", "node_role_byname", "nosuch", peer)
    assert res.code == 1 and "Node name nosuch not found" in res.err
    res = herder("confd", "query", "bogus", peer)
    assert res.code == 1 and "unknown confd query type" in res.err


def test_cli_daemon(tmp_path: Path) -> None:
    path = write_config(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "herder.cli.main", "--config", str(path), "confd", "--bind",
         "127.0.0.1", "--port", "0"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert match, line
        client = confd.ConfdClient(["127.0.0.1"], KEY, port=int(match[1]), timeout=2)
        assert client.query("mc_list").answer == ["node1.example.com", "node2.example.com"]
    finally:
        proc.terminate()
        assert proc.wait(5) == 0
