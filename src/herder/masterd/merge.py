"""Cluster merge (issue 10, design-2.1 "Automated Ganeti Cluster Merger"): take another herder
cluster's node groups, nodes and instances into this one.

It runs on this cluster's master and reaches the other cluster only over the network, as
design-2.1's merger reaches it over ssh: through the other cluster's RAPI (its config, its jobs)
and its node daemons (node RPCs signed with its key). The operator copies the other master's
`hmac.key`, `server.pem`, `rapi_users` and `node.pem` here first
(`<secrets dir>/<other cluster name>/`: design-2.1's borrowed key); the other cluster's name
resolves to its master IP.

The merge is a list of steps, each with a `do` and an `undo`, run in order. When a step fails
before the point of no return, the steps already done are undone in reverse order, which leaves
the other cluster as it was (its nodes, instances and maintenance settings; its instances running
again, its daemons running again; only its config serial moves on). The point of no return is the
step `merge`: it writes the merged config and hands the other cluster's nodes over to this
cluster ("until nodes are re-added" in the design). A failure after it is reported with what is
left to do by hand; nothing is rolled back.

Steps (design-2.1's list, adapted to herder):

  key       the other cluster's HMAC key (the "temporary key", design-2.1's borrowed ssh key):
            every node of the other cluster must answer a signed node RPC with it
  pause     both clusters' maintd paused (maintenance `enabled=false`, a job through each
            masterd; Ganeti's cluster-merge pauses the watcher "on all merging clusters,
            including ourself"): this cluster's must not take the handed-over nodes, whose
            daemons restart, for failed nodes and fence them
  stop      the other cluster's running instances stopped through its masterd (recorded)
  daemons   the other cluster's master daemons stopped and its master IP taken down, through
            its master's node daemon (node_stop_master, node_deactivate_master_ip)
  merge     point of no return: one `FileStore.update` of this config adds the other cluster's
            node groups, nodes (never master candidates) and instances, every DRBD port of theirs
            reallocated from this cluster's ports; then every node of the other cluster is handed
            over (node_adopt, signed with its old key: this cluster's key and certificate, its
            config copy and ssconf gone, its daemons restarted) and receives this cluster's
            files and ssconf
  start     the recorded instances started through this cluster's masterd
  forget    the temporary key removed again: the copies of the other cluster's secrets here
            are deleted (its nodes dropped theirs when handed over), so nothing acts as that
            cluster any more
  verify    nodes and instances after == this cluster's before + the other's before (names and
            UUIDs), DRBD ports unique, `herder cluster verify` has no error
  resume    this cluster's maintd as it was before the merge

DRBD minors are per node and the other cluster's DRBD disks only use its own nodes, so minors
never collide and are kept.

Test hook: `HERDER_MERGE_FAIL_AT=<step>` makes that step fail before it does anything (to test
the rollback). It is read only here.

How the other cluster's daemons are stopped, started and handed over is a `Control`
(`RpcControl`: through the node daemons; tests give their own).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from herder.core import envelope, model, node_certs, ports
from herder.core.cluster_secrets import CERT_FILE, HMAC_KEY_FILE, RAPI_USERS_FILE, SecretPaths
from herder.core.errors import HerderError
from herder.core.noderpc import HttpNodeRpc
from herder.core.rapi import RapiClient, RapiError
from herder.core.rpcdefs import node_calls, role_calls
from herder.core.store import FileStore
from herder.core.verify import verify as verify_config

FAIL_ENV = "HERDER_MERGE_FAIL_AT"
FINAL_JOB = {"success", "error", "canceled"}
OTHER_JOBS_TIMEOUT = 120.0  # seconds the merge waits for the other cluster's running jobs
STEPS = ("key", "pause", "stop", "daemons", "merge", "start", "forget", "verify", "resume")
POINT_OF_NO_RETURN = "merge"
GROUP_MODES = ("refuse", "merge", "rename")


class MergeError(HerderError):
    """The merge was refused or failed (rolled back unless said otherwise)."""


@dataclass(frozen=True)
class OtherCluster:
    """The cluster to merge in, as this master reaches it: its name (it resolves to its master
    IP) and the copies of its secrets the operator put here."""

    name: str
    secrets_dir: Path  # hmac.key, server.pem, rapi_users, node.pem of the other master

    @property
    def address(self) -> str:
        try:
            return socket.gethostbyname(self.name)
        except OSError as err:
            raise MergeError(f"the other cluster's name {self.name} does not resolve: "
                             f"{err.strerror or err}") from None

    def check(self) -> None:
        # node.pem: the other master's node certificate, the one its nodes take calls from
        missing = [f for f in (HMAC_KEY_FILE, CERT_FILE, RAPI_USERS_FILE,
                               node_certs.NODE_CERT_FILE)
                   if not (self.secrets_dir / f).is_file()]
        if missing:
            raise MergeError(f"copy {', '.join(missing)} of {self.name}'s master to "
                             f"{self.secrets_dir} first (its /var/lib/herder)")

    def rapi(self) -> RapiClient:
        return RapiClient.for_herder_cluster(self.secrets_dir,
                                             f"https://{self.address}:{ports.MASTERD}")

    def rpc(self) -> HttpNodeRpc:
        return HttpNodeRpc(envelope.load_key(self.secrets_dir / HMAC_KEY_FILE),
                           self.secrets_dir / CERT_FILE, timeout=30)

    def load_config(self) -> model.ConfigData:
        """The other cluster's config, through its masterd."""
        try:
            with self.rapi() as api:
                document = api.request("GET", "/2/herder/config")
        except RapiError as err:
            raise MergeError(f"cannot read {self.name}'s config through its masterd: "
                             f"{err}") from None
        return model.decode(json.dumps(document))


class Control(Protocol):
    """Stopping, starting and handing over the other cluster's daemons."""

    def stop_master_daemons(self, other: OtherCluster, config: model.ConfigData) -> list[str]:
        """Stop the other cluster's masterd and maintd; what was stopped, for the log."""
        ...

    def start_master_daemons(self, other: OtherCluster, config: model.ConfigData) -> None:
        """Start them again (rollback)."""
        ...

    def adopt_nodes(self, other: OtherCluster, config: model.ConfigData,
                    ours: Path) -> None:
        """Hand the other cluster's nodes over to this cluster (config at `ours`)."""
        ...


class RpcControl:
    """The other cluster's daemons through its node daemons, signed with its borrowed key."""

    def __init__(self, adopt_timeout: float = 120.0) -> None:
        self.adopt_timeout = adopt_timeout

    def _master(self, config: model.ConfigData) -> model.Node:
        return config.nodes[config.cluster.master_node]

    def stop_master_daemons(self, other: OtherCluster, config: model.ConfigData) -> list[str]:
        rpc = other.rpc()
        master = self._master(config)
        try:
            rpc.call(master, role_calls.NodeStopMaster())
            done = [f"masterd and maintd on {master.name}"]
            if config.cluster.master_ip != master.primary_ip:
                rpc.call(master, role_calls.NodeDeactivateMasterIp.of_cluster(config.cluster),
                         timeout=60)
                done.append(f"master IP {config.cluster.master_ip}")
            return done
        finally:
            rpc.close()

    def start_master_daemons(self, other: OtherCluster, config: model.ConfigData) -> None:
        rpc = other.rpc()
        master = self._master(config)
        try:
            if config.cluster.master_ip != master.primary_ip:
                rpc.call(master, role_calls.NodeActivateMasterIp.of_cluster(config.cluster),
                         timeout=60)
            rpc.call(master, role_calls.NodeStartMasterDaemons())
        finally:
            rpc.close()
        deadline = time.monotonic() + 60
        while True:  # until its masterd answers again
            try:
                with other.rapi() as api:
                    api.get_info()
                return
            except RapiError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def adopt_nodes(self, other: OtherCluster, config: model.ConfigData,
                    ours: Path) -> None:
        """node_adopt on every node of the other cluster (signed with its key), then wait
        until each answers this cluster's signed calls, then push this cluster's files and
        ssconf to them (what a new node receives)."""
        from herder.masterd import redist

        secrets = SecretPaths.beside(ours)
        ca_pem = secrets.certificate.read_bytes()
        hmac_key = base64.b64encode(secrets.hmac_key.read_bytes()).decode()
        certificate = base64.b64encode(ca_pem).decode()
        nodes = sorted(config.nodes.values(), key=lambda n: n.name)
        digests: dict[str, str] = {}
        theirs = other.rpc()
        try:
            for node in nodes:
                # a node certificate of this cluster's CA for each (its old one was theirs)
                issued = node_certs.issue(ca_pem, node.name)
                digests[node.uuid] = node_certs.digest(issued)
                theirs.call(node, role_calls.NodeAdopt(
                    hmac_key=hmac_key, certificate=certificate,
                    node_certificate=base64.b64encode(issued).decode()), timeout=60)
        finally:
            theirs.close()
        with FileStore(ours).update() as merged_config:
            merged_config.cluster.node_certs.update(digests)
        ours_rpc = HttpNodeRpc(envelope.load_key(secrets.hmac_key), secrets.certificate,
                               epoch=FileStore(ours).load().cluster.master_epoch, timeout=30,
                               connect_timeout=3.0)
        try:
            deadline = time.monotonic() + self.adopt_timeout
            for node in nodes:
                while True:
                    try:
                        ours_rpc.call(node, node_calls.MasterEpoch(), timeout=10)
                        break
                    except HerderError as err:
                        if time.monotonic() > deadline:
                            raise MergeError(f"{node.name} does not answer this cluster's "
                                             f"calls after the handover: {err}") from None
                        time.sleep(0.3)
            merged = FileStore(ours).load()
            pusher = redist.Redistributor(ours_rpc, ours, None)
            results = pusher.push(merged, full=True, only=[n.name for n in nodes])
            errors = [f"{name}: {e}" for name, r in results.items() for e in r.errors]
            if errors:
                raise MergeError("pushing this cluster's files to the handed-over nodes: "
                                 + "; ".join(errors))
            _libvirt_certificates(ours_rpc, ours, [n for n in nodes if n.vm_capable])
        finally:
            ours_rpc.close()


def _libvirt_certificates(rpc: HttpNodeRpc, ours: Path, nodes: list[model.Node]) -> None:
    """Each handed-over node a libvirt certificate of this cluster's libvirt CA (its old one
    was the other cluster's: `masterd.libvirt_trust`)."""
    from herder.masterd import libvirt_trust, redist

    problems: list[str] = []

    def publish(cas: list[str]) -> None:  # a master without the CA's key makes a new one
        with FileStore(ours).update() as changed:
            changed.cluster.libvirt_cas = list(cas)
        pushed = redist.Redistributor(rpc, ours, None).push(FileStore(ours).load(), full=False)
        problems.extend(f"{name}: {e}" for name, r in pushed.items() for e in r.errors)

    for node in nodes:
        libvirt_trust.issue(rpc, FileStore(ours).load(), ours, node, publish, problems.append)
    if problems:
        raise MergeError("the handed-over nodes' libvirt certificates: " + "; ".join(problems))


# --- the pure part: checks, port reallocation, the merged config ---------------------------------


def listing(config: model.ConfigData) -> dict[str, dict[str, str]]:
    """Node and instance names by UUID (what the final verify compares)."""
    return {"nodes": {n.uuid: n.name for n in config.nodes.values()},
            "instances": {i.uuid: i.name for i in config.instances.values()}}


def _collide(kind: str, ours: Iterable[str], theirs: Iterable[str]) -> list[str]:
    both = sorted(set(ours) & set(theirs))
    return [f"{kind} {value} exists in both clusters" for value in both]


def _disks(disks: Iterable[model.Disk]) -> Iterable[model.Disk]:
    for disk in disks:
        yield disk
        yield from _disks(disk.children)


def check(ours: model.ConfigData, other: model.ConfigData, groups: str = "refuse") -> list[str]:
    """Why `other` cannot be merged into `ours` (empty: it can)."""
    problems: list[str] = []
    if other.version != ours.version:
        problems.append(f"config format {other.version} differs from this cluster's "
                        f"{ours.version}")
    if other.cluster.uuid == ours.cluster.uuid:
        problems.append("the other cluster is this cluster")
        return problems
    problems += _collide("cluster name", [ours.cluster.name], [other.cluster.name])
    problems += _collide("node name", (n.name for n in ours.nodes.values()),
                         (n.name for n in other.nodes.values()))
    problems += _collide("node UUID", ours.nodes, other.nodes)
    problems += _collide("node IP", (ip for n in ours.nodes.values()
                                     for ip in {n.primary_ip, n.secondary_ip} if ip),
                         (ip for n in other.nodes.values()
                          for ip in {n.primary_ip, n.secondary_ip} if ip))
    problems += _collide("instance name", (i.name for i in ours.instances.values()),
                         (i.name for i in other.instances.values()))
    problems += _collide("instance UUID", ours.instances, other.instances)
    problems += _collide("disk UUID", (d.uuid for i in ours.instances.values()
                                       for d in _disks(i.disks)),
                         (d.uuid for i in other.instances.values() for d in _disks(i.disks)))
    problems += _collide("NIC MAC", (n.mac for i in ours.instances.values() for n in i.nics),
                         (n.mac for i in other.instances.values() for n in i.nics))
    problems += _collide("NIC IP", (n.ip for i in ours.instances.values() for n in i.nics
                                    if n.ip),
                         (n.ip for i in other.instances.values() for n in i.nics if n.ip))
    problems += _collide("node group UUID", ours.nodegroups, other.nodegroups)
    if groups == "refuse":
        problems += [p + " (--groups merge or rename)" for p in _collide(
            "node group", (g.name for g in ours.nodegroups.values()),
            (g.name for g in other.nodegroups.values()))]
    problems += _collide("network name", (n.name for n in ours.networks.values()),
                         (n.name for n in other.networks.values()))
    problems += _collide("network UUID", ours.networks, other.networks)
    for inst in sorted(other.instances.values(), key=lambda i: i.name):
        if inst.hypervisor not in ours.cluster.enabled_hypervisors:
            problems.append(f"instance {inst.name}: hypervisor {inst.hypervisor} is not "
                            "enabled in this cluster")
        template = inst.disk_template
        if template != "diskless" and template not in ours.cluster.enabled_disk_templates:
            problems.append(f"instance {inst.name}: disk template {template} is not enabled "
                            "in this cluster")
    return problems


def reallocate_ports(ours: model.ConfigData, other: model.ConfigData) -> dict[str, tuple[int, int]]:
    """New DRBD ports for every DRBD disk of `other`, from this cluster's ports (the unused
    ports of its `tcpudp_port_pool` first, then above `highest_used_port`), unique across both
    clusters: disk UUID -> (old port, new port)."""
    used = {d.logical_id.port for i in ours.instances.values() for d in _disks(i.disks)
            if isinstance(d.logical_id, model.DrbdId)}
    pool = sorted(p for p in ours.cluster.tcpudp_port_pool if p not in used)
    nxt = max(ours.cluster.highest_used_port, 11000)
    moves: dict[str, tuple[int, int]] = {}
    for inst in sorted(other.instances.values(), key=lambda i: i.name):
        for disk in _disks(inst.disks):
            if not isinstance(disk.logical_id, model.DrbdId):
                continue
            if pool:
                port = pool.pop(0)
            else:
                nxt += 1
                while nxt in used:
                    nxt += 1
                port = nxt
            used.add(port)
            moves[disk.uuid] = (disk.logical_id.port, port)
    return moves


def _group_map(ours: model.ConfigData, other: model.ConfigData,
               groups: str) -> dict[str, model.NodeGroup]:
    """The other cluster's group UUID -> the group its nodes join here (theirs, ours, or a
    renamed copy of theirs)."""
    by_name = {g.name: g for g in ours.nodegroups.values()}
    result: dict[str, model.NodeGroup] = {}
    for uuid, group in other.nodegroups.items():
        mine = by_name.get(group.name)
        if mine is None:
            result[uuid] = copy.deepcopy(group)
        elif groups == "merge":
            result[uuid] = mine
        else:  # rename
            renamed = copy.deepcopy(group)
            base = f"{group.name}-{other.cluster.name.split('.')[0]}"
            name, n = base, 1
            while name in by_name or any(g.name == name for g in result.values()):
                n += 1
                name = f"{base}{n}"
            renamed.name = name
            result[uuid] = renamed
    return result


def merge_into(ours: model.ConfigData, other: model.ConfigData, groups: str = "refuse",
               ports: dict[str, tuple[int, int]] | None = None) -> dict[str, Any]:
    """Add `other`'s groups, nodes (not master candidates) and instances (DRBD ports moved) to
    `ours`, in place; a summary."""
    problems = check(ours, other, groups)
    if problems:
        raise MergeError("cannot merge: " + "; ".join(problems))
    ports = reallocate_ports(ours, other) if ports is None else ports
    group_map = _group_map(ours, other, groups)
    for uuid, group in group_map.items():
        if group.uuid in ours.nodegroups:  # merged into ours: keep their network links too
            for net_uuid, link in other.nodegroups[uuid].networks.items():
                group.networks.setdefault(net_uuid, copy.deepcopy(link))
        else:
            ours.nodegroups[group.uuid] = group
    for net in other.networks.values():
        ours.networks[net.uuid] = copy.deepcopy(net)
    for node in other.nodes.values():
        new_node = copy.deepcopy(node)
        new_node.group = group_map[node.group].uuid if node.group in group_map else node.group
        new_node.master_candidate = False
        ours.nodes[new_node.uuid] = new_node
    for inst in other.instances.values():
        new_inst = copy.deepcopy(inst)
        for disk in _disks(new_inst.disks):
            if isinstance(disk.logical_id, model.DrbdId) and disk.uuid in ports:
                disk.logical_id.port = ports[disk.uuid][1]
        ours.instances[new_inst.uuid] = new_inst
    if ports:
        highest = max(new for _, new in ports.values())
        ours.cluster.highest_used_port = max(ours.cluster.highest_used_port, highest)
    return {"groups": sorted(g.name for g in group_map.values()),
            "nodes": sorted(n.name for n in other.nodes.values()),
            "instances": sorted(i.name for i in other.instances.values()),
            "ports": {d: list(p) for d, p in ports.items()}}


def drbd_ports(config: model.ConfigData) -> list[int]:
    return [d.logical_id.port for i in config.instances.values() for d in _disks(i.disks)
            if isinstance(d.logical_id, model.DrbdId)]


def final_check(before_ours: dict[str, dict[str, str]], before_other: dict[str, dict[str, str]],
                after: model.ConfigData) -> list[str]:
    """The final verify: the lists after == ours before + theirs before, DRBD ports unique,
    no verify error."""
    problems: list[str] = []
    now = listing(after)
    for kind in ("nodes", "instances"):
        want = {**before_ours[kind], **before_other[kind]}
        missing = sorted(name for uuid, name in want.items() if now[kind].get(uuid) != name)
        extra = sorted(name for uuid, name in now[kind].items() if uuid not in want)
        if missing:
            problems.append(f"{kind} missing after the merge: {', '.join(missing)}")
        if extra:
            problems.append(f"{kind} that should not be there: {', '.join(extra)}")
    ports = drbd_ports(after)
    dupes = sorted({p for p in ports if ports.count(p) > 1})
    if dupes:
        problems.append(f"DRBD ports used twice: {', '.join(map(str, dupes))}")
    problems += [str(f) for f in verify_config(after) if f.severity == "error"]
    return problems


# --- the steps ------------------------------------------------------------------------------


@dataclass
class Step:
    name: str
    title: str
    do: Callable[[], str | None]
    undo: Callable[[], str | None] | None = None
    undo_on_failure: bool = False  # a failure midway may have done part: undo it too


@dataclass
class Merge:
    """One other cluster merged into this one (`config`: this cluster's config path)."""

    config: Path
    other: OtherCluster
    control: Control
    groups: str = "refuse"
    masterd_url: str | None = None  # this cluster's RAPI (default: its master IP, port 5080)
    say: Callable[[str], None] = print
    job_timeout: float = 300.0
    # filled as the steps run
    ours_before: model.ConfigData | None = None
    other_before: model.ConfigData | None = None
    other_stopped: model.ConfigData | None = None  # with its instances stopped
    running: list[str] = field(default_factory=list)
    maintenance_was: bool | None = None
    our_maintenance_was: bool | None = None
    stopped_daemons: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    done: list[Step] = field(default_factory=list)
    written: bool = False  # the merged config is written: no rollback any more

    # --- planning ---------------------------------------------------------------------------

    def plan(self) -> list[str]:
        """Read both configs, run the checks (MergeError with every problem), try the merge in
        memory; the plan, one line per step."""
        self.other.check()
        self.ours_before = FileStore(self.config).load()
        self.other_before = self.other.load_config()
        ours, other = self.ours_before, self.other_before
        if self.groups not in GROUP_MODES:
            raise MergeError(f"--groups must be one of {', '.join(GROUP_MODES)}")
        problems = check(ours, other, self.groups)
        if problems:
            raise MergeError(f"cannot merge {other.cluster.name}: " + "; ".join(problems))
        trial = copy.deepcopy(ours)
        summary = merge_into(trial, copy.deepcopy(other), self.groups)
        try:
            model.revalidate(trial)
        except HerderError as err:
            raise MergeError(f"the merged config would be invalid: {err}") from None
        up = sorted(i.name for i in other.instances.values() if i.admin_state == "up")
        moves = ", ".join(f"{old}->{new}" for old, new in summary["ports"].values()) or "none"
        return [
            f"merge {other.cluster.name} ({len(other.nodes)} nodes, {len(other.instances)} "
            f"instances) into {ours.cluster.name}",
            f"key: reach {', '.join(sorted(n.name for n in other.nodes.values()))} with "
            f"{other.cluster.name}'s key",
            f"pause: maintd of {other.cluster.name} and of {ours.cluster.name} disabled",
            f"stop: instances {', '.join(up) or '(none running)'}",
            f"daemons: masterd and maintd of {other.cluster.name} stopped",
            f"merge (point of no return): groups {', '.join(summary['groups'])}; nodes as "
            f"non-master-candidates; DRBD ports {moves}",
            f"start: instances {', '.join(up) or '(none)'}",
            f"forget: {other.cluster.name}'s key and config retired",
            "verify: node and instance lists, DRBD ports, cluster verify",
            f"resume: maintd of {ours.cluster.name} "
            f"{'enabled again' if ours.maintenance.enabled else 'left disabled, as it was'}",
        ]

    # --- the other cluster, through its masterd ------------------------------------------------

    def _other_api(self) -> RapiClient:
        return self.other.rapi()

    def _our_api(self) -> RapiClient:
        url = self.masterd_url or os.environ.get("HERDER_MASTERD")
        if not url:
            url = f"https://{FileStore(self.config).load().cluster.master_ip}:{ports.MASTERD}"
        return RapiClient.for_herder_cluster(self.config.parent, url)

    def check_other_idle(self, timeout: float = OTHER_JOBS_TIMEOUT) -> None:
        """The other cluster's queue idle: jobs submitted just before its maintd was paused
        (a repair, the watcher's restart) may finish first; any still running after
        `timeout` seconds refuse the merge."""
        deadline = time.monotonic() + timeout
        while True:
            with self._other_api() as api:
                busy = [str(j.get("id")) for j in api.get_jobs(bulk=True)
                        if j.get("status") not in FINAL_JOB]
            if not busy:
                return
            if time.monotonic() >= deadline:
                raise MergeError(f"the other cluster has running jobs: {', '.join(busy)}")
            time.sleep(1.0)

    def _instances(self, api: RapiClient, names: list[str], action: str) -> None:
        jobs = []
        for name in names:
            job = (api.shutdown_instance(name) if action == "stop"
                   else api.startup_instance(name))
            jobs.append((name, job))
        for name, job in jobs:
            api.wait_for_job(job, timeout=self.job_timeout, raise_on_error=True)
            self.say(f"  {name}: {'stopped' if action == 'stop' else 'started'}")

    # --- step bodies --------------------------------------------------------------------------

    def _key_do(self) -> str:
        assert self.other_before is not None
        rpc = self.other.rpc()
        epochs = []
        try:
            for node in sorted(self.other_before.nodes.values(), key=lambda n: n.name):
                if node.offline:
                    raise MergeError(f"node {node.name} of the other cluster is offline")
                answer = rpc.call(node, node_calls.MasterEpoch())
                epochs.append(f"{node.name} (epoch {answer.epoch})")
        finally:
            rpc.close()
        return "reached " + ", ".join(epochs)

    def _set_maintenance(self, api: RapiClient, enabled: bool) -> None:
        with api:
            job = api.put_herder("maintenance", {"enabled": enabled})
            api.wait_for_job(job, timeout=self.job_timeout, raise_on_error=True)

    def _set_other_maintenance(self, enabled: bool) -> None:
        self._set_maintenance(self._other_api(), enabled)

    def _set_our_maintenance(self, enabled: bool) -> None:
        self._set_maintenance(self._our_api(), enabled)

    def _pause_do(self) -> str:
        assert self.other_before is not None and self.ours_before is not None
        self.maintenance_was = self.other_before.maintenance.enabled
        self._set_other_maintenance(False)
        self.our_maintenance_was = self.ours_before.maintenance.enabled
        self._set_our_maintenance(False)
        return (f"maintenance enabled={self.maintenance_was} -> False there, "
                f"{self.our_maintenance_was} -> False here")

    def _pause_undo(self) -> str:
        self._set_our_maintenance(bool(self.our_maintenance_was))
        self._set_other_maintenance(bool(self.maintenance_was))
        return (f"maintenance enabled={self.maintenance_was} there, "
                f"{self.our_maintenance_was} here again")

    def _resume_do(self) -> str:
        self._set_our_maintenance(bool(self.our_maintenance_was))
        return f"maintenance enabled={self.our_maintenance_was} here again"

    def _stop_do(self) -> str:
        self.check_other_idle()
        current = self.other.load_config()
        self.running = sorted(i.name for i in current.instances.values()
                              if i.admin_state == "up")  # recorded first: a failure midway
        with self._other_api() as api:
            self._instances(api, self.running, "stop")
        self.other_stopped = self.other.load_config()  # what the merge takes over
        return f"stopped {', '.join(self.running) or 'nothing'}"

    def _stop_undo(self) -> str:
        with self._other_api() as api:
            self._instances(api, self.running, "start")
        return f"started {', '.join(self.running) or 'nothing'} again"

    def _daemons_do(self) -> str:
        assert self.other_before is not None
        self.stopped_daemons = self.control.stop_master_daemons(self.other, self.other_before)
        return f"stopped {', '.join(self.stopped_daemons) or 'nothing'}"

    def _daemons_undo(self) -> str:
        assert self.other_before is not None
        self.control.start_master_daemons(self.other, self.other_before)
        return "master daemons started again"

    def _merge_do(self) -> str:
        other = self.other_stopped or self.other_before  # its instances stopped
        assert other is not None
        with FileStore(self.config).update() as cfg:
            self.summary = merge_into(cfg, copy.deepcopy(other), self.groups)
        self.written = True
        self.say(f"  config merged: {len(other.nodes)} nodes, {len(other.instances)} "
                 "instances; point of no return passed")
        self.control.adopt_nodes(self.other, other, self.config)
        moves = ", ".join(f"{o}->{n}" for o, n in self.summary["ports"].values()) or "none"
        return f"nodes handed over to this cluster; DRBD ports {moves}"

    def _start_do(self) -> str:
        with self._our_api() as api:
            self._instances(api, self.running, "start")
        return f"started {', '.join(self.running) or 'nothing'}"

    def _forget_do(self) -> str:
        shutil.rmtree(self.other.secrets_dir)
        return f"removed the copies of {self.other.name}'s secrets ({self.other.secrets_dir})"

    def _verify_do(self) -> str:
        assert self.ours_before is not None and self.other_before is not None
        after = FileStore(self.config).load()
        problems = final_check(listing(self.ours_before), listing(self.other_before), after)
        if problems:
            raise MergeError("; ".join(problems))
        return (f"{len(after.nodes)} nodes, {len(after.instances)} instances, "
                f"{len(drbd_ports(after))} DRBD ports, all unique; verify clean")

    def steps(self) -> list[Step]:
        return [
            Step("key", "borrow the other cluster's key", self._key_do),
            Step("pause", "pause both clusters' maintd", self._pause_do, self._pause_undo),
            Step("stop", "stop the other cluster's instances", self._stop_do, self._stop_undo,
                 undo_on_failure=True),
            Step("daemons", "stop the other cluster's master daemons", self._daemons_do,
                 self._daemons_undo),
            Step("merge", "merge the configs, re-point the nodes", self._merge_do),
            Step("start", "start the instances again", self._start_do),
            Step("forget", "remove the temporary key", self._forget_do),
            Step("verify", "verify the merged cluster", self._verify_do),
            Step("resume", "resume this cluster's maintd", self._resume_do),
        ]

    # --- running --------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Plan, then run every step; roll back before the point of no return."""
        for line in self.plan():
            self.say(f"plan: {line}")
        fail_at = os.environ.get(FAIL_ENV, "")
        past = False
        for step in self.steps():
            self.say(f"{step.name}: {step.title}")
            try:
                if fail_at == step.name:
                    raise MergeError(f"step {step.name} failed ({FAIL_ENV}={fail_at})")
                result = step.do()
            except Exception as err:
                if past or self.written:
                    raise MergeError(
                        f"step {step.name} failed after the point of no return "
                        f"({err}); nothing rolled back: finish by hand (start the instances "
                        f"{', '.join(self.running) or '(none)'}, remove "
                        f"{self.other.secrets_dir}, herder cluster verify"
                        f"{self._resume_hint()})") from err
                self.say(f"{step.name}: failed: {err}")
                if step.undo_on_failure:
                    self.done.append(step)
                self.rollback()
                raise MergeError(f"merge failed at step {step.name}: {err}; rolled back") \
                    from err
            self.say(f"  {result}" if result else "  done")
            self.done.append(step)
            if step.name == POINT_OF_NO_RETURN:
                past = True
        return {**self.summary, "running": self.running, "stopped_daemons": self.stopped_daemons}

    def _resume_hint(self) -> str:
        return (", herder cluster modify --maintenance yes" if self.our_maintenance_was
                else "")

    def rollback(self) -> None:
        """Undo the done steps in reverse order; an undo that fails is reported and the rest
        still run."""
        errors = []
        for step in reversed(self.done):
            if step.undo is None:
                continue
            self.say(f"rollback {step.name}")
            try:
                result = step.undo()
                self.say(f"  {result}" if result else "  done")
            except Exception as err:  # keep undoing the rest
                errors.append(f"{step.name}: {err}")
                self.say(f"  rollback of {step.name} failed: {err}")
        self.done.clear()
        if errors:
            raise MergeError("rollback incomplete: " + "; ".join(errors))
