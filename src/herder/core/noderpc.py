"""What the master asks of a node: the node-RPC client interface and its transports.

LUs call `rpc.call(node, instance_calls.InstanceStart(...))` with a call of the contract
(`core.rpcdefs`: its arguments, its answer's type, its timeout) and get the typed answer;
`call_many` asks many nodes at once. A transport (`RpcTransport`) carries the method name and the
JSON arguments: `HttpNodeRpc` to the node's `herder noded` over HTTPS: the node's certificate is
checked against the cluster CA, the client shows this node's certificate (`node.pem`, whose
digest noded finds in the cluster's list), and every request is signed for its method and node
with the node-RPC key (`core.rpcauth`).
`UnavailableRpc` fails every call with a clear reason (no node daemons configured).

Master epochs (docs/ha.md "Master failover"): a master's calls carry its `master_epoch` in the
signed body (`EPOCH_KEY`); a node keeps the highest epoch it has accepted and refuses an older
one with 409 "stale master epoch N < M" (`StaleEpochError` here), so a former master cannot act
on the nodes after a failover.
"""

from __future__ import annotations

import abc
import base64
import ssl
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import httpx
import msgspec

from herder.core import model, node_certs, ports, rpcauth, untrusted
from herder.core.console import SIGNED_CALL_HEADER
from herder.core.errors import HerderError, RpcError
from herder.core.rpcdefs.base import AnswerT, Call
from herder.core.rpcdefs.instance_calls import ConsoleStream

EPOCH_KEY = "_master_epoch"  # in the signed arguments; noded takes it out before dispatch
STALE_EPOCH = "stale master epoch"


class StaleEpochError(RpcError):
    """A node refused the call: it has accepted a newer master epoch (a failover happened)."""


class NoAnswerError(RpcError):
    """The node daemon gave no answer: no connection came about, or the call timed out or
    broke off after the request went out (the node may have acted on it)."""


class UnreachableError(NoAnswerError):
    """No connection to the node daemon came about, so the call never reached it (the node
    is unchanged); a timeout after the request went out is a plain NoAnswerError."""


class NodeRpc(Protocol):
    """What the master's code calls: a typed call to one node, its typed answer."""

    def call(self, node: model.Node, request: Call[AnswerT],
             timeout: float | None = None) -> AnswerT: ...


class RpcTransport(abc.ABC):
    """Carries a call to a node: `send` posts the method and its JSON arguments and returns
    the node's `result` as decoded JSON; `call` is the typed form over it (the contract's
    arguments out, its answer back, RpcError when the node's answer is not one)."""

    @abc.abstractmethod
    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        """The node's `result` for `method` with `args`; RpcError (or a subclass) when the
        node refused or failed the call or could not be reached."""

    def call(self, node: model.Node, request: Call[AnswerT],
             timeout: float | None = None) -> AnswerT:
        raw = self.send(node, request.METHOD, request.arguments(),
                        timeout if timeout is not None else request.rpc_timeout())
        try:
            return request.answer(raw)
        except msgspec.ValidationError as err:
            raise RpcError(f"node {node.name}: malformed {request.METHOD} answer: "
                           f"{err}") from None


class UnavailableRpc(RpcTransport):
    """The transport when no node daemon transport is configured: every call fails."""

    def __init__(self, reason: str = "no node daemon transport is configured") -> None:
        self.reason = reason

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        raise RpcError(f"node {node.name}: cannot call {method}: {self.reason}")


def release(err: BaseException) -> None:
    """Break the reference cycles of a caught exception and its chain (its `__context__`,
    `__cause__`), so reference counting frees it, and what its frames hold, once dropped.

    httpx raises through context managers (`map_exceptions`): their frames hold the exception
    whose traceback holds those frames, a cycle only the cyclic GC frees, and the cycle holds
    the request (httpx's `Request` and our frames: the signed body). A node call to a node
    that refuses then kept its whole body alive until a full collection: masterd's ssconf
    push to 5,000 such nodes at 50,000 instances (3.9 MB a body, every 10 s) grew it by GBs in
    seconds (docs/scale.md, "Goal 6, round 5": 20.9 GB, the OOM killer)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)  # finished frames: their locals go
        current.__traceback__ = None
        if isinstance(current, httpx.RequestError):
            # its request (the body) and its own frames
            current._request = None  # httpx's `request` property raises when unset
        current = current.__cause__ or current.__context__


def call_many(rpc: NodeRpc, nodes: Sequence[model.Node],
              request: Callable[[model.Node], Call[AnswerT]], *,
              timeout: float | None = None, workers: int = 16
              ) -> dict[str, AnswerT | HerderError]:
    """The same call to many nodes at once (Ganeti's multi-node RPCs): node UUID -> its answer
    or the error it gave; a dead node costs one timeout, not one per node. `request` makes
    each node's arguments (a disk object differs per node)."""
    def one(node: model.Node) -> AnswerT | HerderError:
        try:
            return rpc.call(node, request(node), timeout=timeout)
        except HerderError as err:
            return err

    if not nodes:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(nodes))),
                            thread_name_prefix="node-rpc") as pool:
        return dict(zip((node.uuid for node in nodes), pool.map(one, nodes), strict=True))


class HttpNodeRpc(RpcTransport):
    """Node RPC over HTTPS to each node's noded at its primary IP."""

    def __init__(self, hmac_key: bytes, certificate: Path | None, *,
                 port: int = ports.NODED, timeout: float = 120.0,
                 connect_timeout: float = 5.0, epoch: int | None = None,
                 on_stale: Callable[[StaleEpochError], None] | None = None,
                 client_certificate: Path | None = None) -> None:
        """`certificate`: what the nodes' certificates are checked against, the cluster CA
        (`server.pem`; None: plain HTTP, tests); `client_certificate`: the key and certificate
        (one PEM) shown to the nodes, by default this node's certificate beside it
        (`node.pem`), else `certificate` itself (a cluster set up before node certificates).
        `epoch`: the master epoch every call carries (None: none, a tool that is no master);
        `on_stale` is told when a node refuses it as stale."""
        self.key = hmac_key
        self.epoch = epoch
        self.on_stale = on_stale
        self.port = port
        self.timeout = timeout
        self.connect_timeout = connect_timeout  # kept by every call: a dead node costs this
        verify: Any = False
        self.tls: ssl.SSLContext | None = None  # the context of every call and stream
        if certificate is not None:
            context = ssl.create_default_context(cafile=str(certificate))
            context.check_hostname = False  # the cluster certificate names the cluster
            beside = node_certs.node_certificate_beside(Path(certificate))
            shown = client_certificate or (beside if beside.exists() else certificate)
            try:
                context.load_cert_chain(shown)
            except (OSError, ssl.SSLError) as err:
                raise RpcError(f"cannot load the client certificate {shown} for node RPC: "
                               f"{err}") from None
            verify = self.tls = context
        self.scheme = "https" if certificate is not None else "http"
        self._http = httpx.Client(verify=verify,
                                  timeout=httpx.Timeout(timeout, connect=connect_timeout))

    def url(self, node: model.Node, method: str) -> str:
        host = f"[{node.primary_ip}]" if ":" in node.primary_ip else node.primary_ip
        return f"{self.scheme}://{host}:{self.port}/rpc/{method}"

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        payload = dict(args)
        if self.epoch is not None:
            payload[EPOCH_KEY] = self.epoch
        body = rpcauth.sign_call(self.key, method, node.name, payload)
        failure: RpcError | None = None
        try:
            response = self._http.post(self.url(node, method), content=body,
                                       timeout=httpx.Timeout(timeout or self.timeout,
                                                             connect=self.connect_timeout))
        except httpx.HTTPError as err:
            unsent = isinstance(err, (httpx.ConnectError, httpx.ConnectTimeout))
            failure = (UnreachableError if unsent else NoAnswerError)(
                f"node {node.name}: {method} failed: cannot reach its node daemon "
                f"at {node.primary_ip}:{self.port} ({err})")
            release(err)
        if failure is not None:
            # raised outside the handler, with the request dropped: see `release`
            del body, payload, args
            try:
                raise failure
            finally:
                del failure  # else this frame's local holds the error holding this frame
        try:
            answer = untrusted.loads(response.content)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            answer = {"error": response.text.strip()[:200]}
        if response.status_code == 409 and STALE_EPOCH in str(answer.get("error", "")):
            stale = StaleEpochError(f"node {node.name}: {method} refused: {answer['error']}")
            if self.on_stale is not None:
                self.on_stale(stale)
            raise stale
        if response.status_code != 200:
            raise RpcError(f"node {node.name}: {method} failed: "
                           f"{answer.get('error', response.status_code)}")
        return answer.get("result")

    def stream(self, node: model.Node, path: str, method: str,
               request: ConsoleStream) -> tuple[str, dict[str, str]]:
        """The websocket URL of `path` on the node's noded and the headers that carry the call
        signed for `method` (`core.console`); open it with `self.tls`."""
        payload = msgspec.to_builtins(request)
        if self.epoch is not None:
            payload[EPOCH_KEY] = self.epoch
        body = rpcauth.sign_call(self.key, method, node.name, payload)
        host = f"[{node.primary_ip}]" if ":" in node.primary_ip else node.primary_ip
        scheme = "wss" if self.scheme == "https" else "ws"
        return (f"{scheme}://{host}:{self.port}{path}",
                {SIGNED_CALL_HEADER: base64.urlsafe_b64encode(body).decode("ascii")})

    def close(self) -> None:
        self._http.close()
