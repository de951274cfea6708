"""The file store's journal (core.store, core.configdiff): replayed, it equals the document the
writer holds; a torn record is not part of the state; a journal beside another snapshot is
ignored; a refused change leaves the readers' snapshot as it was."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herder.core import configdiff, configindex, model, store
from herder.core.errors import ConfigError
from herder.core.store import FileStore
from tests.conftest import build_config

_NAMES = itertools.count()


def change(config: model.ConfigData, op: str, pick: int) -> None:
    """One change of the kinds LUs make: tags, flags, parameters, objects added and removed."""
    instances = sorted(config.instances)
    nodes = sorted(config.nodes)
    if op == "tag_instance" and instances:
        config.instances[instances[pick % len(instances)]].tags.append(f"t{next(_NAMES)}")
    elif op == "beparams" and instances:
        config.instances[instances[pick % len(instances)]].beparams["vcpus"] = pick % 8 + 1
    elif op == "drain_node" and nodes:
        node = config.nodes[nodes[pick % len(nodes)]]
        node.drained, node.master_candidate = not node.drained, False
    elif op == "add_instance" and nodes:
        inst = model.Instance(
            uuid=model.new_uuid(), name=f"new{next(_NAMES)}.example.com",
            primary_node=nodes[pick % len(nodes)], os="debootstrap", hypervisor="kvm",
            disks=[model.Disk(uuid=model.new_uuid(), dev_type="plain", size=1024,
                              logical_id=model.PlainId(vg="xenvg", lv=f"l{next(_NAMES)}"))])
        config.instances[inst.uuid] = inst
    elif op == "remove_instance" and instances:
        del config.instances[instances[pick % len(instances)]]
    elif op == "cluster":
        config.cluster.candidate_pool_size = pick % 20 + 1
    elif op == "maintenance":
        config.maintenance.round_delay = pick
    elif op == "tag_by_scan" and instances:  # objects reached through values() / items()
        chosen = sorted(config.instances.values(), key=lambda i: i.uuid)[pick % len(instances)]
        chosen.tags.append(f"s{next(_NAMES)}")
        dict(config.nodes.items())[nodes[pick % len(nodes)]].tags.append(f"n{next(_NAMES)}")
    elif op == "node_by_get" and nodes:
        found = config.nodes.get(nodes[pick % len(nodes)])
        assert found is not None
        found.ndparams = {"spindle_count": pick % 4 + 1}
    elif op == "pop_instance" and instances:
        config.instances.pop(instances[pick % len(instances)])
    elif op == "add_group":
        group = model.NodeGroup(uuid=model.new_uuid(), name=f"g{next(_NAMES)}")
        config.nodegroups[group.uuid] = group


OPS = st.lists(st.tuples(st.sampled_from(
    ["tag_instance", "beparams", "drain_node", "add_instance", "remove_instance", "cluster",
     "maintenance", "add_group", "tag_by_scan", "node_by_get", "pop_instance"]),
    st.integers(0, 100)), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(OPS, st.integers(1, 6))
def test_the_journal_replayed_equals_the_document(tmp_path: Path, ops: list[tuple[str, int]],
                                                  compact_every: int) -> None:
    path = tmp_path / f"c{next(_NAMES)}" / "config.json"
    writer = FileStore(path)
    writer.COMPACT_RECORDS = compact_every
    writer.create(build_config(nodes=4, drbd_instances=3, plain_instances=2))
    for op, pick in ops:
        older = writer.snapshot()
        older_raw = model.encode(older)
        with writer.update() as config:
            change(config, op, pick)
        held = writer.snapshot()
        assert model.encode(older) == older_raw  # a reader of the older snapshot sees it whole
        store._CACHE.clear()  # another process: snapshot and journal from disk
        replayed = FileStore(path).load()
        assert model.encode(replayed) == model.encode(held)
        # ... and a whole-document round trip of it changes nothing (same checks, same form)
        assert model.encode(model.revalidate(replayed)) == model.encode(held)
        assert replayed.index().comparable() == configindex_of(held)
        # the serial read without decoding (what a candidate's noded compares a push with)
        assert FileStore(path).serial_no() == held.serial_no


def configindex_of(config: model.ConfigData) -> dict[str, object]:
    from herder.core.configindex import ConfigIndex

    return ConfigIndex.build(config).comparable()


def test_writes_append_records_and_compact_into_a_snapshot(tmp_path: Path) -> None:
    writer = FileStore(tmp_path / "config.json")
    writer.COMPACT_RECORDS = 3
    writer.create(build_config())
    snapshot = writer.path.read_bytes()
    for number in range(3):
        with writer.update() as config:
            config.cluster.tags.append(f"n{number}")
        assert writer.path.read_bytes() == snapshot  # a record, not the whole document
    assert len(writer.journal_path.read_bytes().splitlines()) == 4  # header + 3 records
    with writer.update() as config:
        config.cluster.tags.append("n3")
    assert writer.path.read_bytes() != snapshot  # the fourth write compacts
    assert len(writer.journal_path.read_bytes().splitlines()) == 1
    assert model.decode(writer.path.read_bytes()).cluster.tags == ["n0", "n1", "n2", "n3"]


def test_a_torn_record_is_not_part_of_the_state_and_the_next_writer_cuts_it(
        tmp_path: Path) -> None:
    writer = FileStore(tmp_path / "config.json")
    writer.create(build_config())
    with writer.update() as config:
        config.cluster.tags.append("kept")
    whole = writer.journal_path.read_bytes()
    with writer.update() as config:
        config.cluster.tags.append("torn")
    journal = writer.journal_path.read_bytes()
    writer.journal_path.write_bytes(journal[:len(whole) + (len(journal) - len(whole)) // 2])
    store._CACHE.clear()
    loaded = FileStore(writer.path).load()
    assert loaded.cluster.tags == ["kept"]
    with FileStore(writer.path).update() as config:
        config.cluster.tags.append("next")
    store._CACHE.clear()
    assert FileStore(writer.path).load().cluster.tags == ["kept", "next"]
    assert writer.journal_path.read_bytes().startswith(whole)


def test_a_damaged_record_ends_the_journal(tmp_path: Path) -> None:
    writer = FileStore(tmp_path / "config.json")
    writer.create(build_config())
    for tag in ("a", "b"):
        with writer.update() as config:
            config.cluster.tags.append(tag)
    lines = writer.journal_path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"a"', b'"x"')  # the CRC no longer matches
    writer.journal_path.write_bytes(b"".join(lines))
    store._CACHE.clear()
    assert FileStore(writer.path).load().cluster.tags == []


def test_a_journal_beside_another_snapshot_is_ignored(tmp_path: Path) -> None:
    """A candidate that was master once: a pushed whole document replaces the snapshot; the
    old journal continues another document and is not replayed over it."""
    writer = FileStore(tmp_path / "config.json")
    writer.create(build_config())
    with writer.update() as config:
        config.cluster.tags.append("from-the-old-journal")
    pushed = writer.load()
    pushed.cluster.tags = ["pushed"]
    store.atomic_write(writer.path, model.encode(pushed))
    store._CACHE.clear()
    assert FileStore(writer.path).load().cluster.tags == ["pushed"]
    assert FileStore(writer.path).snapshot().cluster.tags == ["pushed"]


def test_a_refused_change_leaves_the_shared_snapshot_as_it_was(tmp_path: Path) -> None:
    writer = FileStore(tmp_path / "config.json")
    writer.create(build_config())
    before = model.encode(writer.snapshot())
    inst = next(iter(writer.snapshot().instances))
    with pytest.raises(ConfigError, match="nothing written"), writer.update() as config:
        config.instances[inst].tags.append("ok")
        config.instances[inst].beparams["vcpus"] = -1  # refused by the instance's checks
    assert model.encode(writer.snapshot()) == before
    with pytest.raises(RuntimeError), writer.update() as config:
        config.instances[inst].tags.append("half")
        config.cluster.tags.append("half")
        raise RuntimeError("the LU failed")
    assert model.encode(writer.snapshot()) == before
    store._CACHE.clear()
    assert model.encode(FileStore(writer.path).load()) == before


def test_a_change_set_names_only_what_changed() -> None:
    config = build_config(nodes=3, drbd_instances=2, plain_instances=1)
    encoded = configdiff.Encoded.of(model.decode(model.encode(config)))  # as written
    inst = next(iter(config.instances.values()))
    inst.tags.append("x")
    removed = next(u for u in config.instances if u != inst.uuid)
    del config.instances[removed]
    found = configdiff.diff(encoded, config)
    assert set(found.puts) == {"instances"} and list(found.puts["instances"]) == [inst.uuid]
    assert found.deletes == {"instances": [removed]}
    assert not found.sections
    base, decoded = configdiff.decode_change(configdiff.encode_change(found, 7))
    assert base == 7 and decoded.puts == found.puts and decoded.deletes == found.deletes


def test_a_reader_during_a_write_gets_the_new_config_with_its_followed_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader of the shared snapshot that comes while a writer of the same process appends
    its record waits for the writer's new state: it does not replay the record itself into a
    config that lacks the index the writer hands on (at 50,000 instances the next lookup
    built the whole index again, seconds of CPU per one-tag job)."""
    import threading

    writer = FileStore(tmp_path / "config.json")
    writer.create(build_config())
    writer.snapshot().index()  # kept, as masterd keeps it from its start
    builds: list[int] = []
    build = configindex.ConfigIndex.build.__func__  # type: ignore[attr-defined]

    def counted_build(cls: type[configindex.ConfigIndex],
                      config: model.ConfigData) -> configindex.ConfigIndex:
        builds.append(config.serial_no)
        return build(cls, config)

    monkeypatch.setattr(configindex.ConfigIndex, "build", classmethod(counted_build))
    read: list[model.ConfigData] = []
    reader = threading.Thread(target=lambda: read.append(FileStore(writer.path).snapshot()))
    follow = configdiff.follow

    def follow_while_read(index: object, config: model.ConfigData,
                          change: configdiff.ChangeSet) -> object:
        # the record is in the journal and the older config's index is handed on: a reader
        # now would replay the record into a config of its own
        reader.start()
        reader.join(0.5)
        return follow(index, config, change)

    monkeypatch.setattr(configdiff, "follow", follow_while_read)
    inst = next(iter(writer.snapshot().instances))
    with writer.update() as config:
        config.instances[inst].tags.append("read-during-write")
    reader.join()
    assert read[0] is writer.snapshot()
    assert "read-during-write" in read[0].instances[inst].tags
    assert read[0].find_instance(read[0].instances[inst].name).uuid == inst
    assert builds == []
