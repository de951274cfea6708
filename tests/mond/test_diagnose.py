"""The self-diagnose collector: white-list, protocol, fallbacks, HMAC signature."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from herder.core import envelope, model
from herder.mond.collector import CollectContext, MondSettings
from herder.mond.collectors import diagnose
from herder.mond.runner import collect_once, render

KEY = b"0123456789abcdef0123456789abcdef01234567\n"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="white-list checks need root")


@pytest.fixture
def whitelist(tmp_path: Path) -> Path:
    directory = tmp_path / "node-diagnose-commands"
    directory.mkdir()
    return directory


def make_ctx(whitelist: Path, command: str, config: model.ConfigData, key: bytes | None = KEY,
             timeout: float = 5.0) -> CollectContext:
    config.maintenance.diagnose_command = command
    return CollectContext(
        node_name="node1.example.com",
        settings=MondSettings(diagnose_dir=whitelist, diagnose_timeout=timeout),
        config_loader=lambda: config, hmac_key_loader=lambda: key,
    )


def script(directory: Path, name: str, body: str, mode: int = 0o755) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(mode)
    return path


def run(ctx: CollectContext) -> dict:
    collector = diagnose.DiagnoseCollector(ctx)
    return render(collector, collect_once(collector), verbose=False)


def test_builtin_all_is_well(whitelist: Path, config: model.ConfigData) -> None:
    rep = run(make_ctx(whitelist, "", config))
    assert (rep["name"], rep["category"], rep["kind"]) == ("diagnose", "node", 1)
    assert rep["data"] == {"status": "Ok", "command": "", "details": {}}


@needs_root
def test_script_output_is_reported_verbatim(whitelist: Path, config: model.ConfigData) -> None:
    out = {"status": "evacuate", "command": "", "details": {"disk": "sdb", "smart": [5, 197]}}
    script(whitelist, "check-disks", f"echo '{json.dumps(out)}'")
    rep = run(make_ctx(whitelist, "check-disks", config))
    assert rep["data"] == out  # verbatim, verbose or not


@needs_root
@pytest.mark.parametrize(("setup", "name", "reason"), [
    (lambda d: None, "missing", "does not exist"),
    (lambda d: script(d, "w", "echo '{}'", 0o777), "w", "writable by group or others"),
    (lambda d: script(d, "g", "echo '{}'", 0o775), "g", "writable by group or others"),
    (lambda d: script(d, "noexec", "echo '{}'", 0o644), "noexec", "is not executable"),
    (lambda d: script(d, "suid", "echo '{}'", 0o4755), "suid", "setuid"),
    (lambda d: (d / "adir").mkdir(), "adir", "not a regular file"),
    (lambda d: None, "../etc/passwd", "must be a file name, not a path"),
    (lambda d: None, "sub/check", "must be a file name, not a path"),
    (lambda d: script(d, "garbage", "echo 'not json'"), "garbage", "not JSON"),
    (lambda d: script(d, "list", "echo '[1]'"), "list", "one JSON object"),
    (lambda d: script(d, "badstatus", "echo '{\"status\": \"panic\"}'"), "badstatus",
     "'panic' is not one of Ok, live-repair"),
    (lambda d: script(d, "fails", "echo broken >&2; exit 2"), "fails", "exit code 2: broken"),
])
def test_refusals_and_garbage_fall_back_to_ok(whitelist: Path, config: model.ConfigData, setup,
                                              name: str, reason: str) -> None:
    setup(whitelist)
    data = run(make_ctx(whitelist, name, config))["data"]
    assert data["status"] == "Ok" and data["command"] == ""
    assert reason in data["details"]["diagnose-error"]


@needs_root
def test_wrong_owner_is_refused(whitelist: Path, config: model.ConfigData) -> None:
    path = script(whitelist, "notroot", "echo '{\"status\": \"evacuate\"}'")
    os.chown(path, 65534, 65534)
    data = run(make_ctx(whitelist, "notroot", config))["data"]
    assert data["status"] == "Ok"
    assert "must be owned by root" in data["details"]["diagnose-error"]


@needs_root
def test_slow_script_times_out(whitelist: Path, config: model.ConfigData) -> None:
    script(whitelist, "slow", "sleep 10; echo '{\"status\": \"evacuate\"}'")
    started = time.monotonic()
    data = run(make_ctx(whitelist, "slow", config, timeout=0.5))["data"]
    assert time.monotonic() - started < 5
    assert "did not finish within 0.5s" in data["details"]["diagnose-error"]


@needs_root
def test_script_gets_no_arguments_and_empty_stdin(whitelist: Path,
                                                  config: model.ConfigData) -> None:
    script(whitelist, "args", 'n=$#; in=$(cat); echo "{\\"status\\": \\"Ok\\", '
                              '\\"details\\": {\\"argc\\": $n, \\"stdin\\": \\"$in\\"}}"')
    data = run(make_ctx(whitelist, "args", config))["data"]
    assert data["details"] == {"argc": 0, "stdin": ""}


def test_signature_verifies_and_detects_forgery(whitelist: Path, config: model.ConfigData) -> None:
    rep = run(make_ctx(whitelist, "", config))
    sig = rep["signature"]
    assert sig["timestamp"] == rep["timestamp"]
    assert sig["hmac"] == envelope.compute_hmac(KEY, str(rep["timestamp"]),
                                                envelope.dumps(rep["data"]))
    assert diagnose.verify_signature(KEY, rep)
    assert not diagnose.verify_signature(b"other key\n", rep)
    forged = {**rep, "data": {"status": "evacuate", "command": "", "details": {}}}
    assert not diagnose.verify_signature(KEY, forged)
    replayed = {**rep, "timestamp": rep["timestamp"] + 10**9}  # fresh time, old signature
    assert not diagnose.verify_signature(KEY, replayed)
    wire = json.loads(json.dumps(rep))  # survives a trip through any JSON library
    assert diagnose.verify_signature(KEY, wire)


def test_no_key_no_signature(whitelist: Path, config: model.ConfigData) -> None:
    assert run(make_ctx(whitelist, "", config, key=None))["signature"] is None
