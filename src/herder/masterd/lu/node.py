"""Node LUs: add, modify (flags and roles, with Ganeti's rules), remove, powercycle, and the
node-level operations that need node daemons (evacuate, migrate)."""

from __future__ import annotations

from typing import Any, TypeVar

from herder.core import envelope, model, names, params, ports
from herder.core.cluster_secrets import SecretPaths
from herder.core.errors import ConfigError, HerderError, OpPrereqError
from herder.core.noderpc import UnavailableRpc
from herder.core.rpcdefs import node_calls, role_calls
from herder.masterd import join, libvirt_trust, locking, redist
from herder.masterd.jobs import opcodes
from herder.masterd.lu import candidates, migration, placement
from herder.masterd.lu.base import (
    JobResult,
    LockRequest,
    LogicalUnit,
    MasterEnv,
    ResultWithJobs,
    lookup,
)
from herder.masterd.lu.common import config_path_of, redistribute, resets

REACH_TIMEOUT = 10.0  # seconds: Ganeti's TcpPing


def _answers(address: str, port: int) -> bool:
    """Does noded's port accept a TCP connection on `address` within REACH_TIMEOUT?"""
    return names.address_answers(address, port, REACH_TIMEOUT, live_port_needed=True)


def _check_ip(value: str | None, what: str) -> None:
    if value is None:
        return
    try:
        names.ip_address(value, what)
    except ValueError as err:
        raise OpPrereqError(str(err)) from None


class NodeAdd(LogicalUnit[opcodes.OpNodeAdd]):
    REQ_BGL = True  # the node has no lock yet

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        if not op.primary_ip:
            raise OpPrereqError("a new node needs its primary IP (primary_ip)")
        _check_ip(op.primary_ip, "primary IP")
        _check_ip(op.secondary_ip, "secondary IP")
        for other in config.nodes.values():
            if other.name == op.node_name and not op.readd:
                raise OpPrereqError(f"node {op.node_name!r} already exists (uuid {other.uuid})",
                                    "already_exists")
            if other.primary_ip == op.primary_ip and other.name != op.node_name:
                raise OpPrereqError(f"IP {op.primary_ip} is already node {other.name}'s "
                                    "primary IP", "already_exists")
        if op.readd and not any(n.name == op.node_name for n in config.nodes.values()):
            raise OpPrereqError(f"node {op.node_name!r} is not in the cluster; cannot re-add",
                                "unknown_entity")
        if op.group:
            lookup(config.find_group, op.group)
        elif not config.nodegroups:
            raise OpPrereqError("the cluster has no node group")
        try:
            params.apply_overrides(params.ND_FAMILY, {}, resets(op.ndparams or {}))
        except ConfigError as err:
            raise OpPrereqError(str(err)) from None
        if op.join_token is None and op.node_check:
            self._reach(op.primary_ip, op.secondary_ip)

    def _reach(self, primary_ip: str, secondary_ip: str | None) -> None:
        """Ganeti's reachability checks of a new node (TcpPing to noded's port on its primary,
        then on its secondary address), with noded's port answering: a node whose daemon does
        not run is not added. A join reaches the node itself."""
        port = int(getattr(self.env.rpc, "port", ports.NODED))
        if not _answers(primary_ip, port):
            raise OpPrereqError(f"Node not reachable by ping: nothing answers on {primary_ip} "
                                f"port {port} (node_check: false adds it without)",
                                "environment_error")
        if secondary_ip and secondary_ip != primary_ip and not _answers(secondary_ip, port):
            raise OpPrereqError(f"Node secondary ip not reachable by TCP based ping to node "
                                f"daemon port: nothing answers on {secondary_ip} port {port}",
                                "environment_error")

    def join(self, node_uuid: str) -> str | None:
        """Join the node with its token (before the config changes: a failure leaves the config
        as it was); its certificate's digest. None: no token, the node was set up by hand."""
        op = self.op
        if op.join_token is None:
            return None
        if isinstance(self.env.rpc, UnavailableRpc):
            raise OpPrereqError("joining a node needs the node daemons (masterd's node RPC)")
        config_path = config_path_of(self.env)
        secrets = SecretPaths.beside(config_path)
        # the ssconf the node gets: the config as it will be, the node and its certificate in
        planned = self.env.store.load()
        group = planned.find_group(op.group) if op.group else \
            min(planned.nodegroups.values(), key=lambda g: g.ctime)
        planned.nodes[node_uuid] = model.Node(
            uuid=node_uuid, name=op.node_name, primary_ip=op.primary_ip or "",
            secondary_ip=op.secondary_ip, group=group.uuid,
            ndparams=params.apply_overrides(params.ND_FAMILY, {}, resets(op.ndparams or {})))
        try:
            material = join.JoinMaterial(secrets.certificate.read_bytes(),
                                         envelope.load_key(secrets.hmac_key))
        except (OSError, HerderError) as err:
            raise OpPrereqError(f"cannot join {op.node_name}: the cluster's secrets: "
                                f"{err}") from None
        port = int(getattr(self.env.rpc, "port", ports.NODED))

        def values(digest: str) -> dict[str, str]:
            planned.cluster.node_certs[node_uuid] = digest
            return redist.ssconf_values(planned)

        try:
            return join.join(op.node_name, op.primary_ip or "", port, op.join_token, material,
                             ssconf=values)
        except join.JoinError as err:
            raise OpPrereqError(str(err), "environment_error") from None

    def execute(self) -> JobResult:
        op = self.op
        stamp = model.now()
        existing_uuid = next((n.uuid for n in self.env.store.load().nodes.values()
                              if n.name == op.node_name), None)
        new_uuid = existing_uuid or model.new_uuid()
        digest = self.join(new_uuid)
        with self.env.store.update() as config:
            if digest is not None:
                config.cluster.node_certs[new_uuid] = digest
            if op.group:
                group = config.find_group(op.group)
            else:
                group = min(config.nodegroups.values(), key=lambda g: g.ctime)
            existing = next((n for n in config.nodes.values() if n.name == op.node_name), None)
            if existing is not None:  # readd: keep UUID and flags, refresh addresses
                node = existing
                node.primary_ip = op.primary_ip or node.primary_ip
                node.secondary_ip = op.secondary_ip or node.secondary_ip
                node.offline = False
                node.touch()
            else:
                node = model.Node(
                    uuid=new_uuid, name=op.node_name, primary_ip=op.primary_ip or "",
                    secondary_ip=op.secondary_ip, group=group.uuid,
                    master_capable=True if op.master_capable is None else op.master_capable,
                    vm_capable=True if op.vm_capable is None else op.vm_capable,
                    ndparams=params.apply_overrides(params.ND_FAMILY, {},
                                                    resets(op.ndparams or {})),
                    ctime=stamp, mtime=stamp,
                )
            # Ganeti's node add: a master-capable node joins the candidates while the pool
            # is short (a readd too, its own old role not counted)
            node.master_candidate = node.master_capable and candidates.self_promotion(config,
                                                                                       node)
            config.nodes[node.uuid] = node
        if existing is None:
            self.env.locks.add(locking.LEVEL_NODE, node.uuid)
            self.env.locks.add(locking.LEVEL_NODE_RES, node.uuid)
        self.feedback(f"node {node.name} added (uuid {node.uuid})"
                      + (" as a master candidate" if node.master_candidate else ""))
        if not isinstance(self.env.rpc, UnavailableRpc):
            # as Ganeti's node add: the new node receives its files and ssconf at once
            pushed = redistribute(self.env, self.env.store.load(), full=True, only=[node.name])
            for error in pushed.get(node.name, {}).get("errors", []):
                self.feedback(f"{node.name}: {error}")
            if node.vm_capable:  # libvirt's certificate of the current CA (issue 35)
                _libvirt_certificate(self.env, node.uuid, self.feedback)
        return node.uuid


class NodeSetParams(LogicalUnit[opcodes.OpNodeSetParams]):
    """Flags and roles with Ganeti's rules: the master cannot be offlined, drained or demoted;
    offline/drained nodes stop being master candidates; one change of role at a time."""

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        node = lookup(config.find_node, self.op.node_name)
        # Ganeti locks every node when auto_promote may promote one (lock_all); herder fills
        # the pool within the one config write, so a node failure's offline mark does not wait
        # for every running job (compat 56)
        requests = [LockRequest(locking.LEVEL_NODE, [node.uuid])]
        group = getattr(self.op, "group", None)
        if group:
            target = lookup(config.find_group, group)
            requests.insert(0,
                            LockRequest(locking.LEVEL_NODEGROUP, sorted({node.group, target.uuid})))
        return requests

    def _might_demote(self) -> bool:
        op = self.op
        return op.master_candidate is False or op.offline is True or op.drained is True \
            or op.master_capable is False

    def _fills_pool(self) -> bool:
        return self.op.auto_promote and self._might_demote()

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        node = lookup(config.find_node, op.node_name)
        is_master = node.uuid == config.cluster.master_node
        if self._might_demote() and not op.auto_promote and not is_master:
            candidates.check_demotion(config, node)
        flags = [f for f in ("offline", "drained", "master_candidate")
                 if getattr(op, f) is True]
        if len(flags) > 1:
            raise OpPrereqError(f"only one of {', '.join(flags)} can be set at a time")
        if is_master and (op.offline or op.drained or op.master_candidate is False):
            raise OpPrereqError("The master role can be changed only via master-failover")
        if is_master and op.master_capable is False:
            raise OpPrereqError("the master node must stay master capable")
        if op.master_candidate and ((node.offline and op.offline is not False)
                                    or (node.drained and op.drained is not False)):
            raise OpPrereqError(f"node {node.name} is offline or drained; it cannot become a "
                                "master candidate", "wrong_state")
        if op.master_candidate and not (op.master_capable if op.master_capable is not None
                                        else node.master_capable):
            raise OpPrereqError(f"node {node.name} is not master capable", "wrong_state")
        _check_ip(op.secondary_ip, "secondary IP")
        if op.group:
            lookup(config.find_group, op.group)
        if op.new_name and op.new_name != node.name and any(
                n.name == op.new_name for n in config.nodes.values()):
            raise OpPrereqError(f"node {op.new_name!r} already exists", "already_exists")
        if op.offline and any(i.primary_node == node.uuid and i.admin_state == "up"
                              for i in config.instances.values()) and not op.force:
            raise OpPrereqError(f"node {node.name} has running instances; use force to "
                                "offline it anyway", "wrong_state")
        try:
            params.apply_overrides(params.ND_FAMILY, node.ndparams, resets(op.ndparams or {}))
        except ConfigError as err:
            raise OpPrereqError(str(err)) from None

    def execute(self) -> JobResult:
        op = self.op
        changes: list[list[str]] = []
        with self.env.store.update() as config:
            node = config.find_node(op.node_name)
            promote = op.master_candidate is None and not node.master_candidate and (
                op.offline is False or op.drained is False
                or (op.master_capable is True and not node.master_capable)) and (
                op.master_capable if op.master_capable is not None else node.master_capable) \
                and candidates.self_promotion(config, node)
            # Setting one role clears the others (Ganeti's role semantics).
            if (op.offline is True or op.drained is True) and node.master_candidate:
                node.master_candidate = False
                changes.append(["master_candidate", "False"])
            if (op.master_candidate is True or op.offline is True) and node.drained \
                    and op.drained is not True:
                node.drained = False
                changes.append(["drained", "False"])
            if (op.master_candidate is True or op.drained is True) and node.offline \
                    and op.offline is not True:
                node.offline = False
                changes.append(["offline", "False"])
            for field in ("master_candidate", "offline", "drained", "master_capable",
                          "vm_capable", "powered"):
                value = getattr(op, field)
                if value is not None and getattr(node, field) != value:
                    setattr(node, field, value)
                    changes.append([field, str(value)])
            if node.master_capable is False and node.master_candidate:
                node.master_candidate = False
                changes.append(["master_candidate", "False"])
            if promote and not (node.offline or node.drained):
                # back online (a dead node's return, demoted by its offline mark)
                node.master_candidate = True
                changes.append(["master_candidate", "True"])
                self.feedback("Auto-promoting node to master candidate")
            if op.secondary_ip is not None:
                node.secondary_ip = op.secondary_ip or None
                changes.append(["secondary_ip", op.secondary_ip])
            if op.ndparams:
                node.ndparams = params.apply_overrides(params.ND_FAMILY, node.ndparams,
                                                       resets(op.ndparams))
                changes.append(["ndparams", str(op.ndparams)])
            if op.group:
                group = config.find_group(op.group)
                if group.uuid != node.group:
                    node.group = group.uuid
                    changes.append(["group", group.name])
            if op.new_name and op.new_name != node.name:
                node.name = op.new_name
                changes.append(["name", op.new_name])
            node.touch()
            promoted = candidates.maintain(config, [node.uuid]) \
                if self._fills_pool() and ["master_candidate", "False"] in changes else []
        candidates.announce(self.env, promoted, self.feedback)
        if ["master_candidate", "True"] in changes and \
                not isinstance(self.env.rpc, UnavailableRpc):
            # a new master candidate receives everything (design-2.1 "Redistribute Config")
            pushed = redistribute(self.env, self.env.store.load(), full=True, only=[node.name])
            for error in pushed.get(node.name, {}).get("errors", []):
                self.feedback(f"{node.name}: {error}")
        if ["offline", "False"] in changes and node.vm_capable and \
                not isinstance(self.env.rpc, UnavailableRpc):
            # back online: a rotation meanwhile left it a certificate of an old libvirt CA
            _libvirt_certificate(self.env, node.uuid, self.feedback)
        if ["master_candidate", "False"] in changes and not node.offline and \
                not isinstance(self.env.rpc, UnavailableRpc):
            # Ganeti's DemoteFromMC: the node's config copy goes, nothing there reads it again
            try:
                self.env.rpc.call(node, role_calls.NodeDemoteFromMc())
            except HerderError as err:
                self.feedback(f"{node.name}: its config copy was not removed: {err}")
        return changes


class NodeRemove(LogicalUnit[opcodes.OpNodeRemove]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        node = lookup(config.find_node, self.op.node_name)
        return [LockRequest(locking.LEVEL_INSTANCE, None, shared=True),
                LockRequest(locking.LEVEL_NODE, [node.uuid]),
                LockRequest(locking.LEVEL_NODE_RES, [node.uuid])]

    def check(self, config: model.ConfigData) -> None:
        node = lookup(config.find_node, self.op.node_name)
        if node.uuid == config.cluster.master_node:
            raise OpPrereqError(f"node {node.name} is the master node; fail over first",
                                "wrong_input")
        users = sorted(i.name for i in config.instances_on(node.uuid))
        if users:
            raise OpPrereqError(f"node {node.name} still holds instances: {', '.join(users)}",
                                "wrong_input")

    def execute(self) -> JobResult:
        with self.env.store.update() as config:
            node = config.find_node(self.op.node_name)
            # Ganeti's node remove: other nodes fill the candidate pool
            promoted = candidates.maintain(config, [node.uuid])
            del config.nodes[node.uuid]
            # revoked: every node refuses its certificate once it has the new list
            config.cluster.node_certs.pop(node.uuid, None)
            config.cluster.node_certs_renewing.pop(node.uuid, None)
        self.env.locks.remove(locking.LEVEL_NODE_RES, [node.uuid])
        self.env.locks.remove(locking.LEVEL_NODE, [node.uuid])
        if not isinstance(self.env.rpc, UnavailableRpc):
            # now, not at the next redistribution round: the list of node certificates
            for name, pushed in redistribute(self.env, self.env.store.load(),
                                             full=False).items():
                for error in pushed.get("errors", []):
                    self.feedback(f"{name}: {error}")
            # and libvirt's CA: a new one, of which the removed node has no certificate
            libvirt_trust.renew(self.env.rpc, self.env.store.load(), config_path_of(self.env),
                                _libvirt_publish(self.env, self.feedback), self.feedback)
        candidates.announce(self.env, promoted, self.feedback)
        return None


def _libvirt_publish(env: MasterEnv, feedback: libvirt_trust.Say) -> libvirt_trust.Publish:
    """`libvirt_trust.Publish` for an LU: the CAs into the config, then to every node."""
    def publish(cas: list[str]) -> None:
        with env.store.update() as config:
            config.cluster.libvirt_cas = list(cas)
        for name, pushed in redistribute(env, env.store.load(), full=False).items():
            for error in pushed.get("errors", []):
                feedback(f"{name}: {error}")

    return publish


def _libvirt_certificate(env: MasterEnv, node_uuid: str, feedback: libvirt_trust.Say) -> None:
    """The node's libvirt certificate of the current CA (`masterd.libvirt_trust.issue`),
    once it has the current CAs (a node back online may have missed a rotation)."""
    config = env.store.load()
    node = config.nodes[node_uuid]
    pushed = redistribute(env, config, full=False, only=[node.name])
    for error in pushed.get(node.name, {}).get("errors", []):
        feedback(f"{node.name}: {error}")
    libvirt_trust.issue(env.rpc, config, config_path_of(env), node,
                        _libvirt_publish(env, feedback), feedback)


class NodePowercycle(LogicalUnit[opcodes.OpNodePowercycle]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        return []  # Ganeti takes no locks: a broken node must be power-cyclable

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        node = lookup(config.find_node, op.node_name)
        if node.uuid == config.cluster.master_node and not op.force:
            raise OpPrereqError("the master node is power-cycled only with force")

    def execute(self) -> JobResult:
        node = self.env.store.load().find_node(self.op.node_name)
        return self.env.rpc.call(node, node_calls.NodePowercycle())


NodeMoveOpT = TypeVar("NodeMoveOpT", opcodes.OpNodeEvacuate, opcodes.OpNodeMigrate)
# Templates whose instances can leave a node with their data: DRBD to its secondary, shared
# and external storage (and no disks) to any node.
MOVABLE = frozenset({"drbd", "sharedfile", "ext", "rbd", "gluster", "blockdev", "diskless"})


class _NodeWithInstances(LogicalUnit[NodeMoveOpT]):
    """Moving everything off a node: primaries to their DRBD secondaries (live migration,
    or failover; evacuation: as jobs, `NodeEvacuate`), and for evacuation secondaries to new
    nodes chosen by the allocator."""

    live = True
    allow_failover = True  # a stopped primary instance moves by failover (Ganeti's node ops)
    modes: tuple[str, ...] = ("primary",)

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        return [LockRequest(locking.LEVEL_INSTANCE, None),
                LockRequest(locking.LEVEL_NODE, None)]

    def check(self, config: model.ConfigData) -> None:
        node = lookup(config.find_node, self.op.node_name)
        self.node, self.config = node, config
        self.primaries = sorted((i for i in config.instances.values()
                                 if i.primary_node == node.uuid), key=lambda i: i.name)
        self.secondaries = sorted((i for i in config.instances.values()
                                   if node.uuid in i.secondary_nodes), key=lambda i: i.name)
        if "primary" in self.modes:
            # a disk that lives on this node alone is never "moved" without its data: refused
            # (`herder instance move` copies it); mirrored and shared ones move
            stuck = [i.name for i in self.primaries if i.disk_template not in MOVABLE]
            if stuck:
                raise OpPrereqError(
                    f"instances on {node.name} have disks on that node alone and cannot be "
                    f"evacuated without copying them: {', '.join(stuck)}; move them first "
                    "with 'herder instance move INSTANCE --node NODE'", "wrong_input")
        self.affected = [i.name for i in self.primaries] * ("primary" in self.modes) + \
            [i.name for i in self.secondaries] * ("secondary" in self.modes)

    def dry_run_result(self) -> JobResult:
        return self.affected

    def execute(self) -> JobResult | ResultWithJobs:
        if not self.affected:
            self.feedback(f"node {self.node.name} holds no instances; nothing to do")
            return []
        moved = []
        if "primary" in self.modes:
            for inst in self.primaries:
                config = self.env.store.load()
                fresh = config.instances[inst.uuid]
                if fresh.disk_template == "drbd":
                    target = config.nodes[fresh.secondary_nodes[0]]
                else:  # shared or external storage: where the allocator says
                    target = placement.allocate_target(self.env, config, fresh,
                                                       self.op.iallocator, self.feedback)
                if self.node.offline:  # a dead primary: Ganeti's evacuation fails over
                    migration.failover(self.env, config, fresh, target, reason=self.op.reason,
                                       say=self.feedback, ignore_consistency=True)
                else:
                    migration.migrate_or_failover(
                        self.env, config, fresh, target, live=self.live,
                        allow_failover=self.allow_failover,
                        allow_runtime_changes=getattr(self.op, "allow_runtime_changes", True),
                        reason=self.op.reason, say=self.feedback)
                self.feedback(f"{inst.name}: now runs on {target.name}")
                moved.append(inst.name)
        return list(dict.fromkeys(moved))


class NodeEvacuate(_NodeWithInstances[opcodes.OpNodeEvacuate]):
    """Ganeti's LUNodeEvacuate: one job per instance (its result lists them, `{"jobs": [[true,
    id], ...]}`): a primary migrates (fails over when stopped, or when the node is offline) to
    its DRBD secondary or, on shared storage, where the allocator says; a DRBD instance that
    keeps this node as secondary gets a new one (the given remote node, else the
    allocator's), in the same job after its move."""

    def check(self, config: model.ConfigData) -> None:
        mode = self.op.mode
        self.modes = {"primary-only": ("primary",), "secondary-only": ("secondary",),
                      "all": ("primary", "secondary")}[mode]
        if self.op.remote_node:
            remote = lookup(config.find_node, self.op.remote_node)
            if remote.uuid == lookup(config.find_node, self.op.node_name).uuid:
                raise OpPrereqError("can not evacuate a node to itself", "wrong_input")
        super().check(config)

    def _new_secondary(self, name: str) -> dict[str, Any]:
        op = self.op
        where = {"remote_node": op.remote_node} if op.remote_node else \
            {"iallocator": op.iallocator} if op.iallocator else {}
        return {"OP_ID": "OP_INSTANCE_REPLACE_DISKS", "instance_name": name,
                "mode": "replace_new_secondary", "early_release": op.early_release, **where}

    def execute(self) -> JobResult | ResultWithJobs:
        jobs: list[list[dict[str, Any]]] = []
        if "primary" in self.modes:
            for inst in self.primaries:
                move: dict[str, Any] = {"instance_name": inst.name}
                if self.node.offline:
                    move.update(OP_ID="OP_INSTANCE_FAILOVER", ignore_consistency=True)
                else:
                    move.update(OP_ID="OP_INSTANCE_MIGRATE", allow_failover=True)
                if inst.disk_template != "drbd" and self.op.iallocator:
                    move["iallocator"] = self.op.iallocator
                job = [move]
                if "secondary" in self.modes and inst.disk_template == "drbd":
                    job.append(self._new_secondary(inst.name))
                jobs.append(job)
        if "secondary" in self.modes:
            jobs += [[self._new_secondary(inst.name)] for inst in self.secondaries]
        if not jobs:
            self.feedback(f"node {self.node.name} holds no instances; nothing to do")
        return ResultWithJobs(jobs)


class NodeMigrate(_NodeWithInstances[opcodes.OpNodeMigrate]):
    def check(self, config: model.ConfigData) -> None:
        self.live = self.op.mode != "non-live" and self.op.live is not False
        super().check(config)

