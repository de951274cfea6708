"""Storage units: parsing Ganeti's captured LVM output, fake-runner tests, real LVM on loop
devices (root only; this kernel has no device-mapper, so LVs are created unactivated) and file
storage directories."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from herder.noded import storage as storage_units
from tests.conftest import build_config

# --- parse-only: Ganeti's captured outputs -----------------------------------------------------


def _ganeti(shared: Path, name: str) -> str:
    return (shared / "conformance" / "ganeti" / name).read_text()


def test_vgreduce_old_version_ok(shared: Path) -> None:
    out = storage_units.parse_vgreduce(_ganeti(shared, "vgreduce-removemissing-2.02.02.txt"))
    assert out.consistent and not out.needs_force
    assert out.missing_pvs == ("gg4cmC-4lrT-EN1v-39OA-6S2b-6eEI-wWlJJJ",)
    assert out.partial_lvs == ()


def test_vgreduce_new_version_ok(shared: Path) -> None:
    out = storage_units.parse_vgreduce(_ganeti(shared, "vgreduce-removemissing-2.02.66-ok.txt"))
    assert out.consistent and not out.needs_force
    assert out.missing_pvs == ("NzfYON-F7ky-1Szf-aGf1-v8Xa-Bt1W-8V3bou",)


def test_vgreduce_new_version_needs_force(shared: Path) -> None:
    out = storage_units.parse_vgreduce(_ganeti(shared, "vgreduce-removemissing-2.02.66-fail.txt"))
    assert not out.consistent and out.needs_force
    assert len(out.partial_lvs) == 30
    assert out.partial_lvs[0] == "4ba7abfa-8459-43b6-b00f-c016244980f0.disk0"
    assert out.missing_pvs == ("bHRa26-svpL-ihJX-e0S4-2HNz-wAAi-AlBFtl",)


def test_vgs_missing_pvs_old_version(shared: Path) -> None:
    text = _ganeti(shared, "vgs-missing-pvs-2.02.02.txt")
    result = storage_units.CommandResult(("vgs",), 5, "", text)
    assert "failed" in (storage_units.vg_inconsistency("xenvg", result) or "")
    # Even with a zero exit the "not found" line is enough.
    zero_exit = storage_units.CommandResult((), 0, "", text)
    assert "not found" in (storage_units.vg_inconsistency("xenvg", zero_exit) or "")


def test_vgs_missing_pvs_new_version_exits_zero(shared: Path) -> None:
    text = _ganeti(shared, "vgs-missing-pvs-2.02.66.txt")
    result = storage_units.CommandResult(("vgs",), 0, text, "")
    reason = storage_units.vg_inconsistency("xenvg", result)
    assert reason is not None and "bHRa26-svpL-ihJX-e0S4-2HNz-wAAi-AlBFtl" in reason


def test_lvs_rows(shared: Path) -> None:
    rows = storage_units.parse_rows(_ganeti(shared, "lvs_lv.txt"), 20, separator=";")
    assert [r[1] for r in rows] == ["df9ff3f6-a833-48ff-8bd5-bff2eaeab759.disk0_data",
                                    "df9ff3f6-a833-48ff-8bd5-bff2eaeab759.disk0_meta"]
    assert rows[0][12] == "xenvg"
    assert storage_units.parse_rows(_ganeti(shared, "lvs_lv.txt"), 7, separator=";") == []


def test_vg_inconsistency_partial_attr() -> None:
    ok = storage_units.CommandResult(("vgs",), 0, "  xenvg|wz--n-\n", "")
    assert storage_units.vg_inconsistency("xenvg", ok, "wz--n-") is None
    assert "partial" in (storage_units.vg_inconsistency("xenvg", ok, "wz-pn-") or "")


def test_parse_size() -> None:
    assert storage_units.parse_size("60.00") == 60
    assert storage_units.parse_size(" 1023.60 ") == 1024
    # a unit LVM printed is honoured (lower case: GiB)
    assert storage_units.parse_size("1.5g") == 1536
    with pytest.raises(storage_units.StorageError, match="cannot parse"):
        storage_units.parse_size("1.2x")


# --- fake runner -------------------------------------------------------------------------------


class FakeRunner:
    def __init__(self,
                 responses: dict[str, storage_units.CommandResult | tuple[int, str, str]]) -> None:
        self.responses = responses
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> storage_units.CommandResult:
        self.calls.append(list(argv))
        for prefix, resp in self.responses.items():
            if " ".join(argv).startswith(prefix):
                if isinstance(resp, storage_units.CommandResult):
                    return resp
                rc, out, err = resp
                return storage_units.CommandResult(tuple(argv), rc, out, err)
        raise AssertionError(f"unexpected command {argv}")


PVS_OUT = """  /dev/sda5|1000.50|200.00|800.50|a--
  WARNING: something odd
  /dev/sdb1|500.00|0|500.00|---
"""


def test_pv_list_units_fields_and_command() -> None:
    runner = FakeRunner({"pvs": (0, PVS_OUT, "")})
    pv = storage_units.get_storage("lvm-pv", runner=runner)
    units = pv.list_units()
    assert runner.calls[0] == [
        "pvs", "--noheadings", "--units=m", "--nosuffix", "--separator=|",
        "--options=pv_name,pv_size,pv_used,pv_free,pv_attr",
    ]
    assert units == [
        {"name": "/dev/sda5", "size": 1000, "used": 200, "free": 800, "allocatable": True},
        {"name": "/dev/sdb1", "size": 500, "used": 0, "free": 500, "allocatable": False},
    ]
    runner.responses["pvs"] = (0, "  /dev/sda5|a--\n", "")
    assert pv.list_units("/dev/sda5", ["name", "allocatable"]) == [
        {"name": "/dev/sda5", "allocatable": True}]
    assert runner.calls[1][-2:] == ["--options=pv_name,pv_attr", "/dev/sda5"]


def test_vg_list_units_used_is_size_minus_free() -> None:
    runner = FakeRunner({"vgs": (0, "  xenvg|1000.00|250.00\n", "")})
    vg = storage_units.get_storage("lvm-vg", runner=runner)
    assert vg.list_units() == [
        {"name": "xenvg", "size": 1000, "used": 750, "free": 250, "allocatable": True}]
    assert runner.calls[0][-1] == "--options=vg_name,vg_size,vg_free"
    runner.responses["vgs"] = (0, "  xenvg\n", "")
    assert vg.list_units(fields=["allocatable"]) == [{"allocatable": True}]
    assert runner.calls[1][-1] == "--options=vg_name"


def test_list_failures_and_unknown_fields() -> None:
    runner = FakeRunner({"pvs": (5, "", "  Failed to find physical volume \"/dev/x\".")})
    pv = storage_units.LvmPvStorage(runner=runner)
    with pytest.raises(storage_units.StorageCommandError,
                       match="exit code 5.*Failed to find") as info:
        pv.list_units("/dev/x")
    assert info.value.returncode == 5
    with pytest.raises(storage_units.StorageError, match="unknown storage field"):
        pv.list_units(fields=["name", "colour"])
    with pytest.raises(storage_units.StorageError, match="unknown storage type 'zfs'"):
        storage_units.get_storage("zfs")


def test_modify_and_execute_dispatch() -> None:
    runner = FakeRunner({"pvchange": (0, "  Physical volume changed\n", "")})
    pv = storage_units.LvmPvStorage(runner=runner)
    pv.modify("/dev/sda5", {"allocatable": False})
    assert runner.calls[-1] == ["pvchange", "--allocatable=n", "/dev/sda5"]
    with pytest.raises(storage_units.StorageError, match="size cannot be modified"):
        pv.modify("/dev/sda5", {"size": 1})
    with pytest.raises(storage_units.StorageError, match="no operation 'fix-consistency'"):
        pv.execute("/dev/sda5", "fix-consistency")
    with pytest.raises(storage_units.StorageError, match="cannot be modified"):
        storage_units.LvmVgStorage(runner=runner).modify("xenvg", {"allocatable": True})


def test_repair_vg_fake_runner(shared: Path) -> None:
    fail = _ganeti(shared, "vgreduce-removemissing-2.02.66-fail.txt")
    runner = FakeRunner({
        "vgreduce --removemissing --force": (0, "  Wrote out consistent volume group xenvg\n", ""),
        "vgreduce --removemissing": (5, "", fail),
        "vgs": (0, "  xenvg|wz--n-\n", ""),
    })
    with pytest.raises(storage_units.VgRepairError, match="partial LVs.*remove_partial_lvs"):
        storage_units.repair_vg("xenvg", runner=runner)
    assert not any("--force" in c for c in runner.calls)
    vg_storage = storage_units.LvmVgStorage(runner=runner)
    with pytest.raises(storage_units.VgRepairError, match="partial LVs"):
        vg_storage.execute("xenvg", "fix-consistency")
    result = vg_storage.execute("xenvg", "fix-consistency", remove_partial_lvs=True)
    assert result.forced and len(result.removed_lvs) == 30
    assert runner.calls[-2] == ["vgreduce", "--removemissing", "--force", "xenvg"]
    runner.responses["vgs"] = (0, _ganeti(shared, "vgs-missing-pvs-2.02.66.txt"), "")
    runner.responses["vgreduce --removemissing"] = (0, "  Wrote out consistent volume group", "")
    with pytest.raises(storage_units.VgRepairError, match="still not consistent.*misses PV"):
        storage_units.repair_vg("xenvg", runner=runner)


def test_run_command_errors() -> None:
    with pytest.raises(storage_units.StorageCommandError, match="cannot run"):
        storage_units.run_command(["/nonexistent/tool"])
    with pytest.raises(storage_units.StorageCommandError, match="timed out after 0.2s"):
        storage_units.run_command(["sleep", "5"], timeout=0.2)
    result = storage_units.run_command(["sh", "-c", "echo $LC_ALL; echo err >&2; exit 3"])
    assert result.returncode == 3 and result.stdout.strip() == "C" and "err" in result.output
    with pytest.raises(storage_units.StorageCommandError, match="exit code 3"):
        storage_units.check(result, "testing")


# --- file storage ------------------------------------------------------------------------------


def test_file_storage_list_and_status(tmp_path: Path) -> None:
    base = tmp_path / "fs"
    (base / "inst1").mkdir(parents=True)
    (base / "inst1" / "disk0").write_bytes(b"\0" * (3 * 1048576))
    (base / "inst1" / "link").symlink_to("/etc/passwd")
    fs = storage_units.get_storage("file", [base])
    (unit,) = fs.list_units()
    assert unit["name"] == str(base) and unit["allocatable"] is True
    assert unit["used"] == 3
    assert unit["size"] >= unit["free"] > 0
    assert fs.list_units(str(base), ["used"]) == [{"used": 3}]
    status = fs.unit_status(str(base))
    assert status["ok"] and status["is_dir"] and status["used"] == 3
    missing = fs.unit_status(str(tmp_path / "nope"))
    assert not missing["ok"] and not missing["exists"]
    with pytest.raises(storage_units.FileStorageError, match="cannot stat"):
        fs.list_units(str(tmp_path / "nope"), ["size"])


def test_file_storage_dirs_restricted_to_bases(tmp_path: Path) -> None:
    base = tmp_path / "file-storage"
    base.mkdir()
    bases = [base, tmp_path / "shared"]
    made = storage_units.create_dir(base / "inst1" / "sub", bases)
    assert made.is_dir()
    assert storage_units.create_dir(base / "inst1" / "sub", bases) == made  # idempotent
    with pytest.raises(storage_units.FileStorageError, match="not below an allowed"):
        storage_units.create_dir(tmp_path / "elsewhere", bases)
    with pytest.raises(storage_units.FileStorageError, match="not below an allowed"):
        storage_units.create_dir(base / ".." / "escape", bases)
    with pytest.raises(storage_units.FileStorageError, match="not below an allowed"):
        storage_units.create_dir(base, bases)  # the base itself is not a unit to create or remove
    with pytest.raises(storage_units.FileStorageError, match="absolute"):
        storage_units.create_dir("relative/dir", bases)
    (base / "evil").symlink_to(tmp_path)
    with pytest.raises(storage_units.FileStorageError, match="not below an allowed"):
        storage_units.create_dir(base / "evil" / "x", bases)
    (base / "afile").write_text("")
    with pytest.raises(storage_units.FileStorageError, match="not a directory"):
        storage_units.create_dir(base / "afile", bases)
    with pytest.raises(storage_units.FileStorageError, match="must be empty"):
        storage_units.remove_dir(base / "inst1", bases)
    storage_units.remove_dir(base / "inst1" / "sub", bases)
    storage_units.remove_dir(base / "inst1", bases)
    assert not (base / "inst1").exists()
    storage_units.remove_dir(base / "inst1", bases)  # already gone: fine
    with pytest.raises(storage_units.FileStorageError, match="not a directory"):
        storage_units.remove_dir(base / "afile", bases)
    with pytest.raises(storage_units.FileStorageError, match="not below an allowed"):
        storage_units.remove_dir(tmp_path, bases)


def test_allowed_dirs_from_cluster() -> None:
    config = build_config(nodes=1, drbd_instances=0, plain_instances=0)
    assert storage_units.allowed_file_storage_dirs(config.cluster) == [
        Path("/srv/herder/file-storage"), Path("/srv/herder/shared-file-storage")]


# --- real LVM on loop devices ------------------------------------------------------------------

LVM_TOOLS = ("pvcreate", "vgcreate", "vgremove", "pvremove", "pvs", "vgs", "pvchange",
             "vgreduce", "lvcreate", "losetup")


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LC_ALL": "C", "LVM_SUPPRESS_FD_WARNINGS": "1"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=check,
                          timeout=60)


@pytest.fixture
def loop_pvs(tmp_path: Path) -> Iterator[Callable[[int], list[str]]]:
    """Factory for `n` 64 MiB loop devices with PVs on them; everything is torn down after."""
    if os.geteuid() != 0:
        pytest.skip("real LVM tests need root")
    if not all(shutil.which(t) for t in LVM_TOOLS) or not Path("/dev/loop-control").exists():
        pytest.skip("LVM tools or loop devices are not available")
    devices: list[str] = []
    vgs: list[str] = []

    def make(count: int) -> list[str]:
        made = []
        for _ in range(count):
            backing = tmp_path / f"pv{len(devices)}.img"
            with open(backing, "wb") as f:
                f.truncate(64 * 1048576)
            loop = _sh("losetup", "--find", "--show", str(backing), check=False)
            if loop.returncode != 0:
                pytest.skip(f"cannot set up a loop device: {loop.stderr.strip()}")
            dev = loop.stdout.strip()
            devices.append(dev)
            made.append(dev)
            _sh("pvcreate", "-y", dev)
        return made

    make.vgs = vgs  # type: ignore[attr-defined]
    yield make
    for vg in vgs:
        _sh("vgremove", "-f", vg, check=False)
    for dev in devices:
        _sh("pvremove", "-ff", "-y", dev, check=False)
        _sh("losetup", "-d", dev, check=False)


def _vg(loop_pvs: Callable[[int], list[str]], devices: list[str]) -> str:
    name = f"hdrtest{secrets.token_hex(4)}"
    loop_pvs.vgs.append(name)  # type: ignore[attr-defined]
    _sh("vgcreate", name, *devices)
    return name


def test_real_pv_listing_status_and_allocatable(loop_pvs) -> None:
    (dev,) = loop_pvs(1)
    vg = _vg(loop_pvs, [dev])
    pv = storage_units.LvmPvStorage()
    (unit,) = pv.list_units(dev)
    assert unit["name"] == dev and unit["allocatable"] is True
    assert unit["size"] == 60 and unit["used"] == 0 and unit["free"] == 60
    assert any(u["name"] == dev for u in pv.list_units())
    status = pv.unit_status(dev)
    assert status["vg"] == vg and status["ok"] and not status["missing"]
    storage_units.set_pv_allocatable(dev, False)
    assert pv.list_units(dev, ["allocatable"]) == [{"allocatable": False}]
    pv.modify(dev, {"allocatable": True})
    assert pv.unit_status(dev)["allocatable"] is True
    with pytest.raises(storage_units.StorageCommandError, match="cannot modify physical volume"):
        storage_units.set_pv_allocatable("/dev/hdrtest-no-such-pv", False)


def test_real_vg_listing_and_status(loop_pvs) -> None:
    devs = loop_pvs(2)
    vg = _vg(loop_pvs, devs)
    storage = storage_units.LvmVgStorage()
    assert storage.list_units(vg) == [
        {"name": vg, "size": 120, "used": 0, "free": 120, "allocatable": True}]
    _sh("lvcreate", "--driverloaded", "n", "-an", "-Zn", "-L", "8m", "-n", "lv1", vg)
    assert storage.list_units(vg, ["used", "free"]) == [{"used": 8, "free": 112}]
    status = storage.unit_status(vg)
    assert status["ok"] and status["pv_count"] == 2 and status["lv_count"] == 1
    assert not status["partial"]
    with pytest.raises(storage_units.StorageCommandError):
        storage.unit_status("hdrtest-no-such-vg")


def test_real_repair_vg_with_missing_pv(loop_pvs) -> None:
    devs = loop_pvs(2)
    vg = _vg(loop_pvs, devs)
    _sh("losetup", "-d", devs[1])  # the disk "dies"
    status = storage_units.LvmVgStorage().unit_status(vg)
    assert not status["ok"] and status["partial"]
    result = storage_units.repair_vg(vg)
    assert not result.forced and len(result.missing_pvs) == 1
    status = storage_units.LvmVgStorage().unit_status(vg)
    assert status["ok"] and status["pv_count"] == 1


def test_real_repair_vg_with_partial_lv_needs_permission(loop_pvs) -> None:
    devs = loop_pvs(2)
    vg = _vg(loop_pvs, devs)
    _sh("lvcreate", "--driverloaded", "n", "-an", "-Zn", "-L", "8m", "-n", "lost", vg, devs[1])
    _sh("lvcreate", "--driverloaded", "n", "-an", "-Zn", "-L", "8m", "-n", "kept", vg, devs[0])
    _sh("losetup", "-d", devs[1])
    with pytest.raises(storage_units.VgRepairError, match="partial LVs \\(lost\\)"):
        storage_units.repair_vg(vg)
    assert storage_units.LvmVgStorage().unit_status(vg)["lv_count"] == 2  # nothing removed
    with pytest.raises(storage_units.VgRepairError):  # the generic entry point refuses too
        storage_units.LvmVgStorage().execute(vg, "fix-consistency")
    repaired = storage_units.repair_vg(vg, remove_partial_lvs=True)
    assert repaired.forced and repaired.removed_lvs == ("lost",)
    status = storage_units.LvmVgStorage().unit_status(vg)
    assert status["ok"] and status["lv_count"] == 1 and status["pv_count"] == 1
