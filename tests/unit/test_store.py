"""The config store: atomic, serialized, refusing bad documents, surviving kill -9."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import stat
import time
from pathlib import Path

import pytest

from herder.core import model
from herder.core.errors import ConfigError, StoreError
from herder.core.store import FileStore
from tests.conftest import build_config, stored_files


@pytest.fixture
def store(tmp_path: Path, config: model.ConfigData) -> FileStore:
    s = FileStore(tmp_path / "config.json")
    s.create(config)
    return s


def test_create_refuses_to_overwrite(store: FileStore, config: model.ConfigData) -> None:
    with pytest.raises(StoreError, match="already exists"):
        store.create(config)


def test_file_is_private(store: FileStore) -> None:
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def test_update_increments_serial_and_mtime(store: FileStore) -> None:
    before = store.load()
    with store.update() as config:
        config.find_node("node3").drained = True
    after = store.load()
    assert after.serial_no == before.serial_no + 1
    assert after.mtime > before.mtime
    assert after.find_node("node3").drained is True
    for _ in range(3):
        with store.update():
            pass
    assert store.load().serial_no == before.serial_no + 4


def test_failed_update_writes_nothing(store: FileStore) -> None:
    original = stored_files(store.path)
    with pytest.raises(RuntimeError), store.update() as config:
        config.find_node("node2").drained = True
        raise RuntimeError("changed my mind")
    assert stored_files(store.path) == original


def test_invalid_change_is_refused_and_writes_nothing(store: FileStore) -> None:
    original = stored_files(store.path)
    with pytest.raises(ConfigError, match="change refused, nothing written.*unknown backend"), \
            store.update() as config:
        config.cluster.beparams["colour"] = "red"
    assert stored_files(store.path) == original


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b'{"version": 1, "cluster": {', "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"version": 1}', "missing required field `cluster`"),
    ],
)
def test_bad_file_is_refused_and_never_overwritten(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content)
    s = FileStore(path)
    with pytest.raises(ConfigError, match=message) as err:
        s.load()
    assert str(path) in str(err.value)
    with pytest.raises(ConfigError), s.update():
        pass
    assert path.read_bytes() == content


def test_truncated_file_is_refused(store: FileStore) -> None:
    full = store.path.read_bytes()
    store.path.write_bytes(full[: len(full) // 2])
    with pytest.raises(ConfigError, match="not valid JSON"):
        store.load()
    assert len(store.path.read_bytes()) == len(full) // 2


def test_missing_file_says_how_to_create_one(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="herder cluster init"):
        FileStore(tmp_path / "nope.json").load()


def _add_tags(path: str, worker: int, count: int) -> None:
    store = FileStore(path)
    for i in range(count):
        with store.update() as config:
            config.cluster.tags.append(f"w{worker}-{i}")


def test_writers_in_several_processes_lose_no_update(store: FileStore) -> None:
    start = store.load().serial_no
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_add_tags, args=(str(store.path), w, 15)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    final = store.load()
    assert final.serial_no == start + 60
    assert len(final.cluster.tags) == 60


def _write_forever(path: str, ready=None) -> None:
    """Child body: bump the document as fast as possible until killed (a new snapshot every
    five journal records, so kills land in appends and in snapshot writes alike)."""
    store = FileStore(path)
    store.COMPACT_RECORDS = 5
    if ready is not None:
        ready.send(b"r")
    while True:
        with store.update() as config:
            config.cluster.candidate_pool_size = config.serial_no % 50 + 1


@pytest.mark.slow
def test_kill_9_never_leaves_a_broken_config(tmp_path: Path) -> None:
    """200 SIGKILLs of a writer at random points: the document always loads, and its serial
    is the one before the interrupted write or the one after it."""
    # A document of some size, so each write takes long enough to be hit mid-way.
    store = FileStore(tmp_path / "config.json")
    store.create(build_config(nodes=60, drbd_instances=120, plain_instances=60))
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(1815)
    # One write cycle here and now (load, validate, encode, write, fsync, rename): kills are
    # spread over a few cycles, so they land in every phase whatever the machine's load.
    # A child first reads the whole store, then writes: a cycle here is a fresh read and the
    # writes up to the child's first new snapshot.
    started = time.perf_counter()
    for _ in range(3):
        FileStore(store.path).load()
        for _ in range(6):
            with store.update():
                pass
    cycle = (time.perf_counter() - started) / 3
    left_temporaries = 0
    last_serial = store.load().serial_no
    for _ in range(200):  # issue 21: hundreds of kills
        parent, child_end = ctx.Pipe()
        child = ctx.Process(target=_write_forever, args=(str(store.path), child_end))
        child.start()
        assert parent.poll(30)
        parent.recv()
        time.sleep(rng.uniform(0.0, 2 * cycle))
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        assert child.exitcode == -signal.SIGKILL
        temporaries = [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
        left_temporaries += bool(temporaries)
        loaded = store.load()  # must never raise
        # The child may have committed several writes; never a partial or invented serial.
        assert loaded.serial_no >= last_serial
        assert loaded.cluster.candidate_pool_size == (loaded.serial_no - 1) % 50 + 1 \
            or loaded.serial_no == last_serial
        last_serial = loaded.serial_no
    # Some kills must have landed mid-write (a temporary file was left behind) ...
    assert left_temporaries > 0
    # ... and the next writer cleans them up.
    with store.update():
        pass
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def _write_once_and_report(path: str, pipe) -> None:
    store = FileStore(path)
    with store.update() as config:
        pipe.send(config.serial_no)  # the serial being replaced
        config.cluster.tags.append("x")


def test_kill_9_during_one_write_leaves_old_or_new(tmp_path: Path) -> None:
    """Precise form of the property: after killing a single write, serial is N or N+1."""
    store = FileStore(tmp_path / "config.json")
    store.create(build_config(nodes=100, drbd_instances=200))
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(1816)
    outcomes = {"old": 0, "new": 0}
    for _ in range(60):
        old = store.load().serial_no
        parent, child_end = ctx.Pipe()
        child = ctx.Process(target=_write_once_and_report, args=(str(store.path), child_end))
        child.start()
        assert parent.poll(10)
        assert parent.recv() == old
        time.sleep(rng.uniform(0.0, 0.02))
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        serial = store.load().serial_no
        assert serial in (old, old + 1)
        outcomes["old" if serial == old else "new"] += 1
    assert sum(outcomes.values()) == 60


def test_raw_json_written_is_sorted_and_readable(store: FileStore) -> None:
    text = store.path.read_text()
    data = json.loads(text)
    assert list(data) == sorted(data)
    assert text.endswith("\n")


def test_a_change_shares_every_object_it_did_not_change(store: FileStore) -> None:
    """After a write the readers' config holds plain tables in the same order, the changed
    object new, and every other object, also one the writer only read, the one it was."""
    before = store.snapshot()
    names = list(before.instances)
    changed, read = names[1], names[2]
    with store.update() as config:
        config.instances[changed].tags.append("new")
        assert config.instances[read].name  # read, not changed
    after = store.snapshot()
    assert type(after.instances) is dict and list(after.instances) == names
    assert after.instances[changed].tags[-1] == "new"
    assert after.instances[changed] is not before.instances[changed]
    assert all(after.instances[uuid] is before.instances[uuid]
               for uuid in names if uuid != changed)

    gone, kept = names[0], names[2]
    with store.update() as config:  # a removal: the other way, the same result
        config.instances.pop(gone)
    removed = store.snapshot()
    assert type(removed.instances) is dict
    assert list(removed.instances) == [uuid for uuid in names if uuid != gone]
    assert removed.instances[kept] is after.instances[kept]
