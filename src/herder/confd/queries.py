"""Answers to confd queries, computed from a config: one pure function per query type.

Each handler takes (config, query) and returns (status, answer, serial). Semantics follow Ganeti
3.0's Haskell confd as observed (docs/compat.md rows C*):

- serial: the cluster's `serial_no` for cluster-scoped answers; node-scoped answers (node_drbd,
  node_instances) carry that node's serial, instance_disks the instance's; ping answers the
  config version (`CONFIG_VERSION`, 3000000) with serial 0; every error answer carries serial 0.
- errors: status 1 with `ERROR_UNKNOWN_ENTRY` (0), `ERROR_INTERNAL` (1) or `ERROR_ARGUMENT` (2),
  or Ganeti's message text where Ganeti answers one (unknown node or instance).
- objects (node_instances, instance_disks) in Ganeti's config.data shapes: logical ids as lists,
  disks by UUID in instances, NIC `ip` omitted when unset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from herder.core import confd, diskobjects, model, params, roles
from herder.core.errors import AmbiguousError, NotFoundError

Answer = tuple[int, Any, int]
Handler = Callable[[model.ConfigData, Any], Answer]


def _ok(answer: Any, serial: int) -> Answer:
    return confd.REPL_STATUS_OK, answer, serial


def _error(answer: Any) -> Answer:
    return confd.REPL_STATUS_ERROR, answer, 0


ARGUMENT_ERROR: Answer = (confd.REPL_STATUS_ERROR, confd.ERROR_ARGUMENT, 0)


class _Index:
    """Data derived from one config, computed once per loaded config."""

    def __init__(self, config: model.ConfigData) -> None:
        self.config = config
        self.node_by_name = {n.name: n for n in config.nodes.values()}
        self.instance_by_name = {i.name: i for i in config.instances.values()}
        # link -> ip -> instance, with NIC parameters filled (cluster < network < NIC).
        self.ips: dict[str, dict[str, model.Instance]] = {}
        for inst in config.instances.values():
            group = config.instance_group(inst)
            for nic in inst.nics:
                if nic.ip:
                    link = str(config.filled_nicparams(nic, group)["link"])
                    self.ips.setdefault(link, {})[nic.ip] = inst
        self.default_link = str(
            params.fill(params.NIC_FAMILY.defaults(), config.cluster.nicparams)["link"]
        )
        self._view: Any = None

    @property
    def view(self) -> dict[str, Any]:
        """The document as JSON builtins, with Ganeti's names where they differ."""
        if self._view is None:
            view = msgspec.to_builtins(self.config)
            view["cluster"]["cluster_name"] = self.config.cluster.name
            self._view = view
        return self._view

    def node(self, key: Any) -> model.Node | None:
        if not isinstance(key, str):
            return None
        found = self.node_by_name.get(key) or self.config.nodes.get(key)
        if found is None:
            try:
                found = self.config.find_node(key)
            except (NotFoundError, AmbiguousError):
                return None
        return found

    def instance(self, key: Any) -> model.Instance | None:
        if not isinstance(key, str):
            return None
        found = self.instance_by_name.get(key) or self.config.instances.get(key)
        if found is None:
            try:
                found = self.config.find_instance(key)
            except (NotFoundError, AmbiguousError):
                return None
        return found


_last: _Index | None = None


def index(config: model.ConfigData) -> _Index:
    global _last
    if _last is None or _last.config is not config:
        _last = _Index(config)
    return _last


def _node_not_found(name: Any) -> str:
    return f'OpPrereqError "Node name {name} not found" ECodeNoEnt'


def _instance_not_found(name: Any) -> str:
    return f'OpPrereqError "Instance name {name} not found" ECodeNoEnt'


# --- Ganeti's object shapes --------------------------------------------------------------------


def ganeti_logical_id(lid: model.LogicalId | None) -> list[Any] | None:
    return None if lid is None else diskobjects.logical_id(lid)


def ganeti_disk(disk: model.Disk, nodes: list[str]) -> dict[str, Any]:
    """A disk as Ganeti 3.0's config.data (and confd) writes it."""
    if isinstance(disk.logical_id, model.DrbdId):
        nodes = list(disk.logical_id.nodes)
    data: dict[str, Any] = {
        "children": [ganeti_disk(child, nodes) for child in disk.children],
        "ctime": disk.ctime,
        "dev_type": disk.dev_type,
        "iv_name": disk.iv_name,
    }
    lid = ganeti_logical_id(disk.logical_id)
    if lid is not None:
        data["logical_id"] = lid
    data.update({"mode": disk.mode, "mtime": disk.mtime, "nodes": nodes,
                 "params": dict(disk.params), "serial_no": disk.serial_no, "size": disk.size,
                 "uuid": disk.uuid})
    if disk.name is not None:
        data["name"] = disk.name
    if disk.spindles is not None:
        data["spindles"] = disk.spindles
    return data


def ganeti_nic(nic: model.NIC) -> dict[str, Any]:
    data: dict[str, Any] = {"mac": nic.mac}
    if nic.ip:
        data["ip"] = nic.ip
    data["nicparams"] = dict(nic.nicparams)
    if nic.network:
        data["network"] = nic.network
    if nic.name is not None:
        data["name"] = nic.name
    data["uuid"] = nic.uuid
    return data


def ganeti_instance(inst: model.Instance) -> dict[str, Any]:
    """An instance as Ganeti 3.0's config.data writes it (disks by UUID)."""
    return {
        "name": inst.name, "primary_node": inst.primary_node, "os": inst.os,
        "hypervisor": inst.hypervisor, "hvparams": dict(inst.hvparams),
        "beparams": dict(inst.beparams), "osparams": dict(inst.osparams),
        "osparams_private": {}, "admin_state": inst.admin_state,
        "admin_state_source": inst.admin_state_source,
        "nics": [ganeti_nic(nic) for nic in inst.nics],
        "disks": [disk.uuid for disk in inst.disks], "disks_active": inst.disks_active,
        "ctime": inst.ctime, "mtime": inst.mtime, "uuid": inst.uuid,
        "serial_no": inst.serial_no, "tags": list(inst.tags),
    }


# --- Ganeti's query types ----------------------------------------------------------------------


def ping(config: model.ConfigData, query: Any) -> Answer:
    """0: the config version, serial 0; the query is ignored (Ganeti 3.0)."""
    return _ok(confd.CONFIG_VERSION, 0)


_CONFD_ROLES = {roles.MASTER: confd.NODE_ROLE_MASTER, roles.CANDIDATE: confd.NODE_ROLE_CANDIDATE,
                roles.DRAINED: confd.NODE_ROLE_DRAINED, roles.OFFLINE: confd.NODE_ROLE_OFFLINE,
                roles.REGULAR: confd.NODE_ROLE_REGULAR}


def node_role(node: model.Node, config: model.ConfigData) -> int:
    """Ganeti 3.0 confd's role (its precedence: master > drained > offline > candidate >
    regular; see herder.core.roles)."""
    return _CONFD_ROLES[roles.confd_node_role(node, config.cluster.master_node)]


def node_role_byname(config: model.ConfigData, query: Any) -> Answer:
    """1: a node's role (name, short name or UUID); cluster serial."""
    if not isinstance(query, str):
        return ARGUMENT_ERROR
    node = index(config).node(query)
    if node is None:
        return _error("Failure: prerequisites not met for this operation:\n"
                      f"error type: ECodeNoEnt, error details:\nNode name {query} not found")
    return _ok(node_role(node, config), config.cluster.serial_no)


def _primary_ip_of(config: model.ConfigData, inst: model.Instance | None) -> tuple[int, Any]:
    if inst is None:
        return confd.REPL_STATUS_ERROR, confd.ERROR_UNKNOWN_ENTRY
    node = config.nodes.get(inst.primary_node)
    if node is None or not node.primary_ip:
        return confd.REPL_STATUS_ERROR, confd.ERROR_INTERNAL
    return confd.REPL_STATUS_OK, node.primary_ip


def node_pip_by_instance_ip(config: model.ConfigData, query: Any) -> Answer:
    """2: the primary IP of the node running the instance with an IP, on a link.

    Query {"1": ip} → the IP; {"2": [ips]} → [[status, answer, serial], ...] per IP; "0" picks
    the link (default: the cluster's default NIC link). A plain string is an argument error.
    """
    if not isinstance(query, dict):
        return ARGUMENT_ERROR
    idx = index(config)
    link = query.get(confd.REQQ_LINK)
    if link is None:
        link = idx.default_link
    if not isinstance(link, str):
        return ARGUMENT_ERROR
    by_ip = idx.ips.get(link, {})
    serial = config.cluster.serial_no
    if confd.REQQ_IP in query:
        ip = query[confd.REQQ_IP]
        if not isinstance(ip, str):
            return ARGUMENT_ERROR
        status, answer = _primary_ip_of(config, by_ip.get(ip))
        return (status, answer, serial if status == confd.REPL_STATUS_OK else 0)
    if confd.REQQ_IPLIST in query:
        ips = query[confd.REQQ_IPLIST]
        if not isinstance(ips, list) or not all(isinstance(ip, str) for ip in ips):
            return ARGUMENT_ERROR
        items = []
        for ip in ips:
            status, answer = _primary_ip_of(config, by_ip.get(ip))
            items.append([status, answer, serial if status == confd.REPL_STATUS_OK else 0])
        return _ok(items, serial)
    return ARGUMENT_ERROR


_FIELD_IDS = {confd.REQFIELD_NAME, confd.REQFIELD_IP, confd.REQFIELD_MNODE_PIP}


def _field_id(value: Any) -> int | None:
    """A cluster_master field id: an int (Ganeti 3.0) or a digit string (2.1, confd-client)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and value in _FIELD_IDS else None


def cluster_master(config: model.ConfigData, query: Any) -> Answer:
    """3: the master node's name, or {"3": [field ids]} → [values] (name, master IP, master
    node's primary IP). Field ids may be ints or strings."""
    master = config.master
    if master is None:
        return _error(confd.ERROR_INTERNAL)
    serial = config.cluster.serial_no
    if not query:
        return _ok(master.name, serial)
    if not isinstance(query, dict) or not isinstance(query.get(confd.REQQ_FIELDS), list):
        return ARGUMENT_ERROR
    values = []
    for raw in query[confd.REQQ_FIELDS]:
        field = _field_id(raw)
        if field is None:
            return ARGUMENT_ERROR
        if field == confd.REQFIELD_NAME:
            values.append(master.name)
        elif field == confd.REQFIELD_IP:
            values.append(config.cluster.master_ip)
        else:
            values.append(master.primary_ip)
    return _ok(values, serial)


def _reverse_uuid_order(nodes: Any) -> list[model.Node]:
    """Ganeti 3.0 lists nodes in reverse UUID order."""
    return sorted(nodes, key=lambda n: n.uuid, reverse=True)


def node_pip_list(config: model.ConfigData, query: Any) -> Answer:
    """4: every node's primary IP (reverse UUID order); query ignored; cluster serial."""
    nodes = _reverse_uuid_order(config.nodes.values())
    return _ok([n.primary_ip for n in nodes], config.cluster.serial_no)


def mc_pip_list(config: model.ConfigData, query: Any) -> Answer:
    """5: the master candidates' primary IPs (reverse UUID order); cluster serial."""
    nodes = _reverse_uuid_order(n for n in config.nodes.values() if n.master_candidate)
    return _ok([n.primary_ip for n in nodes], config.cluster.serial_no)


def instances_ips_list(config: model.ConfigData, query: Any) -> Answer:
    """6: the IPs of instance NICs on a link (None: the default link), sorted; unknown link
    → []. Cluster serial."""
    idx = index(config)
    if query is None:
        query = idx.default_link
    if not isinstance(query, str):
        return ARGUMENT_ERROR
    return _ok(sorted(idx.ips.get(query, {})), config.cluster.serial_no)


def drbd_minors(config: model.ConfigData, node: model.Node) -> list[list[Any]]:
    """[node name, minor, instance name, iv_name, "primary"|"secondary", peer node name] for
    every DRBD disk with a minor on `node` (what mond's DRBD collector pairs with)."""
    rows: list[tuple[int, str, list[Any]]] = []

    def walk(inst: model.Instance, disk: model.Disk, iv_name: str) -> None:
        lid = disk.logical_id
        if isinstance(lid, model.DrbdId) and node.uuid in lid.nodes:
            mine = lid.nodes.index(node.uuid)
            peer = lid.nodes[1 - mine]
            role = "primary" if inst.primary_node == node.uuid else "secondary"
            rows.append((lid.minors[mine], inst.name,
                         [node.name, lid.minors[mine], inst.name, iv_name, role,
                          config.node_name(peer)]))
        for child in disk.children:
            walk(inst, child, child.iv_name or iv_name)

    for inst in config.instances_on(node.uuid):
        for number, disk in enumerate(inst.disks):
            walk(inst, disk, disk.iv_name or f"disk/{number}")
    rows.sort(key=lambda row: (row[0], row[1]))
    return [row[2] for row in rows]


def node_drbd(config: model.ConfigData, query: Any) -> Answer:
    """7: a node's DRBD minors (see `drbd_minors`); the node's serial."""
    node = index(config).node(query)
    if node is None:
        return ARGUMENT_ERROR if not isinstance(query, str) else _error(_node_not_found(query))
    return _ok(drbd_minors(config, node), node.serial_no)


def node_instances(config: model.ConfigData, query: Any) -> Answer:
    """8: [[primary instances], [secondary instances]] of a node, as Ganeti instance objects;
    the node's serial. (Ganeti's Python client refuses to send this type; its server answers.)"""
    node = index(config).node(query)
    if node is None:
        if not isinstance(query, str):
            return ARGUMENT_ERROR
        return _error(f"Node not found in the configuration: {_node_not_found(query)}")
    primary = [ganeti_instance(i) for i in config.primary_instances(node.uuid)]
    secondary = [ganeti_instance(i) for i in config.secondary_instances(node.uuid)]
    return _ok([primary, secondary], node.serial_no)


def instance_disks(config: model.ConfigData, query: Any) -> Answer:
    """9: an instance's disks as Ganeti disk objects; the instance's serial."""
    inst = index(config).instance(query)
    if inst is None:
        if not isinstance(query, str):
            return ARGUMENT_ERROR
        return _error(f"Instance not found in the configuration: {_instance_not_found(query)}")
    default_nodes = [inst.primary_node]
    return _ok([ganeti_disk(d, default_nodes) for d in inst.disks], inst.serial_no)


def config_query(config: model.ConfigData, query: Any) -> Answer:
    """10: the value at a path of the config document, e.g. "/cluster/master_node".

    Paths address herder's document (JSON field names; nodes and instances by UUID); Ganeti's
    `/cluster/cluster_name` is an alias of `/cluster/name`. A bad path is an argument error.
    """
    if not isinstance(query, str) or not query.startswith("/") or query == "/":
        return ARGUMENT_ERROR
    value: Any = index(config).view
    for part in query[1:].split("/"):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return ARGUMENT_ERROR
    return _ok(value, config.cluster.serial_no)


def data_collectors(config: model.ConfigData, query: Any) -> Answer:
    """11: {collector: {"active": bool, "interval": microseconds}}; cluster serial."""
    answer = {
        name: {"active": s.active, "interval": round(s.interval * 1_000_000)}
        for name, s in sorted(config.cluster.data_collectors.items())
    }
    return _ok(answer, config.cluster.serial_no)


# --- herder's additions (design-2.1's list) ----------------------------------------------------


def mc_list(config: model.ConfigData, query: Any) -> Answer:
    """100: the master candidates' names, sorted; cluster serial."""
    names = sorted(n.name for n in config.nodes.values() if n.master_candidate)
    return _ok(names, config.cluster.serial_no)


def offline_nodes(config: model.ConfigData, query: Any) -> Answer:
    """101: the offline nodes' names, sorted; cluster serial."""
    names = sorted(n.name for n in config.nodes.values() if n.offline)
    return _ok(names, config.cluster.serial_no)


def instance_list(config: model.ConfigData, query: Any) -> Answer:
    """102: every instance's name, sorted; cluster serial."""
    return _ok(sorted(i.name for i in config.instances.values()), config.cluster.serial_no)


def instance_primary_node(config: model.ConfigData, query: Any) -> Answer:
    """103: an instance's primary node name (the instance's serial); without a query, every
    instance → its primary node name (cluster serial)."""
    if query is None:
        mapping = {i.name: config.node_name(i.primary_node)
                   for i in sorted(config.instances.values(), key=lambda i: i.name)}
        return _ok(mapping, config.cluster.serial_no)
    inst = index(config).instance(query)
    if inst is None:
        if not isinstance(query, str):
            return ARGUMENT_ERROR
        return _error(confd.ERROR_UNKNOWN_ENTRY)
    return _ok(config.node_name(inst.primary_node), inst.serial_no)


HANDLERS: dict[int, Handler] = {
    confd.REQ_PING: ping,
    confd.REQ_NODE_ROLE_BYNAME: node_role_byname,
    confd.REQ_NODE_PIP_BY_INSTANCE_IP: node_pip_by_instance_ip,
    confd.REQ_CLUSTER_MASTER: cluster_master,
    confd.REQ_NODE_PIP_LIST: node_pip_list,
    confd.REQ_MC_PIP_LIST: mc_pip_list,
    confd.REQ_INSTANCES_IPS_LIST: instances_ips_list,
    confd.REQ_NODE_DRBD: node_drbd,
    confd.REQ_NODE_INSTANCES: node_instances,
    confd.REQ_INSTANCE_DISKS: instance_disks,
    confd.REQ_CONFIG_QUERY: config_query,
    confd.REQ_DATA_COLLECTORS: data_collectors,
    confd.REQ_MC_LIST: mc_list,
    confd.REQ_OFFLINE_NODES: offline_nodes,
    confd.REQ_INSTANCE_LIST: instance_list,
    confd.REQ_INSTANCE_PRIMARY_NODE: instance_primary_node,
}


def answer(config: model.ConfigData, req_type: int, query: Any) -> Answer | None:
    """The answer to one query, or None for an unknown type (the server stays silent)."""
    handler = HANDLERS.get(req_type)
    return None if handler is None else handler(config, query)
