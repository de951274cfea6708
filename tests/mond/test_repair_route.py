"""mond's live-repair route POST /1/repair over real HTTP, with real white-listed commands."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from herder.core import envelope
from herder.maintd import repair_client
from herder.mond.collector import CollectContext, MondSettings, RepairSettings
from tests.mond.agent_fixture import running_mond

KEY = b"0123456789abcdef0123456789abcdef01234567\n"
OTHER_KEY = b"fedcba9876543210fedcba9876543210fedcba98\n"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="white-list checks need root")
DIAGNOSE = {"status": "live-repair", "command": "fix-disk",
            "details": {"disk": "sdb", "smart": [5, 197]}}


@pytest.fixture
def whitelist(tmp_path: Path) -> Path:
    directory = tmp_path / "node-repair-commands"
    directory.mkdir()
    return directory


def make_ctx(tmp_path: Path, whitelist: Path, *, enabled: bool = True, timeout: float = 20.0,
             max_skew: float = 300.0, key: bytes | None = KEY) -> CollectContext:
    settings = MondSettings(
        plugin_dir=tmp_path / "plugins", run_dir=tmp_path / "run",
        repair=RepairSettings(enabled=enabled, commands_dir=whitelist, timeout=timeout,
                              max_skew=max_skew))
    return CollectContext(node_name="node1.example.com", settings=settings,
                          hmac_key_loader=lambda: key)


def script(directory: Path, name: str, body: str, mode: int = 0o755) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(mode)
    return path


def post(url: str, body: bytes, timeout: float = 30) -> tuple[int, Any]:
    req = urllib.request.Request(url + "/1/repair", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def signed(command: str, *, input: Any = DIAGNOSE, event: str | None = None,
           timestamp: int | None = None, key: bytes = KEY) -> bytes:
    return repair_client.build_request(key, command, input, event or str(uuid.uuid4()), timestamp)


def sign_message(message: Any, key: bytes = KEY) -> bytes:
    return envelope.sign_data(message, repair_client.repair_key(key), "salt")


def wait_for_file(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


# --- refusals -------------------------------------------------------------------------------


def test_disabled_by_default(tmp_path: Path, whitelist: Path, caplog) -> None:
    script(whitelist, "ok", "exit 0")
    ctx = make_ctx(tmp_path, whitelist)
    ctx.settings.repair = RepairSettings(commands_dir=whitelist)  # the default: off
    with caplog.at_level(logging.WARNING, logger="herder.mond.repair"), running_mond(ctx, {}) as m:
        code, body = post(m.url, signed("ok"))
        assert code == 403 and body["error"] == "forbidden"
        assert body["message"].startswith("repair is disabled on this node")
        # GET is not the way
        assert m.request("GET", "/1/repair") == (405, {
            "error": "method not allowed", "message": "GET is not supported; use POST"})
    assert "refused (403): repair is disabled" in caplog.text


@needs_root
def test_signature_refusals(tmp_path: Path, whitelist: Path, caplog) -> None:
    script(whitelist, "ok", "exit 0")
    with caplog.at_level(logging.WARNING, logger="herder.mond.repair"), \
            running_mond(make_ctx(tmp_path, whitelist), {}) as m:
        unsigned = json.dumps({"command": "ok", "input": DIAGNOSE, "event": str(uuid.uuid4()),
                               "timestamp": time.time_ns()}).encode()
        code, body = post(m.url, unsigned)
        assert code == 403 and body["message"].startswith("missing signature")
        code, body = post(m.url, signed("ok", key=OTHER_KEY))
        assert code == 403 and body["message"].startswith("bad signature")
        tampered = json.loads(signed("ok"))
        tampered["msg"] = tampered["msg"].replace('"ok"', '"evil"')
        code, body = post(m.url, json.dumps(tampered).encode())
        assert code == 403 and body["message"].startswith("bad signature")
        partial = json.loads(signed("ok"))
        del partial["hmac"]
        code, body = post(m.url, json.dumps(partial).encode())
        assert code == 403 and body["message"].startswith("missing or malformed signature")
        # the good one still goes through: refusals consumed nothing
        code, body = post(m.url, signed("ok"))
        assert code == 200 and body["exit_code"] == 0
    assert caplog.text.count("refused (403)") == 4


@needs_root
def test_replay_and_clock_skew(tmp_path: Path, whitelist: Path) -> None:
    script(whitelist, "ok", "exit 0")
    with running_mond(make_ctx(tmp_path, whitelist, max_skew=60), {}) as m:
        body = signed("ok")
        assert post(m.url, body)[0] == 200
        code, answer = post(m.url, body)  # the very same request again
        assert code == 403 and answer["message"].startswith("replayed request")
        older = json.loads(json.loads(body)["msg"])["timestamp"] - 1
        code, answer = post(m.url, signed("ok", timestamp=older))
        assert code == 403 and "not newer than the last accepted one" in answer["message"]
        code, answer = post(m.url, signed("ok", timestamp=time.time_ns() + 120 * 10**9))
        assert code == 403 and "max_skew 60 s" in answer["message"]
        code, answer = post(m.url, signed("ok", timestamp=time.time_ns() - 120 * 10**9))
        assert code == 403 and "-120 s from this node's clock" in answer["message"]
        assert post(m.url, signed("ok"))[0] == 200
    # the last accepted timestamp survives a restart (kept in run_dir)
    assert json.loads((tmp_path / "run" / "mond-repair.json").read_text())["last_timestamp"] > 0
    with running_mond(make_ctx(tmp_path, whitelist, max_skew=60), {}) as m:
        code, answer = post(m.url, body)
        assert code == 403 and answer["message"].startswith("replayed request")


@needs_root
def test_malformed_requests(tmp_path: Path, whitelist: Path) -> None:
    script(whitelist, "ok", "exit 0")
    now = time.time_ns()
    good = {"command": "ok", "input": None, "event": str(uuid.uuid4()), "timestamp": now}
    with running_mond(make_ctx(tmp_path, whitelist), {}) as m:
        assert post(m.url, b"not json")[0] == 400
        assert post(m.url, b"[1, 2]")[0] == 400
        for broken, words in [
            ({k: v for k, v in good.items() if k != "event"}, "missing required field `event`"),
            ({**good, "event": "yesterday"}, "is not a UUID"),
            ({**good, "timestamp": now / 1e9}, "Expected `int`"),
            ({**good, "command": ""}, "empty command"),
            ({**good, "extra": 1}, "unknown field `extra`"),
        ]:
            code, answer = post(m.url, sign_message(broken))
            assert code == 400, broken
            assert words in answer["message"]
        code, answer = post(m.url, json.dumps(envelope.sign(
            "{nope", repair_client.repair_key(KEY), "s")).encode())
        assert code == 400 and "not valid JSON" in answer["message"]


def test_no_key_on_the_node(tmp_path: Path, whitelist: Path) -> None:
    with running_mond(make_ctx(tmp_path, whitelist, key=None), {}) as m:
        code, answer = post(m.url, signed("ok"))
        assert code == 503 and "no HMAC key" in answer["message"]


@needs_root
def test_white_list(tmp_path: Path, whitelist: Path) -> None:
    script(whitelist, "groupw", "exit 0", 0o775)
    script(whitelist, "noexec", "exit 0", 0o644)
    (whitelist / "adir").mkdir()
    outside = script(tmp_path, "outside", "exit 0")
    notroot = script(whitelist, "notroot", "exit 0")
    os.chown(notroot, 65534, 65534)
    with running_mond(make_ctx(tmp_path, whitelist), {}) as m:
        code, answer = post(m.url, signed("missing"))
        assert code == 404 and answer["error"] == "unknown command"
        assert answer["message"] == f"repair command 'missing' is not in the white-list " \
                                    f"({whitelist})"
        for name in (f"../{outside.name}", str(outside)):
            code, answer = post(m.url, signed(name))
            assert code == 404 and "is not in the white-list" in answer["message"]
        for name, why in [("groupw", "is writable by group or others"),
                          ("noexec", "is not executable"), ("adir", "is not a regular file"),
                          ("notroot", "must be owned by root")]:
            code, answer = post(m.url, signed(name))
            assert code == 403, name
            assert answer["message"].startswith(f"repair command {whitelist / name} {why}")
            assert answer["message"].endswith("(not white-listed)")


# --- running --------------------------------------------------------------------------------


@needs_root
def test_success_gets_input_event_and_output(tmp_path: Path, whitelist: Path) -> None:
    seen = tmp_path / "seen.json"
    script(whitelist, "fix-disk",
           f'cat > {seen}; echo "event=$HERDER_REPAIR_EVENT args=$# cwd=$(pwd)"; '
           'echo "a warning" >&2')
    event = str(uuid.uuid4())
    with running_mond(make_ctx(tmp_path, whitelist), {}) as m:
        code, answer = post(m.url, signed("fix-disk", event=event))
    assert code == 200
    assert answer == {"event": event, "command": "fix-disk", "exit_code": 0,
                      "stdout": f"event={event} args=0 cwd=/\n", "stderr": "a warning\n",
                      "duration": answer["duration"], "timed_out": False}
    assert 0 <= answer["duration"] < 10
    assert json.loads(seen.read_text()) == DIAGNOSE


@needs_root
def test_failing_command_is_an_answer(tmp_path: Path, whitelist: Path) -> None:
    script(whitelist, "broken", "echo partial; echo 'disk gone' >&2; exit 3")
    bad = whitelist / "bad-interpreter"
    bad.write_text("#!/nonexistent/interpreter\n")
    bad.chmod(0o755)
    with running_mond(make_ctx(tmp_path, whitelist), {}) as m:
        code, answer = post(m.url, signed("broken"))
        assert code == 200
        assert (answer["exit_code"], answer["stdout"], answer["stderr"],
                answer["timed_out"]) == (3, "partial\n", "disk gone\n", False)
        code, answer = post(m.url, signed("bad-interpreter"))
        assert code == 200 and answer["exit_code"] == 127
        assert answer["stderr"].startswith(f"cannot start {bad}")
        assert post(m.url, signed("broken"))[0] == 200  # not left busy


@needs_root
def test_output_keeps_the_last_4_kib(tmp_path: Path, whitelist: Path) -> None:
    script(whitelist, "chatty", "i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done; "
                                "echo END")
    with running_mond(make_ctx(tmp_path, whitelist), {}) as m:
        code, answer = post(m.url, signed("chatty"))
    assert code == 200 and answer["exit_code"] == 0
    assert len(answer["stdout"].encode()) == 4096 and answer["stdout"].endswith("line1999\nEND\n")


@needs_root
def test_timeout_kills_the_process_group(tmp_path: Path, whitelist: Path) -> None:
    pids = tmp_path / "pids"
    script(whitelist, "hang", f"sleep 60 & echo $$ $! > {pids}; echo started; wait")
    with running_mond(make_ctx(tmp_path, whitelist, timeout=0.5), {}) as m:
        started = time.monotonic()
        code, answer = post(m.url, signed("hang"))
        assert time.monotonic() - started < 10
        assert code == 200
        assert answer["timed_out"] is True and answer["exit_code"] == -9
        assert answer["stdout"] == "started\n"
        shell, child = map(int, pids.read_text().split())
        deadline = time.monotonic() + 5
        while (alive(shell) or alive(child)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(shell) and not alive(child)
        # and the node takes the next repair
        script(whitelist, "ok", "exit 0")
        assert post(m.url, signed("ok"))[0] == 200


@needs_root
def test_one_repair_at_a_time(tmp_path: Path, whitelist: Path) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    script(whitelist, "slow", f"touch {started}; while [ ! -e {release} ]; do sleep 0.05; done; "
                              "echo done")
    script(whitelist, "ok", "exit 0")
    first: list[tuple[int, Any]] = []
    event = str(uuid.uuid4())
    with running_mond(make_ctx(tmp_path, whitelist), {}) as m:
        thread = threading.Thread(target=lambda: first.append(
            post(m.url, signed("slow", event=event))))
        thread.start()
        try:
            wait_for_file(started)
            code, answer = post(m.url, signed("ok"))
            assert code == 409 and answer["error"] == "conflict"
            assert f"already running on this node (command slow, event {event}" \
                in answer["message"]
            # the rest of the server is not blocked meanwhile
            assert m.get("/")[:2] == (200, [1])
        finally:
            release.touch()
            thread.join(20)
        assert first[0][0] == 200 and first[0][1]["stdout"] == "done\n"
        assert post(m.url, signed("ok"))[0] == 200  # free again


# --- the client helper ----------------------------------------------------------------------


@needs_root
def test_client_round_trip(tmp_path: Path, whitelist: Path) -> None:
    script(whitelist, "fix-disk", 'cat; echo "$HERDER_REPAIR_EVENT" >&2; exit 2')
    event = str(uuid.uuid4())
    with running_mond(make_ctx(tmp_path, whitelist), {}) as m:
        answer = repair_client.run_repair(m.url, KEY, "fix-disk", DIAGNOSE, event, timeout=30)
        assert answer["exit_code"] == 2 and answer["event"] == event
        assert json.loads(answer["stdout"]) == DIAGNOSE and answer["stderr"] == f"{event}\n"
        # two requests back to back: timestamps strictly increase
        answer = repair_client.run_repair(m.url + "/1/repair", KEY, "fix-disk", None, event)
        assert answer["exit_code"] == 2
        with pytest.raises(repair_client.RepairRefusedError) as refused:
            repair_client.run_repair(m.url, KEY, "nope", DIAGNOSE, event)
        assert refused.value.status == 404
        assert refused.value.message.startswith("repair command 'nope' is not in the white-list")
        assert "(HTTP 404)" in str(refused.value)
        with pytest.raises(repair_client.RepairRefusedError) as refused:
            repair_client.run_repair(m.url, OTHER_KEY, "fix-disk", DIAGNOSE, event)
        assert refused.value.status == 403 and "bad signature" in refused.value.message
        url = m.url
    with pytest.raises(repair_client.RepairTransportError, match="cannot reach mond at"):
        repair_client.run_repair(url, KEY, "fix-disk", DIAGNOSE, event, timeout=5)
    assert issubclass(repair_client.RepairRefusedError, repair_client.RepairError)
