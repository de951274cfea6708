"""Loading documents of older formats.

Format 0 is herder's document before persistent UUIDs (design-2.1 "Introducing persistent
UUIDs"): objects filed by name, references by name, no `uuid` fields. Upgrading gives every
object a UUID, files it under that UUID and rewrites references. The UUIDs are derived from the
names (uuid5), so loading the same old document twice gives the same UUIDs even before the
upgraded document is first written. Instances also lose hypervisor parameters that are now
cluster-wide only (design-2.1 "Global hypervisor parameters"), and the pre-2.2 `memory`
backend parameter becomes `maxmem`/`minmem`.
"""

from __future__ import annotations

import uuid as uuid_mod
from typing import Any

from herder.core import model, params, untrusted
from herder.core.errors import ConfigError

_NAMESPACE = uuid_mod.UUID("6f1f3c2e-5b8a-4d0e-9a61-2f1e0c7d9b41")


def stable_uuid(kind: str, name: str) -> str:
    return str(uuid_mod.uuid5(_NAMESPACE, f"{kind}:{name}"))


def load_document(raw: bytes) -> model.ConfigData:
    """Decode a document of the current format, or upgrade an older one."""
    try:
        return model.decode(raw)
    except ConfigError as typed_error:
        try:
            doc = untrusted.decode(raw, what="config", max_bytes=model.CONFIG_MAX_BYTES)
        except untrusted.BadDocument:
            raise typed_error from None
        if not isinstance(doc, dict):
            raise ConfigError("config is not a JSON object") from None
        version = doc.get("version", 0)
        if version == model.FORMAT_VERSION:
            raise typed_error from None
        if not isinstance(version, int) or version > model.FORMAT_VERSION:
            raise ConfigError(
                f"config format version {version!r} is newer than this herder "
                f"(reads up to {model.FORMAT_VERSION})"
            ) from None
        return model.from_builtins(upgrade_document(doc))


def upgrade_document(doc: dict[str, Any]) -> dict[str, Any]:
    """Bring a format-0 document (as builtins) to the current format."""
    if doc.get("version", 0) == 0:
        doc = _upgrade_v0(doc)
    return doc


def _rekey(table: Any, kind: str) -> tuple[dict[str, Any], dict[str, str]]:
    """File objects under their UUIDs; return the new table and a name -> UUID map."""
    items = table.values() if isinstance(table, dict) else (table or [])
    if isinstance(table, dict):
        for key, obj in table.items():
            obj.setdefault("name", key)
    rekeyed: dict[str, Any] = {}
    names: dict[str, str] = {}
    for obj in items:
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            raise ConfigError(f"a {kind} entry has no name")
        obj.setdefault("uuid", stable_uuid(kind, obj["name"]))
        rekeyed[obj["uuid"]] = obj
        names[obj["name"]] = obj["uuid"]
    return rekeyed, names


def _ref(value: Any, names: dict[str, str]) -> Any:
    return names.get(value, value) if isinstance(value, str) else value


def _upgrade_disk(disk: dict[str, Any], owner: str, index: int, nodes: dict[str, str]) -> None:
    disk.setdefault("uuid", stable_uuid("disk", f"{owner}/{index}/{disk.get('iv_name', '')}"))
    lid = disk.get("logical_id")
    if isinstance(lid, dict) and lid.get("type") == "drbd":
        lid["nodes"] = [_ref(n, nodes) for n in lid.get("nodes", [])]
    for child_index, child in enumerate(disk.get("children", [])):
        _upgrade_disk(child, f"{owner}/{index}", child_index, nodes)


def _upgrade_v0(doc: dict[str, Any]) -> dict[str, Any]:
    cluster = doc.setdefault("cluster", {})
    if not isinstance(cluster, dict) or "name" not in cluster:
        raise ConfigError("old config has no cluster name")
    cluster.setdefault("uuid", stable_uuid("cluster", cluster["name"]))

    doc["nodegroups"], groups = _rekey(doc.get("nodegroups", {}), "nodegroup")
    doc["nodes"], nodes = _rekey(doc.get("nodes", {}), "node")
    doc["instances"], _ = _rekey(doc.get("instances", {}), "instance")
    doc["networks"], networks = _rekey(doc.get("networks", {}), "network")

    cluster["master_node"] = _ref(cluster.get("master_node"), nodes)
    for node in doc["nodes"].values():
        node["group"] = _ref(node.get("group"), groups)
    for inst in doc["instances"].values():
        inst["primary_node"] = _ref(inst.get("primary_node"), nodes)
        inst["hvparams"] = params.drop_global_hv_params(inst.get("hvparams", {}))
        be = inst.setdefault("beparams", {})
        if "memory" in be:
            memory = be.pop("memory")
            be.setdefault("maxmem", memory)
            be.setdefault("minmem", memory)
        for index, disk in enumerate(inst.get("disks", [])):
            _upgrade_disk(disk, inst["name"], index, nodes)
        for index, nic in enumerate(inst.get("nics", [])):
            nic.setdefault("uuid", stable_uuid("nic", f"{inst['name']}/{index}"))
            nic["network"] = _ref(nic.get("network"), networks)
    be = cluster.get("beparams", {})
    if "memory" in be:
        memory = be.pop("memory")
        be.setdefault("maxmem", memory)
        be.setdefault("minmem", memory)
    doc["version"] = model.FORMAT_VERSION
    return doc
