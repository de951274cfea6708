"""The network query resource (`/2/query/network`, Ganeti's `gnt-network list`): Ganeti 3.0's
network fields over the config's networks, their address pools (`core.addrpool`) and links
to node groups (as `masterd.views`' network view)."""

from __future__ import annotations

from herder.core import model
from herder.masterd import views
from herder.masterd.livecache import Snapshot
from herder.masterd.queries.fields import (
    NUMBER,
    OTHER,
    TEXT,
    TIMESTAMP,
    ColumnFn,
    FieldDef,
    FieldSet,
    Objects,
    Resource,
    RowFn,
    attr,
    normal,
    tags,
)

FIELDS: dict[str, FieldDef] = {
    "ctime": FieldDef("CTime", TIMESTAMP, "Creation timestamp"),
    "external_reservations": FieldDef("ExternalReservations", TEXT, "External reservations"),
    "free_count": FieldDef("FreeCount", NUMBER, "Number of available addresses"),
    "gateway": FieldDef("Gateway", OTHER, "IPv4 gateway"),
    "gateway6": FieldDef("IPv6Gateway", OTHER, "IPv6 gateway"),
    "group_cnt": FieldDef("NodeGroups", NUMBER, "Number of nodegroups"),
    # Ganeti's description, though its values carry the NIC VLAN too (as herder's do)
    "group_list": FieldDef("GroupList", OTHER,
                           "List of nodegroups (group name, NIC mode, NIC link)"),
    "inst_cnt": FieldDef("Instances", NUMBER, "Number of instances"),
    "inst_list": FieldDef("InstanceList", OTHER, "List of instances"),
    "mac_prefix": FieldDef("MacPrefix", OTHER, "MAC address prefix"),
    "map": FieldDef("Map", TEXT, "Actual mapping"),
    "mtime": FieldDef("MTime", TIMESTAMP, "Modification timestamp"),
    "name": FieldDef("Network", TEXT, "Name"),
    "network": FieldDef("Subnet", TEXT, "IPv4 subnet"),
    "network6": FieldDef("IPv6Subnet", OTHER, "IPv6 subnet"),
    "reserved_count": FieldDef("ReservedCount", NUMBER, "Number of reserved addresses"),
    "serial_no": FieldDef("SerialNo", NUMBER, "Network object serial number, incremented on "
                          "each modification"),
    "tags": FieldDef("Tags", OTHER, "Tags"),
    "uuid": FieldDef("UUID", TEXT, "Network UUID"),
}
POOL_FIELDS = ("free_count", "reserved_count", "map", "external_reservations")

SIMPLE: dict[str, ColumnFn] = {
    **{name: attr(name) for name in ("name", "uuid", "network", "gateway", "network6",
                                     "gateway6", "mac_prefix", "serial_no", "ctime", "mtime")},
    "tags": tags,
}


def _views(config: model.ConfigData, _live: Snapshot) -> RowFn:
    # the pool's counts and map, the groups and instances: masterd.views' network view
    return lambda network: normal(views.network_view(config, network))


def _networks(source: Objects) -> list[model.Network]:
    return list(source.config.networks.values())


RESOURCE = Resource("network", FIELDS, _networks, SIMPLE,
                    (FieldSet(frozenset(FIELDS) - frozenset(SIMPLE), _views, False),),
                    not_found="Network name {} not found")
