"""The RAPI's plumbing, shared by every route module of `masterd.rapi` (it imports none of
them): the context a handler sees (`RapiContext`, `ctx_of`, `config_of`, `live_of`), Ganeti's
error shape (`RapiHttpError`, `error_response`), the helpers handlers share (the request
body, lookups, `submit` of a job, the opcode fields a body may set, `@submits`), the route
table `ROUTES` (who may call each handler) and the middleware enforcing it before any handler
runs: reads need valid credentials (HTTP Basic against `rapi_users`, or a web console
session) unless anonymous reads are on (the cluster's `rapi_anonymous_reads`); writes, and as
in Ganeti's rlib2 the reads that run a job with locks or block, need a user with the `write`
option (401 without credentials, 403 for a read-only user). A parameter naming a file herder
would read and distribute must lie in the cluster's hypervisor file directory
(`masterd.hvfiles`, 400 otherwise).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import msgspec
from aiohttp import web

from herder.core import access, login_backoff, model, reason, rpcauth, untrusted
from herder.core.errors import (
    AmbiguousError,
    ConfigError,
    HerderError,
    NotFoundError,
    OpPrereqError,
    SignatureError,
)
from herder.core.noderpc import NodeRpc
from herder.core.rapi_users import REALM, User, UsersFile
from herder.core.store import ConfigStore
from herder.masterd import hvfiles
from herder.masterd.announce import Announcements
from herder.masterd.jobs import opcodes
from herder.masterd.jobs import queue as job_queue
from herder.masterd.leases import Leases
from herder.masterd.livecache import EMPTY, LiveCache, Snapshot
from herder.masterd.queries.fields import LockSource
from herder.masterd.submissions import SubmissionLimits
from herder.masterd.web import auth as web_auth
from herder.masterd.web.context import WebContext

log = logging.getLogger("herder.rapi")
JSON = "application/json"
MAX_BODY = 4 * 1024 * 1024  # bytes of a request body
_encode = msgspec.json.Encoder().encode
ROUTES = access.Routes("masterd")  # who may call each route: enforced by the middleware
Found = TypeVar("Found")


class ConfigView(Protocol):
    """The config as the RAPI answers it: the last good one (None when there is none), and
    why the current one did not load (`store.ConfigCache`, `etcd_master.EtcdConfigCache`)."""

    error: str | None

    def __call__(self) -> model.ConfigData | None:
        ...


@dataclass
class RapiContext:
    config: ConfigView
    queue: job_queue.JobQueue
    users: UsersFile
    # masterd --anonymous-reads: GETs without credentials whatever the cluster says (tests)
    anonymous_reads: bool = False
    store: ConfigStore | None = None  # for herder's direct state routes
    live: LiveCache | None = None  # the node daemons' live figures (masterd/livecache.py)
    rpc: NodeRpc | None = None  # to the node daemons (the console routes, masterd/rapi/console.py)
    web: WebContext | None = None  # the web console: logins, node samples (masterd/web/)
    # the nodes' announcements that they are up (masterd/announce.py); None: refused
    announce: Announcements | None = None
    # wrong passwords lately, and the holds they set (HTTP Basic and the web console's login)
    backoff: login_backoff.Backoff = field(default_factory=login_backoff.Backoff)
    # each user's job submissions (masterd/submissions.py)
    submissions: SubmissionLimits = field(default_factory=SubmissionLimits)
    # the nodes' liveness leases (masterd/leases.py); None: heartbeats refused
    leases: Leases | None = None

    # masterd's locks, for the lock query (masterd/queries/lock.py); None: none shown
    locks: LockSource | None = None

    @property
    def reads_open(self) -> bool:
        """Whether GET requests without credentials are answered: the cluster setting
        `rapi_anonymous_reads` (Ganeti's behaviour, off unless turned on) or masterd's
        `--anonymous-reads`. Readers see what read-only users see: secrets redacted."""
        if self.anonymous_reads:
            return True
        config = self.config()
        return config is not None and config.cluster.rapi_anonymous_reads

    @property
    def hv_files_dir(self) -> Path | None:
        """Where files named by hypervisor parameters must lie (None: no store, none may)."""
        return hvfiles.directory(self.store.directory) if self.store is not None else None


CTX_KEY = web.AppKey("rapi", RapiContext)


class RapiHttpError(Exception):
    def __init__(self, status: int, explain: str, retry: float | None = None) -> None:
        super().__init__(explain)
        self.status = status
        self.explain = explain
        self.retry = retry  # seconds: the answer's Retry-After (429, 503)


MESSAGES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 409: "Conflict", 413: "Request Entity Too Large",
            426: "Upgrade Required", 429: "Too Many Requests", 500: "Internal Server Error",
            501: "Not Implemented", 503: "Service Unavailable"}
USER_KEY = web.RequestKey("rapi_user", str)  # the request's RAPI user, set by the middleware


def error_response(status: int, explain: str,
                   headers: dict[str, str] | None = None) -> web.Response:
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": f'Basic realm="{REALM}"'}
    body = {"code": status, "message": MESSAGES.get(status, "Error"), "explain": explain}
    return web.Response(body=_encode(body), status=status, content_type=JSON,
                        headers=headers or None)


def ok(value: object) -> web.Response:
    return web.Response(body=_encode(value), content_type=JSON)


def ctx_of(request: web.Request) -> RapiContext:
    return request.app[CTX_KEY]


def config_of(request: web.Request) -> model.ConfigData:
    config = ctx_of(request).config()
    if config is None:
        raise RapiHttpError(503, "the cluster config cannot be loaded: "
                                 f"{ctx_of(request).config.error or 'missing'}")
    return config


async def live_of(request: web.Request, config: model.ConfigData) -> Snapshot:
    """The nodes' live figures for a read (none without node daemons)."""
    cache = ctx_of(request).live
    return EMPTY if cache is None else await cache.asnapshot(config)


_TRUE, _FALSE = frozenset({"1", "true", "yes"}), frozenset({"0", "false", "no", ""})


def flag(request: web.Request, name: str) -> bool:
    """A yes/no query parameter (Ganeti's clients send 1 or 0); 400 for anything else."""
    value = request.query.get(name, "0").lower()
    if value not in _TRUE | _FALSE:
        raise RapiHttpError(400, f"query parameter {name} must be 0 or 1, got {value!r}")
    return value in _TRUE


async def body_of(request: web.Request, *, default: object = None) -> object:
    """The request's JSON body (`herder.core.untrusted`: size and depth limited); 400 in
    Ganeti's error shape for anything else, 413 for a body over the server's limit."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as err:
        raise RapiHttpError(413, f"request body too large ({err.text})") from None
    if not raw.strip():
        return default
    try:
        return untrusted.loads(raw, what="request body", max_bytes=MAX_BODY)
    except untrusted.BadDocument as err:
        raise RapiHttpError(400, str(err)) from None


async def signed_node(request: web.Request, keys: list[bytes],
                      replay: rpcauth.ReplayCache | None, method: str, purpose: str,
                      what: str) -> tuple[model.Node, object]:
    """The node named in the URL whose call of `method` the body is, signed for it with the
    `purpose` key (403 `what` refused, with the reason), and known to the config (404); and
    the call's arguments. `replay` None: the caller checks freshness itself (a counter)."""
    name = request.match_info["name"]
    try:
        args = rpcauth.check_call(keys, await request.read(), method=method, node=name,
                                  replay=replay, purpose=purpose)
    except SignatureError as err:
        raise RapiHttpError(403, f"{what} refused: {err}") from None
    node = next((n for n in config_of(request).nodes.values() if n.name == name), None)
    if node is None:
        raise RapiHttpError(404, f"node {name} is not a node of the cluster")
    return node, args


def peer_certificate(request: web.Request) -> bytes | None:
    """The client certificate (DER) the caller showed on this HTTPS connection; None over
    plain HTTP or when it showed none."""
    tls = request.transport.get_extra_info("ssl_object") if request.transport else None
    shown = tls.getpeercert(binary_form=True) if tls is not None else None
    return shown or None


def body_dict(value: object) -> dict[str, object]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RapiHttpError(400, "request body must be a JSON object")
    return value


def find(finder: Callable[[str], Found], key: str) -> Found:
    """What `finder` finds by `key` (a name or UUID); 404 in Ganeti's shape when nothing or
    more than one thing answers to it."""
    try:
        return finder(key)
    except (NotFoundError, AmbiguousError) as err:
        raise RapiHttpError(404, str(err)) from None


def prepared(request: web.Request, resource: str,
             ops: Sequence[dict[str, object]]) -> list[list[object]]:
    """The request's opcodes made ready to queue (`?dry-run`, `?reason` and the body's reason
    trail applied, file-valued parameters checked); the reason trail the job gets."""
    dry_run = flag(request, "dry-run")
    trail: list[list[object]] = [reason.rapi(resource)]
    text = request.query.get("reason")
    if text:
        trail.append(reason.entry(reason.USER, text))
    for op in ops:
        if dry_run:
            op["dry_run"] = True
        extra = op.pop("reason", None)
        if extra is not None:
            try:
                op["reason"] = reason.validate(extra)
            except ValueError as err:
                raise RapiHttpError(400, str(err)) from None
    refused = hvfiles.problems(ops, ctx_of(request).hv_files_dir)
    if refused:
        raise RapiHttpError(400, "; ".join(refused))
    return trail


async def submit(request: web.Request, resource: str,
                 ops: Sequence[dict[str, object]]) -> web.Response:
    """Queue a job for a write request; answer its id."""
    return ok(await submit_job(request, resource, ops))


async def submit_job(request: web.Request, resource: str,
                     ops: Sequence[dict[str, object]]) -> int:
    """Queue a job for a request (prepared as `prepared` does); its id."""
    trail = prepared(request, resource, ops)
    return (await queued(request, [ops], trail))[0]


async def queued(request: web.Request, jobs: Sequence[Sequence[dict[str, object]]],
                 trail: list[list[object]]) -> list[int]:
    """Queue `jobs` (prepared); their ids. Each job takes a token of the caller's submission
    rate (429 with Retry-After when there is none); 400 for a bad opcode, 503 while the queue
    is drained (Ganeti's rlib2 answers it so) or full of read-only jobs."""
    ctx = ctx_of(request)
    caller = request.get(USER_KEY) or f"source {request.remote}"
    for ops in jobs:
        read_only = all(getattr(opcodes.BY_ID.get(str(op.get("OP_ID"))), "READ_ONLY", False)
                        for op in ops)
        wait = ctx.submissions.take(caller, read_only)
        if wait:
            kind = "read-only jobs" if read_only else "jobs"
            raise RapiHttpError(429, f"{caller} submits {kind} too fast; try again in "
                                     f"{login_backoff.retry_after(wait)} s", retry=wait)
    try:
        return await asyncio.to_thread(ctx.queue.submit_many, jobs, reason=trail)
    except opcodes.OpcodeError as err:
        raise RapiHttpError(400, str(err)) from None
    except job_queue.QueueDrained:
        raise RapiHttpError(503, "Job queue is drained, cannot submit") from None
    except job_queue.QueueFull as err:
        raise RapiHttpError(503, str(err), retry=10.0) from None


# Opcode fields no request body sets: the job's plumbing (dry-run and reason come from the query
# string or are checked by `submit`; herder's LUs log at one level, so a debug level would be
# ignored). A body may set `priority`, `depends` (absolute job ids: a single job has no earlier
# one to be relative to) and `comment`, as Ganeti's FillOpcode allows.
_PLUMBING = frozenset({"debug_level"})
NODE_TARGET = ("node_name", "node_uuid")
INSTANCE_TARGET = ("instance_name", "instance_uuid")


def body_fields(op: type[opcodes.OpCode], *, fixed: Iterable[str] = (),
                extra: Iterable[str] = ()) -> frozenset[str]:
    """What a request body may set on `op` (as Ganeti's baserlib.FillOpcode): the opcode's own
    fields, less the job's plumbing and `fixed` (what the URL names), plus `extra` (keys of
    the body the route translates)."""
    return (frozenset(op.__struct_fields__) - _PLUMBING - frozenset(fixed)) | frozenset(extra)


Handler = Callable[[web.Request], Awaitable[web.Response]]
_SUBMITS: dict[Callable[..., Any], tuple[type[opcodes.OpCode], ...]] = {}


def submits(*ops: type[opcodes.OpCode]) -> Callable[[Handler], Handler]:
    """Marks a route's handler with the opcodes its jobs carry (see `opcode_routes`)."""
    def mark(handler: Handler) -> Handler:
        _SUBMITS[handler] = ops
        return handler

    return mark


# What each handler reads from the request besides `reason` (every route) and `dry-run` (the
# routes that submit jobs): its query parameters, and whether a body (`takes`). The middleware
# refuses anything else with 400 before the handler runs: no parameter is silently ignored.
_QUERY: dict[Callable[..., Any], frozenset[str]] = {}
_BODY: set[Callable[..., Any]] = set()
GENERIC_QUERY = frozenset({"reason"})


AnyHandler = TypeVar("AnyHandler", bound=Callable[..., Any])


def takes(*query: str, body: bool = False) -> Callable[[AnyHandler], AnyHandler]:
    """Marks the query parameters a route's handler reads and whether it reads a body (a body
    with fields: the handler refuses the fields it does not know, `only`)."""
    def mark(handler: AnyHandler) -> AnyHandler:
        _QUERY[handler] = frozenset(query)
        if body:
            _BODY.add(handler)
        return handler

    return mark


def query_taken(handler: Callable[..., object]) -> frozenset[str]:
    """The query parameters `handler` reads (`takes`, `reason`, `dry-run` if it submits)."""
    submitted = {"dry-run"} if handler in _SUBMITS else set()
    return GENERIC_QUERY | submitted | _QUERY.get(handler, frozenset())


def body_taken(handler: Callable[..., object]) -> bool:
    return handler in _BODY


async def input_refusal(request: web.Request) -> web.Response | None:
    """400 for a query parameter the route does not read, or a body given to a route that
    reads none (None: the request's inputs are all read by its handler)."""
    info = request.match_info
    if info.http_exception is not None:
        return None
    handler = info.handler
    route = f"{request.method} {info.route.resource.canonical if info.route.resource else '?'}"
    unknown = sorted(set(request.query) - query_taken(handler))
    if unknown:
        taken = ", ".join(sorted(query_taken(handler)))
        return error_response(400, f"{route} does not take the query parameter(s) "
                                   f"{', '.join(unknown)} (it takes: {taken})")
    if not body_taken(handler) and request.body_exists:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge as err:
            return error_response(413, f"request body too large ({err.text})")
        if raw.strip():
            return error_response(400, f"{route} takes no request body")
    if "reason" in request.query and request.method in ("GET", "HEAD"):
        log.info("RAPI %s %s: reason %r", request.method, request.path, request.query["reason"])
    return None


def opcode_routes(app: web.Application) -> dict[str, list[str]]:
    """OP_ID -> the routes ("METHOD /path") of `app` whose jobs carry it."""
    found: dict[str, list[str]] = {}
    for route in app.router.routes():
        for op in _SUBMITS.get(route.handler, ()):
            found.setdefault(opcodes.op_id_of(op), []).append(
                f"{route.method} {route.resource.canonical if route.resource else '?'}")
    return found


def only(body: dict[str, object], allowed: Iterable[str], what: str) -> dict[str, object]:
    unknown = set(body) - set(allowed) - {"reason", "dry_run"}
    if unknown:
        raise RapiHttpError(400, f"{what}: unknown field(s) {', '.join(sorted(unknown))}")
    return body


def renamed(body: dict[str, object], rename: dict[str, str], what: str) -> dict[str, object]:
    """`body` with Ganeti's RAPI aliases replaced by the opcode's field names (as Ganeti's
    FillOpcode's `rename`); 400 when a field comes under both names."""
    out = dict(body)
    for alias, name in rename.items():
        if alias in out:
            if name in out:
                raise RapiHttpError(400, f"{what}: give {name} or its alias {alias}, not both")
            out[name] = out.pop(alias)
    return out


def from_query(request: web.Request, body: dict[str, object],
               values: dict[str, object]) -> dict[str, object]:
    """`body` with the fields the query string gave (`values`); 400 when the body gives one
    of them too."""
    both = sorted(set(body) & set(values))
    if both:
        raise RapiHttpError(400, f"{request.path}: {', '.join(both)} given both in the query "
                                 "string and in the body")
    return {**body, **values}


def listing(items: list[str], prefix: str, key: str = "id") -> list[dict[str, str]]:
    """Ganeti's non-bulk lists: `id` (nodes, instances) or `name` (groups) plus `uri`."""
    return [{key: name, "uri": f"{prefix}/{name}"} for name in items]


# --- plumbing -----------------------------------------------------------------------------------

WRITE_METHODS = frozenset({"PUT", "POST", "DELETE"})


def route_rule(request: web.Request) -> access.Rule | None:
    """Who may call the matched route (its handler's declaration; None: undeclared). A path
    or method no route serves (a 404 or 405 follows) goes by the method, as Ganeti's."""
    info = request.match_info
    if info.http_exception is not None:
        return access.RAPI_WRITE if request.method in WRITE_METHODS else access.RAPI_READ
    return ROUTES.rule(info.handler)


def access_refusal(request: web.Request) -> web.Response | None:
    """The answer refusing this request (None: the caller may), before any handler runs:
    as Ganeti's RAPI, 401 without valid credentials (reads: unless anonymous reads are
    allowed), 403 for a user without the write option on a route for writers."""
    rule = route_rule(request)
    if rule is None:
        return error_response(500, f"{request.method} {request.path}: the route declares no "
                                   "access rule")
    ctx = ctx_of(request)
    # the web console's login and files (masterd/web/pages.py), a node's signed announcement
    # or heartbeat (masterd/rapi/announce.py, leases.py): their handlers check
    if rule in (access.ANYONE, access.WEB_LOGIN, access.NODE_ANNOUNCE, access.NODE_LEASE):
        return None
    user: User | None = None
    if "Authorization" in request.headers:
        tried = login_backoff.attempt_basic(ctx.users, ctx.backoff,
                                            request.headers["Authorization"],
                                            request.remote or "?", "RAPI")
        if tried.hold > 0:
            return held_response(tried.hold)
        user = tried.user
    else:  # a web console session (masterd/web/auth.py)
        caller = web_auth.session_caller(request, ctx.users,
                                          None if ctx.web is None else ctx.web.sessions)
        if caller.session is not None:
            refused = web_auth.session_refusal(request, caller.session)
            if refused is not None:
                return error_response(403, refused)
            user = caller.user
        elif caller.problem is not None and not ctx.reads_open:
            return error_response(401, caller.problem)
    if user is not None:
        request[USER_KEY] = user.name
    if rule == access.RAPI_READ:
        if user is None and (not ctx.reads_open or "Authorization" in request.headers):
            return error_response(401, "valid credentials are required")
        return None
    if rule == access.RAPI_USER:
        if user is None:
            return error_response(401, "valid credentials are required (any RAPI user: "
                                       "queries are not for anonymous readers, as in Ganeti)")
        return None
    if rule != access.RAPI_WRITE:
        return error_response(500, f"{request.method} {request.path}: access rule {rule.name} "
                                   "is not a RAPI rule")
    if user is None:
        return error_response(401, "valid credentials are required")
    if not user.can_write:
        return error_response(403, f"user {user.name} may not make changes")
    return None


def held_response(hold: float) -> web.Response:
    """429 to an attempt held for its earlier wrong passwords (`core.login_backoff`)."""
    return error_response(429, "too many wrong passwords from this address for this user; "
                               f"try again in {hold:.1f} s",
                          {"Retry-After": login_backoff.retry_after(hold)})


# Ganeti 3.0 RAPI resources herder does not serve (yet), by path prefix: what a 404 says
NOT_SERVED: tuple[tuple[str, str], ...] = ()


def not_served(path: str) -> str:
    """The 404's explanation: what herder does not support, or Ganeti's own message."""
    for prefix, why in NOT_SERVED:
        if path == prefix or path.startswith(prefix + "/"):
            return f"{why}: {path}"
    return f"Nothing matches the given URI: {path}"


@web.middleware
async def rapi_middleware(request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                          ) -> web.StreamResponse:
    refusal = access_refusal(request) or await input_refusal(request)
    if refusal is not None:
        return refusal
    try:
        return await handler(request)
    except RapiHttpError as err:
        return error_response(err.status, err.explain, None if err.retry is None else
                              {"Retry-After": login_backoff.retry_after(err.retry)})
    except web.HTTPMethodNotAllowed:
        return error_response(405, f"{request.method} is not supported on {request.path}")
    except web.HTTPNotFound:
        return error_response(404, not_served(request.path))
    except web.HTTPClientError as err:  # a body too large or too slow (core.serve's limits)
        return error_response(err.status, err.text or err.reason)
    except OpPrereqError as err:
        return error_response(400, str(err))
    except (ConfigError, opcodes.OpcodeError) as err:
        return error_response(400, str(err))
    except HerderError as err:
        return error_response(500, str(err))
    except Exception:  # a bug: logged with its traceback; the client gets Ganeti's error shape
        log.exception("RAPI %s %s failed", request.method, request.path)
        return error_response(500, f"internal error handling {request.method} {request.path}; "
                                   "see the master daemon's log")
