"""`herder node|instance|group list` through a real masterd: the rows are masterd's query
answer (`PUT /2/query/...` with the fields the list prints); masterd gone, the list reads the
config and says why figures are missing; an error answer of masterd is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from herder.cli import group, instance, listing, node
from herder.core.store import FileStore
from herder.masterd import livefields
from tests.httpserver import threaded_http
from tests.system.masterd_fixture import RunningMaster, herder_cli, start_masterd


def _cli(master: RunningMaster, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("HERDER_OFFLINE",
                                                               "HERDER_MASTERD")}
    clean.update(HERDER_CONFIG=str(master.config_path), HERDER_MASTERD=master.url, **env)
    return subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=clean,
                          capture_output=True, text=True, timeout=120)


def _query_rows(master: RunningMaster, spec: listing.ListSpec) -> list[dict[str, Any]]:
    """masterd's query answer for the list's --json fields, as rows by field name (null where
    the result status is not normal)."""
    fields = list(spec.json_fields)
    answer = master.client.request("PUT", f"/2/query/{spec.resource}", None,
                                   {"fields": fields})
    return [{name: value if status == 0 else None
             for name, (status, value) in zip(fields, row, strict=True)}
            for row in answer["data"]]


@pytest.fixture
def master(tmp_path: Path, shared: Path) -> Any:
    sample = shared / "conformance" / "ganeti" / "cluster_config_3.0.json"
    herder_cli(tmp_path / "cluster" / "config.json", "cluster", "import-ganeti", str(sample))
    with start_masterd(tmp_path) as running:
        yield running


def test_lists_through_masterd_print_masterd_query_rows(master: RunningMaster) -> None:
    config = FileStore(master.config_path).load()
    expected = {spec.resource: _query_rows(master, spec)
                for spec in (node.LIST, instance.LIST, group.LIST)}
    for resource, rows in expected.items():
        listed = _cli(master, resource, "list", "--json")
        assert listed.returncode == 0 and listed.stderr == "", listed.stderr
        assert json.loads(listed.stdout) == rows, resource
    assert sorted(r["name"] for r in expected["instance"]) == sorted(
        i.name for i in config.instances.values())
    assert len(expected["instance"]) == 3 and len(expected["group"]) == 2
    # masterd gives every instance a status (its nodes run no daemons here: ERROR_nodedown)
    assert {row["status"] for row in expected["instance"]} == {"ERROR_nodedown"}
    # --offline: the same rows from the config, without masterd's live figures
    offline = json.loads(_cli(master, "--offline", "instance", "list", "--json").stdout)
    live = set(livefields.INSTANCE_LIVE_FIELDS)
    assert [{k: v for k, v in row.items() if k not in live} for row in offline] \
        == [{k: v for k, v in row.items() if k not in live} for row in expected["instance"]]
    assert {row["status"] for row in offline} == {None}


def test_masterd_errors_and_absence(master: RunningMaster, tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("wrong\n")
    refused = _cli(master, "node", "list", HERDER_RAPI_USER="nosuch",
                   HERDER_RAPI_PASSWORD_FILE=str(password),
                   HERDER_RAPI_CA=str(master.config_path.parent / "server.pem"))
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode != 0 and len(lines) == 1, refused.stderr
    assert "401" in lines[0] and master.url in lines[0] and "Traceback" not in refused.stderr
    master.kill9()
    gone = _cli(master, "instance", "list", "--json")
    assert gone.returncode == 0, gone.stderr
    assert gone.stderr.startswith("no live figures: ") and "cannot reach" in gone.stderr
    assert len(json.loads(gone.stdout)) == 3
    groups = _cli(master, "group", "list")
    assert groups.returncode == 0 and groups.stderr == ""


@pytest.mark.parametrize(("answer", "message"), [
    (b'{"fields": [], "data": [[[0, "a"]]]}', "rows of another width than the 5 fields asked"),
    (b'{"fields": [], "data": [[["normal", "a"], [0, 1]]]}', "not a query answer"),
    (b'{"fields": [], "data": [[[0, ' + b"[" * 100_000 + b"]" * 100_000 + b"], [0, 1]]]}",
     "not a query answer"),
    (b"<html>", "not a query answer"),
])
def test_a_bad_query_answer_is_one_line(tmp_path: Path, answer: bytes, message: str) -> None:
    """What masterd answers is decoded and validated at the edge: a value of another kind, a
    deep nest or rows of another width end the list with one line, not a traceback."""
    from http.server import BaseHTTPRequestHandler

    from herder.core.cluster_secrets import self_signed_certificate

    class Answering(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def do_PUT(self) -> None:  # the lists' query (fields and filter in the body)
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.do_GET()

        def log_message(self, *args: object) -> None:
            pass

    (tmp_path / "ca.pem").write_bytes(self_signed_certificate("cluster.example.com"))
    (tmp_path / "password").write_text("secret\n")
    with threaded_http(Answering) as url:
        env = {k: v for k, v in os.environ.items()
               if k != "HERDER_OFFLINE" and not k.startswith(("HERDER_RAPI", "HERDER_MASTERD"))}
        env.update(HERDER_CONFIG=str(tmp_path / "config.json"), HERDER_MASTERD=url,
                   HERDER_RAPI_CA=str(tmp_path / "ca.pem"), HERDER_RAPI_USER="admin",
                   HERDER_RAPI_PASSWORD_FILE=str(tmp_path / "password"))
        listed = subprocess.run([sys.executable, "-m", "herder.cli.main", "group", "list"],
                                env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode != 0 and listed.stdout == ""
    assert message in listed.stderr and "Traceback" not in listed.stderr
    assert len(listed.stderr.strip().splitlines()) == 1, listed.stderr
