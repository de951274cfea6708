"""The `file` (statvfs of the storage directories) and `rbd` (ceph df, rbd showmapped)
storage collectors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from herder.core import model
from herder.mond.collector import CollectContext, CollectorError, MondSettings
from herder.mond.collectors import file_storage, rbd
from herder.mond.collectors.file_storage import FileStorageCollector, file_data, storage_dirs
from herder.mond.collectors.rbd import (
    RbdCollector,
    image_owners,
    parse_ceph_df,
    parse_showmapped,
    rbd_data,
    rbd_pools,
)
from herder.mond.report import Kind
from herder.mond.runner import collect_once, render
from tests.conftest import build_config

SHARED = Path(__file__).resolve().parents[3] / "shared"
RBD_SAMPLES = SHARED / "conformance" / "ganeti" / "bdev-rbd"

IMAGE1 = "b9e31bb3-4d4f-4a2c-bc63-207a0bc4b287.rbd.disk0"
IMAGE3 = "d7ab910a-4933-4ffe-88d0-faf2ce31390a.rbd.disk0"

CEPH_DF = {
    "stats": {"total_bytes": 3 * 2**40, "total_avail_bytes": 2 * 2**40,
              "total_used_bytes": 2**40 - 2**30, "total_used_raw_bytes": 2**40,
              "total_used_raw_ratio": 0.333, "num_osds": 3},
    "stats_by_class": {},
    "pools": [
        {"name": "rbd", "id": 1, "stats": {"stored": 100 * 2**30, "objects": 25600,
                                           "kb_used": 300 * 2**20, "bytes_used": 300 * 2**30,
                                           "percent_used": 0.15, "max_avail": 600 * 2**30}},
        {"name": "other", "id": 2, "stats": {"stored": 2**30, "objects": 256,
                                             "kb_used": 3 * 2**20, "bytes_used": 3 * 2**30,
                                             "percent_used": 0.01, "max_avail": 600 * 2**30}},
    ],
}
# Luminous: no `stored`, pool usage in bytes_used
CEPH_DF_OLD = {"stats": {"total_bytes": 1000 * 1024, "total_used_bytes": 400 * 1024,
                         "total_avail_bytes": 600 * 1024},
               "pools": [{"name": "rbd", "id": 0,
                          "stats": {"kb_used": 100, "bytes_used": 100 * 1024,
                                    "max_avail": 500 * 1024, "objects": 3}}]}


def ctx_with(config: model.ConfigData | None, inputs: dict[str, Path] | None = None,
             timeout: float = 10.0) -> CollectContext:
    return CollectContext(node_name="node1.example.com", inputs=inputs or {},
                          config_loader=lambda: config,
                          settings=MondSettings(command_timeout=timeout))


# --- file ----------------------------------------------------------------------------------------


def file_config(file_dir: Path | str, shared_dir: Path | str, *templates: str) -> model.ConfigData:
    config = build_config()
    config.cluster.file_storage_dir = str(file_dir)
    config.cluster.shared_file_storage_dir = str(shared_dir)
    config.cluster.enabled_disk_templates = ["drbd", "plain", *templates]
    return config


def test_file_dirs_follow_enabled_templates(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert storage_dirs(file_config(a, b)) == []
    assert storage_dirs(file_config(a, b, "file")) == [("file", str(a))]
    assert storage_dirs(file_config(a, b, "sharedfile", "file")) == [
        ("file", str(a)), ("sharedfile", str(b))]
    assert storage_dirs(None) == []
    assert not FileStorageCollector(ctx_with(None)).available()
    assert not FileStorageCollector(ctx_with(file_config(a, b))).available()
    assert FileStorageCollector(ctx_with(file_config(a, b, "file"))).available()


def test_file_sizes(tmp_path: Path) -> None:
    a, b = tmp_path / "files", tmp_path / "shared"
    a.mkdir()
    b.mkdir()
    collector = FileStorageCollector(ctx_with(file_config(a, b, "file", "sharedfile")))
    assert (collector.name, collector.category, collector.kind) == ("file", "storage",
                                                                    Kind.STATUS)
    sample = collect_once(collector)
    assert not sample.failed
    data = sample.data
    assert data["status"] == {"code": 0, "message": ""}
    vfs = os.statvfs(a)
    entry = data["dirs"][0]
    assert entry["path"] == str(a) and entry["template"] == "file"
    assert entry["total"] == vfs.f_blocks * vfs.f_frsize // 1024
    assert abs(entry["free"] - vfs.f_bavail * vfs.f_frsize // 1024) < 64 * 1024  # moving
    assert entry["used"] == entry["total"] - entry["free"]
    # both directories are on one filesystem: counted once at the top
    assert data["total"] == entry["total"] and len(data["dirs"]) == 2
    assert render(collector, sample, verbose=False)["data"] == {
        key: data[key] for key in ("status", "free", "used", "total")}


def test_file_errors(tmp_path: Path) -> None:
    present, missing, not_dir = tmp_path / "ok", tmp_path / "missing", tmp_path / "afile"
    present.mkdir()
    not_dir.write_text("x")
    data = file_data([("file", str(missing)), ("sharedfile", str(present))])
    assert data["status"]["code"] == 4
    assert data["status"]["message"] == (
        f"filesystem error: file storage directory {missing}: does not exist")
    assert data["dirs"][1]["status"]["code"] == 0 and data["total"] > 0
    data = file_data([("file", str(not_dir))])
    assert data["status"]["message"] == (
        f"filesystem error: file storage directory {not_dir}: not a directory")
    collector = FileStorageCollector(ctx_with(file_config(missing, present, "file")))
    report = render(collector, collect_once(collector), verbose=False)
    assert report["data"]["status"]["code"] == 4
    assert str(missing) in report["data"]["status"]["message"]


def test_file_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_statvfs(path: Any) -> SimpleNamespace:
        return SimpleNamespace(f_blocks=1000, f_bavail=400, f_frsize=4096, f_flag=os.ST_RDONLY)

    monkeypatch.setattr(file_storage.os, "statvfs", fake_statvfs)
    data = file_data([("file", str(tmp_path))])
    assert data["status"]["code"] == 4 and "read-only filesystem" in data["status"]["message"]
    assert (data["dirs"][0]["total"], data["dirs"][0]["free"]) == (4000, 1600)


# --- rbd: parsers --------------------------------------------------------------------------------


def sample(name: str) -> str:
    path = RBD_SAMPLES / name
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared not mounted)")
    return path.read_text()


@pytest.mark.parametrize(("name", "count"), [
    ("json_output_ok.txt", 3), ("json_output_extra_matches.txt", 4),
    ("json_output_no_matches.txt", 2), ("json_output_empty.txt", 0),
    ("plain_output_new_ok.txt", 3), ("plain_output_new_extra_matches.txt", 4),
    ("plain_output_new_no_matches.txt", 2), ("plain_output_new_empty.txt", 0),
    ("plain_output_old_ok.txt", 3), ("plain_output_old_extra_matches.txt", 4),
    ("plain_output_old_no_matches.txt", 2), ("plain_output_old_empty.txt", 0),
])
def test_showmapped_samples(name: str, count: int) -> None:
    mapped = parse_showmapped(sample(name))
    assert len(mapped) == count
    if count:
        by_device = {m["device"]: m for m in mapped}
        assert by_device["/dev/rbd1"] == {"id": "1", "pool": "rbd", "namespace": "",
                                          "image": IMAGE1, "snap": "-", "device": "/dev/rbd1"}


def test_showmapped_current_json_list() -> None:
    text = json.dumps([{"id": "0", "pool": "rbd", "namespace": "ns", "name": "img",
                        "snap": "-", "device": "/dev/rbd0"}])
    assert parse_showmapped(text) == [{"id": "0", "pool": "rbd", "namespace": "ns",
                                       "image": "img", "snap": "-", "device": "/dev/rbd0"}]
    # plain text with a namespace column
    text = "id  pool  namespace  image  snap  device\n0   rbd   ns         img    -     /dev/rbd0\n"
    assert parse_showmapped(text)[0]["namespace"] == "ns"


@pytest.mark.parametrize("garbage", ["invalid rbd output \n", "{nope", "[1, 2]", "42",
                                     "1 rbd img - notadev\n"])
def test_showmapped_garbage(garbage: str) -> None:
    with pytest.raises(CollectorError, match="rbd showmapped"):
        parse_showmapped(garbage)


def test_showmapped_invalid_sample() -> None:
    with pytest.raises(CollectorError):
        parse_showmapped(sample("output_invalid.txt"))


def test_parse_ceph_df() -> None:
    df = parse_ceph_df(json.dumps(CEPH_DF))
    assert df["cluster"] == {"total": 3 * 2**30, "free": 2 * 2**30, "used": 2**30}
    pool = df["pools"][0]
    assert pool == {"name": "rbd", "id": 1, "free": 600 * 2**20, "used": 100 * 2**20,
                    "total": 700 * 2**20, "objects": 25600}
    old = parse_ceph_df(json.dumps(CEPH_DF_OLD))
    assert old["pools"][0]["used"] == 100 and old["pools"][0]["total"] == 600
    assert old["cluster"]["used"] == 400


@pytest.mark.parametrize("garbage", ["not json", "[]", '{"pools": 3}',
                                     '{"pools": [{"stats": {}}]}',
                                     '{"pools": [{"name": "x", "stats": {"max_avail": "z"}}]}'])
def test_parse_ceph_df_garbage(garbage: str) -> None:
    with pytest.raises(CollectorError, match="ceph df"):
        parse_ceph_df(garbage)


# --- rbd: pools, instances, status ---------------------------------------------------------------


def rbd_config(pool: str | None = None) -> model.ConfigData:
    config = build_config()
    config.cluster.enabled_disk_templates = ["drbd", "plain", "rbd"]
    if pool is not None:
        config.cluster.diskparams = {"rbd": {"pool": pool}}
    inst = config.find_instance("plain0.example.com")
    inst.disks = [model.Disk(uuid=model.new_uuid(), dev_type="rbd", size=1024,
                             logical_id=model.ExtId(provider="rbd", name=IMAGE1))]
    return config


def test_pools_and_owners() -> None:
    assert rbd_pools(None) == [] and image_owners(None) == {}
    assert rbd_pools(build_config()) == []
    assert rbd_pools(rbd_config()) == ["rbd"]
    assert rbd_pools(rbd_config("fast")) == ["fast"]
    assert image_owners(rbd_config()) == {("rbd", IMAGE1): "plain0.example.com"}


def test_rbd_collector_with_config(tmp_path: Path) -> None:
    df = tmp_path / "df.json"
    df.write_text(json.dumps(CEPH_DF))
    mapped = tmp_path / "mapped.json"
    mapped.write_text(sample("json_output_ok.txt"))
    collector = RbdCollector(ctx_with(rbd_config(), {"ceph_df": df, "rbd_showmapped": mapped}))
    assert collector.available()
    got = collect_once(collector)
    assert not got.failed
    data = got.data
    assert data["status"] == {"code": 0, "message": ""}
    assert (data["free"], data["used"], data["total"]) == (600 * 2**20, 100 * 2**20,
                                                           700 * 2**20)
    assert [p["name"] for p in data["pools"]] == ["rbd", "other"]
    owners = {m["image"]: m["instance"] for m in data["mapped"]}
    assert owners[IMAGE1] == "plain0.example.com" and owners[IMAGE3] is None
    assert render(collector, got, verbose=False)["data"] == {
        key: data[key] for key in ("status", "free", "used", "total")}


def test_rbd_without_config_uses_cluster_totals(tmp_path: Path) -> None:
    df = tmp_path / "df.json"
    df.write_text(json.dumps(CEPH_DF))
    mapped = tmp_path / "mapped.txt"
    mapped.write_text("")
    data = RbdCollector(ctx_with(None, {"ceph_df": df, "rbd_showmapped": mapped})).collect()
    assert (data["total"], data["free"], data["used"]) == (3 * 2**30, 2 * 2**30, 2**30)
    assert data["mapped"] == []


def _ceph_not_configured(argv: list[str], input_name: str | None = None) -> str:
    """A node with Ceph's tools but no Ceph: every call fails as `ceph df` does there."""
    raise CollectorError(f"{argv[0]} failed with exit code 1: Error initializing cluster client")


def test_an_unreachable_ceph_is_no_fault_where_the_cluster_uses_no_rbd() -> None:
    context = ctx_with(build_config(), {})
    context.run = _ceph_not_configured  # type: ignore[method-assign]
    data = RbdCollector(context).collect()
    assert data["status"]["code"] == 0
    assert "the cluster uses no rbd" in data["status"]["message"]
    context = ctx_with(rbd_config(), {})
    context.run = _ceph_not_configured  # type: ignore[method-assign]
    assert RbdCollector(context).collect()["status"]["code"] == 4  # in use: a fault


def test_a_node_without_config_or_ceph_conf_is_no_fault() -> None:
    # a node that is no candidate (mond has no config) with Ceph's tools and no ceph.conf:
    # `ceph df` fails as on Debian with ceph-common installed and nothing configured
    def no_ceph_conf(argv: list[str], input_name: str | None = None) -> str:
        raise CollectorError(f"{argv[0]} failed with exit code 1: Error initializing cluster "
                             "client: ObjectNotFound('RADOS object not found (error calling "
                             "conf_read_file)')")

    context = ctx_with(None, {})
    context.run = no_ceph_conf  # type: ignore[method-assign]
    data = RbdCollector(context).collect()
    assert data["status"]["code"] == 0
    assert data["status"]["message"].startswith("no Ceph configuration on this node; ")
    context = ctx_with(None, {})
    context.run = _ceph_not_configured  # type: ignore[method-assign]
    assert RbdCollector(context).collect()["status"]["code"] == 4  # configured, unreachable


def test_rbd_missing_pool() -> None:
    df = parse_ceph_df(json.dumps(CEPH_DF))
    data = rbd_data(df, None, [], None, ["rbd", "gone"], {})
    assert data["status"] == {"code": 4, "message": "rbd pool gone does not exist"}
    assert data["total"] == 700 * 2**20


@pytest.mark.parametrize(("argv", "fragment"), [
    (("false",), "false failed with exit code 1"),
    (("sleep", "5"), "sleep did not finish within 0.3s"),
    (("/nonexistent/ceph",), "command not found"),
])
def test_rbd_unreachable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         argv: tuple[str, ...], fragment: str) -> None:
    monkeypatch.setattr(rbd, "CEPH_DF_ARGV", argv)
    mapped = tmp_path / "mapped.txt"
    mapped.write_text(sample("plain_output_old_ok.txt"))
    collector = RbdCollector(ctx_with(rbd_config(), {"rbd_showmapped": mapped}, timeout=0.3))
    got = collect_once(collector)
    assert not got.failed
    st = got.data["status"]
    assert st["code"] == 4 and st["message"].startswith("unreachable: ")
    assert fragment in st["message"]
    assert len(got.data["mapped"]) == 3  # the local part still reports


def test_rbd_showmapped_failure_is_unknown(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rbd, "RBD_SHOWMAPPED_ARGV", ("false",))
    df = tmp_path / "df.json"
    df.write_text(json.dumps(CEPH_DF))
    data = RbdCollector(ctx_with(rbd_config(), {"ceph_df": df})).collect()
    assert data["status"]["code"] == 2
    assert data["status"]["message"].startswith("cannot list mapped images: ")


def test_rbd_garbage_is_status_4(tmp_path: Path) -> None:
    df = tmp_path / "df.json"
    df.write_text("garbage")
    mapped = tmp_path / "mapped.txt"
    mapped.write_text("")
    collector = RbdCollector(ctx_with(None, {"ceph_df": df, "rbd_showmapped": mapped}))
    got = collect_once(collector)
    assert got.failed
    st = render(collector, got, verbose=False)["data"]["status"]
    assert st["code"] == 4 and "ceph df output is not JSON" in st["message"]


def test_rbd_available(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(rbd.shutil, "which", lambda name: None)
    assert not RbdCollector(ctx_with(None)).available()
    assert RbdCollector(ctx_with(None, {"ceph_df": tmp_path / "x"})).available()
    monkeypatch.setattr(rbd.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert RbdCollector(ctx_with(None)).available()
