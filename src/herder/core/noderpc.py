"""What the master asks of a node: the node-RPC client interface and its transports.

LUs call `rpc.call(node, method, args)`; `HttpNodeRpc` carries it to the node's `herder noded`
over HTTPS: the node's certificate is checked against the cluster CA, the client shows this
node's certificate (`node.pem`, whose digest noded finds in the cluster's list), and every
request is signed for its method and node with the node-RPC key (`core.rpcauth`).
`UnavailableRpc` fails every call with a clear reason (no node daemons configured).
Instance-affecting calls carry the reason trail and the config version (`serial_no`) of the
instance they act on (design-monitoring-agent "Instance status"), and calls that create or use
backend storage carry the instance (design "Instance disk status propagation").

Master epochs (docs/ha.md "Master failover"): a master's calls carry its `master_epoch` in the
signed body (`EPOCH_KEY`); a node keeps the highest epoch it has accepted and refuses an older
one with 409 "stale master epoch N < M" (`StaleEpochError` here), so a former master cannot act
on the nodes after a failover.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import httpx

from herder.core import diskobjects, model, node_certs, ports, rpcauth, untrusted
from herder.core.console import SIGNED_CALL_HEADER
from herder.core.errors import RpcError

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
    def call(self, node: model.Node, method: str, args: dict[str, Any] | None = None,
             timeout: float | None = None) -> Any: ...


class UnavailableRpc:
    """The transport when no node daemon transport is configured: every call fails."""

    def __init__(self, reason: str = "no node daemon transport is configured") -> None:
        self.reason = reason

    def call(self, node: model.Node, method: str, args: dict[str, Any] | None = None,
             timeout: float | None = None) -> Any:
        raise RpcError(f"node {node.name}: cannot call {method}: {self.reason}")


class HttpNodeRpc:
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

    def call(self, node: model.Node, method: str, args: dict[str, Any] | None = None,
             timeout: float | None = None) -> Any:
        payload = dict(args or {})
        if self.epoch is not None:
            payload[EPOCH_KEY] = self.epoch
        body = rpcauth.sign_call(self.key, method, node.name, payload)
        try:
            response = self._http.post(self.url(node, method), content=body,
                                       timeout=httpx.Timeout(timeout or self.timeout,
                                                             connect=self.connect_timeout))
        except httpx.HTTPError as err:
            unsent = isinstance(err, (httpx.ConnectError, httpx.ConnectTimeout))
            raise (UnreachableError if unsent else NoAnswerError)(
                f"node {node.name}: {method} failed: cannot reach its node daemon "
                f"at {node.primary_ip}:{self.port} ({err})") from None
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
               args: dict[str, Any]) -> tuple[str, dict[str, str]]:
        """The websocket URL of `path` on the node's noded and the headers that carry the call
        signed for `method` (`core.console`); open it with `self.tls`."""
        payload = dict(args)
        if self.epoch is not None:
            payload[EPOCH_KEY] = self.epoch
        body = rpcauth.sign_call(self.key, method, node.name, payload)
        host = f"[{node.primary_ip}]" if ":" in node.primary_ip else node.primary_ip
        scheme = "wss" if self.scheme == "https" else "ws"
        return (f"{scheme}://{host}:{self.port}{path}",
                {SIGNED_CALL_HEADER: base64.urlsafe_b64encode(body).decode("ascii")})

    def close(self) -> None:
        self._http.close()


def network_of(config: model.ConfigData, nic: model.NIC) -> dict[str, Any]:
    """A NIC's network for the node: its name and Ganeti's hook variables (Network.HooksDict:
    NETWORK_NAME, _UUID, _TAGS, _SUBNET, _GATEWAY, _SUBNET6, _GATEWAY6, _MAC_PREFIX), which a
    routed NIC's ifup passes on. {} without a network."""
    net = config.networks.get(nic.network) if nic.network else None
    if net is None:
        return {}
    env = {"NETWORK_NAME": net.name, "NETWORK_UUID": net.uuid,
           "NETWORK_TAGS": " ".join(net.tags), "NETWORK_SUBNET": net.network}
    for key, value in (("NETWORK_GATEWAY", net.gateway), ("NETWORK_SUBNET6", net.network6),
                       ("NETWORK_GATEWAY6", net.gateway6),
                       ("NETWORK_MAC_PREFIX", net.mac_prefix)):
        if value:
            env[key] = value
    return {"network": net.name, "network_env": env}


def instance_payload(config: model.ConfigData, inst: model.Instance,
                     node: model.Node | None = None) -> dict[str, Any]:
    """What a node needs to define and run an instance; its disks are Ganeti's disk objects
    for `node` (default: the primary; `core.diskobjects`)."""
    be = config.filled_beparams(inst)
    group = config.instance_group(inst)
    return {
        "name": inst.name, "uuid": inst.uuid, "memory": be["maxmem"], "vcpus": be["vcpus"],
        "hypervisor": inst.hypervisor, "os": inst.os,
        "disks": diskobjects.disk_objects(config, inst, node.uuid if node else None),
        "nics": [{"mac": n.mac, "ip": n.ip, "uuid": n.uuid, "name": n.name,
                  **network_of(config, n), **config.filled_nicparams(n, group)}
                 for n in inst.nics],
        "tags": list(inst.tags),
        "hvparams": config.filled_hvparams(inst), "beparams": config.filled_beparams(inst),
        "osparams": config.filled_osparams(inst),
        "uid_pool": [list(r) for r in config.cluster.uid_pool],
        "network_port": inst.network_port,
    }
