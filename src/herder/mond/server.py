"""mond's HTTP API, protocol v1 (design "Format of the query"), served from the agent's cache.

GET: `/` -> `[1]`; `/1` -> `null`; `/1/list/collectors` -> `[[name, category, kind], ...]`
(Ganeti's order inside the triples); `/1/report/all` (herder extension: `?only=CATEGORY/NAME,...`
gives only those reports, in that order, each once, at most `MAX_ONLY` names);
`/1/report/<category>/<name>`
(`default` for collectors without a category); `?verbose=1` gives status collectors' full data.
Also `/metrics` (Prometheus text) and `/openapi.json`. Unknown resources get a JSON 404 whose
message differs for "unknown collector" and "unknown path" (as Ganeti's agent); other methods a
JSON 405. Every JSON answer has a JSON content type.

POST `/1/repair` (herder extension, off unless the local config's `[repair] enabled = true`):
maintd's live-repair. An HMAC-signed (the repair key, derived from the cluster key:
`herder.core.envelope`'s format) request `{"command", "input", "event", "timestamp" (int ns),
"node"}` runs the white-listed command `command` from
`[repair] commands_dir` with `input` as JSON on stdin and `HERDER_REPAIR_EVENT=<event>`, one at a
time, with a timeout; 200 `{"event", "command", "exit_code", "stdout", "stderr", "duration",
"timed_out"}`. Refusals: 403 disabled / bad or missing signature / replay / unsafe command, 400
malformed, 404 unknown command, 409 busy. Details in `herder.mond.repair`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from herder.core import access
from herder.core import serve as serve_helper
from herder.mond import metrics
from herder.mond.agent import Agent
from herder.mond.context import make_context
from herder.mond.localconf import Resolved
from herder.mond.repair import Repairer
from herder.mond.report import CATEGORIES, DEFAULT_CATEGORY

log = logging.getLogger("herder.mond")
JSON = "application/json"
MAX_ONLY = 256  # report names one `only=` request may give (repeats counted)
AGENT_KEY = web.AppKey("agent", Agent)
REPAIR_KEY = web.AppKey("repair", Repairer)
_encode = msgspec.json.Encoder().encode
ROUTES = access.Routes("mond")  # who may call each route (tests/security walks the router)


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type=JSON)


def _error(status: int, error: str, message: str) -> web.Response:
    return _json(_encode({"error": error, "message": message}), status)


def _verbose(request: web.Request) -> bool:
    return request.query.get("verbose", "0").lower() in ("1", "true", "yes")


@ROUTES.allow(access.ANYONE)
async def root(request: web.Request) -> web.Response:
    return _json(b"[1]")


@ROUTES.allow(access.ANYONE)
async def version1(request: web.Request) -> web.Response:
    return _json(b"null")


@ROUTES.allow(access.ANYONE)
async def list_collectors(request: web.Request) -> web.Response:
    return _json(request.app[AGENT_KEY].listing)


@ROUTES.allow(access.ANYONE)
async def report_all(request: web.Request) -> web.Response:
    agent = request.app[AGENT_KEY]
    verbose = _verbose(request)
    asked = request.query.getall("only", None)
    if asked is None:
        return _json(agent.all_verbose if verbose else agent.all_summary)
    # herder extension: only the named reports (CATEGORY/NAME,...), in the order first named,
    # each once (a name repeated in a small request must not multiply a large answer);
    # unknown ones are left out. maintd's one poll per tick asks for the three it uses.
    paths = [path for only in asked for path in only.split(",")]
    if len(paths) > MAX_ONLY:
        return _error(400, "bad request", f"only= names {len(paths)} reports; at most "
                                          f"{MAX_ONLY}")
    found = [agent.by_path.get((category, name)) for category, _, name in
             (path.partition("/") for path in dict.fromkeys(paths))]
    bodies = [r.verbose if verbose else r.summary for r in found if r is not None]
    return _json(b"[" + b",".join(bodies) + b"]")


@ROUTES.allow(access.ANYONE)
async def report_one(request: web.Request) -> web.Response:
    agent = request.app[AGENT_KEY]
    category, name = request.match_info["category"], request.match_info["name"]
    cached = agent.by_path.get((category, name))
    if cached is None:
        known = (*CATEGORIES, DEFAULT_CATEGORY)
        why = (f"no active collector {name!r} in category {category!r}"
               if category in known else
               f"unknown category {category!r} (categories are lowercase: {', '.join(known)})")
        return _error(404, "unknown collector",
                      f"Unable to produce a report for the requested resource: {why}")
    return _json(cached.verbose if _verbose(request) else cached.summary)


@ROUTES.allow(access.ANYONE)
async def report_bad_path(request: web.Request) -> web.Response:
    return _error(404, "unknown collector",
                  "Unable to produce a report for the requested resource: use "
                  "/1/report/all or /1/report/<category>/<name>")


@ROUTES.allow(access.ANYONE)
async def prometheus(request: web.Request) -> web.Response:
    body = metrics.exposition(request.app[AGENT_KEY])
    return web.Response(body=body, content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})


@ROUTES.allow(access.ANYONE)
async def openapi(request: web.Request) -> web.Response:
    return _json(OPENAPI_BODY)


@web.middleware
async def json_errors(request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as err:
        allowed = "POST" if "POST" in err.allowed_methods else "GET"
        return web.Response(
            body=_encode({"error": "method not allowed",
                          "message": f"{request.method} is not supported; use {allowed}"}),
            status=405, content_type=JSON,
            headers={"Allow": "POST" if allowed == "POST" else "GET, HEAD"},
        )
    except web.HTTPNotFound:
        return _error(404, "unknown path", f"Resource not found: {request.path}")


def make_app(agent: Agent) -> web.Application:
    app = web.Application(middlewares=[json_errors])
    app[AGENT_KEY] = agent
    routes = [
        ("/", root), ("/1", version1), ("/1/", version1),
        ("/1/list/collectors", list_collectors),
        ("/1/report/all", report_all),
        ("/1/report/{category}/{name}", report_one),
        ("/1/report", report_bad_path), ("/1/report/{tail:.*}", report_bad_path),
        ("/metrics", prometheus), ("/openapi.json", openapi),
    ]
    for path, handler in routes:
        app.router.add_get(path, handler)
    settings = agent.ctx.settings
    repairer = Repairer(settings.repair, agent.ctx.hmac_key, state_dir=settings.run_dir,
                        node_name=agent.ctx.node_name)
    app[REPAIR_KEY] = repairer
    app.router.add_post("/1/repair", ROUTES.declare(repairer.handle, access.MOND_REPAIR))

    async def kill_repair(app: web.Application) -> None:
        app[REPAIR_KEY].kill()

    app.on_shutdown.append(kill_repair)
    return app


async def serve(agent: Agent, host: str, port: int, *, ready: Callable[[int], None] | None = None,
                stop: asyncio.Event | None = None) -> None:
    """Run the agent and the HTTP server until `stop` is set (or the task is cancelled)."""
    await serve_helper.serve(
        "mond", agent.ctx.settings.run_dir,
        endpoints=[serve_helper.Http(make_app(agent), [serve_helper.Listener(
            host, port, backlog=1024)], routes=ROUTES)],
        tasks=[agent.run], on_stop=[agent.close],
        ready=None if ready is None else lambda bound: ready(bound[0].port), stop=stop)


def run(resolved: Resolved, config_path: str | Path, local_config: Path | None,
        say: Callable[[str], None]) -> None:
    """Build the agent from the resolved settings and serve it until SIGTERM/SIGINT; `say`
    prints the line that tells it listens (and where its settings come from)."""
    settings = resolved.settings
    context = make_context(config_path, node_name=resolved.node, settings=settings)
    agent = Agent(context)
    source = f"config {config_path}"
    if settings.confd_peers:
        source += f", else confd {', '.join(settings.confd_peers)}"
    if local_config is not None:
        source += f"; local config {local_config}"
    if settings.repair.enabled:
        source += f"; repair enabled ({settings.repair.commands_dir})"

    def ready(bound: int) -> None:
        say(f"herder mond: node {context.node_name}, listening on "
            f"http://{resolved.bind}:{bound}/ ({source})")

    serve_helper.run(lambda stop: serve(agent, resolved.bind, resolved.port, ready=ready,
                                        stop=stop))


OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "herder mond: node monitoring agent", "version": "1",
             "description": "Ganeti monitoring agent protocol v1 "
                            "(design-monitoring-agent), served from a cache."},
    "paths": {
        "/": {"get": {"summary": "Supported protocol versions",
                      "responses": {"200": {"description": "[1]",
                                            "content": {JSON: {"schema": {
                                                "type": "array",
                                                "items": {"type": "integer"}}}}}}}},
        "/1": {"get": {"summary": "Root of protocol v1 (null)",
                       "responses": {"200": {"description": "null"}}}},
        "/1/list/collectors": {"get": {
            "summary": "Active collectors as [name, category or 'default', kind]",
            "responses": {"200": {"description": "list", "content": {JSON: {"schema": {
                "type": "array", "items": {"type": "array", "minItems": 3, "maxItems": 3}}}}}}}},
        "/1/report/all": {"get": {
            "summary": "Every active collector's report",
            "parameters": [
                {"$ref": "#/components/parameters/verbose"},
                {"name": "only", "in": "query", "required": False,
                 "description": "herder extension: only these reports, comma-separated "
                                "CATEGORY/NAME ('default' for no category), in that order; "
                                "unknown ones are left out",
                 "schema": {"type": "string"}}],
            "responses": {"200": {"description": "reports", "content": {JSON: {"schema": {
                "type": "array", "items": {"$ref": "#/components/schemas/Report"}}}}}}}},
        "/1/report/{category}/{name}": {"get": {
            "summary": "One collector's report ('default' for collectors without a category)",
            "parameters": [
                {"name": "category", "in": "path", "required": True,
                 "schema": {"type": "string",
                            "enum": [*CATEGORIES, DEFAULT_CATEGORY]}},
                {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                {"$ref": "#/components/parameters/verbose"}],
            "responses": {
                "200": {"description": "report", "content": {JSON: {"schema": {
                    "$ref": "#/components/schemas/Report"}}}},
                "404": {"description": "no such active collector",
                        "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}}}}}},
        "/metrics": {"get": {"summary": "The cached data in Prometheus text format",
                             "responses": {"200": {"description": "text/plain"}}}},
        "/1/repair": {"post": {
            "summary": "herder extension: run a white-listed live-repair command (maintd); "
                       "off unless [repair] enabled = true in mond's config",
            "requestBody": {"required": True, "content": {JSON: {"schema": {
                "$ref": "#/components/schemas/SignedEnvelope"}}}},
            "responses": {
                "200": {"description": "the command ran", "content": {JSON: {"schema": {
                    "$ref": "#/components/schemas/RepairResult"}}}},
                **{code: {"description": what, "content": {JSON: {"schema": {
                    "$ref": "#/components/schemas/Error"}}}}
                   for code, what in (
                       ("400", "malformed request"),
                       ("403", "disabled, bad or missing signature, replay, unsafe command"),
                       ("404", "command not in the white-list"),
                       ("409", "a repair is already running"),
                       ("503", "no HMAC key on this node"))}}}},
    },
    "components": {
        "parameters": {"verbose": {
            "name": "verbose", "in": "query", "required": False,
            "description": "1: status collectors give all their data, not only status",
            "schema": {"type": "string", "enum": ["0", "1"]}}},
        "schemas": {
            "Report": {"type": "object",
                       "required": ["name", "version", "format_version", "timestamp",
                                    "category", "kind", "data"],
                       "properties": {
                           "name": {"type": "string"}, "version": {"type": "string"},
                           "format_version": {"type": "integer"},
                           "timestamp": {"type": "integer",
                                         "description": "ns since the epoch"},
                           "category": {"type": "string", "nullable": True},
                           "kind": {"type": "integer", "enum": [0, 1]},
                           "data": {},
                           "signature": {"type": "object", "nullable": True,
                                         "description": "diagnose only: HMAC over data"}}},
            "SignedEnvelope": {
                "type": "object", "required": ["msg", "salt", "hmac"],
                "description": "msg: JSON text of {command, input, event (uuid), timestamp "
                               "(int ns since the epoch)}; hmac: hex HMAC-SHA1(cluster key, "
                               "salt + msg)",
                "properties": {"msg": {"type": "string"}, "salt": {"type": "string"},
                               "hmac": {"type": "string"}}},
            "RepairResult": {
                "type": "object",
                "required": ["event", "command", "exit_code", "stdout", "stderr", "duration",
                             "timed_out"],
                "properties": {
                    "event": {"type": "string"}, "command": {"type": "string"},
                    "exit_code": {"type": "integer", "nullable": True,
                                  "description": "negative: killed by that signal"},
                    "stdout": {"type": "string", "description": "last 4 KiB"},
                    "stderr": {"type": "string", "description": "last 4 KiB"},
                    "duration": {"type": "number", "description": "seconds"},
                    "timed_out": {"type": "boolean"}}},
            "Error": {"type": "object", "required": ["error", "message"],
                      "properties": {"error": {"type": "string"},
                                     "message": {"type": "string"}}},
        },
    },
}
OPENAPI_BODY = _encode(OPENAPI)
