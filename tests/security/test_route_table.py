"""Every route of every HTTP daemon, generated from the routers themselves (issue 18).

Each daemon's aiohttp application is built as the daemon builds it and its router walked
(`app.router.routes()`): a route whose handler declares no rule (`core.access`) fails here, so
a route added later must say who may call it. Then, against the running application:

- unauthenticated callers, and read-only RAPI users, are refused every route that may change
  something, and nothing changed (no job queued, no incident canceled, no repair run, no node
  action, no notification taken);
- a signed message of one protocol (a confd request, a node RPC, a repair request, a diagnose
  report's signature, the notification token) is refused by every other protocol's receiver
  (noded's RPCs, mond's repair route, maintd's notifications, confd), while each is taken by
  its own receiver.

confd (UDP) has no router: its one receiver is checked with every foreign message.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from herder.confd.server import ConfdProcessor
from herder.core import (
    access,
    confd,
    console,
    envelope,
    login_backoff,
    notification,
    purpose_keys,
    rpcauth,
)
from herder.core.cluster_secrets import self_signed_certificate
from herder.core.rapi_users import UsersFile
from herder.core.reachability import Reachability
from herder.core.rpcdefs import node_calls
from herder.core.store import ConfigCache, FileStore
from herder.maintd import repair_client
from herder.maintd import server as maintd_server
from herder.maintd.daemon import Maintd
from herder.maintd.rounds import Instance
from herder.maintd.state import FileState
from herder.masterd.announce import Announcements
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.leases import Leases
from herder.masterd.rapi import app as rapi_app
from herder.masterd.rapi import base as rapi_base
from herder.mond import server as mond_server
from herder.mond.agent import Agent
from herder.mond.collectors.diagnose import signature
from herder.noded import rpc as noded_rpc
from herder.noded import server as noded_server
from herder.noded.node import Node, NodeSettings
from tests.conftest import build_config
from tests.maintd.fakes import FakeCluster, FakeSource
from tests.mond.test_repair_route import make_ctx, script

from .serving import Route, Served, resolves_to, routes, serving

KEY = b"0123456789abcdef0123456789abcdef01234567\n"
NODE = "node1.example.com"
WRITER, READER = ("admin", "s3cret"), ("viewer", "l00k")
U_A = "11111111-1111-4111-8111-111111111111"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mond's white-list needs root")
REFUSED = (400, 401, 403)  # a malformed request is refused before its signature is looked at


@dataclass
class Daemon:
    name: str
    app: web.Application
    table: access.Routes
    rules: frozenset[access.Rule]  # the rules this daemon's routes may declare
    tls: ssl.SSLContext | None = None


def users_file(directory: Path) -> Path:
    path = directory / "rapi_users"
    path.write_text(f"{WRITER[0]} {WRITER[1]} write\n{READER[0]} {READER[1]}\n")
    return path


def certificate(directory: Path) -> Path:
    path = directory / "server.pem"
    path.write_bytes(self_signed_certificate("cluster.example.com"))
    return path


@pytest.fixture
def masterd(tmp_path: Path) -> Iterator[tuple[Daemon, rapi_base.RapiContext]]:
    directory = tmp_path / "masterd"
    directory.mkdir()
    store = FileStore(directory / "config.json")
    store.create(build_config(3))
    # a queue that takes jobs and never runs them: what a refused request must not leave
    queue = JobQueue(directory / "queue", lambda ctx, op: None)
    ctx = rapi_base.RapiContext(config=ConfigCache(store.path), queue=queue,
                                users=UsersFile(users_file(directory)), store=store,
                                announce=Announcements(lambda: [KEY], Reachability()),
                                leases=Leases(lambda: [KEY]))
    # anyone: the web console's login page and files (tests/security/test_web_console.py)
    yield Daemon("masterd", rapi_app.make_app(ctx), rapi_base.ROUTES,
                 frozenset({access.ANYONE, access.RAPI_READ, access.RAPI_USER, access.RAPI_WRITE,
                            access.WEB_LOGIN, access.NODE_ANNOUNCE, access.NODE_LEASE})), ctx


@pytest.fixture
def noded(tmp_path: Path) -> Iterator[tuple[Daemon, Node]]:
    daemon = Node(NodeSettings(
        node_name=NODE, state_dir=tmp_path / "noded" / "state", run_dir=tmp_path / "noded" / "run",
        hmac_key=KEY, libvirt_uri="test:///default",
        file_root=tmp_path / "noded" / "root", config_dir=tmp_path / "noded" / "cluster"))
    yield Daemon("noded", noded_server.make_app(daemon), noded_server.ROUTES,
                 # ANYONE: GET /metrics only, a read (a joined node's TLS handshake asks for
                 # a certificate of the cluster CA before any route)
                 frozenset({access.NODE_RPC, access.NODE_CONSOLE, access.JOIN_TOKEN,
                            access.NODE_IMPORT, access.NODE_LEASE, access.ANYONE})), daemon
    daemon.hv.close()


@pytest.fixture
def mond(tmp_path: Path) -> Iterator[tuple[Daemon, Agent]]:
    whitelist = tmp_path / "repair-commands"
    whitelist.mkdir()
    script(whitelist, "ok", "exit 0")
    agent = Agent(make_ctx(tmp_path / "mond", whitelist), collectors={})
    yield Daemon("mond", mond_server.make_app(agent), mond_server.ROUTES,
                 frozenset({access.ANYONE, access.MOND_REPAIR})), agent


@pytest.fixture
def maintd(tmp_path: Path) -> Iterator[tuple[Daemon, Maintd]]:
    directory = tmp_path / "maintd"
    directory.mkdir()
    cluster = FakeCluster(4, [Instance("a", "node2", ("node3",), uuid=U_A,
                                       disk_template="sharedfile")])
    source = FakeSource()
    source.data["u2"] = {"status": "evacuate", "command": "", "details": {"disk": "sdb"}}
    daemon = Maintd(cluster, FileState(directory / "s.json"), [source], interval=0.01,
                    watcher=False)
    asyncio.run(daemon.tick())
    assert daemon.state.incidents  # something a cancel could change
    settings = maintd_server.NotifySettings(lambda: KEY,
                                            users=UsersFile(users_file(directory)))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(certificate(directory))
    yield Daemon("maintd", maintd_server.make_app(daemon, settings), maintd_server.ROUTES,
                 frozenset({access.ANYONE, access.NOTIFICATION, access.RAPI_WRITE}),
                 tls), daemon


def request(served: Served, route: Route, *, secure: bool = False, auth: Any = None,
            content: bytes | None = None, headers: dict[str, str] | None = None,
            method: str | None = None) -> httpx.Response:
    base = served.secure if secure else served.plain
    assert base is not None
    verb = method or (route.method if route.method != "*" else "POST")
    with httpx.Client(verify=False, timeout=30) as http:
        return http.request(verb, base + route.path, auth=auth, content=content,
                            headers=headers)


# --- every route declares who may call it -------------------------------------------------------


def test_every_route_of_every_daemon_declares_its_callers(masterd, noded, mond, maintd) -> None:
    for daemon in (masterd[0], noded[0], mond[0], maintd[0]):
        found = routes(daemon.app, daemon.table)
        assert found, daemon.name
        undeclared = [str(r) for r in found if r.rule is None]
        assert not undeclared, f"{daemon.name}: routes without an access rule: {undeclared}"
        for route in found:
            assert route.rule in daemon.rules, f"{daemon.name} {route}: {route.rule}"
            # nothing open to anyone may change anything; any method but GET is a change, but
            # Ganeti's PUT /2/query, a read for any RAPI user (rlib2: PUT_ACCESS = GET_ACCESS)
            if route.method not in ("GET", "*") and route.rule != access.RAPI_USER:
                assert route.rule is not None and route.rule.changes, f"{daemon.name} {route}"
            # the sample path really reaches this route
            reached = asyncio.run(resolves_to(daemon.app, route.method if route.method != "*"
                                              else "POST", route.path))
            assert reached == str(route), (daemon.name, route.path, reached)


def test_an_undeclared_route_is_refused_by_masterd(masterd) -> None:
    daemon, _ = masterd

    async def added_later(request: web.Request) -> web.Response:
        return web.json_response("changed")

    daemon.app.router.add_put("/2/added-later", added_later)
    (route,) = [r for r in routes(daemon.app, daemon.table) if r.rule is None]
    with serving(daemon.app) as served:
        answer = request(served, route, auth=WRITER)
        assert answer.status_code == 500 and "declares no access rule" in answer.text


# --- unauthenticated and read-only callers ---------------------------------------------------


def test_masterd_refuses_every_write_to_anonymous_and_read_only_callers(masterd) -> None:
    daemon, ctx = masterd
    serial = ctx.config().serial_no
    found = [r for r in routes(daemon.app, daemon.table)
             if r.rule not in (access.ANYONE, access.WEB_LOGIN, access.NODE_ANNOUNCE,
                               access.NODE_LEASE)]
    with serving(daemon.app) as served:
        for route in found:
            assert request(served, route).status_code == 401, route
            if route.rule == access.RAPI_WRITE:
                assert request(served, route, auth=READER).status_code == 403, route
                # refused, or held after a few (core.login_backoff): never let in
                assert request(served, route, auth=("admin", "wrong")).status_code in (401, 429)
        assert ctx.queue.job_ids() == [], "a refused request queued a job"
        assert FileStore(ctx.store.path).load().serial_no == serial
        ctx.anonymous_reads = True
        for route in found:
            if str(route) == "GET /2/os":
                continue  # a read that waits for its job: this queue never runs one (below)
            anonymous = request(served, route).status_code
            if route.rule in (access.RAPI_WRITE, access.RAPI_USER):
                assert anonymous == 401, route  # a query too: as Ganeti's, never anonymous
                if route.rule == access.RAPI_USER:
                    assert request(served, route, auth=READER).status_code not in (401, 403)
            else:
                assert anonymous not in (401, 403), route
                assert request(served, route, auth=READER).status_code not in (401, 403)
        # GET /2/os answers once its OP_OS_DIAGNOSE job ends: let in, it queued the job and
        # waits (a refusal is answered at once, never after a wait)
        for auth in (None, READER):
            queued = len(ctx.queue.job_ids())
            with pytest.raises(httpx.ReadTimeout), httpx.Client(verify=False,
                                                                 timeout=3) as http:
                http.get(served.plain + "/2/os", auth=auth)
            (job_id,) = ctx.queue.job_ids()[queued:]
            assert ctx.queue.cancel(job_id)[0]  # the waiting handler answers and ends
        # the writer gets through (the route's own answer: a job id, 400, 404, ...); the
        # wrong passwords above hold the writer's pair from this address for a few seconds
        ctx.backoff = login_backoff.Backoff()
        tags = next(r for r in found if str(r) == "PUT /2/tags")
        assert request(served, tags, auth=WRITER, method="PUT").status_code == 400


def test_masterd_takes_a_nodes_announcement_signed_for_that_node_only(masterd) -> None:
    daemon, ctx = masterd
    assert ctx.announce is not None
    record = ctx.announce.reachability
    node2 = ctx.config().find_node("node2")
    record.failed(node2.uuid, "connection refused")
    (route,) = [r for r in routes(daemon.app, daemon.table) if r.rule == access.NODE_ANNOUNCE]
    path = route.canonical.replace("{name}", node2.name)
    announce = Route(route.method, route.canonical, path, route.rule)

    def signed(node: str = node2.name, purpose: str = purpose_keys.NODE_ANNOUNCE,
               key: bytes = KEY) -> bytes:
        return rpcauth.sign_call(key, "node_announce", node, {}, purpose=purpose)

    with serving(daemon.app) as served:
        for body in [b"", b"{}", signed(purpose=purpose_keys.NODE_RPC),  # a node RPC's key
                     signed(node="node3.example.com"), signed(key=b"k" * 40)]:
            answer = request(served, announce, content=body)
            assert answer.status_code == 403, (body, answer.text)
        assert record.down(node2.uuid) is not None  # nothing refused changed the record
        body = signed()
        answer = request(served, announce, content=body)
        assert answer.status_code == 200 and answer.json()["was_unreachable"] is True
        assert record.down(node2.uuid) is None
        assert request(served, announce, content=body).status_code == 403  # replayed
        ghost = Route(route.method, route.canonical,
                      route.canonical.replace("{name}", "ghost.example.com"), route.rule)
        assert request(served, ghost, content=signed("ghost.example.com")).status_code == 404
    assert ctx.queue.job_ids() == []


def test_noded_refuses_every_unsigned_call(noded) -> None:
    daemon, node = noded
    methods = sorted(noded_rpc.handlers())
    assert "node_powercycle" in methods and "upload_file" in methods
    (route,) = [r for r in routes(daemon.app, daemon.table) if r.rule == access.NODE_RPC]
    (join_route,) = [r for r in routes(daemon.app, daemon.table) if r.rule == access.JOIN_TOKEN]
    before = sorted(p.relative_to(node.settings.state_dir)
                    for p in node.settings.state_dir.rglob("*"))
    with serving(daemon.app) as served:
        for method in [*methods, "no_such_rpc"]:
            call = Route("POST", route.canonical, f"/rpc/{method}", route.rule)
            for body in (b"", b"{}", json.dumps({"path": "/etc/x"}).encode()):
                assert request(served, call, content=body).status_code in REFUSED, method
        # the join steps that change something need the token's proof (this node has none)
        for step in ("request", "install", "no_such_step"):
            call = Route("POST", join_route.canonical, f"/join/{step}", join_route.rule)
            for body in (b"", b"{}", json.dumps({"challenge": "x", "proof": "y"}).encode()):
                assert request(served, call, content=body).status_code in (*REFUSED, 404), step
        assert not node.trust.joined()
        ping = Route("POST", route.canonical, "/rpc/ping", route.rule)
        good = rpcauth.sign_call(KEY, "ping", NODE, {})
        assert request(served, ping, content=good).status_code == 200  # the control
    after = sorted(p.relative_to(node.settings.state_dir)
                   for p in node.settings.state_dir.rglob("*"))
    assert node.powercycled == [] and before == after


def test_noded_opens_a_console_stream_only_for_the_masters_signed_call(noded) -> None:
    """The console websockets: no signed call, garbage, a call signed for the other stream,
    another node or another instance, or a replayed one are refused (403) before anything is
    looked up; the master's call passes the door (then: 409, the instance is not running)."""
    daemon, _node = noded
    found = [r for r in routes(daemon.app, daemon.table) if r.rule == access.NODE_CONSOLE]
    assert sorted(r.canonical for r in found) == ["/console/{instance}/serial",
                                                  "/console/{instance}/vnc"]
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}

    def signed(method: str, node: str, instance: str) -> dict[str, str]:
        body = rpcauth.sign_call(KEY, method, node, {"instance": instance})
        return {**upgrade, console.SIGNED_CALL_HEADER:
                base64.urlsafe_b64encode(body).decode()}

    with serving(daemon.app) as served:
        for route in found:
            instance = route.path.split("/")[2]
            kind = route.path.rsplit("/", 1)[-1]
            other = next(k for k in console.STREAM_KINDS if k != kind)
            method = console.STREAM_METHODS[kind]
            good = signed(method, NODE, instance)
            for headers in (upgrade, {**upgrade, console.SIGNED_CALL_HEADER: "!!"},
                            signed(console.STREAM_METHODS[other], NODE, instance),
                            signed(method, "node2.example.com", instance),
                            signed(method, NODE, "other.example.com"),
                            signed("ping", NODE, instance)):
                answer = request(served, route, headers=headers)
                assert answer.status_code == 403, (route, headers, answer.text)
                assert answer.headers[console.ERROR_HEADER].startswith("refused")
            answer = request(served, route, headers=good)
            assert answer.status_code == 409 and "not running" in answer.text, answer.text
            assert request(served, route, headers=good).status_code == 403  # a replay


@needs_root
def test_mond_refuses_every_unsigned_change(mond) -> None:
    daemon, _agent = mond
    with serving(daemon.app) as served:
        for route in routes(daemon.app, daemon.table):
            if route.rule is not None and route.rule.changes:
                for body in (b"", b"{}", json.dumps({"command": "ok"}).encode()):
                    assert request(served, route, content=body).status_code in REFUSED, route
            else:  # reads only: any other method is refused
                assert request(served, route, method="POST").status_code >= 400, route
        repairer = daemon.app[mond_server.REPAIR_KEY]
        assert repairer.completed == 0
        repair = next(r for r in routes(daemon.app, daemon.table) if r.rule == access.MOND_REPAIR)
        body = repair_client.build_request(KEY, "ok", None, str(uuid.uuid4()))
        assert request(served, repair, content=body).status_code == 200  # the control
        assert repairer.completed == 1


def test_maintd_refuses_every_change_but_over_https_with_credentials(maintd) -> None:
    daemon, state = maintd
    incident = state.state.incidents[0]
    received = len(state.notifications())
    note = notification.vm_notification("node2", U_A, "LIFECYCLE", "STOPPED_FAILED")
    with serving(daemon.app, daemon.tls) as served:
        for route in routes(daemon.app, daemon.table):
            if route.rule is not None and route.rule.changes:
                body = note.to_json()
                for secure, auth in [(False, None), (False, WRITER), (True, None),
                                     (True, READER), (True, ("admin", "wrong"))]:
                    answer = request(served, route, secure=secure, auth=auth, content=body)
                    assert answer.status_code in (401, 403), (route, secure, auth)
            else:
                for secure in (False, True):
                    assert request(served, route, secure=secure,
                                   method="POST").status_code >= 400, route
        assert incident.repair_status == "pending"
        assert len(state.notifications()) == received
        # the controls: a writer's cancel and a notification with the token, over HTTPS
        cancel = Route("POST", "/1/cancel/{uuid}", f"/1/cancel/{incident.uuid}",
                       access.RAPI_WRITE)
        assert request(served, cancel, secure=True, auth=WRITER).status_code == 200
        notify = Route("POST", "/1/notifications", "/1/notifications", access.NOTIFICATION)
        taken = request(served, notify, secure=True, content=note.to_json(),
                        headers={notification.TOKEN_HEADER: notification.token_for(KEY)})
        assert taken.status_code == 202


# --- no signed message of one protocol is taken by another -------------------------------------


def foreign_messages() -> dict[str, bytes]:
    """One genuine signed message of each protocol (bodies as their receivers get them)."""
    _, confd_packet = confd.build_request(confd.REQ_PING, None, KEY)
    stamp = int(time.time())
    report = {"status": "live-repair", "command": "ok", "details": {}}
    diagnose = signature(KEY, report, stamp)
    return {
        "confd request": confd_packet[len(envelope.MAGIC):],
        "diagnose report": json.dumps({"msg": envelope.dumps(report), "salt": str(stamp),
                                       "hmac": diagnose["hmac"]}).encode(),
        "node rpc": rpcauth.sign_call(KEY, "ping", NODE, {}),
        "node announcement": rpcauth.sign_call(KEY, "ping", NODE, {},
                                               purpose=purpose_keys.NODE_ANNOUNCE),
        "repair request": repair_client.build_request(KEY, "ok", None, str(uuid.uuid4()),
                                                      node=NODE),
    }


def hmac_of(body: bytes) -> str:
    return str(json.loads(body)["hmac"])


@needs_root
def test_no_signed_message_of_one_protocol_is_taken_by_another(noded, mond, maintd) -> None:
    messages = foreign_messages()
    node_daemon, node = noded
    mond_daemon, _ = mond
    maintd_daemon, _ = maintd
    repairer = mond_daemon.app[mond_server.REPAIR_KEY]
    methods = sorted(noded_rpc.handlers())
    assert "node_powercycle" in methods
    note = notification.vm_notification("node2", U_A, "LIFECYCLE", "STOPPED_FAILED")
    with serving(node_daemon.app) as noded_http, serving(mond_daemon.app) as mond_http, \
            serving(maintd_daemon.app, maintd_daemon.tls) as maintd_http:
        rpc = Route("POST", "/rpc/{method}", "", access.NODE_RPC)
        repair = Route("POST", "/1/repair", "/1/repair", access.MOND_REPAIR)
        notify = Route("POST", "/1/notifications", "/1/notifications", access.NOTIFICATION)
        for name, body in messages.items():
            if name != "node rpc":
                for method in methods:
                    call = Route("POST", rpc.canonical, f"/rpc/{method}", rpc.rule)
                    answer = request(noded_http, call, content=body)
                    assert answer.status_code == 403, (name, method)
            if name != "repair request":
                assert request(mond_http, repair, content=body).status_code == 403, name
            # a signature of any protocol is not the notification token
            token = {notification.TOKEN_HEADER: hmac_of(body)}
            answer = request(maintd_http, notify, secure=True, content=note.to_json(),
                             headers=token)
            assert answer.status_code == 401, name
        # each is taken by its own receiver (so the refusals above are no accident)
        ping = Route("POST", rpc.canonical, "/rpc/ping", rpc.rule)
        assert request(noded_http, ping, content=messages["node rpc"]).status_code == 200
        assert request(mond_http, repair, content=messages["repair request"]).status_code == 200
    assert node.powercycled == [] and repairer.completed == 1
    processor = ConfdProcessor(lambda: build_config(3), KEY)
    for name, body in messages.items():
        if name != "confd request":
            assert processor.process(envelope.pack(body)) is None, name
            assert processor.process(body) is None, name
    assert processor.process(envelope.MAGIC + messages["confd request"]) is not None
    # and the token is no signature anywhere
    token_body = json.dumps({"msg": "{}", "salt": "1",
                             "hmac": notification.token_for(KEY)}).encode()
    assert processor.process(envelope.pack(token_body)) is None



def test_masterd_records_a_nodes_heartbeat_signed_for_that_node_only(masterd) -> None:
    daemon, ctx = masterd
    assert ctx.leases is not None
    node2 = ctx.config().find_node("node2")
    (route,) = [r for r in routes(daemon.app, daemon.table) if r.rule == access.NODE_LEASE]
    beat = Route(route.method, route.canonical,
                 route.canonical.replace("{name}", node2.name), route.rule)

    def signed(node: str = node2.name, purpose: str = purpose_keys.NODE_LEASE,
               key: bytes = KEY) -> bytes:
        return rpcauth.sign_call(key, "node_lease", node, {"counter": 1}, purpose=purpose)

    before = ctx.leases.ages([node2.uuid])[node2.uuid]
    with serving(daemon.app) as served:
        for body in [b"", b"{}", signed(purpose=purpose_keys.NODE_ANNOUNCE),  # another key
                     signed(node="node3.example.com"), signed(key=b"k" * 40)]:
            answer = request(served, beat, content=body)
            assert answer.status_code == 403, (body, answer.text)
        assert ctx.leases.ages([node2.uuid])[node2.uuid] >= before  # nothing was recorded
        body = signed()
        answer = request(served, beat, content=body)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"node": node2.name, "offline": False, "lease": 6.0}
        assert ctx.leases.ages([node2.uuid])[node2.uuid] < 1.0
        assert request(served, beat, content=body).status_code == 409  # replayed
    assert ctx.queue.job_ids() == []


def test_a_candidates_noded_witnesses_a_lease_signed_for_that_node_only(noded) -> None:
    daemon, node = noded
    from herder.core import ssconf

    node.data_dir.mkdir(parents=True, exist_ok=True)
    caller = "node2.example.com"
    (route,) = [r for r in routes(daemon.app, daemon.table) if r.rule == access.NODE_LEASE]
    lease = Route(route.method, route.canonical, route.canonical.replace("{name}", caller),
                  route.rule)

    counter = iter(range(1, 100))

    def signed(name: str = caller, purpose: str = purpose_keys.NODE_LEASE,
               key: bytes = KEY) -> bytes:
        return rpcauth.sign_call(key, "node_lease", name, {"counter": next(counter)},
                                 purpose=purpose)

    with serving(daemon.app) as served:
        # not a master candidate (no ssconf yet): it witnesses nothing
        assert request(served, lease, content=signed()).status_code == 409
        ssconf.path("master_candidates", node.data_dir).write_text(f"{NODE}\n{caller}\n")
        for body in [b"", signed(purpose=purpose_keys.NODE_ANNOUNCE),
                     signed(name="node3.example.com"), signed(key=b"k" * 40)]:
            answer = request(served, lease, content=body)
            assert answer.status_code == 403, (body, answer.text)
        assert node.witness.age(caller) is None
        ssconf.path("offline_nodes", node.data_dir).write_text(f"{caller}\n")
        assert request(served, lease, content=signed()).status_code == 409
        assert node.witness.age(caller) is None
        ssconf.path("offline_nodes", node.data_dir).write_text("")
        body = signed()
        answer = request(served, lease, content=body)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"result": {"candidate": NODE}}
        age = node.witness.age(caller)
        assert age is not None and age < 5
        assert request(served, lease, content=body).status_code == 409  # replayed
    # the master's question about it: when it asked, and whether its noded answers
    found = noded_rpc.dispatch(node, "node_reachable",
                               {"node": caller, "address": "127.0.0.1", "timeout": 1})
    assert isinstance(found, node_calls.ReachableAnswer)
    assert isinstance(found.reachable, bool) and found.asked_age is not None

# --- docs/security.md covers every route ---------------------------------------------------------


def test_security_md_names_every_route_with_its_rule(masterd, noded, mond, maintd) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    rows: dict[str, dict[str, str]] = {}  # daemon (its "### " section) -> route -> rule
    section = ""
    for line in text.splitlines():
        if line.startswith("### "):
            section = line.removeprefix("### ").split()[0]
        elif line.startswith("| `") and section:
            cells = line.split("|")
            rows.setdefault(section, {})[cells[1].strip()] = cells[2].strip()
    missing = []
    for daemon in (masterd[0], noded[0], mond[0], maintd[0]):
        table = rows.get(daemon.name, {})
        for route in routes(daemon.app, daemon.table):
            key = f"`{route.method} {route.canonical}`"
            assert route.rule is not None
            if table.get(key) != route.rule.name:
                missing.append(f"{daemon.name}: {key} ({route.rule.name}): "
                               f"{table.get(key, 'no row')}")
    assert not missing, "docs/security.md's tables lack or misstate:\n" + "\n".join(missing)
    methods = sorted(noded_rpc.handlers())
    assert "ping" in methods
    for method in methods:
        assert f"`{method}`" in text, f"docs/security.md does not name noded's {method}"
