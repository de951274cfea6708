"""`herder cluster master-failover`: make a master candidate the master (Ganeti's
`bootstrap.MasterFailover`, on the file backend; on etcd the master lease elects, docs/ha.md).

1. The vote: this node and every other online node (through its noded) try to reach the
   master's masterd at the cluster's master IP; a majority of the online nodes, this one
   counted, must find it gone. An old master whose masterd is stopped consents that way (its
   noded still answers). Without voting the operator vouches that the old master is gone.
2. In the config, in one change: master_node = the new master, master_epoch + 1, and the master
   IP moves along when it was the old master's primary IP.
3. Every reachable node is told the new epoch; from then on nodes refuse the old master's calls,
   and an old masterd exits with code 11 (also when started again).
4. Through the node daemons, as Ganeti does: the old master's master IP goes down on its
   master_netdev and its master daemons stop (warnings when it cannot be reached); then the new
   master's IP goes up and its masterd and maintd start, continuing from its copy of the config
   and job queue. Skipped when asked (the operator starts them).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor

import msgspec

from herder.core import cluster_secrets, envelope, model
from herder.core.errors import HerderError
from herder.core.noderpc import HttpNodeRpc, UnreachableError, call_many
from herder.core.rpcdefs import node_calls, role_calls
from herder.core.rpcdefs.base import Call
from herder.core.store import ConfigStore


class Votes(msgspec.Struct, kw_only=True):
    gone: int  # votes that the master is gone
    voters: int  # the online nodes
    nodes: list[str]  # one line per node
    unreachable: list[str] = []  # nodes whose noded could not be reached (no connection)


class FailoverReport(msgspec.Struct, kw_only=True, omit_defaults=True):
    old_master: str
    new_master: str
    voting: bool
    votes: Votes | None = None  # None: no vote (--no-voting)
    epoch: int
    master_ip: str
    serial_no: int
    nodes: list[str]  # per node: told the new epoch, or why not
    roles: list[str] | None = None  # the master role's move; None: not started here

    @property
    def failed(self) -> bool:
        """The new master's side of the role move failed (the old one's may)."""
        return any(line.startswith("ERROR") for line in self.roles or ())


def vote_rpc(store: ConfigStore, epoch: int | None, noded_port: int,
             timeout: float = 15.0) -> HttpNodeRpc:
    """The node RPC client of a failover: a node that is gone costs the connect timeout (2 s,
    as the vote's own connect to masterd: a living node's kernel and noded accept a
    connection in milliseconds, even loaded), so the calls keep the client's timeouts (a
    per-call timeout would replace both)."""
    secrets = cluster_secrets.SecretPaths.beside(store.path)
    return HttpNodeRpc(envelope.load_key(secrets.hmac_key), secrets.certificate,
                       port=noded_port, epoch=epoch, timeout=timeout, connect_timeout=2.0)


def masterd_reachable(address: str, port: int, timeout: float = 2.0) -> tuple[bool, str]:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True, "masterd answers"
    except OSError as err:
        return False, err.strerror or str(err)


def master_vote(store: ConfigStore, config: model.ConfigData, me: model.Node, *,
                masterd_port: int, noded_port: int) -> Votes:
    """Ask every online node (this one directly, the others through their noded's
    `master_vote`) whether the master's masterd is reachable, all at once, so dead nodes cost
    the vote one connect timeout together. A node that does not answer does not vote for a
    failover; one whose noded could not be reached is listed in `unreachable` (the later
    steps do not wait for it again)."""
    c = config.cluster
    voters = [n for n in config.nodes.values() if not n.offline]
    others = sorted((n for n in voters if n.uuid != me.uuid), key=lambda n: n.name)
    rpc = vote_rpc(store, c.master_epoch, noded_port)
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="vote") as own:
            mine = own.submit(masterd_reachable, c.master_ip, masterd_port)
            answers = call_many(rpc, others, lambda node: node_calls.MasterVote(
                master=config.node_name(c.master_node), address=c.master_ip,
                port=masterd_port, timeout=2.0))
            reachable, detail = mine.result()
    finally:
        rpc.close()
    gone = int(not reachable)
    lines = [f"{me.name}: master {'reachable' if reachable else 'gone'} ({detail})"]
    unreachable = []
    for node in others:
        answer = answers[node.uuid]
        if isinstance(answer, HerderError):
            lines.append(f"{node.name}: no answer ({answer})")
            if isinstance(answer, UnreachableError):
                unreachable.append(node.name)
            continue
        gone += not answer.reachable
        lines.append(f"{node.name}: master "
                     f"{'reachable' if answer.reachable else 'gone'} ({answer.detail})")
    return Votes(gone=gone, voters=len(voters), nodes=lines, unreachable=unreachable)


def announce_epoch(store: ConfigStore, config: model.ConfigData, noded_port: int,
                   unreachable: Collection[str] = ()) -> list[str]:
    """Tell every node the new master epoch (any call carrying it raises the node's), all at
    once; nodes the vote could not reach are not waited for again."""
    rpc = vote_rpc(store, config.cluster.master_epoch, noded_port)
    nodes = sorted(config.nodes.values(), key=lambda n: n.name)
    try:
        answers = call_many(rpc, [n for n in nodes if n.name not in unreachable],
                            lambda node: node_calls.MasterEpoch())
    finally:
        rpc.close()
    lines = []
    for node in nodes:
        answer = answers.get(node.uuid)
        if answer is None:
            lines.append(f"{node.name}: not told (unreachable in the vote); it learns the "
                         "epoch from the new master's first call")
        elif isinstance(answer, HerderError):
            lines.append(f"{node.name}: not told ({answer}); it learns the epoch from the "
                         "new master's first call")
        else:
            lines.append(f"{node.name}: epoch {answer.epoch}")
    return lines


def move_master_role(store: ConfigStore, config: model.ConfigData, before: model.Cluster, *,
                     old_uuid: str, noded_port: int,
                     unreachable: Collection[str] = ()) -> list[str]:
    """Ganeti's master failover, through the node daemons: on the old master the master IP
    down and the master daemons stopped (a warning each when it cannot be done: the old master
    may be gone; one warning, no call, when the vote could not reach it), then on the new
    master the master IP up and the master daemons started."""
    rpc = vote_rpc(store, config.cluster.master_epoch, noded_port, timeout=150.0)
    lines: list[str] = []
    old, new = config.nodes.get(old_uuid), config.nodes[config.cluster.master_node]
    # A master IP that is the old master's own primary IP (no floating IP) stays where it is.
    floating = old is None or before.master_ip != old.primary_ip
    steps: list[tuple[model.Node | None, Call[str], str]] = [
        (old, role_calls.NodeDeactivateMasterIp.of_cluster(before), "master IP down"),
        (old, role_calls.NodeStopMaster(), "master daemons stopped"),
        (new, role_calls.NodeActivateMasterIp.of_cluster(config.cluster), "master IP up"),
        (new, role_calls.NodeStartMasterDaemons(), "masterd and maintd started")]
    if not floating:
        steps = [step for step in steps if not isinstance(step[1], role_calls.MasterIp)]
    if old is not None and old.name in unreachable:
        lines.append(f"WARNING: {old.name}: unreachable in the vote: "
                     + ", ".join(done for node, _, done in steps if node is old)
                     + " not done there (the new epoch refuses it if it comes back)")
        steps = [step for step in steps if step[0] is not old]
    try:
        for node, request, done in steps:
            if node is None:
                continue
            try:
                rpc.call(node, request)
                lines.append(f"{node.name}: {done}")
            except HerderError as err:  # the old master may be gone; the new one must work
                level = "WARNING" if node is old else "ERROR"
                lines.append(f"{level}: {node.name}: {request.METHOD}: {err}")
    finally:
        rpc.close()
    return lines


def candidate(config: model.ConfigData, me_name: str) -> model.Node:
    """The node `me_name`, if it may become the master; HerderError saying why not."""
    try:
        me = config.find_node(me_name)
    except HerderError:
        raise HerderError(f"this node ({me_name}) is not a node of the cluster; run it on a "
                          "master candidate or give --node") from None
    c = config.cluster
    if me.uuid == c.master_node:
        raise HerderError(f"{me.name} is already the master (epoch {c.master_epoch})")
    if not me.master_candidate:
        raise HerderError(f"{me.name} is not a master candidate; only a master candidate can "
                          "become the master (herder node modify NODE --master-candidate yes)")
    if me.offline or me.drained:
        raise HerderError(f"{me.name} is offline or drained; it cannot become the master")
    return me


def take_master_role(store: ConfigStore, before: model.Cluster, me: model.Node) -> None:
    """Step 2: `me` the master at the next epoch, in one change of the config, unless the
    master changed since `before` was read."""
    with store.update() as cfg:
        cc = cfg.cluster
        if cc.master_node != before.master_node or cc.master_epoch != before.master_epoch:
            raise HerderError("the master changed meanwhile (another failover?); nothing done")
        new = cfg.nodes[me.uuid]
        if cc.master_ip == cfg.nodes[before.master_node].primary_ip:
            cc.master_ip = new.primary_ip  # no separate floating IP: the master IP moves along
        cc.master_node = new.uuid
        cc.master_epoch += 1


def failover(store: ConfigStore, me_name: str, *, voting: bool, masterd_port: int,
             noded_port: int, start: bool, unvoted: Callable[[str, str], None],
             voted: Callable[[str, Votes], None]) -> FailoverReport:
    """Make `me_name` the master (steps 1-4; step 4 only with `start`). `unvoted(old, new)`
    is asked before a failover without a vote (it raises to stop it); `voted(old, votes)`
    hears the vote before its majority is checked."""
    config = store.load()
    me = candidate(config, me_name)
    c = config.cluster
    old = config.node_name(c.master_node)
    votes = None
    if not voting:
        unvoted(old, me.name)
    else:
        votes = master_vote(store, config, me, masterd_port=masterd_port, noded_port=noded_port)
        voted(old, votes)
        if votes.gone * 2 <= votes.voters:
            raise HerderError(f"only {votes.gone} of {votes.voters} nodes find the master {old} "
                              "gone, no majority; stop its masterd first, or use --no-voting if "
                              "the cluster lost its majority")
    take_master_role(store, c, me)
    config = store.load()
    dead = votes.unreachable if votes is not None else ()
    told = announce_epoch(store, config, noded_port, dead)
    roles = move_master_role(store, config, c, old_uuid=c.master_node,
                             noded_port=noded_port, unreachable=dead) if start else None
    return FailoverReport(
        old_master=old, new_master=me.name, voting=voting, votes=votes,
        epoch=config.cluster.master_epoch, master_ip=config.cluster.master_ip,
        serial_no=config.serial_no, nodes=told, roles=roles)
