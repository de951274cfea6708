"""The instance query's rows kept encoded in masterd (`query.InstanceRows`) equal the rows
computed afresh (`query.answer`) after any sequence of changes written through a store: a
change to an instance, a node, a group or the cluster shows in the next answer."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herder.core import model
from herder.core.store import FileStore
from herder.masterd import query
from herder.masterd.livecache import EMPTY, Snapshot
from tests.conftest import build_config
from tests.unit.test_live_fields import info, run, snapshot

# the CLI's list (config and live fields interleaved), live fields first and last, only live
# fields, an unknown field, none
FIELD_LISTS = (
    ["name", "uuid", "admin_state", "disk_template", "os", "hypervisor", "tags", "status",
     "oper_state", "oper_ram", "oper_vcpus", "pnode", "snodes", "be/vcpus", "be/maxmem"],
    ["oper_ram", "name", "be/minmem", "admin_up", "status"],
    ["status", "oper_state"],
    ["name", "nosuch", "network_port", "serial_no", "mtime"],
    [],
)

CHANGES = st.lists(st.tuples(
    st.sampled_from(["tag", "beparams", "admin_state", "rename", "rename_node",
                     "offline_node", "cluster_beparams", "remove", "move_primary", "group",
                     "live"]),
    st.integers(0, 50), st.integers(0, 50)), max_size=8)


def change(config: model.ConfigData, op: str, target: int, value: int) -> None:
    instances = sorted(config.instances)
    nodes = sorted(config.nodes)
    inst = config.instances[instances[target % len(instances)]] if instances else None
    node = config.nodes[nodes[target % len(nodes)]]
    if op == "tag" and inst is not None:
        inst.tags = [*inst.tags, f"t{value}"]
    elif op == "beparams" and inst is not None:
        inst.beparams = {**inst.beparams, "vcpus": 1 + value % 4}
    elif op == "admin_state" and inst is not None:
        inst.admin_state = ("up", "down", "offline")[value % 3]
    elif op == "rename" and inst is not None:
        inst.name = f"r{value}.example.com"
    elif op == "rename_node":
        node.name = f"m{value}.example.com"
    elif op == "offline_node":
        node.offline = not node.offline
        node.master_candidate = False  # an offline node cannot be one
    elif op == "cluster_beparams":
        config.cluster.beparams = {**config.cluster.beparams, "maxmem": 128 * (1 + value % 8)}
    elif op == "remove" and inst is not None and len(instances) > 1:
        del config.instances[inst.uuid]
    elif op == "move_primary" and inst is not None and not inst.secondary_nodes:
        inst.primary_node = nodes[value % len(nodes)]
    elif op == "group":
        group = next(iter(config.nodegroups.values()))
        group.name = f"g{value}"


def fresh(config: model.ConfigData, fields: list[str], live: Snapshot) -> Any:
    return json.loads(json.dumps(query.answer(config, "instance", fields, live)))


def live_of(config: model.ConfigData, seed: int) -> Snapshot:
    """Some nodes answer (with guests on their primary or elsewhere), some do not."""
    names = sorted(n.name for n in config.nodes.values())
    guests = sorted(i.name for i in config.instances.values())
    answers = {name: None if (seed + number) % 3 == 0 else info(runs={
        guest: run(256 * (1 + number)) for at, guest in enumerate(guests)
        if (at + seed + number) % 2 == 0}) for number, name in enumerate(names)}
    return snapshot(config, answers)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CHANGES)
def test_kept_rows_equal_fresh_rows_after_any_changes(
        changes: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = FileStore(Path(tmp) / "config.json")
        store.create(build_config(nodes=4, drbd_instances=3, plain_instances=2))
        rows = query.InstanceRows()
        live: Snapshot = EMPTY
        for step, (op, target, value) in enumerate([("none", 0, 0), *changes]):
            if op == "live":
                live = live_of(store.snapshot(), value)
            else:
                with store.update() as config:
                    change(config, op, target, value)
            config = store.snapshot()
            # the CLI's list every time (kept), and one of the others in turn (kept as the
            # second list, the one before dropped)
            for fields in (FIELD_LISTS[0], FIELD_LISTS[1 + step % 4]):
                assert json.loads(rows.encode(config, fields, live)) == \
                    fresh(config, fields, live), (op, fields)


def test_a_tag_shows_in_the_next_answer_and_other_rows_are_kept(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "config.json")
    store.create(build_config(nodes=4, drbd_instances=3, plain_instances=2))
    rows = query.InstanceRows()
    fields = FIELD_LISTS[0]
    rows.encode(store.snapshot(), fields, EMPTY)
    kept_before = dict(rows._kept[tuple(fields)])
    with store.update() as config:
        config.find_instance("plain0").tags = ["web"]
    config = store.snapshot()
    answer = json.loads(rows.encode(config, fields, EMPTY))
    assert answer == fresh(config, fields, EMPTY)
    tags = {row[0][1]: row[6][1] for row in answer["data"]}
    assert tags["plain0.example.com"] == ["web"]
    kept_after = rows._kept[tuple(fields)]
    changed = [uuid for uuid, (inst, pieces) in kept_after.items()
               if kept_before[uuid][1] is not pieces]
    assert changed == [config.find_instance("plain0").uuid]


def test_rows_of_whole_view_fields_are_not_kept() -> None:
    config = build_config(nodes=3)
    assert query.InstanceRows.takes(FIELD_LISTS[0])
    assert not query.InstanceRows.takes(["name", "hvparams"])
    assert json.loads(query.encode_answer(config, "instance", ["name", "hvparams"], EMPTY)) == \
        fresh(config, ["name", "hvparams"], EMPTY)


def test_the_whole_answer_is_kept_while_its_config_and_guests_are_the_same(
        tmp_path: Path) -> None:
    """The list asked again of the same config and live figures is the kept answer (the same
    bytes, not made again); a guest's other memory, a node that no longer answers and a
    change through the store each give a new answer, equal to one made afresh."""
    store = FileStore(tmp_path / "config.json")
    store.create(build_config(nodes=4, drbd_instances=3, plain_instances=2))
    rows = query.InstanceRows()
    fields = FIELD_LISTS[0]
    config = store.snapshot()

    def live(memory: int, node4: bool = True) -> Snapshot:
        return snapshot(config, {"node1.example.com": info(runs={"drbd0.example.com":
                                                                 run(memory)}),
                                 "node4.example.com": info() if node4 else None})

    first = rows.encode(config, fields, live(768))
    # the nodes asked again (new answers, the same guests; a guest's uptime moved)
    again = snapshot(config, {"node1.example.com": info(runs={"drbd0.example.com": msgspec
                              .structs.replace(run(768), uptime=99.0)}),
                              "node4.example.com": info(memory_free=10)})
    assert rows.encode(config, fields, again) is first
    for other in (live(1024), live(768, node4=False)):
        got = rows.encode(config, fields, other)
        assert got is not first and json.loads(got) == fresh(config, fields, other)
    with store.update() as changing:
        changing.find_instance("plain0").tags = ["web"]
    config = store.snapshot()
    got = rows.encode(config, fields, live(768))
    assert json.loads(got) == fresh(config, fields, live(768)) != json.loads(first)
    assert rows.encode(config, fields, live(768)) is got


def test_rows_of_replaced_instances_are_written_into_the_kept_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a change of instances alone (none renamed, added or removed), the answer is the
    kept one with those rows made again (no instance is listed and ordered again), equal to
    one made afresh, change after change, the first row and the last among them."""
    store = FileStore(tmp_path / "config.json")
    store.create(build_config(nodes=4, drbd_instances=3, plain_instances=2))
    rows = query.InstanceRows()
    live = snapshot(store.snapshot(), {"node1.example.com": info(runs={
        "drbd0.example.com": run(768)})})
    rows.encode(store.snapshot(), FIELD_LISTS[0], live)
    names = [row[0][1] for row in fresh(store.snapshot(), FIELD_LISTS[0], live)["data"]]

    def listed_again(*args: Any) -> Any:
        raise AssertionError("the instances were listed again")

    for number, (name, tags) in enumerate([(names[0], ["a-much-longer-tag"]), (names[-1], []),
                                           (names[2], ["x"]), (names[0], [])]):
        with store.update() as config:
            config.find_instance(name).tags = tags
            if number == 2:  # two at once
                config.find_instance(names[1]).admin_state = "down"
        config = store.snapshot()
        with monkeypatch.context() as patched:
            patched.setattr(query, "select", listed_again)
            got = rows.encode(config, FIELD_LISTS[0], live)
        assert json.loads(got) == fresh(config, FIELD_LISTS[0], live)
