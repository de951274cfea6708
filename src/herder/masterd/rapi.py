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
from herder.masterd.leases import Leases
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
    # the nodes' liveness leases (masterd/leases.py); None: heartbeats refused
    leases: Leases | None = None

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


async def submit(request: web.Request, resource: str, ops: list[dict[str, Any]]) -> web.Response:
    """Queue a job for a write request; answer its id."""
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
    ctx = ctx_of(request)
    refused = hvfiles.problems(ops, ctx.hv_files_dir)
    if refused:
        raise RapiHttpError(400, "; ".join(refused))
    queue = ctx.queue
    try:
        job_id = await asyncio.to_thread(queue.submit, ops, reason=trail)
    except opcodes.OpcodeError as err:
        raise RapiHttpError(400, str(err)) from None
    return ok(job_id)


# Opcode fields no request body sets: the job's plumbing (the queue's; dry-run and reason come
# from the query string or are checked by `submit`)
_PLUMBING = frozenset({"debug_level", "priority", "depends", "comment"})
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


@ROUTES.allow(access.RAPI_READ)
async def jobs(request: web.Request) -> web.Response:
    queue = ctx_of(request).queue
    ids = queue.job_ids()
    if flag(request, "bulk"):
        return ok([queue.info(i) for i in ids])
    return ok([{"id": i, "uri": f"/2/jobs/{i}"} for i in ids])


@ROUTES.allow(access.RAPI_READ)
async def job(request: web.Request) -> web.Response:
    try:
        return ok(ctx_of(request).queue.info(_job_id(request)))
    except NotFoundError as err:
        raise RapiHttpError(404, str(err)) from None


@ROUTES.allow(access.RAPI_WRITE)
async def job_cancel(request: web.Request) -> web.Response:
    try:
        return ok(list(ctx_of(request).queue.cancel(_job_id(request))))
    except NotFoundError as err:
        raise RapiHttpError(404, str(err)) from None


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


@ROUTES.allow(access.RAPI_WRITE)
async def herder_jobs_submit(request: web.Request) -> web.Response:
    """Submit a job of any opcodes (like Ganeti's luxi SubmitJob): {"ops": [{"OP_ID": ...}]}."""
    body = body_dict(await body_of(request, default={}))
    ops = body.get("ops")
    if not isinstance(ops, list) or not ops or not all(isinstance(o, dict) for o in ops):
        raise RapiHttpError(400, "give 'ops': a non-empty list of opcode objects")
    return await submit(request, "herder_jobs", [dict(o) for o in ops])


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
    r.add_get("/2/herder/config", herder_config)
    r.add_get("/2/herder/maintenance", herder_maintenance)
    r.add_put("/2/herder/maintenance", herder_maintenance_set)
    r.add_put("/2/herder/maintenance/state", herder_maintenance_state)
    from herder.masterd import announce, console, leases, oob, query  # /2/query; consoles
    from herder.masterd.web import api as web_api  # the web console
    from herder.masterd.web import pages as web_pages

    query.add_routes(r)
    console.add_routes(r)  # the instance consoles and their streams
    announce.add_routes(r)
    oob.add_routes(r)  # OP_OOB_COMMAND (Ganeti's RAPI has none)
    leases.add_routes(r)  # the nodes' heartbeats, their ages, the candidates' view
    web_api.add_routes(r)
    web_pages.add_routes(r)
    return app
