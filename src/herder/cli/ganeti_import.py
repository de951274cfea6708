"""Import a Ganeti `config.data` (JSON) into herder's config model.

Ganeti 2.16 and 3.x keep one JSON document: `cluster`, `nodegroups`, `nodes`, `instances`,
`networks`, a top-level `disks` table (instances list disk UUIDs; older documents embed the disk
objects in the instance) and a few areas herder does not model (`filters`, ...). The import keeps
names, UUIDs, tags, serial numbers and timestamps, placement (primary node, DRBD peers, ports,
minors and secrets) and every parameter herder declares. What cannot be carried over is dropped
and reported in the returned notes, never silently: parameters herder does not declare, global-only
hypervisor parameters set on an instance, private OS parameters, network reservation bitmaps,
and cluster settings herder has no place for.

The result is validated like any loaded document (`model.from_builtins`); a config that cannot be
made valid raises `ConfigError` naming the problem.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from herder.core import model, params, uidpool, untrusted
from herder.core.errors import ConfigError, ParameterError
from herder.core.upgrade import stable_uuid

# Ganeti's older device type names (LD_LV, LD_DRBD8) and their disk templates.
_DEV_TYPE_ALIASES = {"lvm": "plain", "drbd8": "drbd"}
# socket.AF_INET / AF_INET6 as Ganeti stores them; herder says 4 / 6.
_IP_FAMILY = {2: 4, 10: 6, 4: 4, 6: 6}
# Ganeti's collector intervals are in microseconds; herder's in seconds.
_MICROSECONDS = 1_000_000.0

_ISPEC_KEYS = ("memory-size", "cpu-count", "disk-count", "disk-size", "nic-count", "spindle-use")
_IPOLICY_KEYS = ("minmax", "std", "disk-templates", "vcpu-ratio", "spindle-ratio")

# Keys of each Ganeti object that the import reads (or drops knowingly, silently: derivable or
# runtime-only data). Anything else that is non-empty is reported as ignored.
_TOP_KEYS = frozenset(
    {"version", "serial_no", "ctime", "mtime", "cluster", "nodegroups", "nodes", "instances",
     "networks", "disks", "maintenance", "filters"}
)
_FILTER_KEYS = frozenset({"uuid", "watermark", "priority", "predicates", "action",
                          "reason_trail"})
_CLUSTER_KEYS = frozenset(
    {"cluster_name", "uuid", "serial_no", "ctime", "mtime", "tags", "master_node", "master_ip",
     "master_netdev", "master_netmask", "primary_ip_family", "mac_prefix", "volume_group_name",
     "file_storage_dir", "shared_file_storage_dir", "enabled_hypervisors",
     "enabled_disk_templates", "hvparams", "os_hvp", "beparams", "osparams", "diskparams",
     "nicparams", "ndparams", "ipolicy", "uid_pool", "default_iallocator",
     "default_iallocator_params", "data_collectors", "candidate_pool_size", "tcpudp_port_pool",
     "highest_used_port", "drbd_usermode_helper", "reserved_lvs", "blacklisted_os", "hidden_os"}
)
_GROUP_KEYS = frozenset(
    {"uuid", "name", "serial_no", "ctime", "mtime", "tags", "alloc_policy", "ndparams",
     "diskparams", "ipolicy", "networks", "members", "hv_state_static", "disk_state_static"}
)
_NODE_KEYS = frozenset(
    {"uuid", "name", "serial_no", "ctime", "mtime", "tags", "primary_ip", "secondary_ip", "group",
     "master_candidate", "master_capable", "vm_capable", "offline", "drained", "powered",
     "ndparams", "hv_state_static", "disk_state_static"}
)
_INSTANCE_KEYS = frozenset(
    {"uuid", "name", "serial_no", "ctime", "mtime", "tags", "primary_node", "os", "hypervisor",
     "admin_state", "admin_state_source", "admin_up", "disks", "disks_active", "nics", "hvparams",
     "beparams", "osparams", "osparams_private", "disk_template", "secondary_nodes",
     "network_port"}
)
_DISK_KEYS = frozenset(
    {"uuid", "name", "dev_type", "size", "mode", "spindles", "logical_id", "children", "iv_name",
     "params", "serial_no", "ctime", "mtime", "nodes", "physical_id", "dynamic_params"}
)
_NIC_KEYS = frozenset({"uuid", "name", "mac", "ip", "network", "nicparams"})
_NETWORK_KEYS = frozenset(
    {"uuid", "name", "serial_no", "ctime", "mtime", "tags", "network", "gateway", "network6",
     "gateway6", "mac_prefix", "reservations", "ext_reservations"}
)
_MAINTENANCE_KEYS = {
    "roundDelay": "roundDelay",
    "jobs": "jobs",
    "balance": "balance",
    "balanceThreshold": "balanceThreshold",
    "evacuated": "evacuated",
    "serial_no": "serial_no",
    "ctime": "ctime",
    "mtime": "mtime",
}
_INCIDENT_KEYS = frozenset(
    {"uuid", "node", "original", "action", "jobs", "repair-status", "tag", "serial_no", "ctime",
     "mtime"}
)


def import_ganeti(data: Mapping[str, Any]) -> tuple[model.ConfigData, list[str]]:
    """Convert a parsed Ganeti config.data; return the herder config and a list of human-readable
    notes about what was dropped or adapted (e.g. unknown parameters dropped, 'filters' ignored).

    Raises ConfigError when `data` is not a Ganeti config or cannot be made a valid herder one.
    """
    if not isinstance(data, Mapping) or "cluster" not in data or "version" not in data:
        raise ConfigError(
            "not a Ganeti config.data: expected a JSON object with 'cluster' and 'version'"
        )
    importer = _Importer()
    try:
        doc = importer.document(data)
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ConfigError(f"Ganeti config cannot be imported: malformed data ({err!r})") from None
    try:
        config = model.from_builtins(doc)
    except ConfigError as err:
        raise ConfigError(f"Ganeti config cannot be imported: {err}") from None
    return config, importer.result_notes()


def import_ganeti_file(path: str | os.PathLike[str]) -> tuple[model.ConfigData, list[str]]:
    """Read and import a Ganeti config.data file (see `import_ganeti`)."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read Ganeti config {str(file)!r}: {err.strerror}") from None
    try:
        untrusted.check(raw, what=f"Ganeti config {str(file)!r}")
        data = json.loads(raw)
    except untrusted.BadDocument as err:
        raise ConfigError(str(err)) from None
    except UnicodeDecodeError:
        raise ConfigError(f"Ganeti config {str(file)!r} is not UTF-8 JSON") from None
    except json.JSONDecodeError as err:
        where = f"line {err.lineno} column {err.colno}"
        problem = "is truncated" if err.pos >= len(raw.rstrip()) else "is not valid JSON"
        raise ConfigError(
            f"Ganeti config {str(file)!r} {problem} ({err.msg} at {where})"
        ) from None
    if not isinstance(data, dict) or "cluster" not in data or "version" not in data:
        raise ConfigError(
            f"{str(file)!r} is not a Ganeti config.data: expected a JSON object with "
            "'cluster' and 'version'"
        )
    return import_ganeti(data)


# --- helpers ---------------------------------------------------------------------------------


def _dict(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"Ganeti config: {where} should be a JSON object, got {value!r}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"Ganeti config: {where} should be a list, got {value!r}")
    return value


def _required(obj: Mapping[str, Any], key: str, where: str) -> Any:
    value = obj.get(key)
    if value is None:
        raise ConfigError(f"Ganeti config: {where} has no {key!r}")
    return value


def _is_empty(value: Any) -> bool:
    return value is None or value is False or value == "" or value == [] or value == {}


def _stamps(obj: Mapping[str, Any]) -> dict[str, Any]:
    """serial_no, ctime and mtime of a Ganeti object (absent ones get herder's defaults)."""
    result: dict[str, Any] = {}
    if isinstance(obj.get("serial_no"), int):
        result["serial_no"] = obj["serial_no"]
    for key in ("ctime", "mtime"):
        value = obj.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            result[key] = float(value)
    return result


def _tags(obj: Mapping[str, Any], where: str) -> list[str]:
    return [str(tag) for tag in _list(obj.get("tags"), f"{where} tags")]


def _default_layer(value: Any, where: str) -> dict[str, Any]:
    """Ganeti keeps cluster beparams/nicparams as {"default": {...}}; herder keeps the dict."""
    table = _dict(value, where)
    if "default" in table and isinstance(table["default"], dict):
        return table["default"]
    return table


class _Importer:
    """One import run: converts step by step and collects notes."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.node_uuids: dict[str, str] = {}  # name or UUID -> UUID
        self.group_uuids: dict[str, str] = {}
        self.network_uuids: dict[str, str] = {}
        self.cluster_nicparams: dict[str, Any] = {}
        self.cluster_policy: dict[str, Any] = {}

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def result_notes(self) -> list[str]:
        return list(self.notes)

    def ignored(self, obj: Mapping[str, Any], known: frozenset[str], where: str) -> None:
        extra = sorted(k for k, v in obj.items() if k not in known and not _is_empty(v))
        if extra:
            self.note(f"{where}: ignored Ganeti field(s) herder does not model: {', '.join(extra)}")

    # --- parameters ---------------------------------------------------------------------------

    def params(
        self,
        family: params.ParamFamily,
        values: Any,
        where: str,
        *,
        instance_level: bool = False,
    ) -> dict[str, Any]:
        """Keep the parameters `family` declares (coerced); drop and note the rest."""
        result: dict[str, Any] = {}
        unknown: list[str] = []
        global_only: list[str] = []
        for name, value in _dict(values, where).items():
            spec = family.specs.get(name)
            if spec is None:
                unknown.append(name)
                continue
            if instance_level and spec.global_only:
                global_only.append(name)
                continue
            try:
                result[name] = params.coerce(spec, value)
            except ParameterError as err:
                self.note(f"{where}: dropped {family.owner} parameter {name!r}: {err}")
        if unknown:
            self.note(
                f"{where}: dropped {family.owner} parameter(s) herder does not declare: "
                f"{', '.join(sorted(unknown))}"
            )
        if global_only:
            self.note(
                f"{where}: dropped cluster-wide-only {family.owner} parameter(s) set at "
                f"instance level: {', '.join(sorted(global_only))}"
            )
        return result

    def per_template(self, values: Any, where: str) -> dict[str, dict[str, Any]]:
        result: dict[str, dict[str, Any]] = {}
        for template, per in _dict(values, where).items():
            if template not in params.DISK_TEMPLATES:
                self.note(f"{where}: dropped parameters of unknown disk template {template!r}")
                continue
            result[template] = self.params(
                params.disk_family(template), per, f"{where} ({template})"
            )
        return result

    def per_hypervisor(
        self, values: Any, where: str, *, instance_level: bool = False
    ) -> dict[str, dict[str, Any]]:
        result: dict[str, dict[str, Any]] = {}
        for hv, per in _dict(values, where).items():
            if hv not in params.HYPERVISORS:
                self.note(f"{where}: dropped parameters of unknown hypervisor {hv!r}")
                continue
            result[hv] = self.params(
                params.hv_family(hv), per, f"{where} ({hv})", instance_level=instance_level
            )
        return result

    def osparams(self, values: Any, where: str) -> dict[str, str]:
        result: dict[str, str] = {}
        for key, value in _dict(values, where).items():
            if isinstance(value, str):
                result[key] = value
            elif isinstance(value, bool):
                result[key] = "true" if value else "false"
            elif isinstance(value, int | float):
                result[key] = str(value)
            else:
                self.note(f"{where}: dropped OS parameter {key!r} (not a string: {value!r})")
        return result

    def known_names(self, values: Any, known: frozenset[str], where: str, what: str) -> list[str]:
        names = [str(v) for v in _list(values, where)]
        unknown = [n for n in names if n not in known]
        if unknown:
            self.note(f"{where}: dropped {what} herder does not support: {', '.join(unknown)}")
        return [n for n in names if n in known]

    # --- instance policy ----------------------------------------------------------------------

    def ispec(self, value: Any, where: str, base: Mapping[str, int] | None) -> dict[str, int]:
        spec = _dict(value, where)
        result: dict[str, int] = {}
        for key in _ISPEC_KEYS:
            if key in spec:
                result[key] = int(spec[key])
            elif base is not None and key in base:
                result[key] = base[key]
            else:
                raise ConfigError(f"Ganeti config: {where} lacks {key!r}")
        extra = sorted(set(spec) - set(_ISPEC_KEYS))
        if extra:
            self.note(f"{where}: dropped unknown ispec field(s): {', '.join(extra)}")
        return result

    def minmax(self, policy: Mapping[str, Any], where: str, base: Any) -> list[dict[str, Any]]:
        if "minmax" in policy:
            pairs = _list(policy["minmax"], f"{where} minmax")
        else:  # Ganeti before 2.9: one min/max pair at the top of the policy
            pairs = [{"min": policy["min"], "max": policy["max"]}]
        base_pair = base[0] if isinstance(base, list) and base else {}
        return [
            {
                bound: self.ispec(
                    _dict(pair, f"{where} minmax").get(bound),
                    f"{where} minmax {bound}",
                    base_pair.get(bound),
                )
                for bound in ("min", "max")
            }
            for pair in pairs
        ]

    def ipolicy(
        self, value: Any, where: str, cluster_policy: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """The cluster's full policy (`cluster_policy` None: gaps filled from herder's default)
        or a group's override (partial ispecs completed from the imported `cluster_policy`)."""
        policy = _dict(value, where)
        base: dict[str, Any] = (
            dict(cluster_policy)
            if cluster_policy is not None
            else model.to_builtins(model.default_ipolicy())
        )
        result: dict[str, Any] = {}
        if "minmax" in policy or ("min" in policy and "max" in policy):
            result["minmax"] = self.minmax(policy, where, base.get("minmax"))
        if "std" in policy and cluster_policy is None:
            result["std"] = self.ispec(policy["std"], f"{where} std", base.get("std"))
        elif "std" in policy:
            self.note(f"{where}: dropped the group's std spec (the standard spec is cluster-wide)")
        if "disk-templates" in policy:
            result["disk-templates"] = self.known_names(
                policy["disk-templates"], params.DISK_TEMPLATES, f"{where} disk-templates",
                "disk template(s)",
            )
        for key in ("vcpu-ratio", "spindle-ratio"):
            if key in policy:
                result[key] = float(policy[key])
        extra = sorted(set(policy) - set(_IPOLICY_KEYS) - {"min", "max"})
        if extra:
            self.note(f"{where}: dropped unknown ipolicy field(s): {', '.join(extra)}")
        if cluster_policy is None:  # the cluster's policy must be complete
            for key in _IPOLICY_KEYS:
                if key not in result:
                    result[key] = base[key]
                    self.note(f"{where}: no {key!r} in Ganeti's policy; herder's default used")
        return result

    # --- the document -------------------------------------------------------------------------

    def document(self, data: Mapping[str, Any]) -> dict[str, Any]:
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise ConfigError(f"Ganeti config: 'version' should be an integer, got {version!r}")
        major, minor = version // 1_000_000, version // 10_000 % 100
        if (major, minor) < (2, 16):
            self.note(
                f"Ganeti config version {major}.{minor} is older than 2.16 (the oldest tested); "
                "import attempted"
            )
        cluster_raw = _dict(data["cluster"], "cluster")
        nodes_raw = _dict(data.get("nodes"), "nodes")
        groups_raw = _dict(data.get("nodegroups"), "nodegroups")
        networks_raw = _dict(data.get("networks"), "networks")
        for table, index, kind in (
            (nodes_raw, self.node_uuids, "node"),
            (groups_raw, self.group_uuids, "node group"),
            (networks_raw, self.network_uuids, "network"),
        ):
            for key, obj in table.items():
                obj = _dict(obj, f"{kind} {key!r}")
                obj_uuid = str(obj.get("uuid") or key)
                index[obj_uuid] = obj_uuid
                if isinstance(obj.get("name"), str):
                    index.setdefault(obj["name"], obj_uuid)
                index.setdefault(key, obj_uuid)

        cluster = self.cluster(cluster_raw)
        self.cluster_policy = cluster["ipolicy"]
        groups = {g["uuid"]: g for g in (self.group(k, v) for k, v in groups_raw.items())}
        nodes = {n["uuid"]: n for n in (self.node(k, v) for k, v in nodes_raw.items())}
        networks = {n["uuid"]: n for n in (self.network(k, v) for k, v in networks_raw.items())}
        disks_raw = _dict(data.get("disks"), "disks")
        used_disks: set[str] = set()
        instances = {
            i["uuid"]: i
            for i in (
                self.instance(k, v, disks_raw, used_disks)
                for k, v in _dict(data.get("instances"), "instances").items()
            )
        }
        orphans = sorted(set(disks_raw) - used_disks)
        if orphans:
            self.note(f"disks: dropped disk(s) no instance uses: {', '.join(orphans)}")

        doc: dict[str, Any] = {
            "version": model.FORMAT_VERSION,
            **_stamps(data),
            "cluster": cluster,
            "nodegroups": groups,
            "nodes": nodes,
            "instances": instances,
            "networks": networks,
        }
        if not _is_empty(data.get("maintenance")):
            doc["maintenance"] = self.maintenance(_dict(data["maintenance"], "maintenance"))
        if not _is_empty(data.get("filters")):
            doc["filters"] = self.filters(_dict(data["filters"], "filters"))
        for key in sorted(set(data) - _TOP_KEYS):
            if not _is_empty(data[key]):
                self.note(f"ignored Ganeti's top-level {key!r} (herder does not model it)")
        return doc

    def node_ref(self, value: Any, where: str) -> str:
        if isinstance(value, str) and value in self.node_uuids:
            return self.node_uuids[value]
        raise ConfigError(f"Ganeti config: {where} names unknown node {value!r}")

    def cluster(self, c: dict[str, Any]) -> dict[str, Any]:
        where = "cluster"
        hypervisors = self.known_names(
            c.get("enabled_hypervisors"), params.HYPERVISORS, "cluster enabled_hypervisors",
            "hypervisor(s)",
        )
        templates = self.known_names(
            c.get("enabled_disk_templates"), params.DISK_TEMPLATES,
            "cluster enabled_disk_templates",
            "disk template(s)",
        )
        self.cluster_nicparams = self.params(
            params.NIC_FAMILY, _default_layer(c.get("nicparams"), "cluster nicparams"),
            "cluster nicparams",
        )
        family = c.get("primary_ip_family", 2)
        if family not in _IP_FAMILY:
            raise ConfigError(f"Ganeti config: unknown cluster primary_ip_family {family!r}")
        result: dict[str, Any] = {
            "uuid": str(_required(c, "uuid", where)),
            "name": str(_required(c, "cluster_name", where)),
            **_stamps(c),
            "master_node": self.node_ref(c.get("master_node"), "cluster master_node"),
            "master_ip": str(_required(c, "master_ip", where)),
            "primary_ip_family": _IP_FAMILY[family],
            "enabled_hypervisors": hypervisors,
            "enabled_disk_templates": templates,
            "hvparams": self.per_hypervisor(c.get("hvparams"), "cluster hvparams"),
            "os_hvp": {
                os_name: self.per_hypervisor(
                    per_hv, f"cluster os_hvp {os_name!r}", instance_level=True
                )
                for os_name, per_hv in _dict(c.get("os_hvp"), "cluster os_hvp").items()
            },
            "beparams": self.params(
                params.BE_FAMILY, _default_layer(c.get("beparams"), "cluster beparams"),
                "cluster beparams",
            ),
            "osparams": {
                os_name: self.osparams(values, f"cluster osparams {os_name!r}")
                for os_name, values in _dict(c.get("osparams"), "cluster osparams").items()
            },
            "diskparams": self.per_template(c.get("diskparams"), "cluster diskparams"),
            "nicparams": self.cluster_nicparams,
            "ndparams": self.params(params.ND_FAMILY, c.get("ndparams"), "cluster ndparams"),
            "ipolicy": self.ipolicy(c.get("ipolicy"), "cluster ipolicy", None),
        }
        tags = _tags(c, where)
        if "tags" in model.Cluster.__struct_fields__:
            result["tags"] = tags
        elif tags:
            self.note(
                f"cluster: dropped cluster tags ({', '.join(tags)}): herder's cluster object "
                "has no tags field yet"
            )
        for key in ("master_netdev", "master_netmask", "mac_prefix", "file_storage_dir",
                    "shared_file_storage_dir", "candidate_pool_size", "highest_used_port"):
            if c.get(key) is not None:
                result[key] = c[key]
        for key in ("volume_group_name", "drbd_usermode_helper"):
            if key in c:
                result[key] = c[key]
        for key in ("tcpudp_port_pool", "reserved_lvs", "blacklisted_os", "hidden_os"):
            result[key] = _list(c.get(key), f"cluster {key}")
        result["uid_pool"] = self.uid_pool(c.get("uid_pool"))
        result.update(self.iallocators(c))
        result["data_collectors"] = self.collectors(c.get("data_collectors"))
        if not _is_empty(c.get("osparams_private_cluster")):
            self.note("cluster: dropped private OS parameters (osparams_private_cluster)")
        for key in sorted(set(c) - _CLUSTER_KEYS - {"osparams_private_cluster"}):
            if not _is_empty(c[key]):
                self.note(f"cluster: ignored Ganeti setting {key!r} (herder does not model it)")
        return result

    def uid_pool(self, value: Any) -> list[list[int]]:
        ranges: list[tuple[int, int]] = []
        for item in _list(value, "cluster uid_pool"):
            if isinstance(item, list) and len(item) == 2:
                ranges.append((int(item[0]), int(item[1])))
            elif isinstance(item, int):
                ranges.append((item, item))
            else:
                raise ConfigError(f"Ganeti config: bad cluster uid_pool entry {item!r}")
        normal = uidpool.normalise(ranges)
        if normal != ranges:
            self.note("cluster uid_pool: ranges sorted and merged")
        return [[lo, hi] for lo, hi in normal]

    def iallocators(self, c: Mapping[str, Any]) -> dict[str, Any]:
        name = c.get("default_iallocator") or ""
        if not isinstance(name, str):
            raise ConfigError(f"Ganeti config: bad cluster default_iallocator {name!r}")
        chosen = [name] if name else []
        if name:
            self.note(
                f"cluster: Ganeti's default iallocator {name!r} is the default for every "
                f"request type ({', '.join(model.IALLOCATOR_REQUEST_TYPES)})"
            )
        params = {
            str(k): v if isinstance(v, str) else json.dumps(v)
            for k, v in _dict(
                c.get("default_iallocator_params"), "cluster default_iallocator_params"
            ).items()
        }
        return {
            "default_iallocators": {kind: list(chosen) for kind in model.IALLOCATOR_REQUEST_TYPES},
            "default_iallocator_params": params,
        }

    def collectors(self, value: Any) -> dict[str, Any]:
        result: dict[str, Any] = {
            name: model.to_builtins(settings)
            for name, settings in model.default_data_collectors().items()
        }
        for name, raw in _dict(value, "cluster data_collectors").items():
            where = f"cluster data collector {name!r}"
            settings = _dict(raw, where)
            entry = dict(result.get(name, {"active": True, "interval": model.MOND_TIME_INTERVAL}))
            entry["active"] = bool(settings.get("active", entry["active"]))
            interval = settings.get("interval")
            if isinstance(interval, int | float) and not isinstance(interval, bool):
                if interval > 0:
                    entry["interval"] = interval / _MICROSECONDS
                else:
                    self.note(f"{where}: non-positive interval {interval!r} replaced by default")
            entry["min_interval"] = entry["interval"] / 2
            entry["max_interval"] = entry["interval"] * 4
            result[name] = entry
        return result

    def group(self, key: str, g: Any) -> dict[str, Any]:
        g = _dict(g, f"node group {key!r}")
        name = str(_required(g, "name", f"node group {key!r}"))
        where = f"node group {name!r}"
        networks: dict[str, Any] = {}
        for net, link in _dict(g.get("networks"), f"{where} networks").items():
            link = _dict(link, f"{where} network {net!r}")
            extra = sorted(k for k, v in link.items() if k not in ("mode", "link", "vlan") and v)
            if extra:
                self.note(f"{where} network {net!r}: dropped NIC parameter(s) {', '.join(extra)}")
            networks[self.network_uuids.get(net, net)] = {
                "mode": link.get("mode") or self.cluster_nicparams.get("mode")
                or params.NIC_FAMILY.specs["mode"].default,
                "link": link.get("link") or self.cluster_nicparams.get("link")
                or params.NIC_FAMILY.specs["link"].default,
                "vlan": str(link.get("vlan") or ""),
            }
        self.ignored(g, _GROUP_KEYS, where)
        result: dict[str, Any] = {
            "uuid": str(g.get("uuid") or key),
            "name": name,
            **_stamps(g),
            "tags": _tags(g, where),
            "ndparams": self.params(params.ND_FAMILY, g.get("ndparams"), f"{where} ndparams"),
            "diskparams": self.per_template(g.get("diskparams"), f"{where} diskparams"),
            "ipolicy": self.ipolicy(g.get("ipolicy"), f"{where} ipolicy", self.cluster_policy),
            "networks": networks,
        }
        if g.get("alloc_policy"):
            result["alloc_policy"] = g["alloc_policy"]
        return result

    def node(self, key: str, n: Any) -> dict[str, Any]:
        n = _dict(n, f"node {key!r}")
        name = str(_required(n, "name", f"node {key!r}"))
        where = f"node {name!r}"
        group = n.get("group")
        if group not in self.group_uuids:
            raise ConfigError(f"Ganeti config: {where} is in unknown node group {group!r}")
        self.ignored(n, _NODE_KEYS, where)
        result: dict[str, Any] = {
            "uuid": str(n.get("uuid") or key),
            "name": name,
            **_stamps(n),
            "tags": _tags(n, where),
            "primary_ip": str(_required(n, "primary_ip", where)),
            "secondary_ip": n.get("secondary_ip") or None,
            "group": self.group_uuids[group],
            "ndparams": self.params(params.ND_FAMILY, n.get("ndparams"), f"{where} ndparams"),
        }
        for flag in ("master_candidate", "master_capable", "vm_capable", "offline", "drained",
                     "powered"):
            if n.get(flag) is not None:
                result[flag] = bool(n[flag])
        return result

    def network(self, key: str, n: Any) -> dict[str, Any]:
        n = _dict(n, f"network {key!r}")
        name = str(_required(n, "name", f"network {key!r}"))
        where = f"network {name!r}"
        self.ignored(n, _NETWORK_KEYS, where)
        result: dict[str, Any] = {
            "uuid": str(n.get("uuid") or key),
            "name": name,
            **_stamps(n),
            "tags": _tags(n, where),
            "network": str(_required(n, "network", where)),
        }
        # the IP pool as Ganeti keeps it (0/1 per address; core.addrpool)
        for field in ("gateway", "network6", "gateway6", "mac_prefix", "reservations",
                      "ext_reservations"):
            result[field] = n.get(field) or None
        return result

    # --- instances, disks, NICs ---------------------------------------------------------------

    def instance(
        self, key: str, i: Any, disks_raw: Mapping[str, Any], used_disks: set[str]
    ) -> dict[str, Any]:
        i = _dict(i, f"instance {key!r}")
        name = str(_required(i, "name", f"instance {key!r}"))
        where = f"instance {name!r}"
        inst_uuid = str(i.get("uuid") or key)
        hypervisor = _required(i, "hypervisor", where)
        if hypervisor not in params.HYPERVISORS:
            raise ConfigError(
                f"Ganeti config: {where} uses hypervisor {hypervisor!r}, which herder does "
                f"not support (known: {', '.join(sorted(params.HYPERVISORS))})"
            )
        disks: list[dict[str, Any]] = []
        for index, ref in enumerate(_list(i.get("disks"), f"{where} disks")):
            if isinstance(ref, str):
                if ref not in disks_raw:
                    raise ConfigError(f"Ganeti config: {where} uses unknown disk {ref!r}")
                used_disks.add(ref)
                disks.append(self.disk(disks_raw[ref], f"{where} disk {index}", ref))
            else:  # older documents embed the disk objects
                fallback = stable_uuid("disk", f"{inst_uuid}/{index}")
                disks.append(self.disk(ref, f"{where} disk {index}", fallback))
        nics = [
            self.nic(nic, f"{where} NIC {index}", stable_uuid("nic", f"{inst_uuid}/{index}"))
            for index, nic in enumerate(_list(i.get("nics"), f"{where} nics"))
        ]
        beparams_raw = dict(_dict(i.get("beparams"), f"{where} beparams"))
        if "memory" in beparams_raw:  # Ganeti before 2.6
            memory = beparams_raw.pop("memory")
            beparams_raw.setdefault("maxmem", memory)
            beparams_raw.setdefault("minmem", memory)
            self.note(f"{where}: backend parameter 'memory' became maxmem/minmem")
        if not _is_empty(i.get("osparams_private")):
            self.note(f"{where}: dropped private OS parameters (osparams_private)")
        self.ignored(i, _INSTANCE_KEYS, where)
        result: dict[str, Any] = {
            "uuid": inst_uuid,
            "name": name,
            **_stamps(i),
            "tags": _tags(i, where),
            "primary_node": self.node_ref(i.get("primary_node"), f"{where} primary_node"),
            "os": str(_required(i, "os", where)),
            "hypervisor": hypervisor,
            "disks": disks,
            "nics": nics,
            "hvparams": self.params(
                params.hv_family(hypervisor), i.get("hvparams"), f"{where} hvparams",
                instance_level=True,
            ),
            "beparams": self.params(params.BE_FAMILY, beparams_raw, f"{where} beparams"),
            "osparams": self.osparams(i.get("osparams"), f"{where} osparams"),
        }
        if "admin_state" in i:
            result["admin_state"] = i["admin_state"]
        elif "admin_up" in i:  # Ganeti before 2.8
            result["admin_state"] = "up" if i["admin_up"] else "down"
        if i.get("admin_state_source"):
            result["admin_state_source"] = i["admin_state_source"]
        if "disks_active" in i:
            result["disks_active"] = bool(i["disks_active"])
        if isinstance(i.get("network_port"), int) and not isinstance(i["network_port"], bool):
            result["network_port"] = i["network_port"]
        return result

    def logical_id(self, dev_type: str, value: Any, where: str) -> dict[str, Any] | None:
        if value is None:
            return None
        lid = _list(value, f"{where} logical_id")

        def bad() -> ConfigError:
            return ConfigError(f"Ganeti config: {where} has a malformed {dev_type} logical_id")

        if dev_type == "drbd":
            if len(lid) != 6:
                raise bad()
            node_a, node_b, port, minor_a, minor_b, secret = lid
            return {
                "type": "drbd",
                "nodes": [
                    self.node_ref(node_a, f"{where} logical_id"),
                    self.node_ref(node_b, f"{where} logical_id"),
                ],
                "port": port,
                "minors": [minor_a, minor_b],
                "secret": secret,
            }
        if len(lid) != 2:
            raise bad()
        first, second = (str(part) for part in lid)
        if dev_type == "plain":
            return {"type": "plain", "vg": first, "lv": second}
        if dev_type in ("file", "sharedfile", "gluster"):
            return {"type": "file", "driver": first, "path": second}
        return {"type": "ext", "provider": first, "name": second}

    def disk(self, raw: Any, where: str, fallback_uuid: str) -> dict[str, Any]:
        d = _dict(raw, where)
        disk_uuid = str(d.get("uuid") or fallback_uuid)
        raw_type = d.get("dev_type")
        dev_type = _DEV_TYPE_ALIASES.get(raw_type, raw_type) if isinstance(raw_type, str) else None
        if dev_type not in params.DISK_TEMPLATES:
            raise ConfigError(
                f"Ganeti config: {where} has device type {d.get('dev_type')!r}, which herder "
                "does not support"
            )
        self.ignored(d, _DISK_KEYS, where)
        result: dict[str, Any] = {
            "uuid": disk_uuid,
            **_stamps(d),
            "dev_type": dev_type,
            "size": _required(d, "size", where),
            "logical_id": self.logical_id(dev_type, d.get("logical_id"), where),
            "children": [
                self.disk(child, f"{where} child {index}", stable_uuid(
                    "disk", f"{disk_uuid}/child/{index}"
                ))
                for index, child in enumerate(_list(d.get("children"), f"{where} children"))
            ],
            "iv_name": d.get("iv_name") or "",
            "params": self.params(params.disk_family(dev_type), d.get("params"), f"{where} params"),
        }
        if d.get("name"):
            result["name"] = d["name"]
        if d.get("mode"):
            result["mode"] = d["mode"]
        if d.get("spindles") is not None:
            result["spindles"] = d["spindles"]
        return result

    def nic(self, raw: Any, where: str, fallback_uuid: str) -> dict[str, Any]:
        n = _dict(raw, where)
        self.ignored(n, _NIC_KEYS, where)
        network = n.get("network") or None
        if network is not None:
            network = self.network_uuids.get(network, network)
        result: dict[str, Any] = {
            "uuid": str(n.get("uuid") or fallback_uuid),
            "mac": str(_required(n, "mac", where)),
            "ip": n.get("ip") or None,
            "network": network,
            "nicparams": self.params(params.NIC_FAMILY, n.get("nicparams"), f"{where} nicparams"),
        }
        if n.get("name"):
            result["name"] = n["name"]
        return result

    def filters(self, rules: Mapping[str, Any]) -> dict[str, Any]:
        """Ganeti's job filter rules: the same fields (checked when the document is)."""
        result = {}
        for key, raw in rules.items():
            rule = _dict(raw, f"filter {key}")
            self.ignored(rule, _FILTER_KEYS, f"filter {key}")
            result[key] = {k: v for k, v in rule.items() if k in _FILTER_KEYS}
        return result

    def maintenance(self, m: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = {
            target: m[source] for source, target in _MAINTENANCE_KEYS.items() if source in m
        }
        incidents = []
        for index, raw in enumerate(_list(m.get("incidents"), "maintenance incidents")):
            inc = _dict(raw, f"maintenance incident {index}")
            self.ignored(inc, _INCIDENT_KEYS, f"maintenance incident {index}")
            incidents.append({k: v for k, v in inc.items() if k in _INCIDENT_KEYS})
        result["incidents"] = incidents
        extra = sorted(
            k for k, v in m.items()
            if k not in _MAINTENANCE_KEYS and k != "incidents" and not _is_empty(v)
        )
        if extra:
            self.note(f"maintenance: ignored field(s) herder does not model: {', '.join(extra)}")
        return result
