"""Redistribution (issue 10 "High availability", design-2.1 "Redistribute Config"): what the
master pushes to which node, and the pushing.

After every config write the master pushes, through the node daemons (signed, epoch-checked):

- to every online node: the per-node read-only facts (Ganeti's ssconf: `ssconf_<name>` files
  with the cluster name, master, node lists, uid pool, ...), `write_ssconf`;
- to every master candidate but the master itself: the config document and the job queue
  files, `write_config` (they land where the candidate's confd, mond and, after a failover,
  masterd read them: `/var/lib/herder/config.json` and `queue/`), and the jobs archived since
  its last push (at most ARCHIVE_PER_PUSH a call; the rest with the next ones), which the
  candidate files in its `queue/archive/` as Ganeti's candidates keep the archive. Not on the
  etcd backend (`config_copies`): there every masterd reads etcd, which replicates both, and
  a copy pushed once (a `node add`, a promotion) and never again would be a stale config
  that the node's readers of a local copy prefer to its current ssconf;
- the files that must agree cluster-wide, `upload_file`: the remote API certificate and users
  file (master candidates), for every enabled hypervisor the files its parameters name
  (`vnc_password_file`, `spice_password_file`: the cluster default to every VM-capable node,
  an instance's value to every node that can run it; only files in the cluster's hypervisor
  file directory, `masterd.hvfiles`), and the files named in the
  user-maintained list `redist-files` beside the config (one absolute path per line) to
  every node;
- on a full push (`herder cluster redist-conf`, a promotion to master candidate) also the
  cluster HMAC key and certificate (what a new node needs).

The master keeps the originals: it receives its ssconf files only (Ganeti's redistribution skips
the master too).

`plan` is pure (the config in, per node what goes there); `Redistributor` does the I/O, in
parallel, collecting per-node errors: a failed push never fails the config write.

A node masterd cannot reach (`core.reachability`, the record shared with the live cache) is
skipped while it is in back-off, except by a full push (`cluster redist-conf`: the operator
asks every node now); it is owed everything (`watch`), and gets the current state as soon as
its back-off has passed or it is seen again (any call of masterd's reached it, or it
announced itself), within the trigger's interval.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import itertools
import logging
import operator
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from herder import __version__
from herder.core import libvirtd_conf, model, node_certs, params, ssconf, store, uidpool
from herder.core.cluster_secrets import DOMAIN_SECRET_FILE, SecretPaths
from herder.core.errors import HerderError
from herder.core.noderpc import NodeRpc
from herder.core.reachability import Down, Reachability, ReachabilityRpc
from herder.core.redist import REDIST_FILES, UPLOAD_LIST, archive_path
from herder.core.rpcdefs import file_calls, node_calls
from herder.masterd import hvfiles

if TYPE_CHECKING:  # the daemon runs `watch` as its task: it imports this module
    from herder.masterd.daemon import MasterDaemon

log = logging.getLogger("herder.masterd.redist")

# Hypervisor parameters that name a file every node that can run the instance needs.
HV_FILE_PARAMS = hvfiles.FILE_PARAMS


@dataclass
class NodePlan:
    """What one node receives."""

    name: str
    uuid: str
    ssconf: dict[str, str]
    candidate: bool  # gets the config and the job queue (never the master: it has them)
    files: list[str] = field(default_factory=list)  # absolute paths, as on the master


def read_user_list(path: Path) -> list[str]:
    """The user-maintained list: absolute paths, one a line; blank lines and # comments skipped.
    A relative path is ignored (logged)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    paths = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not line.startswith("/") or ".." in Path(line).parts:
            log.warning("%s: ignoring %r (not an absolute path)", path, line)
            continue
        paths.append(line)
    return paths


def _lines(values: Iterable[str]) -> str:
    return "".join(f"{v}\n" for v in values)


def ssconf_values(config: model.ConfigData, upload_files: Iterable[str] = (),
                  memo: PlanMemo | None = None) -> dict[str, str]:
    """Ganeti's ssconf values (one file `ssconf_<name>` each), plus herder's `redist_files`.
    `memo`: the values of the nodes' and instances' tables kept from the configs before
    (`PlanMemo`); the same values, recomputed only for what changed."""
    if memo is None:
        memo = PlanMemo()
    c = config.cluster
    return {
        "cluster_name": f"{c.name}\n",
        "cluster_tags": _lines(sorted(c.tags)),
        "config_serial": f"{config.serial_no}\n",
        "enabled_disk_templates": _lines(c.enabled_disk_templates),
        "enabled_hypervisors": _lines(c.enabled_hypervisors),
        "file_storage_dir": f"{c.file_storage_dir}\n",
        "hypervisor_list": _lines(c.enabled_hypervisors),
        "instance_list": memo.instance_list(config),
        "master_ip": f"{c.master_ip}\n",
        "master_netdev": f"{c.master_netdev}\n",
        "master_netmask": f"{c.master_netmask}\n",
        "networks": _lines(sorted(f"{n.uuid} {n.name}" for n in config.networks.values())),
        "nodegroups": _lines(f"{g.uuid} {g.name}"
                             for g in sorted(config.nodegroups.values(), key=lambda g: g.name)),
        "primary_ip_family": f"{c.primary_ip_family}\n",
        "release_version": f"{__version__}\n",
        "shared_file_storage_dir": f"{c.shared_file_storage_dir}\n",
        "uid_pool": _lines(uidpool.format_range(r) for r in c.uid_pool),
        UPLOAD_LIST: _lines(sorted(set(upload_files))),
        libvirtd_conf.SSCONF_CAS: "".join(c.libvirt_cas),
        **memo.node_values(config),
    }


def node_values(config: model.ConfigData) -> dict[str, str]:
    """The ssconf values made from the nodes (and what fills their parameters)."""
    c = config.cluster
    nodes = sorted(config.nodes.values(), key=lambda n: n.name)
    candidates = [n for n in nodes if n.master_candidate or n.uuid == c.master_node]
    return {
        "master_candidates": _lines(n.name for n in candidates),
        "master_candidates_ips": _lines(n.primary_ip for n in candidates),
        "master_node": f"{config.node_name(c.master_node)}\n",
        "node_list": _lines(n.name for n in nodes),
        "node_primary_ips": _lines(f"{n.name} {n.primary_ip}" for n in nodes),
        "node_secondary_ips": _lines(f"{n.name} {n.secondary_ip or n.primary_ip}"
                                     for n in nodes),
        "offline_nodes": _lines(n.name for n in nodes if n.offline),
        "online_nodes": _lines(n.name for n in nodes if not n.offline),
        "vm_capable_nodes": _lines(n.name for n in nodes if n.vm_capable),
        ssconf.NDPARAMS: ssconf.format_ndparams((n.name, config.filled_ndparams(n))
                                                for n in nodes),
        node_certs.SSCONF_NAME: node_certs.format_list(
            node_certs.list_rows(c.node_certs, {n.uuid: n.name for n in nodes})
            + node_certs.list_rows(c.node_certs_renewing, {n.uuid: n.name for n in nodes})),
    }


def _instance_files(config: model.ConfigData, inst: model.Instance) -> set[str]:
    """The files `inst`'s filled hypervisor parameters name (none: not of an enabled
    hypervisor)."""
    if inst.hypervisor not in config.cluster.enabled_hypervisors:
        return set()
    filled = config.filled_hvparams(inst)
    return {str(filled[p]) for p in HV_FILE_PARAMS if filled.get(p)}


class PlanMemo:
    """What a plan computes over the 5,000 nodes' and 50,000 instances' tables, kept from one
    config to the next and recomputed only for what changed (the redistribution runs after
    every change: over the whole tables it was ~0.25 s of CPU per change at 50,000 instances,
    for a tag change that moves no value). A change replaces the objects it touched and never
    changes one in place (`core.configdiff`, as `views.InstanceViews` relies on), so an
    object that is the same object as in the last config gives the same values; every other
    input is compared by value. Thread-safe (a full push and the trigger may plan at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._node_key: tuple[Any, ...] | None = None
        self._node_values: dict[str, str] = {}
        self._instances: dict[str, model.Instance] = {}  # the last table planned from
        self._names: str | None = None  # instance_list
        self._hv_key: tuple[Any, ...] | None = None
        self._files: dict[str, set[str]] = {}  # instance UUID -> its files (only with some)

    def node_values(self, config: model.ConfigData) -> dict[str, str]:
        c = config.cluster
        # everything `node_values` reads (a list of the same objects compares in one C pass)
        key = (list(config.nodes.values()), list(config.nodegroups.values()), c.master_node,
               c.ndparams, c.node_certs, c.node_certs_renewing)
        with self._lock:
            if key != self._node_key:
                self._node_values, self._node_key = node_values(config), key
            return self._node_values

    def _moved(self, table: dict[str, model.Instance]) -> set[str] | None:
        """The UUIDs of the instances added, removed or replaced since the last table (None:
        no table before). Caller holds the lock."""
        before = self._instances
        if not before and table:
            return None
        if len(before) == len(table) and list(before) == list(table):
            # the same UUIDs in the same order (a change puts a changed object in its
            # place): the replaced objects found in C
            return set(itertools.compress(table, map(operator.is_not, table.values(),
                                                     before.values())))
        moved = {uuid for uuid, inst in table.items() if before.get(uuid) is not inst}
        moved.update(uuid for uuid in before if uuid not in table)
        return moved

    def _follow(self, config: model.ConfigData) -> None:
        """Bring the instances' values to `config`. Caller holds the lock."""
        table = config.instances
        c = config.cluster
        hv_key = (list(c.enabled_hypervisors), c.hvparams, c.os_hvp)
        if table is self._instances and hv_key == self._hv_key and self._names is not None:
            return  # (the same config's second question)
        moved = self._moved(table) if hv_key == self._hv_key else None
        if moved is None:
            self._files = {}
            for inst in table.values():
                files = _instance_files(config, inst)
                if files:
                    self._files[inst.uuid] = files
            self._names = None
        else:
            for uuid in moved:
                now = table.get(uuid)
                old = self._instances.get(uuid)
                files = _instance_files(config, now) if now is not None else set()
                if files:
                    self._files[uuid] = files
                else:
                    self._files.pop(uuid, None)
                if now is None or old is None or now.name != old.name:
                    self._names = None
        self._instances, self._hv_key = table, hv_key
        if self._names is None:
            self._names = _lines(sorted(i.name for i in table.values()))

    def instance_list(self, config: model.ConfigData) -> str:
        with self._lock:
            self._follow(config)
            assert self._names is not None
            return self._names

    def instance_files(self, config: model.ConfigData) -> dict[str, set[str]]:
        with self._lock:
            self._follow(config)
            return dict(self._files)


def _can_run(inst: model.Instance, node: model.Node) -> bool:
    """Whether `node` can run `inst`: VM-capable, and a node of the instance or any node when
    its disks are externally mirrored (shared storage, diskless)."""
    if not node.vm_capable:
        return False
    template = inst.disk_template if inst.disks else "diskless"
    return template in params.DTS_EXT_MIRROR or node.uuid in inst.all_nodes


def instance_files(config: model.ConfigData) -> dict[str, set[str]]:
    """Instance UUID -> the files its filled hypervisor parameters name (only instances that
    name some, of an enabled hypervisor): computed once per plan, not once per node."""
    found: dict[str, set[str]] = {}
    for inst in config.instances.values():
        files = _instance_files(config, inst)
        if files:
            found[inst.uuid] = files
    return found


def hypervisor_defaults(config: model.ConfigData) -> set[str]:
    """The files the enabled hypervisors' cluster-wide parameters name (every VM-capable node
    gets them)."""
    c = config.cluster
    wanted: set[str] = set()
    for hv in c.enabled_hypervisors:
        names = [p for p in HV_FILE_PARAMS if p in params.hv_family(hv).specs] \
            if hv in params.HYPERVISORS else []
        filled = params.fill(params.hv_family(hv).defaults(), c.hvparams.get(hv)) if names else {}
        wanted.update(str(filled[p]) for p in names if filled.get(p))
    return wanted


def hypervisor_files(config: model.ConfigData, node: model.Node,
                     where: Path | None = None,
                     per_instance: dict[str, set[str]] | None = None,
                     defaults: set[str] | None = None) -> list[str]:
    """The files the enabled hypervisors' parameters name that `node` needs: the cluster
    defaults on every VM-capable node, an instance's value on the nodes that can run it. Only
    files in `where`, the cluster's hypervisor file directory (`masterd.hvfiles`; None: none at
    all), are the cluster's: a parameter naming any other file sends nothing. `per_instance`:
    `instance_files(config)`, `defaults`: `hypervisor_defaults(config)`, when the caller asks
    for many nodes."""
    if not node.vm_capable:
        return []
    wanted = set(hypervisor_defaults(config) if defaults is None else defaults)
    if per_instance is None:
        per_instance = instance_files(config)
    for uuid, files in per_instance.items():
        if _can_run(config.instances[uuid], node):
            wanted.update(files)
    return _in_directory(wanted, where)


def _in_directory(wanted: Iterable[str], where: Path | None) -> list[str]:
    """The files of `wanted` in the hypervisor file directory `where`, sorted."""
    return sorted(p for p in wanted
                  if where is not None and hvfiles.path_problem(p, where) is None)


def plan(config: model.ConfigData, config_path: Path, *, user_files: Iterable[str] = (),
         full: bool = False, only: Iterable[str] | None = None,
         config_copies: bool = True, memo: PlanMemo | None = None) -> dict[str, NodePlan]:
    """Per online node (by name) what it receives. `full`: also the cluster secrets (HMAC key,
    certificate, cluster domain secret: what a new node or a new master candidate needs).
    `only`: these node names. `config_copies` False (etcd: the config and the queue live
    there): the candidates get no copy of them, only their files. `memo`: what the plans of
    the configs before computed (`PlanMemo`; the same plan, at the cost of what changed)."""
    if memo is None:
        memo = PlanMemo()
    secrets = SecretPaths.beside(config_path)
    user_list = [str(config_path.parent / REDIST_FILES), *user_files]
    rapi = [str(secrets.certificate), str(secrets.rapi_users)]
    # Ganeti's cluster domain secret (a move between clusters signs with it) goes with the
    # other secrets, when the cluster has one (made by `cluster init` since it signs moves)
    domain_secret = config_path.parent / DOMAIN_SECRET_FILE
    cluster_wide = [str(secrets.hmac_key), str(secrets.certificate),
                    *([str(domain_secret)] if domain_secret.exists() else [])]
    everything = set(user_list) | set(rapi) | set(cluster_wide)
    hv_dir = hvfiles.directory(config_path.parent)
    per_instance = memo.instance_files(config)
    defaults = hypervisor_defaults(config)
    # the same list for every VM-capable node when no instance names a file of its own
    shared = _in_directory(defaults, hv_dir) if not per_instance else None
    node_files = {node.uuid: (shared if shared is not None and node.vm_capable else
                              hypervisor_files(config, node, hv_dir, per_instance, defaults))
                  for node in config.nodes.values()}
    for files in node_files.values():
        everything.update(files)
    facts = ssconf_values(config, everything, memo)
    wanted = set(only) if only is not None else None
    plans: dict[str, NodePlan] = {}
    for node in sorted(config.nodes.values(), key=lambda n: n.name):
        if node.offline or (wanted is not None and node.name not in wanted):
            continue
        if node.uuid == config.cluster.master_node:  # the master has the originals
            plans[node.name] = NodePlan(node.name, node.uuid, dict(facts), False, [])
            continue
        candidate = node.master_candidate
        files = list(user_list)
        files += node_files[node.uuid]
        if candidate:
            files += [str(secrets.rapi_users)]
        if full:
            files += cluster_wide
        plans[node.name] = NodePlan(node.name, node.uuid, dict(facts),
                                    candidate and config_copies,
                                    list(dict.fromkeys(files)))  # each once, in order
    return plans


def queue_state(queue_dir: Path | None) -> dict[str, tuple[int, int]]:
    """Job queue file name -> (mtime_ns, size): what changed since a push."""
    if queue_dir is None or not queue_dir.is_dir():
        return {}
    state = {}
    for path in queue_dir.glob("*.json"):
        with contextlib.suppress(OSError):
            st = path.stat()
            state[path.name] = (st.st_mtime_ns, st.st_size)
    return state


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass
class PushResult:
    sent: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, list[str]]:
        return {"sent": self.sent, "errors": self.errors}


ARCHIVE_PER_PUSH = 500  # archived job files a write_config call carries (~1-3 MB)
# The job files archived after a position of the queue's archive log, and the position after
# them (`jobs.store_file.FileJobStorage.archived_since`)
ArchiveLog = Callable[[int], tuple[list[str], int]]


def _no_archive(position: int) -> tuple[list[str], int]:
    return [], position


class Redistributor:
    """Pushes the plan through noded. Remembers per node the config serial and job files it
    sent, so the push after a config write sends the job files that changed only, and how far
    into the archive log it got."""

    def __init__(self, rpc: NodeRpc, config_path: Path, queue_dir: Path | None,
                 workers: int = 16, reachability: Reachability | None = None,
                 archived_since: ArchiveLog = _no_archive, config_copies: bool = True) -> None:
        """`reachability`: masterd's record, which `rpc` reports every call's outcome to;
        None: a record of this pusher's own, its calls reporting to it. `archived_since`: the
        queue's archive log (nothing archived: none). `config_copies` False on etcd: no
        candidate gets a copy of the config and the queue (`plan`)."""
        self.config_copies = config_copies
        if reachability is None:
            reachability = Reachability()
            rpc = ReachabilityRpc(rpc, reachability)
        self.reachability = reachability
        self.rpc = rpc
        self.config_path = config_path
        self.queue_dir = queue_dir
        self.workers = workers
        self._sent_queue: dict[str, dict[str, tuple[int, int]]] = {}
        self.archived_since = archived_since
        # per candidate: how far into the archive log its copy is (its archive holds the jobs
        # archived before: the log holds this masterd's archiving only)
        self._sent_archive: dict[str, int] = {}
        # per candidate: the snapshot (SHA-256) and the journal length its copy has
        self._sent_journal: dict[str, tuple[str, int]] = {}
        # per node: the digest of the ssconf and files it last received, and when
        self._sent_files: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self.memo = PlanMemo()  # the plan's values over the tables, from one push to the next

    def push(self, config: model.ConfigData, *, full: bool = False,
             only: Iterable[str] | None = None) -> dict[str, PushResult]:
        """Push to every online node (or `only` these names); per node what was sent and the
        errors. Never raises for a node's failure."""
        user_files = read_user_list(self.config_path.parent / REDIST_FILES)
        plans = plan(config, self.config_path, user_files=user_files, full=full, only=only,
                     config_copies=self.config_copies, memo=self.memo)
        skipped: dict[str, Down] = {}  # decided once: _replica and _push_node agree on it
        if not full:
            for np in plans.values():
                down = self.reachability.avoid(np.uuid)
                if down is not None:
                    skipped[np.uuid] = down
        replica = self._replica(plans, full, set(skipped))
        # the whole document only when a candidate is sent one and there is no journal to
        # copy (encoding it is 0.6 s of CPU at 50,000 instances, for nothing when every
        # candidate is in back-off)
        document = replica.snapshot if replica is not None else \
            model.encode(config) if any(np.candidate and np.uuid not in skipped
                                        for np in plans.values()) else None
        contents: dict[str, tuple[bytes, int] | str] = {}
        hv_dir = hvfiles.directory(self.config_path.parent)
        for p in {f for np in plans.values() for f in np.files}:
            if hvfiles.path_problem(p, hv_dir) is None and hvfiles.readable(p, hv_dir) is None:
                contents[p] = "not a regular file inside the hypervisor file directory"
                continue  # (a link out of it, say): never read for a parameter
            try:
                path = Path(p)
                contents[p] = (path.read_bytes(), path.stat().st_mode & 0o7777)
            except OSError as err:
                contents[p] = err.strerror or str(err)
        queue_now = queue_state(self.queue_dir)
        if not plans:
            return {}
        digests = _plan_digests({name: np for name, np in plans.items()
                                 if np.uuid not in skipped}, contents)
        results: dict[str, PushResult] = {}
        calls: dict[str, NodePlan] = {}
        now = time.monotonic()
        for name, np in plans.items():
            down = skipped.get(np.uuid)
            if down is not None:  # in back-off: not tried; its next push sends everything
                results[name] = PushResult(errors=[down.describe(self.reachability.clock())])
                with self._lock:
                    self._sent_files.pop(np.uuid, None)
            elif np.candidate or not self._unchanged(np.uuid, digests[name], full, now):
                calls[name] = np
            else:  # nothing to send it: no call, no thread (most nodes after most changes)
                results[name] = PushResult()
        if calls:
            with ThreadPoolExecutor(max_workers=min(self.workers, len(calls))) as pool:
                futures = {name: pool.submit(self._push_node, config, np, document, replica,
                                             contents, queue_now, full, digests[name])
                           for name, np in calls.items()}
                results.update((name, future.result()) for name, future in futures.items())
        return {name: results[name] for name in plans}

    def _unchanged(self, uuid: str, digest: str, full: bool, now: float) -> bool:
        """Whether the node got this ssconf and these files last, recently enough (a full
        push, or RESEND_AFTER, sends them again)."""
        with self._lock:
            last = self._sent_files.get(uuid)
        return not full and last is not None and last[0] == digest \
            and now - last[1] < RESEND_AFTER

    def _replica(self, plans: dict[str, NodePlan], full: bool,
                 skipped: set[str]) -> store.Replica | None:
        """The config files as the candidates copy them (snapshot bytes only when one of
        them needs the whole document); None when the master's store has no journal (then
        the document is encoded from the config pushed). A candidate skipped as unreachable
        needs nothing now (the whole document is 16 MB at 10,000 instances)."""
        candidates = [np.uuid for np in plans.values()
                      if np.candidate and np.uuid not in skipped]
        if not candidates:
            return None
        with self._lock:
            sent = [self._sent_journal.get(uuid) for uuid in candidates]
        file_store = store.FileStore(self.config_path)
        if not file_store.exists():
            return None
        try:
            replica = file_store.replica(with_snapshot=False)
            if replica is not None and (full or not all(
                    s is not None and s[0] == replica.digest and s[1] <= len(replica.journal)
                    for s in sent)):
                self._whole(replica)  # some candidate needs the whole document
        except HerderError:
            return None
        return replica

    def _config_args(self, np: NodePlan, config: model.ConfigData, document: bytes | None,
                     replica: store.Replica | None, whole: bool,
                     queue: file_calls.QueueCopy) -> tuple[file_calls.WriteConfig, str]:
        """write_config for one candidate and what it carries: the journal's new records when
        its copy continues the master's snapshot, else the whole document."""
        if replica is None:
            assert document is not None
            return (file_calls.WriteConfig(config=document.decode(), serial=config.serial_no,
                                           queue=queue),
                    f"config (serial {config.serial_no})")
        with self._lock:
            sent = self._sent_journal.get(np.uuid)
        if not whole and sent is not None and sent[0] == replica.digest \
                and sent[1] <= len(replica.journal):
            data = replica.journal[sent[1]:]
            return (file_calls.WriteConfig(serial=replica.serial, queue=queue,
                                           journal=file_calls.JournalCopy(
                                               snapshot=replica.digest, offset=sent[1],
                                               data=_b64(data))),
                    f"config journal (serial {replica.serial}, {len(data)} bytes)")
        assert replica.snapshot is not None
        return (file_calls.WriteConfig(config=replica.snapshot.decode(), serial=replica.serial,
                                       queue=queue, journal=file_calls.JournalCopy(
                                           snapshot=replica.digest, offset=0,
                                           data=_b64(replica.journal))),
                f"config (serial {replica.serial})")

    def _push_node(self, config: model.ConfigData, np: NodePlan, document: bytes | None,
                   replica: store.Replica | None,
                   contents: dict[str, tuple[bytes, int] | str],
                   queue_now: dict[str, tuple[int, int]], full: bool,
                   digest: str) -> PushResult:
        result = PushResult()
        node = config.nodes[np.uuid]
        # a change that leaves a node's ssconf and files as they were costs it nothing
        # (candidates still get the config); a full push, or RESEND_AFTER, sends them again
        if self._unchanged(np.uuid, digest, full, time.monotonic()):
            if np.candidate:
                self._push_config(node, np, config, document, replica, queue_now, full, result)
            return result
        try:
            if not self.reachability.heard_from(np.uuid):
                # not heard from since masterd started (its start, a node that is down): a
                # small call first, so a node that cannot be reached costs no signed ssconf
                # (~470 KB, ~5 ms of CPU at 1,000 nodes: seconds at a start among dead nodes)
                self.rpc.call(node, node_calls.Ping(), timeout=30)
            self.rpc.call(node, file_calls.WriteSsconf(values=dict(np.ssconf)))
            result.sent.append(f"ssconf ({len(np.ssconf)} values)")
        except HerderError as err:
            result.errors.append(f"ssconf: {err}")
            with self._lock:
                self._sent_files.pop(np.uuid, None)
            return result  # its upload white-list is in the ssconf: nothing else can land
        files_failed = False
        for path in np.files:
            content = contents.get(path)
            if isinstance(content, str) or content is None:
                if not path.endswith("/" + REDIST_FILES):  # the user list is optional
                    result.errors.append(f"{path}: cannot read it on the master: {content}")
                continue
            data, mode = content
            try:
                self.rpc.call(node, file_calls.UploadFile(path=path, data=_b64(data),
                                                          mode=mode))
                result.sent.append(path)
            except HerderError as err:
                result.errors.append(f"{path}: {err}")
                files_failed = True
        with self._lock:
            if files_failed:
                self._sent_files.pop(np.uuid, None)
            else:
                self._sent_files[np.uuid] = (digest, time.monotonic())
        if np.candidate:
            self._push_config(node, np, config, document, replica, queue_now, full, result)
        return result

    def _push_config(self, node: model.Node, np: NodePlan, config: model.ConfigData,
                     document: bytes | None, replica: store.Replica | None,
                     queue_now: dict[str, tuple[int, int]], full: bool,
                     result: PushResult) -> None:
        """A candidate's copy of the config and of the job queue's changed files."""
        with self._lock:
            before = {} if full else dict(self._sent_queue.get(np.uuid, {}))
        changed = {name for name, st in queue_now.items() if before.get(name) != st}
        files: dict[str, str] = {}
        if changed:
            queue_dir = self.queue_dir
            assert queue_dir is not None  # queue files are only seen in a queue directory
            for name in sorted(changed):
                with contextlib.suppress(OSError):
                    files[name] = _b64((queue_dir / name).read_bytes())
        with self._lock:
            position = self._sent_archive.get(np.uuid, 0)
        archived, after = self._archived(position)
        queue = file_calls.QueueCopy(files=files, names=sorted(queue_now), archived=archived)
        call, what = self._config_args(np, config, document, replica, full, queue)
        try:
            try:
                self.rpc.call(node, call)
            except HerderError:
                if call.config is not None or replica is None:
                    raise
                # the copy does not continue where we think: the whole document
                call, what = self._config_args(np, config, self._whole(replica), replica,
                                               True, queue)
                self.rpc.call(node, call)
            result.sent.append(f"{what}, {len(files)} job file(s)"
                               + (f", {len(archived)} archived" if archived else ""))
            with self._lock:
                self._sent_queue[np.uuid] = queue_now
                self._sent_archive[np.uuid] = after
                if replica is not None:
                    self._sent_journal[np.uuid] = (replica.digest, len(replica.journal))
        except HerderError as err:
            result.errors.append(f"config: {err}")
            with self._lock:
                self._sent_queue.pop(np.uuid, None)
                self._sent_journal.pop(np.uuid, None)

    def _archived(self, position: int) -> tuple[dict[str, str], int]:
        """The archived job files after `position` of the log (at most ARCHIVE_PER_PUSH) as
        the candidates receive them, and the position after them."""
        names, end = self.archived_since(position)
        if len(names) > ARCHIVE_PER_PUSH:
            names, end = names[:ARCHIVE_PER_PUSH], position + ARCHIVE_PER_PUSH
        files: dict[str, str] = {}
        for name in names:
            with contextlib.suppress(OSError):  # (a file gone is no longer the cluster's)
                assert self.queue_dir is not None
                files[name] = _b64(archive_path(self.queue_dir, name).read_bytes())
        return files, end

    def archive_behind(self) -> set[str]:
        """The candidates (UUIDs) whose copy of the archive is behind the log."""
        _, end = self.archived_since(1 << 62)  # (nothing after the end: its position only)
        with self._lock:
            return {uuid for uuid, position in self._sent_archive.items() if position < end}

    def _whole(self, replica: store.Replica) -> bytes:
        """`replica` with its snapshot's bytes (read if it came without them)."""
        if replica.snapshot is None:
            fresh = store.FileStore(self.config_path).replica(with_snapshot=True)
            if fresh is None or fresh.digest != replica.digest:
                raise HerderError("the config changed while being pushed; the next push "
                                  "sends it")
            replica.snapshot = fresh.snapshot
        assert replica.snapshot is not None
        return replica.snapshot


RESEND_AFTER = 600.0  # seconds after which a node gets its unchanged ssconf and files again
# ssconf values that, changed alone, are pushed to no node: the config serial moves with every
# change, and pushing every node its ssconf again for it (5,000 calls per tag change) would
# make every change cost the whole cluster. A node's `ssconf_config_serial` is the serial of
# the config its values were last pushed from (they hold for every serial since); Ganeti
# writes its ssconf only when the cluster's serial moves (compat D30)
UNPUSHED_ALONE = frozenset({"config_serial"})


def values_digest(values: dict[str, str]) -> str:
    """A digest of ssconf values, but those that are pushed to no node alone."""
    return hashlib.sha256(msgspec.json.encode(
        sorted(item for item in values.items() if item[0] not in UNPUSHED_ALONE))).hexdigest()


def _plan_digests(plans: dict[str, NodePlan],
                  contents: dict[str, tuple[bytes, int] | str]) -> dict[str, str]:
    """Node name -> a digest of the ssconf and the files it receives. The plans share their
    ssconf values (the same strings), so each distinct set is hashed once."""
    file_digests = {path: hashlib.sha256(repr(content[1]).encode() + content[0]).hexdigest()
                    if isinstance(content, tuple) else f"unreadable: {content}"
                    for path, content in contents.items()}
    by_values: dict[tuple[int, ...], str] = {}
    digests = {}
    for name, np in plans.items():
        identity = tuple(map(id, np.ssconf.values()))
        ssconf_digest = by_values.get(identity)
        if ssconf_digest is None:
            ssconf_digest = values_digest(np.ssconf)
            by_values[identity] = ssconf_digest
        files = [f"{path}={file_digests.get(path, 'absent')}" for path in np.files]
        digests[name] = hashlib.sha256(
            "\n".join([ssconf_digest, *files]).encode()).hexdigest()
    return digests


def report(results: dict[str, PushResult]) -> dict[str, dict[str, list[str]]]:
    return {name: r.to_dict() for name, r in sorted(results.items())}


def due(reachability: Reachability, uuid: str, owed_since: float, retry_at: float) -> bool:
    """Whether a node a push failed for (at `owed_since`, monotonic) is pushed to again now:
    not while it is in back-off; at once when its back-off has passed or it was seen again
    (a call of masterd's reached it); after a failure that was no unreachable node (an
    answer with an error, a file the master cannot read), at `retry_at`."""
    if reachability.avoid(uuid) is not None:
        return False
    if reachability.down(uuid) is not None:
        return True
    return reachability.answered_since(uuid, owed_since) or \
        reachability.clock() >= retry_at


async def watch(daemon: MasterDaemon, stop: asyncio.Event, interval: float | None = None,
                retry: float = 10.0) -> None:
    """masterd's trigger: every `interval` seconds (its master check interval), when the
    config serial or the job queue changed since the last push, push (not full); else push to
    the nodes a push failed for that are `due` (`retry` seconds after an error that was not
    an unreachable node). Errors are logged, never raised."""
    if getattr(daemon, "lease", None) is not None:
        # etcd backend: the config and the job queue live in etcd, replicated by it; the
        # files of a file-backed master are not there to push (docs/ha.md)
        log.info("etcd backend: the config and the job queue are replicated by etcd")
        return
    every = interval if interval is not None else daemon.settings.check_interval
    pusher = Redistributor(daemon.env.rpc, daemon.secrets.hmac_key.parent / "config.json",
                           daemon.env.queue_dir,
                           reachability=getattr(daemon, "reachability", None),
                           archived_since=getattr(daemon.queue.storage, "archived_since",
                                                  _no_archive))
    record = pusher.reachability
    last: Any = None
    owed: dict[str, tuple[float, float]] = {}  # node UUID -> (failed at, retry at)
    while not stop.is_set():
        try:
            config = await asyncio.to_thread(daemon.store.snapshot)
            key = (config.serial_no, await asyncio.to_thread(queue_state, daemon.env.queue_dir),
                   pusher.archived_since(1 << 62)[1])
            for uuid in [u for u in owed if u not in config.nodes]:
                del owed[uuid]  # removed from the cluster
            only = None if key != last else \
                [config.nodes[uuid].name for uuid, (since, retry_at) in owed.items()
                 if due(record, uuid, since, retry_at)]
            if daemon.deposed is None and (only is None or only):
                results = await asyncio.to_thread(pusher.push, config, only=only)
                last = key
                now = record.clock()
                uuids = {n.name: n.uuid for n in config.nodes.values()}
                # pushed to again (or offline now): owed anew below if it failed again
                if only is None:
                    owed.clear()
                for name in only or ():
                    owed.pop(uuids[name], None)
                for name, result in results.items():
                    if result.errors:
                        owed[uuids[name]] = (now, now + retry)
                for uuid in pusher.archive_behind() & set(uuids.values()):
                    owed.setdefault(uuid, (now, now))  # the rest of the archive: next round
                failed = {n: r.errors for n, r in results.items() if r.errors}
                if failed:
                    log.warning("redistribution of config serial %d: %s", config.serial_no,
                                _summary(failed))
        except Exception as err:  # never let the trigger stop masterd
            log.warning("redistribution failed: %s", err)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every)


def _summary(failed: dict[str, list[str]], shown: int = 10) -> str:
    """The nodes' errors for the log, the first `shown` nodes (1,000 unreachable nodes are
    one line, not 1,000)."""
    names = sorted(failed)
    text = "; ".join(f"{n}: {', '.join(failed[n])}" for n in names[:shown])
    return text if len(names) <= shown else f"{text}; and {len(names) - shown} more node(s)"
