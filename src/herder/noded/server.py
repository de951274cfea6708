"""noded's HTTP server: POST /rpc/<method> over HTTPS; the caller shows a certificate of the
cluster (`noded.daemon`), every body is signed for its method and this node with the node-RPC
key, within the time window and never replayed (`noded.rpccheck`); anything else gets 403. The
arguments are decoded into the method's call of the contract (`herder.core.rpcdefs`; 404 for a
method the node does not have, 400 naming a malformed argument), the master epoch is checked
(409 for an older master's call), and the call runs in a thread through its handler
(`herder.noded.rpc`). Beside the RPCs: the join steps of a node not yet in a cluster
(`noded.join`), a disk's bytes from another node (`noded.disk_transfer`) and the consoles
(`noded.console`).
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec
from aiohttp import StreamReader, web

from herder.core import access, metrics
from herder.core.errors import HerderError
from herder.core.noderpc import EPOCH_KEY
from herder.core.rpcdefs import role_calls
from herder.core.rpcdefs.base import Call
from herder.noded import console, disk_transfer, fence, join, rpc, rpccheck
from herder.noded.node import Node, StaleEpoch

log = logging.getLogger("herder.noded")
_encode = msgspec.json.Encoder().encode
ROUTES = access.Routes("noded")  # who may call each route (tests/security walks the router)
NODE = web.AppKey("node", Node)
CHECKER = web.AppKey("checker", rpccheck.RequestChecker)
JOINING = web.AppKey("joining", join.JoinSteps)


def _json(status: int, **body: object) -> web.Response:
    return web.Response(status=status, body=_encode(body), content_type="application/json")


def _refused_caller(node: Node, request: web.Request) -> str | None:
    """Why the TLS caller may not call node RPCs (None: it may; plain HTTP only in
    in-process tests, `daemon.serve` takes TLS)."""
    tls = request.transport.get_extra_info("ssl_object") \
        if request.transport is not None else None
    return None if tls is None else node.trust.refusal(tls.getpeercert(binary_form=True))


def _admitted(node: Node, request: web.Request, method: str, body: bytes
              ) -> Call[object] | web.Response:
    """The call, or the response that refuses it (403 caller or signature, 404 method, 400
    arguments, 409 epoch)."""
    try:
        refusal = _refused_caller(node, request)
        if refusal is not None:
            raise rpccheck.Refused(403, f"refused: {refusal}")
        args = request.app[CHECKER].check(method, body)
    except rpccheck.Refused as err:
        log.warning("refused RPC %s from %s: %s", method, request.remote, err.message)
        return _json(err.status, error=err.message)
    epoch = args.pop(EPOCH_KEY, None)
    try:
        call = rpc.decode(method, args)
    except rpc.UnknownMethod as err:
        return _json(404, error=str(err))
    except rpc.BadArguments as err:
        log.warning("refused RPC %s: %s", method, err)
        return _json(400, error=str(err))
    if epoch is not None:
        try:
            node.accept_epoch(epoch)
        except StaleEpoch as err:
            log.warning("refused RPC %s from %s: %s", method, request.remote, err)
            return _json(409, error=str(err))
        except OSError as err:
            return _json(500, error=f"cannot record the master epoch: {err}")
    return call


async def call_rpc(request: web.Request) -> web.Response:
    """One node RPC."""
    node = request.app[NODE]
    method = request.match_info["method"]
    admitted = _admitted(node, request, method, await request.read())
    if isinstance(admitted, web.Response):
        return admitted
    try:
        result = await asyncio.to_thread(rpc.run, node, admitted)
        if isinstance(admitted, role_calls.RenewCrypto):
            node.trust.refresh()  # here, in the loop that makes the handshakes
    except (HerderError, ValueError, OSError) as err:
        log.warning("RPC %s failed: %s", method, err)
        return _json(500, error=str(err))
    except Exception:  # a bug: logged with its traceback, one line to the master
        log.exception("RPC %s failed", method)
        return _json(500, error=f"internal error in {method}; see the node daemon's log")
    return _json(200, result=result)


async def join_step(request: web.Request) -> web.Response:
    """A join step (noded.join): only on a node that has not joined, the token proven."""
    node = request.app[NODE]
    step = request.match_info["step"]
    try:
        result = request.app[JOINING].handle(step, await request.read())
    except join.JoinRefused as err:
        log.warning("refused join step %s from %s: %s", step, request.remote, err)
        return _json(err.status, error=str(err))
    except (HerderError, OSError) as err:
        log.warning("join step %s failed: %s", step, err)
        return _json(500, error=str(err))
    if step == "install":
        node.trust.refresh()  # the next handshakes: node certificate, cluster callers
        log.info("joined the cluster (node certificate %s)", result.get("digest"))
        await asyncio.to_thread(node.follow_node_params)
    return _json(200, result=result)


async def _next_chunk(content: StreamReader) -> bytes:
    """The next CHUNK bytes of a stream (fewer only at its end): one hand-off to the writer's
    thread per MiB, not one per network read (of 64 KiB or less)."""
    parts: list[bytes] = []
    size = 0
    while size < disk_transfer.CHUNK:
        part = await content.read(disk_transfer.CHUNK - size)
        if not part:
            break
        parts.append(part)
        size += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def import_stream(request: web.Request) -> web.Response:
    """A disk's bytes from another node of the cluster (`noded.disk_transfer`): its node
    certificate and the token of a prepared import."""
    node = request.app[NODE]
    tls = request.transport.get_extra_info("ssl_object") \
        if request.transport is not None else None
    if tls is not None:
        refusal, _ = node.trust.node_refusal(tls.getpeercert(binary_form=True))
        if refusal is not None:
            return _json(403, error=f"refused: {refusal}")
    pending = node.imports.take(request.match_info["token"])
    if pending is None:
        return _json(403, error="no such import")
    try:
        writer = await asyncio.to_thread(disk_transfer.open_writer, pending)
    except OSError as err:
        return _json(500, error=f"cannot open {pending.path}: {err.strerror}")
    try:
        while chunk := await _next_chunk(request.content):
            await asyncio.to_thread(writer.write, chunk)
        result = await asyncio.to_thread(writer.close)
    except (HerderError, OSError) as err:
        writer.abort()
        log.warning("import into %s failed: %s", pending.path, err)
        return _json(500, error=str(err))
    log.info("imported %s bytes into %s", result["bytes"], pending.path)
    return _json(200, result=result)


def node_metrics(node: Node) -> bytes:
    """The node's domains by state, its KVM verdict (once probed), its master epoch and
    uptime, and the process, in Prometheus text (blocking: libvirt is asked)."""
    try:
        states: list[str] = list(node.hv.list_domains().values())
        libvirt_up = 1.0
    except HerderError:
        states, libvirt_up = [], 0.0
    families = [
        metrics.counts("herder_noded_domains", "Domains defined on the node, by state",
                       "state", states),
        metrics.Family("herder_noded_libvirt_up", "libvirt answers noded (1) or not (0)",
                       samples=[((), libvirt_up)]),
        metrics.Family("herder_noded_master_epoch", "The highest master epoch accepted",
                       samples=[((), float(node.master_epoch))]),
        metrics.Family("herder_noded_uptime_seconds", "Seconds since noded started",
                       samples=[((), time.time() - node.started)]),
    ]
    probe = node.hv.probed()
    if probe is not None:
        families.append(metrics.Family(
            "herder_noded_kvm_usable", "The KVM probe's verdict: hardware KVM (1) or "
            "emulation (0)", samples=[((), 1.0 if probe.usable else 0.0)]))
    return metrics.exposition(families)


async def prometheus(request: web.Request) -> web.Response:
    """GET /metrics: the node's figures for Prometheus (the TLS handshake already asked for a
    certificate of the cluster CA; the route only reads)."""
    body = await asyncio.to_thread(node_metrics, request.app[NODE])
    return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})


def make_app(node: Node) -> web.Application:
    rpc.handlers()  # found at start: an area that cannot load fails noded's start, not a call
    checker = rpccheck.RequestChecker(node.hmac_keys, node.name)
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app[NODE] = node
    app[CHECKER] = checker
    app[JOINING] = join.JoinSteps(node.trust, node.name)
    app.router.add_post("/rpc/{method}", call_rpc)
    ROUTES.declare(call_rpc, access.NODE_RPC)
    app.router.add_post("/import/{token}", import_stream)
    ROUTES.declare(import_stream, access.NODE_IMPORT)
    app.router.add_post("/join/{step}", join_step)
    ROUTES.declare(join_step, access.JOIN_TOKEN)
    console.add_routes(app, node, checker, ROUTES)
    fence.add_routes(app, node, ROUTES)  # the master candidates' lease renewals
    app.router.add_get("/metrics", prometheus)
    ROUTES.declare(prometheus, access.ANYONE)
    return app
