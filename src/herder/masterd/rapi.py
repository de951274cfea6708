"""A subset of Ganeti's RAPI version 2, served by masterd (same paths, bodies, job semantics).

Reads answer from the config; writes submit a job and answer its id, exactly as Ganeti's RAPI.
Every handler declares who may call it (`ROUTES`, `core.access`), and the middleware enforces
it before the handler runs: reads need valid credentials (HTTP Basic against `rapi_users`)
unless anonymous reads are configured; writes, and as in Ganeti's rlib2 the reads that run a
job with locks or block (`GET /2/nodes/N/storage`, `GET /2/jobs/ID/wait`), need a user with
the `write` option (401 without credentials, 403 for a read-only user). A parameter naming a
file herder would read and distribute must lie in the cluster's hypervisor file directory
(`masterd.hvfiles`, 400 otherwise). Errors are Ganeti's JSON `{"code", "message", "explain"}`.
herder-only routes live under `/2/herder/`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid as uuid_module
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec
from aiohttp import web

from herder.core import access, login_backoff, model, reason, roles, storage_units, untrusted
from herder.core.errors import (
    AmbiguousError,
    ConfigError,
    HerderError,
    NotFoundError,
    OpPrereqError,
)
from herder.core.noderpc import NodeRpc
from herder.core.rapi_users import REALM, User, UsersFile
from herder.core.store import ConfigStore
from herder.masterd import hvfiles, views
from herder.masterd.announce import Announcements
from herder.masterd.jobs import opcodes
from herder.masterd.jobs import queue as job_queue
from herder.masterd.livecache import EMPTY, LiveCache, Snapshot
from herder.masterd.web import auth as web_auth
from herder.masterd.web.context import WebContext

log = logging.getLogger("herder.rapi")
JSON = "application/json"
WAIT_TIMEOUT = 10.0  # seconds a /wait request blocks before answering null (as Ganeti)
MAX_BODY = 4 * 1024 * 1024  # bytes of a request body
FEATURES = ["instance-create-reqv1", "instance-reinstall-reqv1", "node-migrate-reqv1",
            "node-evac-res1"]
_encode = msgspec.json.Encoder().encode
ROUTES = access.Routes("masterd")  # who may call each route: enforced by the middleware
INSTANCE_VIEWS = views.InstanceViews()  # the bulk instance list, encoded per object


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
    anonymous_reads: bool = False
    store: ConfigStore | None = None  # for herder's direct state routes
    live: LiveCache | None = None  # the node daemons' live figures (masterd/livecache.py)
    rpc: NodeRpc | None = None  # to the node daemons (the console routes, masterd/console.py)
    web: WebContext | None = None  # the web console: logins, node samples (masterd/web/)
    # the nodes' announcements that they are up (masterd/announce.py); None: refused
    announce: Announcements | None = None
    # wrong passwords lately, and the holds they set (HTTP Basic and the web console's login)
    backoff: login_backoff.Backoff = field(default_factory=login_backoff.Backoff)

    @property
    def hv_files_dir(self) -> Path | None:
        """Where files named by hypervisor parameters must lie (None: no store, none may)."""
        return hvfiles.directory(self.store.directory) if self.store is not None else None


CTX_KEY = web.AppKey("rapi", RapiContext)


class RapiHttpError(Exception):
    def __init__(self, status: int, explain: str) -> None:
        super().__init__(explain)
        self.status = status
        self.explain = explain


MESSAGES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 409: "Conflict", 413: "Request Entity Too Large",
            426: "Upgrade Required", 429: "Too Many Requests", 500: "Internal Server Error",
            501: "Not Implemented", 503: "Service Unavailable"}


def error_response(status: int, explain: str,
                   headers: dict[str, str] | None = None) -> web.Response:
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": f'Basic realm="{REALM}"'}
    body = {"code": status, "message": MESSAGES.get(status, "Error"), "explain": explain}
    return web.Response(body=_encode(body), status=status, content_type=JSON, headers=headers)


def ok(value: Any) -> web.Response:
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


def flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "0").lower() in ("1", "true", "yes")


async def body_of(request: web.Request, *, default: Any = None) -> Any:
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


def body_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RapiHttpError(400, "request body must be a JSON object")
    return value


def find(finder: Callable[[str], Any], key: str) -> Any:
    try:
        return finder(key)
    except (NotFoundError, AmbiguousError) as err:
        raise RapiHttpError(404, str(err)) from None


def _prepared(request: web.Request, resource: str,
              ops: list[dict[str, Any]]) -> list[list[Any]]:
    """The request's opcodes made ready to queue (dry-run and reasons applied, file-valued
    parameters checked); the reason trail the job gets."""
    dry_run = flag(request, "dry-run")
    trail = [reason.rapi(resource)]
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


async def submit(request: web.Request, resource: str, ops: list[dict[str, Any]]) -> web.Response:
    """Queue a job for a write request; answer its id."""
    trail = _prepared(request, resource, ops)
    ids = await _queued(request, [ops], trail)
    return ok(ids[0])


async def _queued(request: web.Request, jobs: list[list[dict[str, Any]]],
                  trail: list[list[Any]]) -> list[int]:
    try:
        return await asyncio.to_thread(ctx_of(request).queue.submit_many, jobs, reason=trail)
    except opcodes.OpcodeError as err:
        raise RapiHttpError(400, str(err)) from None
    except job_queue.QueueDrained:  # Ganeti's rlib2 answers it so
        raise RapiHttpError(503, "Job queue is drained, cannot submit") from None


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

# Opcodes without a RAPI route of their own (clients submit them through /2/herder/jobs),
# and why: tests/unit/test_opcode_registry.py checks that every other opcode has one.
NO_ROUTE = {
    "OP_NODE_ADD": "Ganeti's RAPI cannot add a node either (gnt-node add); herder node add",
    "OP_NODE_REMOVE": "Ganeti's RAPI cannot remove a node either (gnt-node remove); "
                      "herder node remove",
    "OP_REPAIR_COMMAND": "Ganeti 3.0's RAPI has no route for it (compat M2); herder node "
                         "repair-command and maintd",
    "OP_OS_DIAGNOSE": "Ganeti's GET /2/os waits for this job inside the request; herder os list "
                      "submits it and waits as a client",
    "OP_TEST_DELAY": "a test opcode (Ganeti's RAPI has no route for it); tests and benchmarks",
    "OP_CLUSTER_VERIFY_GROUP": "Ganeti's RAPI has no verify route either (gnt-cluster verify); "
                               "herder cluster verify submits it",
    "OP_INSTANCE_STOP_STRAY": "herder's own, for maintd's stray copies (issue 18); through "
                              "POST /2/herder/jobs",
    "OP_GROUP_VERIFY_DISKS": "Ganeti's RAPI has no route for it (gnt-cluster verify-disks "
                             "submits it); herder cluster verify-disks",
    "OP_CLUSTER_VERIFY_DISKS": "Ganeti's RAPI has no route for it either (gnt-cluster "
                               "verify-disks); herder cluster verify-disks",
    "OP_INSTANCE_MOVE": "Ganeti's RAPI has no move route either (gnt-instance move); herder "
                        "instance move submits it",
}


def submits(*ops: type[opcodes.OpCode]) -> Callable[[Handler], Handler]:
    """Marks a route's handler with the opcodes its jobs carry (see `opcode_routes`)."""
    def mark(handler: Handler) -> Handler:
        _SUBMITS[handler] = ops
        return handler

    return mark


def opcode_routes(app: web.Application) -> dict[str, list[str]]:
    """OP_ID -> the routes ("METHOD /path") of `app` whose jobs carry it."""
    found: dict[str, list[str]] = {}
    for route in app.router.routes():
        for op in _SUBMITS.get(route.handler, ()):
            found.setdefault(opcodes.op_id_of(op), []).append(
                f"{route.method} {route.resource.canonical if route.resource else '?'}")
    return found


def only(body: dict[str, Any], allowed: Iterable[str], what: str) -> dict[str, Any]:
    unknown = set(body) - set(allowed) - {"reason", "dry_run"}
    if unknown:
        raise RapiHttpError(400, f"{what}: unknown field(s) {', '.join(sorted(unknown))}")
    return body


# --- handlers: cluster --------------------------------------------------------------------------

@ROUTES.allow(access.RAPI_READ)
async def version(request: web.Request) -> web.Response:
    return ok(views.RAPI_VERSION)


@ROUTES.allow(access.RAPI_READ)
async def root(request: web.Request) -> web.Response:
    return ok(None)


@ROUTES.allow(access.RAPI_READ)
async def features(request: web.Request) -> web.Response:
    return ok(FEATURES)


@ROUTES.allow(access.RAPI_READ)
async def info(request: web.Request) -> web.Response:
    return ok(views.cluster_view(config_of(request)))


CLUSTER_FIELDS = body_fields(opcodes.OpClusterSetParams)


@submits(opcodes.OpClusterSetParams)
@ROUTES.allow(access.RAPI_WRITE)
async def cluster_modify(request: web.Request) -> web.Response:
    body = body_dict(await body_of(request, default={}))
    only(body, CLUSTER_FIELDS, "cluster modify")
    return await submit(request, "modify", [{"OP_ID": "OP_CLUSTER_SET_PARAMS", **body}])


@submits(opcodes.OpClusterRedistConf)
@ROUTES.allow(access.RAPI_WRITE)
async def redistribute_config(request: web.Request) -> web.Response:
    return await submit(request, "redist_config", [{"OP_ID": "OP_CLUSTER_REDIST_CONF"}])


# --- tags (cluster, nodes, groups, instances) -------------------------------------------------

def tag_target(request: web.Request) -> tuple[str, str | None, list[str]]:
    kind = request.match_info.get("kind", "cluster")
    config = config_of(request)
    if kind == "cluster":
        return "cluster", None, list(config.cluster.tags)
    name = request.match_info["name"]
    finder = {"nodes": config.find_node, "instances": config.find_instance,
              "groups": config.find_group}[kind]
    obj = find(finder, name)
    return {"nodes": "node", "instances": "instance", "groups": "nodegroup"}[kind], obj.name, \
        list(obj.tags)


@ROUTES.allow(access.RAPI_READ)
async def tags_get(request: web.Request) -> web.Response:
    return ok(tag_target(request)[2])


@submits(opcodes.OpTagsSet, opcodes.OpTagsDel)
@ROUTES.allow(access.RAPI_WRITE)
async def tags_change(request: web.Request) -> web.Response:
    kind, name, _ = tag_target(request)
    tags = request.query.getall("tag", [])
    if not tags:
        raise RapiHttpError(400, "give the tags as ?tag=...&tag=...")
    op_id = "OP_TAGS_SET" if request.method == "PUT" else "OP_TAGS_DEL"
    resource = "tags" if kind == "cluster" else f"{request.match_info['kind']}_name_tags"
    return await submit(request, resource, [{"OP_ID": op_id, "kind": kind, "name": name,
                                             "tags": tags}])


# --- nodes --------------------------------------------------------------------------------------

def listing(items: list[str], prefix: str, key: str = "id") -> list[dict[str, str]]:
    """Ganeti's non-bulk lists: `id` (nodes, instances) or `name` (groups) plus `uri`."""
    return [{key: name, "uri": f"{prefix}/{name}"} for name in items]


@ROUTES.allow(access.RAPI_READ)
async def nodes(request: web.Request) -> web.Response:
    config = config_of(request)
    ordered = sorted(config.nodes.values(), key=lambda n: n.name)
    if flag(request, "bulk"):
        live = await live_of(request, config)
        return ok([views.node_view(config, n, live) for n in ordered])
    return ok(listing([n.name for n in ordered], "/2/nodes"))


@ROUTES.allow(access.RAPI_READ)
async def node(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_node, request.match_info["name"])
    return ok(views.node_view(config, target, await live_of(request, config)))


@ROUTES.allow(access.RAPI_READ)
async def node_role_get(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_node, request.match_info["name"])
    return ok(roles.NAMES[roles.node_role(target, config.cluster.master_node)])


ROLE_FIELDS = {
    "master-candidate": {"master_candidate": True, "offline": False, "drained": False},
    "regular": {"master_candidate": False, "offline": False, "drained": False},
    "drained": {"drained": True},
    "offline": {"offline": True},
}


@submits(opcodes.OpNodeSetParams)
@ROUTES.allow(access.RAPI_WRITE)
async def node_role_set(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_node, request.match_info["name"])
    role = await body_of(request)
    if not isinstance(role, str):
        raise RapiHttpError(400, "the body must be a node role (a JSON string)")
    if role == "master":
        raise RapiHttpError(400, "the master role can be changed only via master-failover")
    if role not in ROLE_FIELDS:
        raise RapiHttpError(400, f"unknown node role {role!r} "
                                 f"(one of {', '.join(ROLE_FIELDS)})")
    op = {"OP_ID": "OP_NODE_SET_PARAMS", "node_name": target.name, "node_uuid": target.uuid,
          "force": flag(request, "force"), "auto_promote": flag(request, "auto-promote"),
          **ROLE_FIELDS[role]}
    return await submit(request, "nodes_name_role", [op])


NODE_MODIFY_FIELDS = body_fields(opcodes.OpNodeSetParams, fixed=NODE_TARGET)


@submits(opcodes.OpNodeSetParams)
@ROUTES.allow(access.RAPI_WRITE)
async def node_modify(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_node, request.match_info["name"])
    body = only(body_dict(await body_of(request, default={})), NODE_MODIFY_FIELDS, "node modify")
    if flag(request, "force"):
        body["force"] = True
    return await submit(request, "nodes_name_modify", [
        {"OP_ID": "OP_NODE_SET_PARAMS", "node_name": target.name, "node_uuid": target.uuid,
         **body}])


@submits(opcodes.OpNodeEvacuate)
@ROUTES.allow(access.RAPI_WRITE)
async def node_evacuate(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_node, request.match_info["name"])
    body = only(body_dict(await body_of(request, default={})),
                body_fields(opcodes.OpNodeEvacuate, fixed=NODE_TARGET), "node evacuate")
    return await submit(request, "nodes_name_evacuate", [
        {"OP_ID": "OP_NODE_EVACUATE", "node_name": target.name, "node_uuid": target.uuid,
         **body}])


@submits(opcodes.OpNodeMigrate)
@ROUTES.allow(access.RAPI_WRITE)
async def node_migrate(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_node, request.match_info["name"])
    body = only(body_dict(await body_of(request, default={})),
                body_fields(opcodes.OpNodeMigrate, fixed=NODE_TARGET), "node migrate")
    if "mode" in request.query:
        body["mode"] = request.query["mode"]
    return await submit(request, "nodes_name_migrate", [
        {"OP_ID": "OP_NODE_MIGRATE", "node_name": target.name, "node_uuid": target.uuid,
         **body}])


@submits(opcodes.OpNodePowercycle)
@ROUTES.allow(access.RAPI_WRITE)
async def node_powercycle(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_node, request.match_info["name"])
    return await submit(request, "nodes_name_powercycle", [
        {"OP_ID": "OP_NODE_POWERCYCLE", "node_name": target.name, "node_uuid": target.uuid,
         "force": flag(request, "force")}])


@submits(opcodes.OpNodeQueryStorage)
@ROUTES.allow(access.RAPI_WRITE)
async def node_storage(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_node, request.match_info["name"])
    kind = request.query.get("storage_type", "lvm-vg")
    fields = [f for f in request.query.get("output_fields", "name,size,used,free,"
                                           "allocatable").split(",") if f]
    name = request.query.get("name")
    problem = storage_units.query_problem(config, kind, name) if name is not None else None
    if problem:  # only the node's configured storage units (issue 18)
        raise RapiHttpError(400, f"cannot query storage unit: {problem}")
    return await submit(request, "nodes_name_storage", [
        {"OP_ID": "OP_NODE_QUERY_STORAGE", "nodes": [target.name], "storage_type": kind,
         "output_fields": fields, "name": name}])


@submits(opcodes.OpNodeModifyStorage)
@ROUTES.allow(access.RAPI_WRITE)
async def node_storage_modify(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_node, request.match_info["name"])
    if "name" not in request.query or "allocatable" not in request.query:
        raise RapiHttpError(400, "give ?storage_type=lvm-pv&name=PV&allocatable=0|1")
    return await submit(request, "nodes_name_storage_modify", [
        {"OP_ID": "OP_NODE_MODIFY_STORAGE", "node_name": target.name,
         "storage_type": request.query.get("storage_type", "lvm-pv"),
         "name": request.query["name"],
         "changes": {"allocatable": flag(request, "allocatable")}}])


@submits(opcodes.OpRepairNodeStorage)
@ROUTES.allow(access.RAPI_WRITE)
async def node_storage_repair(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_node, request.match_info["name"])
    if "name" not in request.query:
        raise RapiHttpError(400, "give ?storage_type=lvm-vg&name=VG")
    return await submit(request, "nodes_name_storage_repair", [
        {"OP_ID": "OP_REPAIR_NODE_STORAGE", "node_name": target.name,
         "storage_type": request.query.get("storage_type", "lvm-vg"),
         "name": request.query["name"],
         "ignore_consistency": flag(request, "ignore_consistency")}])


# --- groups -------------------------------------------------------------------------------------

@ROUTES.allow(access.RAPI_READ)
async def groups(request: web.Request) -> web.Response:
    config = config_of(request)
    ordered = sorted(config.nodegroups.values(), key=lambda g: g.name)
    if flag(request, "bulk"):
        return ok([views.group_view(config, g) for g in ordered])
    return ok(listing([g.name for g in ordered], "/2/groups", key="name"))


@ROUTES.allow(access.RAPI_READ)
async def group(request: web.Request) -> web.Response:
    config = config_of(request)
    return ok(views.group_view(config, find(config.find_group, request.match_info["name"])))


GROUP_FIELDS = body_fields(opcodes.OpGroupAdd, extra=("name",))  # Ganeti's alias of group_name


@submits(opcodes.OpGroupAdd)
@ROUTES.allow(access.RAPI_WRITE)
async def group_add(request: web.Request) -> web.Response:
    body = only(body_dict(await body_of(request, default={})), GROUP_FIELDS, "group add")
    name = body.pop("group_name", None) or body.pop("name", None)
    if not name:
        raise RapiHttpError(400, "group add needs group_name")
    return await submit(request, "groups", [{"OP_ID": "OP_GROUP_ADD", "group_name": name,
                                             **body}])


@submits(opcodes.OpGroupSetParams)
@ROUTES.allow(access.RAPI_WRITE)
async def group_modify(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_group, request.match_info["name"])
    body = only(body_dict(await body_of(request, default={})),
                body_fields(opcodes.OpGroupSetParams, fixed=("group_name",)), "group modify")
    return await submit(request, "groups_name_modify", [
        {"OP_ID": "OP_GROUP_SET_PARAMS", "group_name": target.name, **body}])


@submits(opcodes.OpGroupRename)
@ROUTES.allow(access.RAPI_WRITE)
async def group_rename(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_group, request.match_info["name"])
    body = body_dict(await body_of(request, default={}))
    new_name = body.get("new_name")
    if not isinstance(new_name, str) or not new_name:
        raise RapiHttpError(400, "group rename needs new_name")
    return await submit(request, "groups_name_rename", [
        {"OP_ID": "OP_GROUP_RENAME", "group_name": target.name, "new_name": new_name}])


@submits(opcodes.OpGroupRemove)
@ROUTES.allow(access.RAPI_WRITE)
async def group_delete(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_group, request.match_info["name"])
    return await submit(request, "groups_name", [{"OP_ID": "OP_GROUP_REMOVE",
                                                  "group_name": target.name}])


# --- instances ----------------------------------------------------------------------------------

@ROUTES.allow(access.RAPI_READ)
async def instances(request: web.Request) -> web.Response:
    config = config_of(request)
    ordered = sorted(config.instances.values(), key=lambda i: i.name)
    if flag(request, "bulk"):
        live = await live_of(request, config)
        return web.Response(body=INSTANCE_VIEWS.encode(config, ordered, live), content_type=JSON)
    return ok(listing([i.name for i in ordered], "/2/instances"))


CREATE_FIELDS = body_fields(opcodes.OpInstanceCreate)


@submits(opcodes.OpInstanceCreate)
@ROUTES.allow(access.RAPI_WRITE)
async def instance_create(request: web.Request) -> web.Response:
    """Ganeti's instance-create-reqv1 body: `__version__: 1`, `name`, `disk_template`, ..."""
    body = body_dict(await body_of(request, default={}))
    version = body.pop("__version__", None)
    if version != 1:
        raise RapiHttpError(400, "instance creation needs the request body version "
                                 "(__version__: 1)")
    name = body.pop("name", None) or body.pop("instance_name", None)
    if not isinstance(name, str) or not name:
        raise RapiHttpError(400, "instance creation needs the instance name (name)")
    body.pop("mode", None)
    only(body, CREATE_FIELDS, "instance create")
    return await submit(request, "instances", [{"OP_ID": "OP_INSTANCE_CREATE",
                                                "instance_name": name, **body}])


@ROUTES.allow(access.RAPI_READ)
async def instance(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_instance, request.match_info["name"])
    return ok(views.instance_view(config, target, await live_of(request, config)))


def _instance_name(request: web.Request) -> model.Instance:
    config = config_of(request)
    return find(config.find_instance, request.match_info["name"])


@submits(opcodes.OpInstanceQueryData)
@ROUTES.allow(access.RAPI_READ)
async def instance_info(request: web.Request) -> web.Response:
    inst = _instance_name(request)
    return await submit(request, "instances_name_info", [
        {"OP_ID": "OP_INSTANCE_QUERY_DATA", "instances": [inst.name],
         "static": flag(request, "static")}])


@submits(opcodes.OpInstanceRemove)
@ROUTES.allow(access.RAPI_WRITE)
async def instance_delete(request: web.Request) -> web.Response:
    inst = _instance_name(request)
    return await submit(request, "instances_name", [
        {"OP_ID": "OP_INSTANCE_REMOVE", "instance_name": inst.name}])


def _instance_op(op: type[opcodes.OpCode], resource: str,
                 query_flags: tuple[str, ...] = ()) -> Handler:
    """A route submitting `op` for the instance of the URL, with the opcode's fields from the
    body and `query_flags` from the query string."""
    op_id = opcodes.op_id_of(op)
    fields = body_fields(op, fixed=INSTANCE_TARGET)

    @submits(op)
    @ROUTES.allow(access.RAPI_WRITE)
    async def handler(request: web.Request) -> web.Response:
        inst = _instance_name(request)
        body = only(body_dict(await body_of(request, default={})), fields, resource)
        for name in query_flags:
            if name in request.query:
                body[name.replace("-", "_")] = flag(request, name)
        if "type" in request.query and "reboot_type" in fields:
            body["reboot_type"] = request.query["type"]
        return await submit(request, resource, [{"OP_ID": op_id, "instance_name": inst.name,
                                                 **body}])

    return handler


@submits(opcodes.OpInstanceRename)
@ROUTES.allow(access.RAPI_WRITE)
async def instance_rename(request: web.Request) -> web.Response:
    inst = _instance_name(request)
    body = only(body_dict(await body_of(request, default={})),
                body_fields(opcodes.OpInstanceRename, fixed=INSTANCE_TARGET), "instance rename")
    if not isinstance(body.get("new_name"), str) or not body["new_name"]:
        raise RapiHttpError(400, "instance rename needs new_name")
    return await submit(request, "instances_name_rename", [
        {"OP_ID": "OP_INSTANCE_RENAME", "instance_name": inst.name, **body}])


@submits(opcodes.OpInstanceReinstall, opcodes.OpInstanceStartup)
@ROUTES.allow(access.RAPI_WRITE)
async def instance_reinstall(request: web.Request) -> web.Response:
    """Ganeti's reinstall body: `os`, `osparams`, `start` (then a startup opcode follows)."""
    inst = _instance_name(request)
    body = only(body_dict(await body_of(request, default={})),
                body_fields(opcodes.OpInstanceReinstall, fixed=INSTANCE_TARGET,
                            extra=("os", "start")),
                "instance reinstall")
    ops: list[dict[str, Any]] = [{
        "OP_ID": "OP_INSTANCE_REINSTALL", "instance_name": inst.name,
        "os_type": body.get("os_type") or body.get("os") or request.query.get("os"),
        "osparams": body.get("osparams"), "force_variant": bool(body.get("force_variant"))}]
    if body.get("start", not flag(request, "nostartup")):
        ops.append({"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": inst.name})
    return await submit(request, "instances_name_reinstall", ops)


@submits(opcodes.OpInstanceGrowDisk)
@ROUTES.allow(access.RAPI_WRITE)
async def instance_grow_disk(request: web.Request) -> web.Response:
    """Ganeti's `POST /2/instances/NAME/disk/N/grow`: body `amount` (MiB), `wait_for_sync`,
    `absolute`."""
    inst = _instance_name(request)
    try:
        index = int(request.match_info["disk"])
    except ValueError:
        raise RapiHttpError(400, f"invalid disk index {request.match_info['disk']!r}") from None
    body = only(body_dict(await body_of(request, default={})),
                body_fields(opcodes.OpInstanceGrowDisk, fixed=(*INSTANCE_TARGET, "disk")),
                "instance disk grow")
    if not isinstance(body.get("amount"), int) or isinstance(body.get("amount"), bool):
        raise RapiHttpError(400, "instance disk grow needs amount (MiB, an integer)")
    return await submit(request, "instances_name_disk_grow", [{
        "OP_ID": "OP_INSTANCE_GROW_DISK", "instance_name": inst.name, "disk": index, **body}])


# --- jobs ---------------------------------------------------------------------------------------

def _job_id(request: web.Request) -> int:
    try:
        return int(request.match_info["job_id"])
    except ValueError:
        raise RapiHttpError(400, f"invalid job id {request.match_info['job_id']!r}") from None


def query_only(request: web.Request, allowed: Iterable[str]) -> None:
    """400 naming the query parameters a route does not take (none is ignored)."""
    unknown = sorted(set(request.query) - set(allowed))
    if unknown:
        raise RapiHttpError(400, f"{request.method} {request.path}: unknown query "
                                 f"parameter(s) {', '.join(unknown)}")


@ROUTES.allow(access.RAPI_READ)
async def jobs(request: web.Request) -> web.Response:
    """The queue's jobs (Ganeti's list); herder's `archived=1` adds the archive's (read from
    its storage: as Ganeti's `gnt-job list --archived`, slow for a big archive)."""
    query_only(request, ("bulk", "archived"))
    queue = ctx_of(request).queue
    archived = flag(request, "archived")
    ids = await asyncio.to_thread(queue.job_ids, archived=archived) if archived \
        else queue.job_ids()
    if flag(request, "bulk"):
        if archived:
            return ok(await asyncio.to_thread(_infos, queue, ids))
        return ok(_infos(queue, ids))
    return ok([{"id": i, "uri": f"/2/jobs/{i}"} for i in ids])


def _infos(queue: job_queue.JobQueue, ids: Iterable[int]) -> list[dict[str, Any]]:
    """Each job's fields (a job archived or gone meanwhile is left out)."""
    found = []
    for job_id in ids:
        try:
            found.append(queue.info(job_id))
        except NotFoundError:
            continue
    return found


@ROUTES.allow(access.RAPI_READ)
async def job(request: web.Request) -> web.Response:
    query_only(request, ())
    try:
        return ok(await asyncio.to_thread(ctx_of(request).queue.info, _job_id(request)))
    except NotFoundError as err:
        raise RapiHttpError(404, str(err)) from None


@ROUTES.allow(access.RAPI_WRITE)
async def job_cancel(request: web.Request) -> web.Response:
    query_only(request, ("dry-run",))  # Ganeti's client sends it; a cancel has no dry run
    if flag(request, "dry-run"):
        raise RapiHttpError(400, "canceling a job has no dry run")
    try:
        return ok(list(await asyncio.to_thread(ctx_of(request).queue.cancel,
                                               _job_id(request))))
    except NotFoundError as err:
        raise RapiHttpError(404, str(err)) from None


# herder's routes for what Ganeti does over luxi only (gnt-job archive, autoarchive,
# change-priority; gnt-cluster queue): docs/rapi.md, compat rows 49-52

@ROUTES.allow(access.RAPI_WRITE)
async def herder_job_archive(request: web.Request) -> web.Response:
    """Archive a finished job (luxi ArchiveJob): [success, message]."""
    query_only(request, ())
    if body_dict(await body_of(request, default={})):
        raise RapiHttpError(400, "archive takes no body")
    try:
        return ok(list(await asyncio.to_thread(ctx_of(request).queue.archive,
                                               _job_id(request))))
    except NotFoundError as err:
        raise RapiHttpError(404, str(err)) from None


@ROUTES.allow(access.RAPI_WRITE)
async def herder_job_priority(request: web.Request) -> web.Response:
    """Change a job's priority (luxi ChangeJobPriority): {"priority": N}; [success,
    message]."""
    query_only(request, ())
    body = body_dict(await body_of(request, default={}))
    if set(body) - {"priority"}:
        raise RapiHttpError(400, "change-priority: unknown field(s) "
                                 f"{', '.join(sorted(set(body) - {'priority'}))}")
    priority = body.get("priority")
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise RapiHttpError(400, "change-priority needs 'priority': an integer")
    try:
        return ok(list(await asyncio.to_thread(ctx_of(request).queue.change_priority,
                                               _job_id(request), priority)))
    except NotFoundError as err:
        raise RapiHttpError(404, str(err)) from None
    except opcodes.OpcodeError as err:
        raise RapiHttpError(400, str(err)) from None


@ROUTES.allow(access.RAPI_WRITE)
async def herder_jobs_autoarchive(request: web.Request) -> web.Response:
    """Archive the finished jobs older than `age` seconds (-1: all) within `timeout` seconds
    (luxi AutoArchiveJobs): [archived, left unexamined]."""
    query_only(request, ())
    body = body_dict(await body_of(request, default={}))
    unknown = sorted(set(body) - {"age", "timeout"})
    if unknown:
        raise RapiHttpError(400, f"autoarchive: unknown field(s) {', '.join(unknown)}")
    age, timeout = body.get("age"), body.get("timeout")
    if not isinstance(age, int | float) or isinstance(age, bool) or (age < 0 and age != -1):
        raise RapiHttpError(400, "autoarchive needs 'age': seconds, or -1 for every job")
    if timeout is not None and (not isinstance(timeout, int | float)
                                or isinstance(timeout, bool) or timeout <= 0):
        raise RapiHttpError(400, "autoarchive: 'timeout' must be a positive number of seconds")
    archived, left = await asyncio.to_thread(ctx_of(request).queue.auto_archive, age, timeout)
    return ok([archived, left])


@ROUTES.allow(access.RAPI_READ)
async def herder_queue(request: web.Request) -> web.Response:
    """The queue's state (gnt-cluster queue info): drained or not, its jobs per status, the
    queued jobs held back and why."""
    query_only(request, ())
    queue = ctx_of(request).queue
    counts: dict[str, int] = {}
    for job_id in queue.job_ids():
        status = queue.status_of(job_id)
        if status is not None:
            counts[status] = counts.get(status, 0) + 1
    return ok({"drained": queue.drained, "jobs": counts,
               "held": {str(k): v for k, v in sorted(queue.held().items())}})


@ROUTES.allow(access.RAPI_WRITE)
async def herder_queue_set(request: web.Request) -> web.Response:
    """Drain or undrain the queue (gnt-cluster queue drain|undrain): {"drained": bool}."""
    query_only(request, ())
    body = body_dict(await body_of(request, default={}))
    if set(body) != {"drained"} or not isinstance(body["drained"], bool):
        raise RapiHttpError(400, "give {\"drained\": true|false} and nothing else")
    queue = ctx_of(request).queue
    await asyncio.to_thread(queue.set_drained, body["drained"])
    return ok({"drained": queue.drained})


# --- job filter rules (Ganeti's /2/filters; gnt-filter) -------------------------------------------

FILTER_FIELDS = ("watermark", "priority", "predicates", "action", "reason_trail", "uuid")
FILTER_BODY = frozenset({"priority", "predicates", "action", "reason"})


def _filter_uuid(request: web.Request) -> str:
    text = request.match_info["uuid"]
    try:
        return str(uuid_module.UUID(text))
    except ValueError:
        raise RapiHttpError(400, f"invalid filter UUID {text!r}") from None


def _filter_view(rule: model.FilterRule) -> dict[str, Any]:
    shown: dict[str, Any] = msgspec.to_builtins(rule)
    return {name: shown[name] for name in FILTER_FIELDS}


def _rules_of(request: web.Request) -> dict[str, model.FilterRule]:
    return config_of(request).filters


@ROUTES.allow(access.RAPI_READ)
async def filters(request: web.Request) -> web.Response:
    query_only(request, ("bulk",))
    rules = sorted(_rules_of(request).values(), key=lambda r: (r.priority, r.watermark, r.uuid))
    if flag(request, "bulk"):
        return ok([_filter_view(rule) for rule in rules])
    return ok([{"uuid": rule.uuid, "uri": f"/2/filters/{rule.uuid}"} for rule in rules])


@ROUTES.allow(access.RAPI_READ)
async def filter_get(request: web.Request) -> web.Response:
    query_only(request, ())
    rule = _rules_of(request).get(_filter_uuid(request))
    if rule is None:
        raise RapiHttpError(404, f"filter {request.match_info['uuid']} not found")
    return ok(_filter_view(rule))


@ROUTES.allow(access.RAPI_WRITE)
async def filter_add(request: web.Request) -> web.Response:
    """A new rule (Ganeti's ReplaceFilter without a UUID): its UUID."""
    query_only(request, ())
    return ok(await _replace_filter(request, model.new_uuid()))


@ROUTES.allow(access.RAPI_WRITE)
async def filter_replace(request: web.Request) -> web.Response:
    """The rule replaced, or made with this UUID (Ganeti's ReplaceFilter): its UUID."""
    query_only(request, ())
    return ok(await _replace_filter(request, _filter_uuid(request)))


async def _replace_filter(request: web.Request, uuid: str) -> str:
    """Ganeti's checkFilterParameters, then the rule written with a new watermark (the
    highest job id now) and the queue told."""
    body = body_dict(await body_of(request, default={}))
    unknown = sorted(set(body) - FILTER_BODY)
    if unknown:
        raise RapiHttpError(400, "Invalid body parameters: filter rule doesn't support the "
                                 f"parameter '{unknown[0]}'")
    ctx = ctx_of(request)
    queue = ctx.queue
    trail = body.get("reason", [])
    try:
        trail = [*reason.validate(trail), reason.rapi("filters")]
    except ValueError as err:
        raise RapiHttpError(400, str(err)) from None
    fields = {"uuid": uuid, "watermark": queue.highest_id(),
              "priority": body.get("priority", 0), "predicates": body.get("predicates", []),
              "action": body.get("action", "CONTINUE"), "reason_trail": trail}
    try:
        rule = msgspec.convert(fields, model.FilterRule)
    except msgspec.ValidationError as err:
        raise RapiHttpError(400, f"invalid filter rule: {err}") from None
    await asyncio.to_thread(_write_rules, ctx, lambda rules: rules.__setitem__(uuid, rule))
    return uuid


def _write_rules(ctx: RapiContext, change: Callable[[dict[str, model.FilterRule]], None]) -> None:
    """Change the config's filter rules (a config write, no job: Ganeti's luxi writes them so
    too, and a drained or paused queue must not stop them), then apply them to the queue."""
    if ctx.store is None:
        raise RapiHttpError(503, "this masterd has no config store to write filter rules to")
    with ctx.store.update() as config:
        rules = dict(config.filters)
        change(rules)
        config.filters = rules
    ctx.queue.reconsider()


@ROUTES.allow(access.RAPI_WRITE)
async def filter_delete(request: web.Request) -> web.Response:
    query_only(request, ())
    body_dict(await body_of(request, default={}))  # (Ganeti's client sends {})
    uuid = _filter_uuid(request)

    def drop(rules: dict[str, model.FilterRule]) -> None:
        if rules.pop(uuid, None) is None:
            raise RapiHttpError(404, f"filter {uuid} not found")

    await asyncio.to_thread(_write_rules, ctx_of(request), drop)
    return ok(None)


@ROUTES.allow(access.RAPI_WRITE)
async def job_wait(request: web.Request) -> web.Response:
    job_id = _job_id(request)
    body = body_dict(await body_of(request, default={}))
    fields = body.get("fields")
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise RapiHttpError(400, "wait needs 'fields': a list of job field names")
    prev_info = body.get("previous_job_info")
    prev_serial = body.get("previous_log_serial")
    if prev_serial is not None and not isinstance(prev_serial, int):
        raise RapiHttpError(400, "previous_log_serial must be an integer or null")
    try:  # awaited, not in a thread: waiters hold no worker thread (issue 18)
        result = await ctx_of(request).queue.wait_for_change_async(
            job_id, fields, prev_info, prev_serial, WAIT_TIMEOUT)
    except NotFoundError as err:
        raise RapiHttpError(404, str(err)) from None
    return ok(result)


# --- herder extensions --------------------------------------------------------------------------

@ROUTES.allow(access.RAPI_READ)
async def herder_maintenance(request: web.Request) -> web.Response:
    return ok(views.maintenance_view(config_of(request)))


MAINT_FIELDS = {"enabled": "maint_enabled", "harep": "maint_harep",
                "roundDelay": "maint_round_delay",
                "balance": "maint_balance", "balanceThreshold": "maint_balance_threshold",
                "balanceDiskMoves": "maint_balance_disk_moves",
                "balanceDynamicLoad": "maint_balance_dynamic_load",
                "diagnoseCommand": "diagnose_data_collector_filename"}


@submits(opcodes.OpClusterSetParams)
@ROUTES.allow(access.RAPI_WRITE)
async def herder_maintenance_set(request: web.Request) -> web.Response:
    body = only(body_dict(await body_of(request, default={})), set(MAINT_FIELDS),
                "maintenance settings")
    op = {"OP_ID": "OP_CLUSTER_SET_PARAMS"}
    op.update({MAINT_FIELDS[k]: v for k, v in body.items() if k in MAINT_FIELDS})
    return await submit(request, "herder_maintenance", [op])


STATE_FIELDS = {"incidents", "jobs", "evacuated", "intents", "seen"}


@ROUTES.allow(access.RAPI_WRITE)
async def herder_maintenance_state(request: web.Request) -> web.Response:
    """maintd's state (incidents, jobs of the current round, evacuated instances): replaced as
    given, validated, written atomically to the config (not a job: maintd's bookkeeping, like
    Ganeti's WConfd maintenance RPCs). Answers the whole maintenance section."""
    body = only(body_dict(await body_of(request, default={})), STATE_FIELDS,
                "maintenance state")
    if not body:
        raise RapiHttpError(400, f"give one of {', '.join(sorted(STATE_FIELDS))}")
    store = ctx_of(request).store
    if store is None:
        raise RapiHttpError(503, "this server has no config store")

    def update() -> dict[str, Any]:
        with store.update() as config:
            current = model.to_builtins(config.maintenance)
            current.update(body)
            try:
                config.maintenance = msgspec.convert(current, model.Maintenance)
            except msgspec.ValidationError as err:
                raise RapiHttpError(400, f"maintenance state: {err}") from None
            config.maintenance.touch()
            return model.to_builtins(config.maintenance)

    return ok(await asyncio.to_thread(update))


@ROUTES.allow(access.RAPI_WRITE)
async def herder_config(request: web.Request) -> web.Response:
    """The whole cluster config, as masterd holds it (herder's CLI reads it from a machine
    without a copy: `node list`, `instance info`, ...). It carries the DRBD secrets: for users
    with the `write` option only (the access rule)."""
    return web.Response(body=model.encode(config_of(request)), content_type=JSON)


def _opcode_list(value: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value or not all(isinstance(o, dict) for o in value):
        raise RapiHttpError(400, f"{what}: a non-empty list of opcode objects")
    return [dict(o) for o in value]


@ROUTES.allow(access.RAPI_WRITE)
async def herder_jobs_submit(request: web.Request) -> web.Response:
    """Submit a job of any opcodes (like Ganeti's luxi SubmitJob): {"ops": [{"OP_ID": ...}]},
    answered by its id; or several (luxi SubmitManyJobs, a job's `depends` may name an earlier
    one of them relatively: -1 the one before): {"jobs": [[...], ...]}, answered as Ganeti's
    [[true, id], ...]. Nothing is queued when one opcode is bad."""
    query_only(request, ("dry-run", "reason"))
    body = body_dict(await body_of(request, default={}))
    if len(body) != 1 or not body.keys() <= {"ops", "jobs"}:
        raise RapiHttpError(400, "give either 'ops' (one job) or 'jobs' (a list of jobs)")
    if "ops" in body:
        return await submit(request, "herder_jobs", _opcode_list(body["ops"], "'ops'"))
    many = body["jobs"]
    if not isinstance(many, list) or not many:
        raise RapiHttpError(400, "'jobs': a non-empty list of jobs (lists of opcodes)")
    jobs = [_opcode_list(ops, f"job {index}") for index, ops in enumerate(many)]
    trails = [_prepared(request, "herder_jobs", ops) for ops in jobs]  # (all alike)
    return ok([[True, job_id] for job_id in await _queued(request, jobs, trails[0])])


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
    # (masterd/announce.py): their handlers check
    if rule in (access.ANYONE, access.WEB_LOGIN, access.NODE_ANNOUNCE):
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
        elif caller.problem is not None and not ctx.anonymous_reads:
            return error_response(401, caller.problem)
    if rule == access.RAPI_READ:
        if user is None and (not ctx.anonymous_reads or "Authorization" in request.headers):
            return error_response(401, "valid credentials are required")
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


@web.middleware
async def rapi_middleware(request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                          ) -> web.StreamResponse:
    refusal = access_refusal(request)
    if refusal is not None:
        return refusal
    try:
        return await handler(request)
    except RapiHttpError as err:
        return error_response(err.status, err.explain)
    except web.HTTPMethodNotAllowed:
        return error_response(405, f"{request.method} is not supported on {request.path}")
    except web.HTTPNotFound:
        return error_response(404, f"Nothing matches the given URI: {request.path}")
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


def make_app(ctx: RapiContext) -> web.Application:
    app = web.Application(middlewares=[rapi_middleware], client_max_size=MAX_BODY)
    app[CTX_KEY] = ctx
    r = app.router
    r.add_get("/", root)
    r.add_get("/version", version)
    r.add_get("/2/features", features)
    r.add_get("/2/info", info)
    r.add_put("/2/modify", cluster_modify)
    r.add_put("/2/redistribute-config", redistribute_config)
    for prefix in ("/2/tags",):
        r.add_get(prefix, tags_get)
        r.add_put(prefix, tags_change)
        r.add_delete(prefix, tags_change)
    for kind in ("nodes", "instances", "groups"):
        path = f"/2/{{kind:{kind}}}/{{name}}/tags"
        r.add_get(path, tags_get)
        r.add_put(path, tags_change)
        r.add_delete(path, tags_change)
    r.add_get("/2/nodes", nodes)
    r.add_get("/2/nodes/{name}", node)
    r.add_get("/2/nodes/{name}/role", node_role_get)
    r.add_put("/2/nodes/{name}/role", node_role_set)
    r.add_post("/2/nodes/{name}/modify", node_modify)
    r.add_post("/2/nodes/{name}/evacuate", node_evacuate)
    r.add_post("/2/nodes/{name}/migrate", node_migrate)
    r.add_post("/2/nodes/{name}/powercycle", node_powercycle)
    r.add_get("/2/nodes/{name}/storage", node_storage)
    r.add_put("/2/nodes/{name}/storage/modify", node_storage_modify)
    r.add_put("/2/nodes/{name}/storage/repair", node_storage_repair)
    r.add_get("/2/groups", groups)
    r.add_post("/2/groups", group_add)
    r.add_get("/2/groups/{name}", group)
    r.add_delete("/2/groups/{name}", group_delete)
    r.add_put("/2/groups/{name}/modify", group_modify)
    r.add_put("/2/groups/{name}/rename", group_rename)
    r.add_get("/2/instances", instances)
    r.add_post("/2/instances", instance_create)
    r.add_get("/2/instances/{name}", instance)
    r.add_delete("/2/instances/{name}", instance_delete)
    r.add_get("/2/instances/{name}/info", instance_info)
    r.add_put("/2/instances/{name}/rename", instance_rename)
    r.add_put("/2/instances/{name}/modify", _instance_op(
        opcodes.OpInstanceSetParams, "instances_name_modify"))
    r.add_put("/2/instances/{name}/startup", _instance_op(
        opcodes.OpInstanceStartup, "instances_name_startup", ("force", "no_remember")))
    r.add_put("/2/instances/{name}/shutdown", _instance_op(
        opcodes.OpInstanceShutdown, "instances_name_shutdown", ("no_remember",)))
    r.add_post("/2/instances/{name}/reboot", _instance_op(
        opcodes.OpInstanceReboot, "instances_name_reboot", ("ignore_secondaries",)))
    r.add_put("/2/instances/{name}/migrate", _instance_op(
        opcodes.OpInstanceMigrate, "instances_name_migrate"))
    r.add_put("/2/instances/{name}/failover", _instance_op(
        opcodes.OpInstanceFailover, "instances_name_failover"))
    r.add_put("/2/instances/{name}/activate-disks", _instance_op(
        opcodes.OpInstanceActivateDisks, "instances_name_activate_disks", ("ignore_size",)))
    r.add_put("/2/instances/{name}/deactivate-disks", _instance_op(
        opcodes.OpInstanceDeactivateDisks, "instances_name_deactivate_disks", ("force",)))
    r.add_post("/2/instances/{name}/reinstall", instance_reinstall)
    r.add_post("/2/instances/{name}/disk/{disk}/grow", instance_grow_disk)
    r.add_post("/2/instances/{name}/recreate-disks", _instance_op(
        opcodes.OpInstanceRecreateDisks, "instances_name_recreate_disks"))
    r.add_post("/2/instances/{name}/replace-disks", _instance_op(
        opcodes.OpInstanceReplaceDisks, "instances_name_replace_disks"))
    r.add_get("/2/jobs", jobs)
    r.add_get("/2/jobs/{job_id}", job)
    r.add_delete("/2/jobs/{job_id}", job_cancel)
    r.add_get("/2/jobs/{job_id}/wait", job_wait)
    r.add_post("/2/herder/jobs", herder_jobs_submit)
    r.add_put("/2/herder/jobs/autoarchive", herder_jobs_autoarchive)
    r.add_put("/2/herder/jobs/{job_id}/archive", herder_job_archive)
    r.add_put("/2/herder/jobs/{job_id}/priority", herder_job_priority)
    r.add_get("/2/herder/queue", herder_queue)
    r.add_put("/2/herder/queue", herder_queue_set)
    r.add_get("/2/filters", filters)
    r.add_post("/2/filters", filter_add)
    r.add_get("/2/filters/{uuid}", filter_get)
    r.add_put("/2/filters/{uuid}", filter_replace)
    r.add_delete("/2/filters/{uuid}", filter_delete)
    r.add_get("/2/herder/config", herder_config)
    r.add_get("/2/herder/maintenance", herder_maintenance)
    r.add_put("/2/herder/maintenance", herder_maintenance_set)
    r.add_put("/2/herder/maintenance/state", herder_maintenance_state)
    from herder.masterd import announce, console, query  # /2/query; consoles; nodes up
    from herder.masterd.web import api as web_api  # the web console
    from herder.masterd.web import pages as web_pages

    query.add_routes(r)
    console.add_routes(r)  # the instance consoles and their streams
    announce.add_routes(r)
    web_api.add_routes(r)
    web_pages.add_routes(r)
    return app
