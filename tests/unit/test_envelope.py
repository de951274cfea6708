"""The signed envelope: Ganeti's HMAC vectors, and packets from a real ganeti-confd."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from herder.core import envelope as envelope_signing
from herder.core.errors import SignatureError

DATA = Path(__file__).resolve().parents[1] / "data"
KEY = b"mykeydata"
RSALT = "9aa6ce92-8336-11de-af38-001d093e835f"

# Vectors of ../shared/reference/ganeti21.md §1.10 (Ganeti 2.1's test fixtures, key "mykeydata").
VECTORS = [
    ("1254213006",
     '{"protocol": 1, "rsalt": "9aa6ce92-8336-11de-af38-001d093e835f", "type": 0}\n',
     "dfc6c75d33d02a8570aee961071a7189a9f99524"),
    (RSALT, '{"answer": "ok", "protocol": 1, "serial": 42, "status": 0}\n',
     "1629b59f06b73915b957bb5910374ef94aba81ad"),
    ("1254213006",
     '{"protocol": 1, "query": "node1.example.com", '
     '"rsalt": "9aa6ce92-8336-11de-af38-001d093e835f", "type": 1}\n',
     "5b52f39cc6e74541c828e9984b1419fd26389ecd"),
    (RSALT, '{"answer": 0, "protocol": 1, "serial": 42, "status": 0}\n',
     "4d9f2bcae72328e8fd731aad706dc75996a24517"),
]

PING_WIRE = (
    b'plj0{"hmac": "dfc6c75d33d02a8570aee961071a7189a9f99524", "msg": "{\\"protocol\\": 1, '
    b'\\"rsalt\\": \\"9aa6ce92-8336-11de-af38-001d093e835f\\", \\"type\\": 0}\\n", '
    b'"salt": "1254213006"}\n'
)


@pytest.mark.parametrize(("salt", "msg", "expected"), VECTORS)
def test_hmac_matches_ganeti_vectors(salt: str, msg: str, expected: str) -> None:
    assert envelope_signing.compute_hmac(KEY, salt, msg) == expected
    assert envelope_signing.sign(msg, KEY, salt)["hmac"] == expected
    assert envelope_signing.verify(envelope_signing.sign(msg, KEY, salt), KEY) == (msg, salt)


def test_verifies_ganeti_21_wire_bytes() -> None:
    assert len(PING_WIRE) == 175
    data, salt = envelope_signing.verify_data(envelope_signing.unpack(PING_WIRE), KEY)
    assert salt == "1254213006"
    assert data == {"protocol": 1, "rsalt": RSALT, "type": 0}


def test_verification_uses_the_received_text_not_a_reserialisation() -> None:
    odd = '{ "type":0,  "protocol":1 }'  # formatting no serialiser of ours would produce
    envelope = envelope_signing.sign(odd, KEY, "1")
    assert envelope_signing.verify(envelope, KEY) == (odd, "1")


def test_round_trip_of_our_own_messages() -> None:
    raw = envelope_signing.sign_data({"b": [1, 2], "a": "x"}, KEY, "salt")
    data, salt = envelope_signing.verify_data(raw, KEY)
    assert (data, salt) == ({"a": "x", "b": [1, 2]}, "salt")
    assert json.loads(raw)["msg"] == '{"a":"x","b":[1,2]}'


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda e: {**e, "hmac": "0" * 40}, "invalid signature"),
        (lambda e: {**e, "salt": e["salt"] + "1"}, "invalid signature"),
        (lambda e: {**e, "msg": e["msg"] + " "}, "invalid signature"),
        (lambda e: {k: v for k, v in e.items() if k != "hmac"}, "needs string fields"),
        (lambda e: {**e, "salt": 5}, "needs string fields"),
        (lambda e: [e], "not a JSON object"),
    ],
)
def test_tampering_is_detected(mutate, message: str) -> None:
    envelope = envelope_signing.sign('{"a":1}', KEY, "1")
    with pytest.raises(SignatureError, match=message):
        envelope_signing.verify(mutate(envelope), KEY)


def test_wrong_key_and_garbage_are_rejected() -> None:
    envelope = envelope_signing.sign('{"a":1}', KEY, "1")
    with pytest.raises(SignatureError, match="invalid signature"):
        envelope_signing.verify(envelope, KEY + b"\n")  # the newline is part of the key
    with pytest.raises(SignatureError, match="not valid JSON"):
        envelope_signing.verify(b"{nope", KEY)
    with pytest.raises(SignatureError, match="bad magic"):
        envelope_signing.unpack(b"plj")
    with pytest.raises(SignatureError, match="bad magic"):
        envelope_signing.unpack(b"xxxx{}")


def test_key_file_is_used_with_its_newline(tmp_path: Path) -> None:
    key = envelope_signing.generate_key()
    assert len(key) == 41 and key.endswith(b"\n")
    int(key[:40], 16)
    path = tmp_path / "hmac.key"
    path.write_bytes(key)
    assert envelope_signing.load_key(path) == key
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(SignatureError, match="is empty"):
        envelope_signing.load_key(tmp_path / "empty")
    with pytest.raises(SignatureError, match="cannot read"):
        envelope_signing.load_key(tmp_path / "missing")


def test_verifies_packets_captured_from_ganeti_confd() -> None:
    """Requests signed by herder and replies signed by Ganeti 3.0.2's confd, captured here."""
    capture = json.loads((DATA / "ganeti_confd_capture.json").read_text())
    key = bytes.fromhex(capture["hmac_key_hex"])
    assert key.endswith(b"\n")
    for packet in capture["packets"]:
        request, request_salt = envelope_signing.verify_data(
            envelope_signing.unpack(packet["request"].encode()), key)
        reply, reply_salt = envelope_signing.verify_data(
            envelope_signing.unpack(packet["reply"].encode()), key)
        assert reply_salt == request["rsalt"]  # replies are signed with the request's rsalt
        assert reply["protocol"] == 1 and reply["status"] == 0
        assert request["type"] == packet["type"]
        int(request_salt)


PEER_ROOT = Path("/tmp/gpeers/node1.example.com")
PEERS = Path(__file__).resolve().parents[3] / "shared" / "peers"


@pytest.fixture(scope="module")
def live_confd():
    """The real ganeti-confd from ../shared/peers, on a private port; skips when absent."""
    binary = Path("/tmp/groot/usr/lib/ganeti/3.0/usr/sbin/ganeti-confd")
    if not binary.exists() or not (PEERS / "confd.sh").exists():
        pytest.skip("Ganeti's confd peer is not installed (bash ../shared/peers/setup.sh)")
    port = 18140 + (uuid.uuid4().int % 50)
    env = {"CONFD_PORT": str(port), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
    started = subprocess.run(["bash", str(PEERS / "confd.sh"), "start"], env=env,
                             capture_output=True, text=True, timeout=120)
    if "confd already running" in started.stdout:
        pytest.skip("a ganeti-confd peer is already running (port unknown)")
    if started.returncode != 0:
        pytest.skip(f"ganeti-confd peer failed to start: {started.stdout[-300:]}")
    try:
        yield port, (PEER_ROOT / "var/lib/ganeti/hmac.key").read_bytes()
    finally:
        subprocess.run(["bash", str(PEERS / "confd.sh"), "stop"], env=env,
                       capture_output=True, timeout=60)


@pytest.mark.peer
def test_live_ganeti_confd_accepts_our_signature_and_we_verify_its_reply(live_confd) -> None:
    port, key = live_confd
    rsalt = str(uuid.uuid4())
    request = {"protocol": 1, "type": 3, "rsalt": rsalt}  # cluster_master
    packet = envelope_signing.pack(envelope_signing.sign_data(request, key, str(int(time.time()))))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        sock.sendto(packet, ("127.0.0.1", port))
        reply_bytes, _ = sock.recvfrom(envelope_signing.MAX_UDP_DATA_SIZE)
    reply, salt = envelope_signing.verify_data(envelope_signing.unpack(reply_bytes), key)
    assert salt == rsalt
    assert reply["status"] == 0 and reply["answer"] == "node1.example.com"
    # A packet signed with another key gets no answer at all (Ganeti drops it).
    forged = envelope_signing.pack(envelope_signing.sign_data(request, b"not the key\n",
                                                              str(int(time.time()))))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(1)
        sock.sendto(forged, ("127.0.0.1", port))
        with pytest.raises(TimeoutError):
            sock.recvfrom(envelope_signing.MAX_UDP_DATA_SIZE)
