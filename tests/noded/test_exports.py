"""The node's export directory (`noded.exports`) on real files: an export being written is
`NAME.new` until its config.ini is in place, then replaces the older export of that instance
whole; only finished exports are listed; names never leave the directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from herder.core import exportconf, paths
from herder.core.rpcdefs import disk_calls
from herder.noded import exports
from herder.noded import rpc as noded_rpc
from herder.noded.node_disks import DiskFailure


def partial(root: Path, name: str, dump: bytes) -> None:
    directory = root / f"{name}.new"
    directory.mkdir(parents=True)
    (directory / "disk-uuid").write_bytes(dump)


def test_finalize_replaces_the_older_export_whole(tmp_path: Path) -> None:
    partial(tmp_path, "web1", b"old")
    exports.finalize(tmp_path, "web1", "[export]\n")
    partial(tmp_path, "web1", b"new")
    assert exports.list_exports(tmp_path) == ["web1"]  # the one being written is not listed
    exports.finalize(tmp_path, "web1", "[export]\nos = x\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["web1"]
    assert (tmp_path / "web1" / "disk-uuid").read_bytes() == b"new"
    assert (tmp_path / "web1" / exportconf.CONF_FILE).read_text() == "[export]\nos = x\n"


def test_finalize_without_a_partial_export_changes_nothing(tmp_path: Path) -> None:
    partial(tmp_path, "web1", b"old")
    exports.finalize(tmp_path, "web1", "[export]\n")
    with pytest.raises(exports.ExportFailure, match="no export of web2 is being written"):
        exports.finalize(tmp_path, "web2", "[export]\n")
    assert exports.list_exports(tmp_path) == ["web1"]


def config_ini(timestamp: int) -> str:
    return (f"[export]\nversion = 0\ntimestamp = {timestamp}\nsource = n\nos = x\n"
            "[instance]\nname = web1\ndisk_template = plain\nhypervisor = kvm\n"
            "disk_count = 0\nnic_count = 0\n")


DAY = 86400
T0 = 1_800_000_000  # 2027-01-15 08:00:00 UTC


def test_a_retention_count_keeps_the_older_exports_under_dated_names(tmp_path: Path) -> None:
    """keep 3: the export replaced is kept whole as `web1@<its time>` (its own config.ini
    and dump, so a Ganeti export still), the oldest beyond three go only once the newest is
    in place; another instance's exports are not touched."""
    partial(tmp_path, "web10", b"other")
    exports.finalize(tmp_path, "web10", config_ini(T0))
    removed = []
    for day in range(5):
        partial(tmp_path, "web1", b"day%d" % day)
        removed.append(exports.finalize(tmp_path, "web1", config_ini(T0 + day * DAY), keep=3))
    assert removed == [[], [], [], ["web1@20270115-080000"], ["web1@20270116-080000"]]
    assert exports.list_exports(tmp_path) == ["web1", "web10", "web1@20270117-080000",
                                              "web1@20270118-080000"]
    for name, day in (("web1", 4), ("web1@20270118-080000", 3), ("web1@20270117-080000", 2)):
        assert (tmp_path / name / "disk-uuid").read_bytes() == b"day%d" % day
        assert exportconf.parse((tmp_path / name / exportconf.CONF_FILE).read_text()
                                ).timestamp == T0 + day * DAY
        noded_rpc.decode("export_info", {"name": name})  # a name the node's calls take
    assert (tmp_path / "web10" / "disk-uuid").read_bytes() == b"other"
    # Ganeti's own export (no keep) replaces the newest and leaves the dated ones be; keep 1
    # then removes them
    partial(tmp_path, "web1", b"ganeti")
    assert exports.finalize(tmp_path, "web1", config_ini(T0 + 5 * DAY)) == []
    assert exports.kept_exports(tmp_path, "web1") == ["web1@20270117-080000",
                                                      "web1@20270118-080000"]
    partial(tmp_path, "web1", b"one")
    assert exports.finalize(tmp_path, "web1", config_ini(T0 + 6 * DAY), keep=1) == [
        "web1@20270117-080000", "web1@20270118-080000"]
    assert exports.list_exports(tmp_path) == ["web1", "web10"]


def test_two_exports_in_the_same_second_both_stay(tmp_path: Path) -> None:
    for dump in (b"a", b"b", b"c"):
        partial(tmp_path, "web1", dump)
        exports.finalize(tmp_path, "web1", config_ini(T0), keep=3)
    assert exports.list_exports(tmp_path) == ["web1", "web1@20270115-080000",
                                              "web1@20270115-080001"]
    assert (tmp_path / "web1@20270115-080000" / "disk-uuid").read_bytes() == b"a"


def test_an_export_without_a_timestamp_is_dated_by_its_file(tmp_path: Path) -> None:
    import os

    partial(tmp_path, "web1", b"old")
    exports.finalize(tmp_path, "web1", "[export]\n")
    os.utime(tmp_path / "web1" / exportconf.CONF_FILE, (T0, T0))
    partial(tmp_path, "web1", b"new")
    exports.finalize(tmp_path, "web1", config_ini(T0 + DAY), keep=2)
    assert exports.list_exports(tmp_path) == ["web1", "web1@20270115-080000"]


def test_a_failed_finalize_removes_no_older_export(tmp_path: Path) -> None:
    for day in range(2):
        partial(tmp_path, "web1", b"day%d" % day)
        exports.finalize(tmp_path, "web1", config_ini(T0 + day * DAY), keep=2)
    with pytest.raises(exports.ExportFailure, match="no export of web1 is being written"):
        exports.finalize(tmp_path, "web1", config_ini(T0 + 2 * DAY), keep=1)
    assert exports.list_exports(tmp_path) == ["web1", "web1@20270115-080000"]


def test_a_starting_noded_removes_the_partial_exports_it_holds(tmp_path: Path) -> None:
    """A node daemon that died mid-stream left `NAME.new`; the stream's token died with it, so
    the daemon starting again removes it (the finished exports stay); one it died in the
    finalize of (config.ini written, the older export already dated) is put in place."""
    from tests.noded.noded_fixture import running_noded

    root = tmp_path / "root" / exportconf.EXPORT_DIR.lstrip("/")
    partial(root, "web1", b"old")
    exports.finalize(root, "web1", "[export]\n")
    partial(root, "web1", b"half of it")
    partial(root, "web2", b"half")
    partial(root, "web3", b"whole")  # its finalize ended after it kept the older one aside
    (root / "web3.new" / exportconf.CONF_FILE).write_text(config_ini(T0 + DAY))
    (root / "web3@20270115-080000").mkdir()
    (root / "web3@20270115-080000" / exportconf.CONF_FILE).write_text(config_ini(T0))
    with running_noded(tmp_path) as node:
        assert sorted(p.name for p in root.iterdir()) == ["web1", "web3",
                                                          "web3@20270115-080000"]
        assert noded_rpc.dispatch(node.daemon, "export_list", {}) == [
            "web1", "web3", "web3@20270115-080000"]
    assert (root / "web1" / "disk-uuid").read_bytes() == b"old"
    assert (root / "web3" / "disk-uuid").read_bytes() == b"whole"


def test_list_of_a_missing_directory_is_empty(tmp_path: Path) -> None:
    assert exports.list_exports(tmp_path / "none") == []


@pytest.mark.parametrize("name", ["..", "../etc", "a/b", ""])
def test_names_stay_in_the_directory(tmp_path: Path, name: str) -> None:
    with pytest.raises(paths.UnsafeName):
        exports.export_path(tmp_path, name)


def test_an_export_and_its_import_go_through_the_os_scripts(tmp_path: Path) -> None:
    """Between two real node daemons: disk/0 of an instance of the herder-guest OS read by its
    OS `export` script into the other node's export directory, finalized there, then sent
    back through the OS `import` script into another disk: the same bytes; an export script
    that fails is the stream's failure (the master then removes the partial export)."""
    import random

    import xxhash

    from herder.sim import guest
    from tests.noded.noded_fixture import running_noded
    from tests.noded.test_disk_transfer import allow, file_disk

    os_dir = guest.install_os_definition(tmp_path / "os")
    store_a, store_b = tmp_path / "fs-a" / "inst1", tmp_path / "fs-b" / "inst1"
    with running_noded(tmp_path / "a", "node1") as source, \
            running_noded(tmp_path / "b", "node2") as target:
        for node, root, store in ((source, tmp_path / "a", store_a),
                                  (target, tmp_path / "b", store_b)):
            node.daemon.settings.os_path = (os_dir.parent,)
            allow(root / "root", store.parent)
            noded_rpc.dispatch(node.daemon, "file_storage_dir_create",
                               {"file_storage_dir": str(store)})
        disk_a, back = file_disk(store_a / "disk0"), file_disk(store_a / "disk1")
        back["uuid"] = "d-2"
        for disk in (disk_a, back):
            noded_rpc.dispatch(source.daemon, "blockdev_create", {"disk": disk, "size": 4,
                                                       "owner": "inst1", "on_primary": True,
                                                       "info": ""})
        data = random.Random(9).randbytes(4 << 20)
        (store_a / "disk0").write_bytes(data)
        instance = {"name": "inst1", "uuid": "u-1", "memory": 128, "vcpus": 1,
                    "os": guest.OS_NAME, "hypervisor": "kvm", "nics": [],
                    "disks": [disk_a], "hvparams": {}, "beparams": {}, "osparams": {}}
        port = int(target.url.rsplit(":", 1)[1])
        dump = noded_rpc.dispatch(target.daemon, "export_prepare_dump", {"instance": "inst1",
                                                              "dump": "d-1"})
        sent = noded_rpc.dispatch(source.daemon, "blockdev_export", {
            "disk": disk_a, "instance": "inst1", "token": dump.token, "os_instance": instance,
            "target": {"address": "127.0.0.1", "port": port}})
        assert sent == disk_calls.Transferred(
            bytes=4 << 20, checksum=f"xxh3_128:{xxhash.xxh3_128_hexdigest(data)}")
        noded_rpc.dispatch(target.daemon, "export_finalize", {"instance": "inst1",
                                                   "config_ini": "[export]\n"})
        assert noded_rpc.dispatch(target.daemon, "export_list", {}) == ["inst1"]
        log = (tmp_path / "a" / "state" / "os-logs")
        assert any(p.name.startswith("export-inst1") for p in log.iterdir())
        # back into disk1 of the instance, through its import script
        importing = {**instance, "disks": [back]}
        prepared = noded_rpc.dispatch(source.daemon, "blockdev_import_prepare", {
            "disk": back, "instance": "inst1", "os_instance": importing})
        noded_rpc.dispatch(target.daemon, "export_send", {
            "name": "inst1", "dump": "d-1", "token": prepared.token,
            "target": {"address": "127.0.0.1", "port": int(source.url.rsplit(":", 1)[1])}})
        assert (store_a / "disk1").read_bytes() == data
        # an export script that fails: the stream fails, whatever reached the target
        (os_dir / "export").write_text("#!/bin/sh\nhead -c 1000 \"$EXPORT_DEVICE\"\nexit 3\n")
        dump = noded_rpc.dispatch(target.daemon, "export_prepare_dump", {"instance": "inst1",
                                                              "dump": "d-1"})
        with pytest.raises(DiskFailure, match="OS export script failed") as failed:
            noded_rpc.dispatch(source.daemon, "blockdev_export", {
                "disk": disk_a, "instance": "inst1", "token": dump.token,
                "os_instance": instance, "target": {"address": "127.0.0.1", "port": port}})
        assert "exit code 3" in str(failed.value) and "\n" not in str(failed.value)


@pytest.mark.parametrize(("method", "args", "named"), [
    ("export_remove", {"name": "../etc"}, "export name"),
    ("export_info", {"name": "web 1"}, "export name"),
    ("export_prepare_dump", {"instance": "web1", "dump": ".hidden"}, "dump file"),
    ("export_prepare_dump", {"instance": "web1", "dump": "a/b"}, "dump file"),
    ("export_send", {"name": "web1", "dump": "d", "token": "x y",
                     "target": {"address": "127.0.0.1", "port": 1811}}, "token"),
    ("export_finalize", {"instance": "web1", "config_ini": "x" * (2 << 20)}, "config_ini"),
    ("export_finalize", {"instance": "web1", "config_ini": "", "keep": 0}, "keep"),
    ("export_finalize", {"instance": "web1", "config_ini": "", "keep": 101}, "keep"),
    ("export_remove", {"name": "web1@2027-01-15"}, "export name"),
    ("export_info", {"name": "web1@20270115-080000@1"}, "export name"),
])
def test_bad_export_arguments_are_refused_at_the_door(method: str, args: dict[str, object],
                                                      named: str) -> None:
    """The contract's checks (`core.rpcdefs.backup_calls`): a 400 naming the argument before
    any handler runs."""
    with pytest.raises(noded_rpc.BadArguments, match=named):
        noded_rpc.decode(method, args)

