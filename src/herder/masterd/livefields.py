"""The live fields of nodes and instances, computed from the config and a snapshot of the node
daemons' answers (`livecache.Snapshot`) as Ganeti 3.0's query code does: every value with its
result status (Ganeti's `RS_*`: bulk RAPI answers show the value only when it is normal, null
otherwise; `/2/query` shows both).

Instance status follows Ganeti 3.0's query code (`Ganeti.Query.Instance`, which serves RAPI and
`gnt-instance list` in 3.0; the older Python `query._GetInstStatus` differs only in that it
reports `USER_down` for a user-stopped instance even when the cluster does not enable user
shutdown, and counts an instance running on a wrong node as down unless it also runs on its
primary):

1. primary node offline: `ERROR_nodeoffline`;
2. running on another node than its primary (and not on the primary): `ERROR_wrongnode`;
3. running on its primary: `running` when its admin state is up, else `ERROR_up`; a guest that
   shut itself down (a hypervisor-reported shutdown) is `USER_down` when user shutdown is
   allowed, else `ERROR_down` (admin up) or `ADMIN_down`;
4. the primary's daemon did not answer: `ERROR_nodedown`;
5. not running: admin up `ERROR_down`; admin down `ADMIN_down` (`USER_down` when a user shut it
   down and user shutdown is allowed); admin offline `ADMIN_offline`.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterable, Mapping
from typing import Any

from herder.core import livefigures, model
from herder.core.jsonvalue import JsonObject
from herder.masterd.livecache import Snapshot

# Ganeti's result statuses (constants.RS_*)
RS_NORMAL, RS_UNKNOWN, RS_NODATA, RS_UNAVAIL, RS_OFFLINE = 0, 1, 2, 3, 4

RUNNING = "running"
ADMIN_DOWN = "ADMIN_down"
ADMIN_OFFLINE = "ADMIN_offline"
ERROR_DOWN = "ERROR_down"
ERROR_UP = "ERROR_up"
ERROR_NODEDOWN = "ERROR_nodedown"
ERROR_NODEOFFLINE = "ERROR_nodeoffline"
ERROR_WRONGNODE = "ERROR_wrongnode"
USER_DOWN = "USER_down"
STATUSES = frozenset({RUNNING, ADMIN_DOWN, ADMIN_OFFLINE, ERROR_DOWN, ERROR_UP, ERROR_NODEDOWN,
                      ERROR_NODEOFFLINE, ERROR_WRONGNODE, USER_DOWN})

# where an instance's hypervisor process was found
ON_PRIMARY, ELSEWHERE = "primary", "elsewhere"

Result = tuple[int, Any]

NODE_LIVE_FIELDS = ("mtotal", "mnode", "mfree", "dtotal", "dfree", "ctotal", "cnos", "cnodes",
                    "csockets", "spfree", "sptotal", "bootid", "kvm_accel", "kvm_reason",
                    "herder_version")
INSTANCE_LIVE_FIELDS = ("oper_state", "oper_ram", "oper_vcpus", "status")


def instance_status(*, admin_state: str, admin_state_source: str = "admin",
                    primary_offline: bool = False, primary_answered: bool = True,
                    found: str | None = None, shut_down: bool = False,
                    user_shutdown: bool = False) -> str:
    """Ganeti's instance status (the rules of the module doc). `found`: ON_PRIMARY, ELSEWHERE
    or None; `shut_down`: the hypervisor reports the guest shut itself down; `user_shutdown`:
    the cluster enables user shutdown (and a KVM instance's `user_shutdown` parameter is on)."""
    if primary_offline:
        return ERROR_NODEOFFLINE
    if found == ELSEWHERE:
        return ERROR_WRONGNODE
    if found == ON_PRIMARY:
        if shut_down:
            if admin_state == "up":
                return USER_DOWN if user_shutdown else ERROR_DOWN
            return ADMIN_DOWN
        return RUNNING if admin_state == "up" else ERROR_UP
    if not primary_answered:
        return ERROR_NODEDOWN
    if admin_state == "up":
        return ERROR_DOWN
    if admin_state == "down":
        return USER_DOWN if admin_state_source == "user" and user_shutdown else ADMIN_DOWN
    return ADMIN_OFFLINE


def _find_run(config: model.ConfigData, inst: model.Instance, live: Snapshot
              ) -> tuple[str | None, livefigures.InstanceRun | None]:
    """Where the instance runs: on its primary first, else on the first other node (in name
    order) whose daemon reports it."""
    runs = live.runs(inst.primary_node)
    if runs is not None and inst.name in runs:
        return ON_PRIMARY, runs[inst.name]
    elsewhere = [config.nodes[uuid] for uuid in live.reporters.get(inst.name, ())
                 if uuid != inst.primary_node and uuid in config.nodes]
    for node in sorted(elsewhere, key=lambda n: n.name):
        runs = live.runs(node.uuid)
        if runs is not None and inst.name in runs:
            return ELSEWHERE, runs[inst.name]
    return None, None


# What decides an instance's live fields: its admin state and its source, whether its primary
# is offline, whether the primary's daemon answered, where it runs (ON_PRIMARY, ELSEWHERE or
# None), and the running guest's memory and vCPUs. A list of 10,000 instances has a few dozen
# of these: their fields (and their encodings) are made once per key.
RunKey = tuple[str, str, bool, bool, str | None, int | None, int | None]


def run_keys(config: model.ConfigData, insts: Iterable[model.Instance],
             live: Snapshot) -> list[RunKey]:
    """Each instance's `RunKey`; what a primary node gives (offline, answered, its guests) is
    looked up once per node."""
    primaries: dict[str, tuple[bool, bool, Mapping[str, livefigures.InstanceRun] | None]] = {}
    reporters = live.reporters
    keys: list[RunKey] = []
    for inst in insts:
        primary = primaries.get(inst.primary_node)
        if primary is None:
            node = config.nodes.get(inst.primary_node)
            info = live.info(inst.primary_node)
            primary = primaries[inst.primary_node] = (
                node is None or node.offline, info is not None,
                None if info is None else info.instances or {})
        offline, answered, runs = primary
        run = runs.get(inst.name) if runs else None
        if run is not None:
            found: str | None = ON_PRIMARY
        elif inst.name in reporters:  # on another node (or on none that still answers)
            found, run = _find_run(config, inst, live)
        else:
            found = None
        keys.append((inst.admin_state, inst.admin_state_source, offline, answered, found,
                     None if run is None else run.memory, None if run is None else run.vcpus))
    return keys


@functools.lru_cache(maxsize=4096)
def fields_of(key: RunKey) -> Mapping[str, Result]:
    """The live fields for a `RunKey` (shared: not to be changed)."""
    admin_state, admin_state_source, offline, answered, found, memory, vcpus = key
    status = instance_status(
        admin_state=admin_state, admin_state_source=admin_state_source,
        primary_offline=offline, primary_answered=answered, found=found,
        # herder's config has no `enabled_user_shutdown` (Ganeti's default: off), and a
        # guest's own shutdown ends its domain (a domain that is not live is not running)
        shut_down=False, user_shutdown=False)
    fields: dict[str, Result] = {"status": (RS_NORMAL, status)}
    if found is not None:
        fields["oper_state"] = (RS_NORMAL, True)
        fields["oper_ram"] = (RS_NORMAL, memory)
        fields["oper_vcpus"] = (RS_NORMAL, vcpus)
        return types.MappingProxyType(fields)
    fields["oper_state"] = (RS_NORMAL, False) if answered and not offline else (RS_NODATA, None)
    missing = RS_OFFLINE if offline else RS_UNAVAIL if answered else RS_NODATA
    fields["oper_ram"] = fields["oper_vcpus"] = (missing, None)
    return types.MappingProxyType(fields)


def instance_fields(config: model.ConfigData, inst: model.Instance,
                    live: Snapshot) -> dict[str, Result]:
    """`oper_state`, `oper_ram`, `oper_vcpus` and `status` with their result statuses."""
    return dict(fields_of(run_keys(config, (inst,), live)[0]))


def node_fields(config: model.ConfigData, node: model.Node,
                live: Snapshot) -> dict[str, Result]:
    """The live node fields (NODE_LIVE_FIELDS) with their result statuses: offline nodes are
    RS_OFFLINE, nodes that cannot host instances RS_UNAVAIL, nodes that did not answer
    RS_NODATA, figures the node does not report (no lvm-pv unit for spindles) RS_NODATA."""
    if node.offline:
        return {name: (RS_OFFLINE, None) for name in NODE_LIVE_FIELDS}
    if not node.vm_capable:
        return {name: (RS_UNAVAIL, None) for name in NODE_LIVE_FIELDS}
    info = live.info(node.uuid)
    if info is None:
        return {name: (RS_NODATA, None) for name in NODE_LIVE_FIELDS}
    disk = livefigures.default_unit(info.storage, config.cluster.enabled_disk_templates)
    spindles = livefigures.spindles(info.storage)
    values: Mapping[str, Any] = {
        "mtotal": info.memory_total, "mnode": info.memory_dom0, "mfree": info.memory_free,
        "dtotal": disk.storage_size if disk else None,
        "dfree": disk.storage_free if disk else None,
        "ctotal": info.cpu_total, "cnos": info.cpu_dom0, "cnodes": info.cpu_nodes,
        "csockets": info.cpu_sockets,
        "sptotal": spindles.storage_size if spindles else None,
        "spfree": spindles.storage_free if spindles else None,
        "bootid": info.bootid or None,
        # herder's: the KVM probe's verdict (compat K9)
        "kvm_accel": None if info.kvm is None else "kvm" if info.kvm.usable else "tcg",
        "kvm_reason": None if info.kvm is None else info.kvm.reason,
        # herder's: the build the node's noded runs (compat U1)
        "herder_version": info.herder_version,
    }
    return {name: (RS_NODATA, None) if values[name] is None else (RS_NORMAL, values[name])
            for name in NODE_LIVE_FIELDS}


def values(results: Mapping[str, Result]) -> JsonObject:
    """The bulk answers' form: the value when normal, else null."""
    return {name: value if status == RS_NORMAL else None
            for name, (status, value) in results.items()}
