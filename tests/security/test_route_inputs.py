"""No route of masterd ignores a parameter it was given (issue 32): every route, walked from
the router itself, refuses a query parameter it does not read, and every route that reads a
JSON object body refuses a field it does not know, with 400 in Ganeti's error shape and
nothing queued. Routes whose body is not a JSON object of fields (a node role string, a tag
list, the web console's login form, a node's signed announcement or heartbeat) are refused
such a body as well, by their own checks.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herder.masterd.jobs import opcodes
from herder.masterd.rapi import base as rapi_base
from tests.security.serving import Route, routes, serving
from tests.security.test_route_table import WRITER, Daemon, masterd  # noqa: F401

# A sample object for each placeholder, by the collection it follows in the path
OBJECT_OF = {"nodes": "node1.example.com", "instances": "drbd0.example.com",
             "groups": "default", "jobs": "1", "query": "node"}
# Bodies a route needs besides the unknown field for that field to be what it refuses
BASE_BODY: dict[str, dict[str, Any]] = {"POST /2/instances": {"__version__": 1}}
# Field names some route knows (every opcode's field, Ganeti's aliases, herder's routes'):
# never drawn, so a drawn name is unknown to every route
KNOWN_FIELDS = frozenset({
    "__version__", "name", "os", "start", "ops", "fields", "qfilter", "filter",
    "previous_job_info", "previous_log_serial", "incidents", "jobs", "evacuated", "intents",
    "seen", "enabled", "harep", "balance", "custom_beparams", "custom_hvparams",
    "custom_osparams", "custom_ndparams", "custom_ipolicy", "custom_diskparams", "nics",
    "pnode", *(field for op in opcodes.ALL_OPCODES for field in op.__struct_fields__)})
# the served daemon is a function-scoped fixture shared by a test's examples (nothing it
# changes is kept: refused requests queue nothing)
ROUTE_EXAMPLES = settings(max_examples=80, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
NAMES = st.text(alphabet=string.ascii_lowercase + "_-", min_size=1, max_size=12)


def concrete(route: Route) -> str:
    """The route's path with each placeholder an object of build_config's cluster."""
    def value(match: re.Match[str]) -> str:
        before = route.canonical[:match.start()].rstrip("/").rsplit("/", 1)[-1]
        name = match.group(1)
        if name == "kind":
            return "nodes"
        if name == "disk":
            return "0"
        if before == "{kind}":  # the tag routes: a node's tags
            return OBJECT_OF["nodes"]
        return OBJECT_OF.get(before, route.path.split("/")[-1])

    return re.sub(r"\{(\w+)[^}]*\}", value, route.canonical)


@dataclass
class Served:
    url: str
    table: list[Route]
    ctx: rapi_base.RapiContext
    handlers: dict[tuple[str, str], Any]  # (method, canonical) -> the route's handler

    def handler(self, route: Route) -> Any:
        return self.handlers[(route.method, route.canonical)]


@pytest.fixture
def served(masterd: tuple[Daemon, rapi_base.RapiContext]) -> Iterator[Served]:  # noqa: F811
    daemon, ctx = masterd
    ctx.queue.recover()  # the queue's directory, for the jobs an accepted request queues
    table = [r for r in routes(daemon.app, daemon.table) if r.method != "*"]
    handlers = {(r.method, r.resource.canonical): r.handler
                for r in daemon.app.router.routes() if r.resource is not None}
    with serving(daemon.app) as server:
        yield Served(server.plain, table, ctx, handlers)


def test_every_route_declares_what_it_reads(
        served: Served) -> None:
    """The new routes are in the table the tests below walk; every route takes `reason`, and
    a route takes `dry-run` exactly when it submits jobs (or is herder's job route)."""
    app_routes = {(r.method, r.canonical) for r in served.table}
    assert ("POST", "/2/instances-multi-alloc") in app_routes
    assert ("GET", "/2/os") in app_routes
    assert ("PUT", "/2/groups/{name}/assign-nodes") in app_routes
    for route in served.table:
        taken = rapi_base.query_taken(served.handler(route))
        assert "reason" in taken
        submits = route.canonical in ("/2/herder/jobs",) or \
            served.handler(route) in rapi_base._SUBMITS
        assert ("dry-run" in taken) == submits, route


@ROUTE_EXAMPLES
@given(data=st.data())
def test_unknown_query_parameters_are_refused(
        served: Served, data: st.DataObject) -> None:
    url, ctx = served.url, served.ctx
    route = data.draw(st.sampled_from(served.table), label="route")
    taken = rapi_base.query_taken(served.handler(route))
    name = data.draw(NAMES.filter(lambda n: n not in taken),
                     label="parameter")
    before = list(ctx.queue.job_ids())
    answer = httpx.request(route.method, url + concrete(route), params={name: "1"},
                           auth=WRITER, timeout=30)
    assert answer.status_code == 400, (route, name, answer.text)
    assert name in answer.json()["explain"] and answer.json()["code"] == 400
    assert list(ctx.queue.job_ids()) == before


@ROUTE_EXAMPLES
@given(data=st.data())
def test_unknown_body_fields_are_refused(
        served: Served, data: st.DataObject) -> None:
    url, ctx = served.url, served.ctx
    route = data.draw(st.sampled_from(served.table), label="route")
    name = data.draw(NAMES.filter(lambda n: n not in KNOWN_FIELDS), label="field")
    before = list(ctx.queue.job_ids())
    body = {**BASE_BODY.get(f"{route.method} {route.canonical}", {}), name: 1}
    answer = httpx.request(route.method, url + concrete(route), json=body, auth=WRITER,
                           timeout=30, follow_redirects=False)
    assert list(ctx.queue.job_ids()) == before, (route, name)
    if route.rule is not None and route.rule.name in ("node-announce", "node-lease"):
        assert answer.status_code == 403  # its body is a signed call, and this one is not
        return
    if route.rule is not None and route.rule.name == "web-login":
        # a form, not JSON fields (404: this daemon serves no web console)
        assert answer.status_code in (303, 400, 401, 403, 404)
        return
    assert answer.status_code == 400, (route, name, answer.text)
    explain = answer.json()["explain"]
    if rapi_base.body_taken(served.handler(route)) and route.canonical not in (
            "/2/nodes/{name}/role", "/2/tags", "/2/{kind}/{name}/tags"):
        assert name in explain, (route, explain)
    else:
        assert "body" in explain


def test_replace_disks_takes_its_query_string(served: Served) -> None:
    """Ganeti's ReplaceInstanceDisks: mode, remote_node, disks (comma separated) in the query
    string are the opcode's (the silent replace_auto of all disks is gone)."""
    url, ctx = served.url, served.ctx
    answer = httpx.post(url + "/2/instances/drbd0.example.com/replace-disks",
                        params={"mode": "replace_new_secondary",
                                "remote_node": "node3.example.com", "disks": "0"},
                        auth=WRITER, timeout=30)
    assert answer.status_code == 200, answer.text
    op = ctx.queue.info(answer.json(), ["ops"])["ops"][0]
    assert (op["mode"], op["remote_node"], op["disks"]) == \
        ("replace_new_secondary", "node3.example.com", [0])
    refused = httpx.post(url + "/2/instances/drbd0.example.com/replace-disks",
                         params={"mode": "replace_auto"}, json={"mode": "replace_on_primary"},
                         auth=WRITER, timeout=30)
    assert refused.status_code == 400 and "both" in refused.json()["explain"]
    bad = httpx.post(url + "/2/instances/drbd0.example.com/replace-disks",
                     params={"disks": "0,x"}, auth=WRITER, timeout=30)
    assert bad.status_code == 400 and "disk indexes" in bad.json()["explain"]


def test_instance_creation_refuses_modes_it_cannot_do(served: Served) -> None:
    """Ganeti's `mode: import` needs the export (src_node, src_path) and remote-import the
    source cluster's handshake, CA and instance: a 400 naming what is missing, nothing queued; a
    multi-allocation creates only (an import there: 400 naming the mode)."""
    url, ctx = served.url, served.ctx
    body = {"name": "web9.example.com", "disk_template": "plain", "disks": [{"size": 1024}],
            "nics": [], "os": "debootstrap+default", "mode": "import"}
    before = list(ctx.queue.job_ids())
    answer = httpx.post(url + "/2/instances", json={"__version__": 1, **body}, auth=WRITER,
                        timeout=30)
    assert answer.status_code == 400 and "src_node and src_path" in answer.json()["explain"]
    remote = httpx.post(url + "/2/instances", auth=WRITER, timeout=30, json={
        "__version__": 1, **body, "mode": "remote-import"})
    assert remote.status_code == 400 and \
        "mode remote-import needs source_handshake" in remote.json()["explain"]
    multi = httpx.post(url + "/2/instances-multi-alloc", json={"instances": [body]},
                       auth=WRITER, timeout=30)
    assert multi.status_code == 400 and "'import'" in multi.json()["explain"]
    assert list(ctx.queue.job_ids()) == before
