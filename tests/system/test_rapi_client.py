"""The RAPI client: against a small local HTTP(S) server, and against the live Ganeti vcluster.

The vcluster tests skip when `../shared/peers/vcluster` is not running; they leave it as found
(tags removed, node roles restored).
"""

from __future__ import annotations

import json
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from herder.core.cluster_secrets import self_signed_certificate
from herder.core.errors import HerderError
from herder.core.rapi import (
    JOB_STATUS_FINAL,
    NODE_ROLES,
    RapiClient,
    RapiError,
    error_message,
    job_error_message,
    read_rapi_users,
)
from tests.httpserver import threaded_http

# ---- a local server ----


@dataclass
class Seen:
    method: str
    path: str
    query: list[tuple[str, str]]
    body: Any
    headers: dict[str, str]


Reply = tuple[int, str, bytes]  # status, content type, body
Route = Callable[[Seen], Reply]


@dataclass
class LocalServer:
    url: str
    routes: dict[str, Route]
    seen: list[Seen] = field(default_factory=list)


def _json(status: int, value: Any) -> Reply:
    return status, "application/json", json.dumps(value).encode()


@contextmanager
def local_server(
    routes: dict[str, Route] | None = None, tls: ssl.SSLContext | None = None
) -> Iterator[LocalServer]:
    """A threaded HTTP(S) server on 127.0.0.1: `routes` maps "METHOD /path" to a reply function;
    anything else answers 200 with job id 1. Every request is recorded in `.seen`."""
    state = LocalServer("", dict(routes or {}))

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            seen = Seen(
                self.command, parts.path, parse_qsl(parts.query, keep_blank_values=True),
                json.loads(raw) if raw else None, dict(self.headers.items()),
            )
            state.seen.append(seen)
            route = state.routes.get(f"{self.command} {parts.path}")
            status, ctype, payload = route(seen) if route else _json(200, 1)
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_POST = do_DELETE = _serve

        def log_message(self, *args: object) -> None:
            pass

    with threaded_http(Handler, tls) as state.url:
        yield state


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_cert(path: Path, name: str) -> Path:
    path.write_bytes(self_signed_certificate(name))
    return path


def _server_tls(pem: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pem)
    return context


# ---- error parsing ----


def test_error_message_formats() -> None:
    ganeti = json.dumps(
        {"code": 400, "message": "Can&#x27;t set &#x27;bogus&#x27; role",
         "explain": "Bad request syntax or unsupported method"}
    ).encode()
    assert error_message(400, "Bad Request", ganeti)[0] == (
        "Can't set 'bogus' role (Bad request syntax or unsupported method)"
    )
    herder = json.dumps({"error": "not_found", "message": "node x: no such node"}).encode()
    assert error_message(404, "Not Found", herder)[0] == "node x: no such node (not_found)"
    assert error_message(500, "Internal", b"\n  boom happened\nsecond line\n")[0] == "boom happened"
    assert error_message(502, "Bad Gateway", b"")[0] == "Bad Gateway"
    assert error_message(500, "X", b'["odd", 1]')[0] == '["odd", 1]'


def test_http_errors_are_one_line_rapi_errors() -> None:
    routes: dict[str, Route] = {
        "GET /ganeti": lambda s: _json(
            404, {"code": 404, "message": "Not Found", "explain": "Nothing matches the given URI"}
        ),
        "GET /herder": lambda s: _json(
            409, {"error": "conflict", "message": "tag exists\non the cluster"}
        ),
        "GET /plain": lambda s: (500, "text/plain", b"internal failure\ntraceback..."),
        "GET /notjson": lambda s: (200, "text/html", b"<html>hi</html>"),
        "GET /empty": lambda s: (200, "application/json", b""),
    }
    with local_server(routes) as srv, RapiClient(srv.url, "u", "p") as client:
        with pytest.raises(RapiError) as exc:
            client.request("GET", "/ganeti")
        assert exc.value.status == 404
        assert str(exc.value) == (
            "RAPI GET /ganeti failed: 404 Not Found (Nothing matches the given URI)"
        )
        assert isinstance(exc.value, HerderError)
        with pytest.raises(RapiError, match=r"409 tag exists on the cluster \(conflict\)") as exc:
            client.request("GET", "/herder")
        assert exc.value.status == 409 and exc.value.body["error"] == "conflict"
        with pytest.raises(RapiError, match="500 internal failure$"):
            client.request("GET", "/plain")
        with pytest.raises(RapiError, match="not JSON"):
            client.request("GET", "/notjson")
        assert client.request("GET", "/empty") is None


def test_connection_refused_and_timeout() -> None:
    url = f"https://127.0.0.1:{_free_port()}"
    with pytest.raises(RapiError, match=f"cannot reach RAPI at {url}: ") as exc:
        RapiClient(url, "admin", "x").get_info()
    assert exc.value.status is None

    def slow(seen: Seen) -> Reply:
        time.sleep(1.5)
        return _json(200, 2)

    with local_server({"GET /version": slow}) as srv:
        client = RapiClient(srv.url, timeout=0.3)
        with pytest.raises(RapiError, match="timed out") as exc:
            client.get_version()
        assert exc.value.status is None


# ---- request encoding ----


def test_requests_follow_ganeti_conventions() -> None:
    routes: dict[str, Route] = {"GET /2/jobs/5/wait": lambda s: _json(200, None)}
    with (
        local_server(routes) as srv,
        RapiClient(srv.url, "admin", "pw", reason="testing") as client,
    ):
        assert client.add_cluster_tags(["a", "b"], dry_run=True) == 1
        client.delete_node_tags("n1", ["x"])
        client.set_node_role("n1", "drained", force=True)
        client.modify_node("n1", drained=True)
        client.evacuate_node("n1", mode="secondary-only", remote_node="n2")
        client.migrate_node("n1", mode="live")
        client.create_instance("create", "i1", "diskless", [], [{}], ip_check=False)
        client.rename_instance("i1", "i2")
        client.startup_instance("i1", no_remember=True)
        client.reboot_instance("i1", reboot_type="soft")
        client.create_group("g1", alloc_policy="preferred")
        assert client.wait_for_job_change(5, ["status"], ["running"], 3) is None
        client.put_herder("maintd/settings", {"enabled": True})
        client.get_herder("/2/herder/maintd")
    got = [(s.method, s.path, s.query, s.body) for s in srv.seen]
    reason = ("reason", "testing")
    assert got == [
        ("PUT", "/2/tags", [("tag", "a"), ("tag", "b"), ("dry-run", "1"), reason], None),
        ("DELETE", "/2/nodes/n1/tags", [("tag", "x"), reason], None),
        ("PUT", "/2/nodes/n1/role", [("force", "1"), reason], "drained"),
        ("POST", "/2/nodes/n1/modify", [reason], {"drained": True}),
        ("POST", "/2/nodes/n1/evacuate", [reason],
         {"mode": "secondary-only", "remote_node": "n2"}),
        ("POST", "/2/nodes/n1/migrate", [reason], {"mode": "live"}),
        ("POST", "/2/instances", [reason],
         {"__version__": 1, "mode": "create", "name": "i1", "disk_template": "diskless",
          "disks": [], "nics": [{}], "ip_check": False}),
        ("PUT", "/2/instances/i1/rename", [reason],
         {"new_name": "i2", "ip_check": False, "name_check": False}),
        ("PUT", "/2/instances/i1/startup", [("no_remember", "1"), reason], None),
        ("POST", "/2/instances/i1/reboot", [("type", "soft"), reason], None),
        ("POST", "/2/groups", [reason], {"name": "g1", "alloc_policy": "preferred"}),
        ("GET", "/2/jobs/5/wait", [],
         {"fields": ["status"], "previous_job_info": ["running"], "previous_log_serial": 3}),
        ("PUT", "/2/herder/maintd/settings", [reason], {"enabled": True}),
        ("GET", "/2/herder/maintd", [], None),
    ]
    first = srv.seen[0].headers
    assert first["Authorization"].startswith("Basic ")
    assert first["Accept"] == "application/json"
    assert srv.seen[2].headers["Content-Type"] == "application/json"


def test_list_answers_are_reduced_like_ganeti_client() -> None:
    routes: dict[str, Route] = {
        "GET /2/nodes": lambda s: _json(
            200, [{"name": "n1"}] if ("bulk", "1") in s.query
            else [{"id": "n1", "uri": "/2/nodes/n1"}]
        ),
        "GET /2/groups": lambda s: _json(200, [{"name": "default", "uri": "/2/groups/default"}]),
        "GET /2/jobs": lambda s: _json(200, [{"id": 3, "uri": "/2/jobs/3"}]),
        "GET /2/jobs/9": lambda s: _json(200, dict.fromkeys(["id", "ops", "status"])),
        "DELETE /2/jobs/3": lambda s: _json(200, [False, "Job 3 not found in queue"]),
        "GET /2/features": lambda s: _json(404, {"code": 404, "message": "Not Found"}),
    }
    with local_server(routes) as srv, RapiClient(srv.url) as client:
        assert client.get_nodes() == ["n1"]
        assert client.get_nodes(bulk=True) == [{"name": "n1"}]
        assert client.get_groups() == ["default"]
        assert client.get_jobs() == [3]
        assert client.get_features() == []
        assert client.cancel_job(3) == (False, "Job 3 not found in queue")
        with pytest.raises(RapiError, match="cannot cancel job 3: Job 3 not found"):
            client.cancel_job(3, check=True)
        with pytest.raises(RapiError, match="job 9 not found") as exc:
            client.get_job_status(9)
        assert exc.value.status == 404
        with pytest.raises(RapiError, match="either iallocator or remote_node"):
            client.evacuate_node("n1", iallocator="hail", remote_node="n2")


def test_wait_for_job_follows_changes_and_raises_on_error() -> None:
    answers: list[Any] = [
        None,
        {"job_info": ["running"], "log_entries": [[1, [1, 2], "message", "step one"]]},
        {"job_info": ["running"], "log_entries": [[2, [1, 3], "message", "step two"]]},
        {"job_info": ["error"], "log_entries": []},
    ]
    job = {
        "id": 7, "status": "error", "ops": [{"OP_ID": "OP_NODE_SET_PARAMS"}],
        "opstatus": ["error"],
        "opresult": [["OpPrereqError", ["Node 'x' not known", "unknown_entity"]]],
    }
    routes: dict[str, Route] = {
        "GET /2/jobs/7/wait": lambda s: _json(200, answers.pop(0)),
        "GET /2/jobs/7": lambda s: _json(200, job),
    }
    logs: list[Any] = []
    with (
        local_server(routes) as srv,
        RapiClient(srv.url) as client,
        pytest.raises(RapiError) as exc,
    ):
        client.wait_for_job(7, on_log=logs.append, raise_on_error=True)
    assert str(exc.value) == "job 7 error: OpPrereqError: Node 'x' not known (unknown_entity)"
    assert exc.value.job_id == 7 and exc.value.job == job and exc.value.status is None
    assert [entry[3] for entry in logs] == ["step one", "step two"]
    waits = [s.body for s in srv.seen if s.path.endswith("/wait")]
    assert [(w["previous_job_info"], w["previous_log_serial"]) for w in waits] == [
        (None, None), (None, None), (["running"], 1), (["running"], 2)
    ]


def test_wait_for_job_timeout() -> None:
    routes: dict[str, Route] = {"GET /2/jobs/8/wait": lambda s: _json(200, None)}
    with (
        local_server(routes) as srv,
        RapiClient(srv.url) as client,
        pytest.raises(RapiError, match="job 8 did not finish within 0.2 s"),
    ):
        client.wait_for_job(8, timeout=0.2)


def test_job_error_message_variants() -> None:
    assert job_error_message({"status": "canceled", "opstatus": ["canceled"],
                              "opresult": ["Job canceled by request"]}) == (
        "Job canceled by request"
    )
    assert job_error_message({"status": "error", "opstatus": ["success", "error"],
                              "opresult": [None, {"message": "boom"}]}) == "boom"
    assert job_error_message({"status": "error"}) == "status error"


# ---- TLS and the herder cluster helper ----


def test_tls_verification_against_cluster_certificate(tmp_path: Path) -> None:
    pem = _write_cert(tmp_path / "server.pem", "cluster.example.com")
    other = _write_cert(tmp_path / "other.pem", "cluster.example.com")
    with local_server(tls=_server_tls(pem)) as srv:
        assert srv.url.startswith("https://")
        ok = RapiClient(srv.url, verify=str(pem), check_hostname=False)
        assert ok.request("GET", "/anything") == 1
        for bad in (
            RapiClient(srv.url, verify=str(other), check_hostname=False),
            RapiClient(srv.url),  # system CAs
            RapiClient(srv.url, verify=str(pem)),  # certificate names the cluster, not the IP
        ):
            with pytest.raises(RapiError, match="cannot reach RAPI at https://127.0.0.1:") as exc:
                bad.request("GET", "/anything")
            assert exc.value.status is None
            assert "TLS certificate not trusted" in str(exc.value) or "match" in str(exc.value)
        assert RapiClient(srv.url, verify=False).request("GET", "/x") == 1
    with pytest.raises(RapiError, match="cannot load the RAPI certificate"):
        RapiClient("https://127.0.0.1:1", verify=str(tmp_path / "missing.pem"))


def test_for_herder_cluster(tmp_path: Path) -> None:
    pem = _write_cert(tmp_path / "server.pem", "cluster.example.com")
    (tmp_path / "rapi_users").write_text(
        "# herder remote API users\n\nreader readpw read\nadmin s3cret write\n"
        "other {CLEARTEXT}clear read,write\nhashed {HA1}0123456789abcdef write\n"
    )
    with local_server(tls=_server_tls(pem)) as srv:
        client = RapiClient.for_herder_cluster(tmp_path, srv.url)
        assert client.username == "admin"
        client.request("GET", "/2/info")
        other = RapiClient.for_herder_cluster(tmp_path, srv.url, user="other")
        other.request("GET", "/2/info")
    import base64

    auths = [s.headers["Authorization"] for s in srv.seen]
    assert auths == [
        "Basic " + base64.b64encode(b"admin:s3cret").decode(),
        "Basic " + base64.b64encode(b"other:clear").decode(),
    ]
    with pytest.raises(RapiError, match=r"'hashed' .* \{HA1\} password; .*clear-text"):
        RapiClient.for_herder_cluster(tmp_path, user="hashed")
    with pytest.raises(RapiError, match="no RAPI user 'nobody'"):
        RapiClient.for_herder_cluster(tmp_path, user="nobody")
    assert read_rapi_users(tmp_path / "rapi_users")[0] == ("reader", "readpw", ["read"])
    with pytest.raises(RapiError, match="cannot read RAPI users file"):
        RapiClient.for_herder_cluster(tmp_path / "nowhere")
    (tmp_path / "server.pem").unlink()
    with pytest.raises(RapiError, match="server.pem is missing"):
        RapiClient.for_herder_cluster(tmp_path)


# ---- the live Ganeti vcluster ----

VCLUSTER_URL = "https://127.0.0.11:5080"
VCLUSTER_PASSWORD = Path("/tmp/vcluster/rapi-password")
VCLUSTER_CERT = Path("/tmp/vcluster/nodes/node1.vcluster.test/var/lib/ganeti/rapi.pem")


@pytest.fixture(scope="module")
def ganeti() -> Iterator[RapiClient]:
    """A client of a vcluster as freshly started, this module's alone (skips without the
    peers). Its tests put back what they change (a tag, a node's role), so the vcluster is
    passed on to the next module of the vcluster's unit (tests/conftest.py)."""
    from tests.ganeti.vcluster import running_vcluster

    with running_vcluster(reuse=True, keep=True) as vcl, \
            RapiClient(vcl.url, vcl.user, vcl.password, verify=False, timeout=60.0) as client:
        try:
            client.get_version()
        except RapiError as exc:
            pytest.fail(f"vcluster RAPI does not answer: {exc}")
        yield client


@pytest.fixture(scope="module")
def spare_node(ganeti: RapiClient) -> str:
    """A node that is not the master (safe to drain briefly): the first one (the shape
    sequence of test_rapi_shapes drains the last one)."""
    master = ganeti.get_info()["master"]
    return next(n for n in ganeti.get_nodes() if n != master)


@contextmanager
def restored_role(client: RapiClient, node: str) -> Iterator[str]:
    """Puts the node's role back afterwards (only one test per node may use this at a time)."""
    original = client.get_node_role(node)
    try:
        yield original
    finally:
        if client.get_node_role(node) != original:
            client.wait_for_job(client.set_node_role(node, original), timeout=120)


@pytest.mark.peer
def test_vcluster_info_version_features(ganeti: RapiClient) -> None:
    assert ganeti.get_version() == 2
    info = ganeti.get_info()
    assert info["software_version"].startswith("3.")
    assert info["master"] in ganeti.get_nodes()
    assert "instance-create-reqv1" in ganeti.get_features()


@pytest.mark.peer
def test_vcluster_nodes_bulk_and_not(ganeti: RapiClient) -> None:
    names = ganeti.get_nodes()
    assert names and all(isinstance(n, str) for n in names)
    bulk = ganeti.get_nodes(bulk=True)
    assert sorted(n["name"] for n in bulk) == sorted(names)
    assert {"name", "role", "drained", "offline", "master_candidate", "uuid"} <= set(bulk[0])
    node = ganeti.get_node(names[0])
    assert node["name"] == names[0]
    assert ganeti.get_groups() == [g["name"] for g in ganeti.get_groups(bulk=True)]
    assert isinstance(ganeti.get_instances(), list)
    jobs = ganeti.get_jobs()
    assert all(isinstance(j, int) for j in jobs)


@pytest.mark.peer
def test_vcluster_node_roles(ganeti: RapiClient) -> None:
    master = ganeti.get_info()["master"]
    assert ganeti.get_node_role(master) == "master"
    assert all(ganeti.get_node_role(n) in NODE_ROLES for n in ganeti.get_nodes())


@pytest.mark.peer
def test_vcluster_cluster_tag_round_trip(ganeti: RapiClient) -> None:
    tag = f"herder-test-{uuid.uuid4().hex[:8]}"
    logs: list[Any] = []
    try:
        job_id = ganeti.add_cluster_tags([tag])
        assert isinstance(job_id, int)
        job = ganeti.wait_for_job(job_id, timeout=120, on_log=logs.append, raise_on_error=True)
        assert job["status"] == "success" and job["id"] == job_id
        assert job["ops"][0]["OP_ID"] == "OP_TAGS_SET"
        assert tag in ganeti.get_cluster_tags()
    finally:
        done = ganeti.wait_for_job(ganeti.delete_cluster_tags([tag]), timeout=120)
    assert done["status"] == "success"
    assert tag not in ganeti.get_cluster_tags()


@pytest.mark.peer
def test_vcluster_drain_undrain_modify_and_job_status_fields(
    ganeti: RapiClient, spare_node: str
) -> None:
    with restored_role(ganeti, spare_node):
        job_id = ganeti.set_node_role(spare_node, "drained")
        job = ganeti.wait_for_job(job_id, timeout=120, raise_on_error=True)
        assert ganeti.get_node_role(spare_node) == "drained"
        assert ganeti.get_node(spare_node)["drained"] is True
        logs: list[Any] = []
        undrain = ganeti.wait_for_job(
            ganeti.set_node_role(spare_node, "regular"), timeout=120, on_log=logs.append
        )
        assert undrain["status"] == "success"
        assert ganeti.get_node_role(spare_node) in ("regular", "master-candidate")
        # The same through POST /2/nodes/<name>/modify (OpNodeSetParams fields). One test, so
        # that parallel workers never drain the same node at once.
        ganeti.wait_for_job(
            ganeti.modify_node(spare_node, drained=True), 120, raise_on_error=True
        )
        assert ganeti.get_node_role(spare_node) == "drained"
        ganeti.wait_for_job(
            ganeti.modify_node(spare_node, drained=False, auto_promote=True),
            120, raise_on_error=True,
        )
        assert ganeti.get_node_role(spare_node) != "drained"
    # Job status fields as Ganeti 3.0 reports them.
    assert {"id", "ops", "status", "summary", "opstatus", "opresult", "oplog",
            "received_ts", "start_ts", "end_ts"} <= set(job)
    assert job["status"] in JOB_STATUS_FINAL and job["opstatus"] == ["success"]
    for stamp in ("received_ts", "start_ts", "end_ts"):
        seconds, micros = job[stamp]  # [seconds, microseconds]
        assert isinstance(seconds, int) and 0 <= micros < 1_000_000
    op = job["ops"][0]
    assert op["OP_ID"] == "OP_NODE_SET_PARAMS" and op["drained"] is True
    source, _, stamp_ns = op["reason"][0]
    assert source.startswith("gnt:library:rlib2") and stamp_ns > 10**18  # nanoseconds
    # Log entries, when the job had any: [serial, [s, us], type, message].
    for serial, (_sec, _usec), kind, message in logs:
        assert isinstance(serial, int) and isinstance(message, str) and kind == "message"


@pytest.mark.peer
def test_vcluster_failed_job_and_http_errors(ganeti: RapiClient) -> None:
    job_id = ganeti.set_node_role("no-such-node.vcluster.test", "drained")
    job = ganeti.wait_for_job(job_id, timeout=120)
    assert job["status"] == "error"
    assert job["opresult"][0][0] == "OpPrereqError"
    with pytest.raises(RapiError, match=r"job \d+ error: OpPrereqError: Node .* not known") as exc:
        ganeti.wait_for_job(job_id, timeout=120, raise_on_error=True)
    assert exc.value.job_id == job_id
    master = ganeti.get_info()["master"]
    with pytest.raises(RapiError, match="400 Can't set 'bogus' role") as exc:
        ganeti.set_node_role(master, "bogus")
    assert exc.value.status == 400
    with pytest.raises(RapiError, match="404 Not Found") as exc:
        ganeti.get_node("no-such-node.invalid")
    assert exc.value.status == 404
    with pytest.raises(RapiError, match="not found") as exc:
        ganeti.get_job_status(10**8)
    assert exc.value.status == 404


@pytest.mark.peer
def test_vcluster_cancel_finished_job(ganeti: RapiClient) -> None:
    tag = f"herder-test-{uuid.uuid4().hex[:8]}"
    job_id = ganeti.add_cluster_tags([tag], dry_run=True)
    assert ganeti.wait_for_job(job_id, timeout=120)["status"] == "success"
    assert tag not in ganeti.get_cluster_tags()  # dry run
    ok, message = ganeti.cancel_job(job_id)
    assert ok is False and message
    with pytest.raises(RapiError, match=f"cannot cancel job {job_id}"):
        ganeti.cancel_job(job_id, check=True)


@pytest.mark.peer
def test_vcluster_credentials_required(ganeti: RapiClient) -> None:
    for client in (
        RapiClient(VCLUSTER_URL, "admin", "wrong-password", verify=False),
        RapiClient(VCLUSTER_URL, verify=False),
    ):
        with pytest.raises(RapiError, match="401 Unauthorized") as exc:
            client.get_info()
        assert exc.value.status == 401


@pytest.mark.peer
def test_vcluster_tls_against_its_certificate(ganeti: RapiClient) -> None:
    assert VCLUSTER_CERT.read_bytes().startswith(b"-----BEGIN")  # the started vcluster's
    password = VCLUSTER_PASSWORD.read_text().strip()
    good = RapiClient(VCLUSTER_URL, "admin", password, verify=str(VCLUSTER_CERT),
                      check_hostname=False)
    assert good.get_version() == 2
    with pytest.raises(RapiError, match="TLS certificate not trusted") as exc:
        RapiClient(VCLUSTER_URL, "admin", password).get_version()
    assert exc.value.status is None

