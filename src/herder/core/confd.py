"""confd's protocol: constants, request/reply packets, and the client library.

Wire format (design-2.1 "Ganeti Confd", Ganeti 3.0's numbers; see docs/compat.md rows C*):

    request  plj0{"hmac": H, "msg": "{\"protocol\":1,\"type\":T,\"query\":Q,\"rsalt\":R}",
                  "salt": "<unix time>"}
    reply    plj0{"hmac": H, "msg": "{\"protocol\":1,\"status\":S,\"answer\":A,\"serial\":N}",
                  "salt": R}

H is HMAC-SHA1 with the cluster key over salt + msg (`herder.core.envelope`). A reply is signed
with the request's rsalt as its salt.

The client (`ConfdClient`) behaves like Ganeti's: one signed request goes to a random subset of
the peers (`coverage`: 0 = min(peers, 6), -1 = all, N = exactly N), it waits for
`needed_replies(sent)` distinct peers to answer, keeps the answer with the highest serial and
flags the result inconsistent when two answers with the same serial differ. Replies with a bad
magic, HMAC or unknown salt are dropped. Components never import each other, so mond and the CLI
reach confd only through this module.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import select
import socket
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, TypeGuard

import msgspec

from herder.core import envelope, ports, randomness, untrusted
from herder.core.errors import HerderError, SignatureError

# --- constants (Ganeti 3.0 values) ------------------------------------------------------------

PROTOCOL_VERSION = 1
# Ganeti answers a ping with its config version; herder speaks Ganeti 3.0's protocol and answers
# 3.0's version number (herder's own document format version is unrelated to the wire).
CONFIG_VERSION = 3_000_000
MAX_CLOCK_SKEW = 300  # seconds, inclusive (Ganeti: 2 * NODE_MAX_CLOCK_SKEW)
DEFAULT_REQ_COVERAGE = 6
CLIENT_EXPIRE_TIMEOUT = 10.0  # seconds
MAX_UDP_DATA_SIZE = envelope.MAX_UDP_DATA_SIZE

REQ_PING = 0
REQ_NODE_ROLE_BYNAME = 1
REQ_NODE_PIP_BY_INSTANCE_IP = 2
REQ_CLUSTER_MASTER = 3
REQ_NODE_PIP_LIST = 4
REQ_MC_PIP_LIST = 5
REQ_INSTANCES_IPS_LIST = 6
REQ_NODE_DRBD = 7
REQ_NODE_INSTANCES = 8
REQ_INSTANCE_DISKS = 9
REQ_CONFIG_QUERY = 10
REQ_DATA_COLLECTORS = 11
# herder's additions for design-2.1's list where Ganeti has no query type (outside Ganeti's
# numbers; docs/compat.md). Ganeti servers drop them silently.
REQ_MC_LIST = 100  # master candidates' names
REQ_OFFLINE_NODES = 101  # offline nodes' names
REQ_INSTANCE_LIST = 102  # instance names
REQ_INSTANCE_PRIMARY_NODE = 103  # an instance's primary node name (or all of them)

REQ_NAMES: dict[int, str] = {
    REQ_PING: "ping",
    REQ_NODE_ROLE_BYNAME: "node_role_byname",
    REQ_NODE_PIP_BY_INSTANCE_IP: "node_pip_by_instance_ip",
    REQ_CLUSTER_MASTER: "cluster_master",
    REQ_NODE_PIP_LIST: "node_pip_list",
    REQ_MC_PIP_LIST: "mc_pip_list",
    REQ_INSTANCES_IPS_LIST: "instances_ips_list",
    REQ_NODE_DRBD: "node_drbd",
    REQ_NODE_INSTANCES: "node_instances",
    REQ_INSTANCE_DISKS: "instance_disks",
    REQ_CONFIG_QUERY: "config_query",
    REQ_DATA_COLLECTORS: "data_collectors",
    REQ_MC_LIST: "mc_list",
    REQ_OFFLINE_NODES: "offline_nodes",
    REQ_INSTANCE_LIST: "instance_list",
    REQ_INSTANCE_PRIMARY_NODE: "instance_primary_node",
}
REQ_BY_NAME: dict[str, int] = {name: num for num, name in REQ_NAMES.items()}
GANETI_REQS = frozenset(range(REQ_PING, REQ_DATA_COLLECTORS + 1))
HERDER_REQS = frozenset(REQ_NAMES) - GANETI_REQS

REPL_STATUS_OK = 0
REPL_STATUS_ERROR = 1
REPL_STATUS_NOTIMPLEMENTED = 2

# Error answers (with status 1); Ganeti 2.10+ numbering (2.1 had 1/2/3).
ERROR_UNKNOWN_ENTRY = 0
ERROR_INTERNAL = 1
ERROR_ARGUMENT = 2

NODE_ROLE_MASTER = 0
NODE_ROLE_CANDIDATE = 1
NODE_ROLE_OFFLINE = 2
NODE_ROLE_DRAINED = 3
NODE_ROLE_REGULAR = 4
NODE_ROLE_NAMES = {0: "master", 1: "candidate", 2: "offline", 3: "drained", 4: "regular"}

# Keys of a query dict (strings: JSON object keys).
REQQ_LINK = "0"
REQQ_IP = "1"
REQQ_IPLIST = "2"
REQQ_FIELDS = "3"
# cluster_master field ids: ints in Ganeti 3.0 (herder's server accepts "0".."2" too).
REQFIELD_NAME = 0
REQFIELD_IP = 1
REQFIELD_MNODE_PIP = 2


class ConfdError(HerderError):
    """A confd request could not be made or answered."""


class ConfdTimeoutError(ConfdError):
    """No peer answered in time."""


# --- packets ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Request:
    type: int
    query: Any
    rsalt: str
    salt: str  # the request's timestamp as sent
    mac: str  # the request's HMAC (identifies a replayed packet)


@dataclasses.dataclass(frozen=True)
class Reply:
    status: int
    answer: Any
    serial: int
    protocol: int = PROTOCOL_VERSION

    @property
    def ok(self) -> bool:
        return self.status == REPL_STATUS_OK


_sorted = msgspec.json.Encoder(order="sorted")


def _sign_text(msg: str, key: bytes, salt: str) -> bytes:
    """The envelope around an already-serialised message (keys hmac, msg, salt)."""
    return _sorted.encode(envelope.sign(msg, key, salt))


def new_rsalt() -> str:
    return str(uuid.uuid4())


def request_message(req_type: int, query: Any, rsalt: str) -> str:
    """The inner message text; `query` is omitted when None (as Ganeti's ToDict does)."""
    body: dict[str, Any] = {"protocol": PROTOCOL_VERSION, "type": req_type}
    if query is not None:
        body["query"] = query
    body["rsalt"] = rsalt
    return envelope.dumps(body)


def build_request(req_type: int, query: Any, key: bytes, rsalt: str | None = None,
                  now: float | None = None) -> tuple[str, bytes]:
    """(rsalt, packet) for one request; the salt is the current unix time in whole seconds."""
    rsalt = rsalt or new_rsalt()
    salt = str(int(time.time() if now is None else now))
    msg = request_message(req_type, query, rsalt)
    return rsalt, envelope.pack(_sign_text(msg, key, salt))


def reply_message(status: int, answer: Any, serial: int) -> str:
    """The inner reply text in Ganeti 3.0's key order: protocol, status, answer, serial."""
    return msgspec.json.encode(
        {"protocol": PROTOCOL_VERSION, "status": status, "answer": answer, "serial": serial}
    ).decode()


def build_reply(msg: str, key: bytes, rsalt: str) -> bytes:
    """Sign an inner reply text with the request's rsalt and frame it."""
    return envelope.pack(_sign_text(msg, key, rsalt))


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_request(payload: bytes, key: bytes, now: float | None = None,
                  max_skew: float = MAX_CLOCK_SKEW) -> Request:
    """Check and decode a request packet; raises SignatureError (or ConfdError) saying why.

    Checks, in order: magic, envelope and HMAC, integer timestamp within ±max_skew, a JSON object
    body with protocol 1, an integer type and a non-empty string rsalt. The type's range is the
    server's business.
    """
    if len(payload) > MAX_UDP_DATA_SIZE:
        raise ConfdError("packet too big")
    raw = envelope.unpack(payload)
    try:
        outer = untrusted.decode(raw, what="envelope")
    except untrusted.BadDocument as err:
        raise SignatureError(str(err)) from None
    msg, salt = envelope.verify(outer, key)
    if not salt.isascii() or not salt.lstrip("-").isdigit():
        raise ConfdError(f"non-integer timestamp {salt[:40]!r}")
    stamp = int(salt)
    current = time.time() if now is None else now
    if abs(current - stamp) > max_skew:
        raise ConfdError(f"timestamp {stamp} outside the ±{max_skew:g} s window")
    try:
        body = untrusted.decode(msg, what="request body")
    except untrusted.BadDocument as err:
        raise ConfdError(str(err)) from None
    if not isinstance(body, dict):
        raise ConfdError("request body is not a JSON object")
    if body.get("protocol") != PROTOCOL_VERSION or not _is_int(body.get("protocol")):
        raise ConfdError(f"unsupported protocol {body.get('protocol')!r}")
    req_type = body.get("type")
    if not _is_int(req_type):
        raise ConfdError(f"bad request type {req_type!r}")
    rsalt = body.get("rsalt")
    if not isinstance(rsalt, str) or not rsalt:
        raise ConfdError("missing rsalt")
    return Request(type=req_type, query=body.get("query"), rsalt=rsalt, salt=salt,
                   mac=str(outer["hmac"]).lower())


def parse_reply(payload: bytes, key: bytes) -> tuple[Reply, str]:
    """Check and decode a reply packet: (reply, salt). Raises SignatureError/ConfdError."""
    raw = envelope.unpack(payload)
    body, salt = envelope.verify_data(raw, key)
    if not isinstance(body, dict):
        raise ConfdError("reply body is not a JSON object")
    status, serial = body.get("status"), body.get("serial", 0)
    if not _is_int(status) or not _is_int(serial):
        raise ConfdError("reply without integer status and serial")
    return Reply(status=status, answer=body.get("answer"), serial=serial,
                 protocol=body.get("protocol", PROTOCOL_VERSION)), salt


def request_type(value: str | int) -> int:
    """A query type from its number or name (`ping`, `node_drbd`, `cluster-master`...)."""
    if isinstance(value, int):
        return value
    text = value.strip().lower().replace("-", "_")
    if text.lstrip("-").isdigit():
        return int(text)
    if text in REQ_BY_NAME:
        return REQ_BY_NAME[text]
    raise ConfdError(
        f"unknown confd query type {value!r} (known: {', '.join(REQ_BY_NAME)})"
    )


# --- the client's counting rule ---------------------------------------------------------------


def needed_replies(sent: int) -> int:
    """How many peers must answer (Ganeti's _NeededReplies): 1→1 2→2 3→2 4→3 5→3 6→4 …"""
    if sent < 3:
        return sent
    if sent < 5:
        return sent - 1
    return sent // 2 + 1


def coverage_count(coverage: int, peers: int) -> int:
    """How many peers a request goes to: 0 = min(peers, 6), -1 = all, N = exactly N."""
    if coverage == 0:
        count = min(peers, DEFAULT_REQ_COVERAGE)
    elif coverage == -1:
        count = peers
    elif coverage > 0:
        count = coverage
    else:
        raise ConfdError(f"bad coverage {coverage} (0, -1 or a positive number)")
    if count > peers:
        raise ConfdError(f"not enough confd peers known: coverage {count}, {peers} peer(s)")
    if count == 0:
        raise ConfdError("no confd peers to ask")
    return count


# --- the client -------------------------------------------------------------------------------


@dataclasses.dataclass
class ConfdResult:
    """The outcome of one query: the highest-serial answer and how it was reached."""

    type: int
    query: Any
    status: int
    answer: Any
    serial: int
    peer: str  # the peer whose answer was kept ("host:port")
    consistent: bool  # False when two answers with the same serial differ
    sent: int  # peers asked
    needed: int  # replies needed (Ganeti's counting rule)
    received: int  # distinct peers that answered
    timed_out: bool  # fewer than `needed` peers answered in time
    replies: dict[str, Reply] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == REPL_STATUS_OK

    def value(self) -> Any:
        """The answer, or ConfdError if the server answered with an error."""
        if not self.ok:
            raise ConfdError(
                f"confd {REQ_NAMES.get(self.type, self.type)} query failed: {self.answer!r}"
            )
        return self.answer

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["type_name"] = REQ_NAMES.get(self.type, str(self.type))
        data["replies"] = {peer: dataclasses.asdict(rep) for peer, rep in self.replies.items()}
        return data


def pick_best(replies: dict[str, Reply]) -> tuple[str, Reply, bool]:
    """(peer, reply) with the highest serial (the first such), and whether every reply with
    that serial says the same; lower-serial (stale) answers do not count against it."""
    best_peer, best = "", None
    for peer, rep in replies.items():
        if best is None or rep.serial > best.serial:
            best_peer, best = peer, rep
    if best is None:
        raise ConfdError("no replies")
    consistent = all(
        (rep.status, rep.answer) == (best.status, best.answer)
        for rep in replies.values() if rep.serial == best.serial
    )
    return best_peer, best, consistent


def parse_peer(text: str, port: int = ports.CONFD) -> tuple[str, int]:
    """`HOST`, `HOST:PORT`, `[V6]:PORT` or a bare IPv6 address → (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else port
    if text.count(":") == 1:
        host, _, port_text = text.partition(":")
        return host, int(port_text)
    return text, port


def _format_addr(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ConfdClient:
    """Ask confd servers (herder's or Ganeti's) a question; synchronous, thread-safe per call.

    `peers`: addresses or names, or (host, port) pairs; a bare address uses `port`. Each query
    opens its own sockets (IPv4 and/or IPv6 as the peers need), so one client may be shared.
    """

    def __init__(self, peers: Sequence[str] | Sequence[tuple[str, int]], hmac_key: bytes,
                 port: int = ports.CONFD, timeout: float = 2.0) -> None:
        if isinstance(peers, str | bytes):
            raise TypeError("peers must be a list")
        self.hmac_key = hmac_key
        self.port = port
        self.timeout = timeout
        self.peers: list[tuple[str, int]] = [
            (p[0], int(p[1])) if isinstance(p, tuple) else parse_peer(p, port) for p in peers
        ]
        self._resolved: dict[tuple[str, int], tuple[int, tuple[Any, ...]]] = {}

    def _resolve(self, peer: tuple[str, int]) -> tuple[int, tuple[Any, ...]]:
        found = self._resolved.get(peer)
        if found is None:
            try:
                infos = socket.getaddrinfo(peer[0], peer[1], type=socket.SOCK_DGRAM)
            except socket.gaierror as err:
                raise ConfdError(f"cannot resolve confd peer {peer[0]}: {err.strerror}") from None
            family, _, _, _, sockaddr = infos[0]
            found = (family, sockaddr)
            self._resolved[peer] = found
        return found

    def query(self, req_type: int | str, query: Any = None, coverage: int = 0,
              timeout: float | None = None) -> ConfdResult:
        """Send one request and wait for enough answers; see the module docstring.

        Raises ConfdTimeoutError when no peer answers within `timeout` seconds. When some but
        fewer than the needed peers answer, the result carries `timed_out=True`.
        """
        rtype = request_type(req_type)
        wait = self.timeout if timeout is None else timeout
        targets = randomness.RNG.sample(self.peers, coverage_count(coverage, len(self.peers)))
        rsalt, packet = build_request(rtype, query, self.hmac_key)
        if len(packet) > MAX_UDP_DATA_SIZE:
            raise ConfdError("request too big for one UDP packet")
        needed = needed_replies(len(targets))
        sockets: dict[int, socket.socket] = {}
        expected: dict[tuple[str, int], str] = {}  # normalised (ip, port) -> peer label
        try:
            for peer in targets:
                family, sockaddr = self._resolve(peer)
                sock = sockets.get(family)
                if sock is None:
                    sock = socket.socket(family, socket.SOCK_DGRAM)
                    sock.setblocking(False)
                    sockets[family] = sock
                try:
                    sock.sendto(packet, sockaddr)
                except OSError:
                    continue  # an unreachable peer is just one that does not answer
                expected[(_norm_ip(sockaddr[0]), sockaddr[1])] = _format_addr(*peer)
            replies = self._collect(list(sockets.values()), rsalt, expected, needed, wait)
        finally:
            for sock in sockets.values():
                sock.close()
        if not replies:
            names = ", ".join(_format_addr(*p) for p in targets)
            raise ConfdTimeoutError(
                f"no confd answer to {REQ_NAMES.get(rtype, rtype)} from {names} within {wait:g} s"
            )
        best_peer, best, consistent = pick_best(replies)
        return ConfdResult(
            type=rtype, query=query, status=best.status, answer=best.answer, serial=best.serial,
            peer=best_peer, consistent=consistent, sent=len(targets), needed=needed,
            received=len(replies), timed_out=len(replies) < needed, replies=replies,
        )

    # --- what mond needs, decoded (each raises ConfdError on an error answer or no answer) ---

    def data_collectors(self) -> dict[str, tuple[bool, float]]:
        """Type 11: collector name → (active, interval in seconds; Ganeti sends microseconds)."""
        answer = self.query(REQ_DATA_COLLECTORS).value()
        return {name: (bool(s.get("active", True)), float(s["interval"]) / 1_000_000)
                for name, s in answer.items()}

    def node_drbd(self, node: str) -> list[list[Any]]:
        """Type 7: [node, minor, instance, iv_name, "primary"|"secondary", peer node] rows."""
        return list(self.query(REQ_NODE_DRBD, node).value())

    def node_instances(self, node: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Type 8: (primary instances, secondary instances) of a node, as Ganeti objects."""
        primary, secondary = self.query(REQ_NODE_INSTANCES, node).value()
        return list(primary), list(secondary)

    def instance_disks(self, instance: str) -> list[dict[str, Any]]:
        """Type 9: an instance's disks as Ganeti disk objects."""
        return list(self.query(REQ_INSTANCE_DISKS, instance).value())

    def _collect(self, socks: list[socket.socket], rsalt: str,
                 expected: dict[tuple[str, int], str], needed: int,
                 wait: float) -> dict[str, Reply]:
        replies: dict[str, Reply] = {}
        deadline = time.monotonic() + wait
        while len(replies) < needed:
            left = deadline - time.monotonic()
            if left <= 0 or not expected:
                break
            readable, _, _ = select.select(socks, [], [], left)
            for sock in readable:
                try:
                    data, addr = sock.recvfrom(65536)
                except OSError:  # e.g. ICMP port unreachable reported on the socket
                    continue
                peer = expected.get((_norm_ip(addr[0]), addr[1]))
                if peer is None:
                    continue
                try:
                    reply, salt = parse_reply(data, self.hmac_key)
                except HerderError:
                    continue
                if salt != rsalt:
                    continue
                replies.setdefault(peer, reply)
        return replies


def _norm_ip(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.split("%", 1)[0]))
    except ValueError:
        return text


def peers_from_config(config: Any) -> list[str]:
    """The master candidates' primary IPs (where confd runs), the master's first."""
    nodes: Iterable[Any] = config.nodes.values()
    master = config.cluster.master_node
    candidates = [n for n in nodes if n.master_candidate or n.uuid == master]
    candidates.sort(key=lambda n: (n.uuid != master, n.name))
    return [n.primary_ip for n in candidates if not n.offline]
