"""masterd's query resource (`herder.masterd.query`) computes only the fields it is asked for:
each field's column, asked alone (a simple field, or a set such as the live figures or the
backend parameters), equals the same field taken from the whole view; the nodes are asked for
live figures only when a field shows them."""

from __future__ import annotations

from typing import Any, cast

import msgspec
import pytest

from herder.core import model
from herder.masterd import query
from herder.masterd.livecache import EMPTY, Snapshot
from herder.masterd.livefields import RS_NODATA, RS_NORMAL, RS_UNAVAIL, RS_UNKNOWN
from tests.conftest import build_config
from tests.unit.test_live_fields import info, run, snapshot


@pytest.fixture
def config() -> model.ConfigData:
    config = build_config(nodes=4, drbd_instances=3, plain_instances=2)
    config.find_node("node4").secondary_ip = None  # single-homed: sip is the primary IP
    config.find_node("node3").offline = True
    config.find_instance("plain1").beparams = {"vcpus": 4, "auto_balance": False}
    config.find_instance("plain0").tags = ["web", "db"]
    config.cluster.beparams = {"maxmem": 256}
    spare = model.NodeGroup(uuid=model.new_uuid(), name="spare", alloc_policy="last_resort")
    config.nodegroups[spare.uuid] = spare
    config.find_node("node2").group = spare.uuid
    config.index(fresh=True)  # changed in place, outside a store: index it again
    return config


@pytest.fixture
def live(config: model.ConfigData) -> Snapshot:
    return snapshot(config, {"node1.example.com": info(runs={"drbd0.example.com": run(768)}),
                             "node2.example.com": info(runs={"drbd1.example.com": run()}),
                             "node4.example.com": None})


def _column(config: model.ConfigData, resource: str, field: str, live: Snapshot) -> list[object]:
    return [row[0] for row in query.answer(config, resource, [field], live)["data"]]


@pytest.mark.parametrize("resource", sorted(query.RESOURCES))
def test_each_field_alone_equals_the_whole_view(config: model.ConfigData, live: Snapshot,
                                                resource: str) -> None:
    fields = sorted(query.RESOURCES[resource].fields)
    whole = query.answer(config, resource, fields, live)["data"]
    for index, field in enumerate(fields):
        assert _column(config, resource, field, live) == [row[index] for row in whole], field


def test_list_fields_take_no_whole_view(config: model.ConfigData) -> None:
    """The CLI lists' default fields (Ganeti's) are simple or in the small sets: no view is
    built per object."""
    from herder.cli import group, instance, node

    for spec_of_list in (node.LIST, instance.LIST, group.LIST):
        spec = query.RESOURCES[spec_of_list.resource]
        sets = query.needed_sets(spec, list(spec_of_list.default_fields))
        assert spec.sets[-1] not in sets or spec_of_list is group.LIST, spec_of_list.resource
    assert not query.needs_live("group", list(group.LIST.default_fields))
    assert not query.needs_live("node", ["name", "role", "pinst_cnt", "group"])
    assert query.needs_live("node", ["name", "mfree"])
    assert query.needs_live("instance", ["status"])
    assert not query.needs_live("instance", ["name", "pnode", "be/maxmem"])


def test_fields_of_the_lists(config: model.ConfigData, live: Snapshot) -> None:
    answer = query.answer(config, "instance", ["name", "be/vcpus", "be/maxmem", "status",
                                               "snodes", "nosuch"], live)
    rows = {row[0][1]: row[1:] for row in answer["data"]}
    assert rows["plain1.example.com"][:2] == [(RS_NORMAL, 4), (RS_NORMAL, 256)]
    assert rows["drbd0.example.com"][:4] == [(RS_NORMAL, 2), (RS_NORMAL, 1024),
                                             (RS_NORMAL, "running"),
                                             (RS_NORMAL, ["node2.example.com"])]
    assert rows["drbd0.example.com"][4] == (RS_UNKNOWN, None)
    assert [f["kind"] for f in answer["fields"]] == ["text", "number", "unit", "text", "other",
                                                     "unknown"]
    assert answer["fields"][2]["title"] == "ConfigMaxMem"  # Ganeti's BES_PARAMETER_TITLES
    nodes = {row[0][1]: row[1:] for row in query.answer(
        config, "node", ["name", "sip", "custom_sip", "group", "mfree"], live)["data"]}
    assert nodes["node4.example.com"] == [(RS_NORMAL, "192.0.2.14"), (RS_UNAVAIL, None),
                                          (RS_NORMAL, "default"), (RS_NODATA, None)]
    assert nodes["node2.example.com"][2:] == [(RS_NORMAL, "spare"), (RS_NORMAL, 3000)]
    groups = {row[0][1]: row[1:] for row in query.answer(
        config, "group", ["name", "node_cnt", "pinst_cnt", "alloc_policy"], EMPTY)["data"]}
    # node2 (spare) is the primary of drbd1 and plain1
    assert groups == {"default": [(RS_NORMAL, 3), (RS_NORMAL, 3), (RS_NORMAL, "preferred")],
                      "spare": [(RS_NORMAL, 1), (RS_NORMAL, 2), (RS_NORMAL, "last_resort")]}


def test_the_answer_equals_the_bulk_views_field_by_field(
        config: model.ConfigData, live: Snapshot) -> None:
    """The lists print the query answer (cli.listing): its values are those of the RAPI's
    bulk answers for every field both have (the system tests check the CLI's output through
    a real masterd)."""
    from herder.masterd import views
    from herder.masterd.queries.registry import RESOURCES

    bulk: dict[str, dict[str, Any]] = {
        "node": {n.name: views.node_view(config, n, live) for n in config.nodes.values()},
        "instance": {i.name: views.instance_view(config, i, live)
                     for i in config.instances.values()},
        "group": {g.name: views.group_view(config, g) for g in config.nodegroups.values()}}
    for resource, by_name in bulk.items():
        # beparams: RAPI's has Ganeti's old `memory` too, the query's not (as Ganeti's)
        shared = sorted(set(RESOURCES[resource].fields) & set(next(iter(by_name.values())))
                        - {"beparams"})
        assert "name" in shared and len(shared) > 5, resource
        answer = query.answer(config, resource, shared, live)
        assert len(answer["data"]) == len(by_name), resource
        for row in answer["data"]:
            values = {name: value for name, (status, value) in zip(shared, row, strict=True)
                      if status == RS_NORMAL}
            view = by_name[values["name"]]
            assert values == {k: v for k, v in view.items() if k in values}, resource


def test_the_export_resource_lists_each_nodes_exports(config: model.ConfigData) -> None:
    """Ganeti's export resource: a row per export of each node asked, in node order; a node
    that could not be asked has one row without an export (RS_NODATA); a filter selects."""
    source = query.Objects(config, exports={"node2.example.com": ["web2", "web1"],
                                            "node1.example.com": None,
                                            "node4.example.com": []})
    answer = query.answer(source, "export", ["node", "export", "nope"], EMPTY)
    assert [f["name"] for f in answer["fields"]] == ["node", "export", "nope"]
    assert answer["data"] == [
        [(RS_NORMAL, "node1.example.com"), (RS_NODATA, None), (RS_UNKNOWN, None)],
        [(RS_NORMAL, "node2.example.com"), (RS_NORMAL, "web1"), (RS_UNKNOWN, None)],
        [(RS_NORMAL, "node2.example.com"), (RS_NORMAL, "web2"), (RS_UNKNOWN, None)]]
    # the node without data stays, as Ganeti keeps a row whose filtered value it lacks
    compiled = query.compile_filter("export", ["=", "export", "web2"])
    assert query.answer(source, "export", ["node", "export"], EMPTY, compiled)["data"] == [
        [(RS_NORMAL, "node1.example.com"), (RS_NODATA, None)],
        [(RS_NORMAL, "node2.example.com"), (RS_NORMAL, "web2")]]
    assert query.answer(query.Objects(config), "export", ["node"], EMPTY)["data"] == []


@pytest.mark.parametrize("resource", ["node", "instance", "group", "network"])
def test_the_kept_order_follows_renames_additions_and_removals(
        config: model.ConfigData, resource: str) -> None:
    """The order of the last answer is kept by name (`query.in_order`): an answer after a
    rename, an addition or a removal is in Ganeti's order of the new names."""
    from herder.core.names import nice_sort_key

    def names() -> list[str]:
        rows = cast("list[list[list[Any]]]",
                    query.answer(config, resource, ["name"], EMPTY)["data"])
        return [row[0][1] for row in rows]

    tables: dict[str, dict[str, Any]] = {
        "node": config.nodes, "instance": config.instances, "group": config.nodegroups,
        "network": config.networks}
    table = tables[resource]
    if not table:
        first = model.Network(uuid=model.new_uuid(), name="net10", network="192.0.2.0/24")
        table[first.uuid] = first
    names()  # kept
    first_obj = min(table.values(), key=lambda obj: nice_sort_key(obj.name))
    renamed = msgspec.structs.replace(first_obj, name="zzz-renamed")
    table[first_obj.uuid] = renamed
    assert names()[-1] == "zzz-renamed"
    added = msgspec.structs.replace(first_obj, uuid=model.new_uuid(), name="aaa-added")
    table[added.uuid] = added
    assert names()[0] == "aaa-added"
    del table[renamed.uuid]
    assert "zzz-renamed" not in names()
    assert names() == sorted(names(), key=nice_sort_key)

