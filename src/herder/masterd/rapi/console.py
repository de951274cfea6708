"""RAPI's instance console routes (write users only; docs/security.md "Consoles").

- `GET /2/instances/NAME/console`: Ganeti's console object of the running instance
  (`core.console.instance_console`); 503 "Instance console unavailable" when it does not run,
  as Ganeti's RAPI.
- herder's extensions (docs/compat.md): `GET /2/instances/NAME/console/log?lines=N` (the tail
  of the primary node's serial log, text/plain), and the websockets
  `/2/instances/NAME/console/serial` (text frames both ways: the serial console) and
  `/2/instances/NAME/console/vnc` (binary frames: the RFB stream of the VNC server). masterd
  bridges each to the primary node's noded (`noded.console`) over HTTPS with the node
  certificates, the upgrade carrying a call signed for that node like every node RPC; nothing
  but noded's RPC port is reached over the network. A plain GET of a stream (no websocket
  upgrade: the web console asks so first, since a failed websocket says nothing about why) is
  passed to noded as a plain signed GET: it checks all it would check for the stream (the
  caller, the instance running there, its serial console or VNC server) and opens nothing;
  its refusal comes back as 503 with the reason, its consent as 426 (ask with the upgrade).
  An open stream ends (close code 1008 with the reason) when the authority that opened it goes:
  its session, its user, its password or the user's `write` option (`web.streams`).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import ssl
from typing import Any

import aiohttp
from aiohttp import WSCloseCode, WSMsgType, web

from herder.core import access, console, model
from herder.core.errors import HerderError
from herder.core.noderpc import HttpNodeRpc, NodeRpc
from herder.core.rpcdefs import instance_calls, node_calls
from herder.core.rpcdefs.base import AnswerT, Call
from herder.masterd.rapi.base import ROUTES, RapiHttpError, config_of, ctx_of, find, ok, takes
from herder.masterd.web import streams

log = logging.getLogger("herder.rapi.console")
RUNNING_STATES = frozenset({"running", "blocked", "paused"})
UNAVAILABLE = "Instance console unavailable"  # Ganeti's RAPI answer when it does not run
LIST_TIMEOUT = 30.0
MAX_FRAME = 4 << 20


def target(request: web.Request) -> tuple[model.ConfigData, model.Instance, model.Node]:
    config = config_of(request)
    inst = find(config.find_instance, request.match_info["name"])
    node = config.nodes.get(inst.primary_node)
    if node is None or node.offline:
        where = "unknown" if node is None else f"{node.name}, offline"
        raise RapiHttpError(503, f"{UNAVAILABLE}: the primary node of {inst.name} is {where}")
    return config, inst, node


def node_rpc(request: web.Request) -> NodeRpc:
    rpc = ctx_of(request).rpc
    if rpc is None:
        raise RapiHttpError(503, f"{UNAVAILABLE}: masterd has no node daemons")
    return rpc


async def call(request: web.Request, node: model.Node, asked: Call[AnswerT]) -> AnswerT:
    try:
        return await asyncio.to_thread(node_rpc(request).call, node, asked, LIST_TIMEOUT)
    except HerderError as err:
        raise RapiHttpError(503, f"{UNAVAILABLE}: {err}") from None


@ROUTES.allow(access.RAPI_WRITE)
async def console_info(request: web.Request) -> web.Response:
    """Ganeti's R_2_instances_name_console: the console object, 503 unless it runs."""
    config, inst, node = target(request)
    listed = await call(request, node, node_calls.InstanceList())
    if listed.get(inst.name) not in RUNNING_STATES:
        raise RapiHttpError(503, UNAVAILABLE)
    return ok(console.instance_console(
        inst.name, inst.hypervisor, inst.network_port, config.filled_hvparams(inst),
        node.name, config.filled_ndparams(node)))


@ROUTES.allow(access.RAPI_WRITE)
@takes("lines")
async def console_log(request: web.Request) -> web.Response:
    """The last `lines` lines of the instance's serial log on its primary node."""
    _, inst, node = target(request)
    text = request.query.get("lines", str(console.LOG_LINES_DEFAULT))
    if not text.isdigit() or not 1 <= int(text) <= console.LOG_LINES_MAX:
        raise RapiHttpError(400, f"lines must be a number 1..{console.LOG_LINES_MAX}")
    tail = await call(request, node, instance_calls.InstanceConsoleLog(instance=inst.name,
                                                                       lines=int(text)))
    return web.Response(text=tail, content_type="text/plain")


async def ask_only(session: aiohttp.ClientSession, url: str, headers: dict[str, str],
                   tls: ssl.SSLContext | bool, inst: model.Instance, node: model.Node,
                   kind: str) -> None:
    """Ask noded whether the stream could open, without opening it: raises 426 (it could) or
    503 with noded's reason."""
    try:
        async with session.get(url.replace("ws", "http", 1), headers=headers, ssl=tls,
                               timeout=aiohttp.ClientTimeout(total=LIST_TIMEOUT)) as answer:
            status, said = answer.status, answer.headers.get(console.ERROR_HEADER)
            reason = answer.reason
    except (aiohttp.ClientError, OSError, TimeoutError) as err:
        raise RapiHttpError(503, f"{UNAVAILABLE}: cannot reach the node daemon of "
                                 f"{node.name}: {err or type(err).__name__}") from None
    if status == 426:
        raise RapiHttpError(426, f"the {kind} console of {inst.name} is a websocket: ask with "
                                 "'Upgrade: websocket'")
    raise RapiHttpError(503, f"{UNAVAILABLE}: node {node.name}: "
                             f"{said or f'{status} {reason}'}")


async def open_upstream(session: aiohttp.ClientSession, url: str, headers: dict[str, str],
                        tls: ssl.SSLContext | bool, node: model.Node
                        ) -> aiohttp.ClientWebSocketResponse:
    """The websocket to the primary node's noded; 503 with its reason when it refuses."""
    try:
        return await session.ws_connect(
            url, headers=headers, ssl=tls, heartbeat=30.0, max_msg_size=MAX_FRAME,
            timeout=aiohttp.ClientWSTimeout(ws_close=10.0))
    except aiohttp.WSServerHandshakeError as err:
        said = err.headers.get(console.ERROR_HEADER) if err.headers else None
        reason = said or f"{err.status} {err.message}"
        raise RapiHttpError(503, f"{UNAVAILABLE}: node {node.name}: {reason}") from None
    except (aiohttp.ClientError, OSError) as err:
        raise RapiHttpError(503, f"{UNAVAILABLE}: cannot reach the node daemon of "
                                 f"{node.name}: {err}") from None


async def bridge(request: web.Request, kind: str) -> web.StreamResponse:
    _, inst, node = target(request)
    rpc = node_rpc(request)
    if not isinstance(rpc, HttpNodeRpc):
        raise RapiHttpError(503, f"{UNAVAILABLE}: no node daemon transport")
    url, headers = rpc.stream(node, console.STREAM_PATH.format(instance=inst.name, kind=kind),
                              console.STREAM_METHODS[kind],
                              instance_calls.ConsoleStream(instance=inst.name))
    tls = rpc.tls if rpc.tls is not None else True
    async with aiohttp.ClientSession() as session:
        if not web.WebSocketResponse().can_prepare(request).ok:
            await ask_only(session, url, headers, tls, inst, node, kind)
        upstream = await open_upstream(session, url, headers, tls, node)
        client = web.WebSocketResponse(heartbeat=30.0, max_msg_size=MAX_FRAME)
        await client.prepare(request)
        log.info("console %s of %s opened for %s", kind, inst.name, request.remote)
        gone = asyncio.ensure_future(streams.authority_gone(request, access.RAPI_WRITE))
        try:
            lost = await _relay(client, upstream, gone, text=kind == "serial")
        finally:
            gone.cancel()
            await upstream.close()
        if lost is not None:
            log.info("console %s of %s ended: %s", kind, inst.name, lost)
            await client.close(code=WSCloseCode.POLICY_VIOLATION,
                               message=f"the console ended: {lost}"[:120].encode())
        await client.close()
        log.info("console %s of %s closed", kind, inst.name)
    return client


@ROUTES.allow(access.RAPI_WRITE)
async def console_serial(request: web.Request) -> web.StreamResponse:
    return await bridge(request, "serial")


@ROUTES.allow(access.RAPI_WRITE)
async def console_vnc(request: web.Request) -> web.StreamResponse:
    return await bridge(request, "vnc")


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/instances/{name}/console", console_info)
    router.add_get("/2/instances/{name}/console/log", console_log)
    router.add_get("/2/instances/{name}/console/serial", console_serial)
    router.add_get("/2/instances/{name}/console/vnc", console_vnc)


async def _relay(client: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse,
                 gone: asyncio.Future[str], text: bool) -> str | None:
    """Copy frames both ways until either side ends, or `gone` says why the stream's authority
    went (returned; None: a side ended); the serial console's bytes become text frames for the
    client (UTF-8, split sequences kept whole), its text goes down as bytes."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    async def down() -> None:
        async for message in upstream:
            if message.type != WSMsgType.BINARY:
                continue
            if text:
                chunk = decoder.decode(message.data)
                if chunk:
                    await client.send_str(chunk)
            else:
                await client.send_bytes(message.data)

    async def up() -> None:
        async for message in client:
            if message.type == WSMsgType.TEXT:
                await upstream.send_bytes(message.data.encode())
            elif message.type == WSMsgType.BINARY:
                await upstream.send_bytes(message.data)

    tasks = [asyncio.ensure_future(down()), asyncio.ensure_future(up())]
    waited: list[asyncio.Future[Any]] = [*tasks, gone]
    try:
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)
    return gone.result() if gone.done() and not gone.cancelled() else None
