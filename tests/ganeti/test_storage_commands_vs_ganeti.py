"""`plain` on this machine's real LVM: per RPC, the commands herder's node runs equal those of
Ganeti 3.0.2's own storage code, both parsing the real tools' answers.

A volume group on a loop device (activation off: metadata only, as on the simulated nodes;
`tests/noded/bdev/test_lvm_real.py`). Ganeti's backend (`BlockdevCreate`, ... over
storage/bdev.py LogicalVolume) runs in Debian's python3 with its command runner replaced by
one that records each argv and runs it for real (`storage_driver.py`); herder's
`noded.bdev.operations` run with a recording runner over the real one. Each side starts from
the empty VG; the argv lists must be equal, and so must which calls fail. (DRBD cannot run
here: `tests/noded/bdev/test_vs_ganeti.py` compares it on outputs from the captures.)
Skips without root, LVM and loop devices, or without Ganeti's code (/tmp/groot).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from herder.noded.bdev.base import BlockDevError, CommandResult, Host, SubprocessRunner
from tests.noded.bdev import harness, test_lvm_real
from tests.noded.bdev.harness import plain_disk

pytestmark = [pytest.mark.peer, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
OWNER, INFO = "inst1.example.com", "originstname+inst1.example.com"


@pytest.fixture
def vg(tmp_path: Path) -> Iterator[test_lvm_real.LoopVg]:
    if not harness.ganeti_available():
        pytest.skip("Ganeti 3.0.2 from ../shared/peers (/tmp/groot) is absent")
    yield from test_lvm_real.loop_vg.__wrapped__(tmp_path)  # the same loop-device VG


def scenarios(vg: str) -> dict[str, list[list[Any]]]:
    lv = plain_disk("inst1.disk0", 64, vg=vg)
    renamed = plain_disk("inst1.disk0-renamed", 96, vg=vg)
    return {
        "create, set info, grow, find, rename, remove": [
            ["create", lv, OWNER, True, INFO, False],
            ["setinfo", lv, "originstname+inst1-renamed.example.com"],
            ["grow", lv, 32, True, True, False],
            ["grow", lv, 32, False, True, False],
            ["grow", lv, 32, False, False, False],
            ["find", lv],
            ["rename", lv, [vg, "inst1.disk0-renamed"]],
            ["remove", renamed],
            ["remove", renamed]],
        "create on a secondary, assemble, shut down": [
            ["create", lv, OWNER, False, INFO, False],
            ["assemble", lv, False],
            ["assemble", lv, True],
            ["shutdown", lv],
            ["remove", lv]],
        "two stripes asked, one PV: one stripe": [
            ["create", plain_disk("striped", 32, vg=vg, stripes=2), OWNER, True, INFO, False],
            ["remove", plain_disk("striped", 32, vg=vg)]],
        "bigger than the volume group": [
            ["create", plain_disk("big", 4096, vg=vg), OWNER, True, INFO, False]],
        "a missing volume group": [
            ["create", plain_disk("x", 8, vg=f"{vg}missing"), OWNER, True, INFO, False]],
    }


def run_ganeti(env: Mapping[str, str], calls: Sequence[Sequence[Any]],
               **paths: str) -> dict[str, Any]:
    result: dict[str, Any] = harness.run_ganeti_driver(
        HERE / "storage_driver.py", {"env": dict(env), "calls": calls, **paths},
        "storage code", path="/usr/sbin:/usr/bin:/sbin:/bin")
    return result


def run_herder(env: Mapping[str, str], calls: Sequence[Sequence[Any]],
               **host_paths: Any) -> dict[str, Any]:
    real = SubprocessRunner(extra_env=env)
    commands: list[list[str]] = []
    scripts: list[list[Any]] = []

    def recording(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                  timeout: float | None = None, cwd: str | None = None) -> CommandResult:
        commands.append([str(arg) for arg in argv])
        if env is not None or cwd is not None:
            scripts.append([[str(arg) for arg in argv], cwd, dict(env or {})])
        return real(argv, env=env, timeout=timeout, cwd=cwd)

    host = Host(runner=recording, lv_device_nodes_required=False, **host_paths)
    errors: list[str | None] = []
    for name, *args in calls:
        try:
            harness.HERDER_CALLS[name](host, *args)
            errors.append(None)
        except BlockDevError as err:
            errors.append(str(err))
    return {"commands": commands, "scripts": scripts, "errors": errors}


def empty(vg: test_lvm_real.LoopVg) -> None:
    subprocess.run(["lvremove", "-f", vg.vg], env={**os.environ, **vg.env},
                   capture_output=True, check=False)
    assert vg.lvs() == {}


@pytest.mark.parametrize("name", list(scenarios("xenvg")))
def test_lvm_commands_equal_ganetis(name: str, vg: test_lvm_real.LoopVg) -> None:
    calls = scenarios(vg.vg)[name]
    theirs = run_ganeti(vg.env, calls)
    left_by_ganeti = vg.lvs()
    empty(vg)
    ours = run_herder(vg.env, calls)
    assert ours["commands"] == theirs["commands"]
    assert [e is None for e in ours["errors"]] == [e is None for e in theirs["errors"]], (
        ours["errors"], theirs["errors"])
    assert vg.lvs() == left_by_ganeti


def test_the_scenarios_reach_the_real_tools(vg: test_lvm_real.LoopVg) -> None:
    """Worth something only if the real tools answered: the LV was made, grown, renamed."""
    ours = run_herder(vg.env, scenarios(vg.vg)["create, set info, grow, find, rename, remove"])
    verbs = [argv[0] for argv in ours["commands"]]
    for verb in ("pvs", "lvcreate", "lvchange", "lvextend", "lvrename", "lvremove", "lvs"):
        assert verb in verbs
    assert ours["errors"][:-1] == [None] * 8
    big = run_herder(vg.env, scenarios(vg.vg)["bigger than the volume group"])
    assert big["errors"][0].startswith(f"not enough free space in volume group '{vg.vg}'")


# --- ext: the sharedimg provider, for real (images loop-attached) ---------------------------

EXTSTORAGE = Path(__file__).resolve().parents[2] / "src/herder/sim/extstorage"


def ext_scenario(images: Path) -> list[list[Any]]:
    vol = {"dev_type": "ext", "logical_id": ["sharedimg", "vol-inst1-0"], "size": 4,
           "params": {"access": "kernelspace", "dir": str(images)}, "iv_name": "disk/0",
           "name": "disk0", "uuid": "u-3", "mode": "rw", "children": [], "spindles": None,
           "dynamic_params": {}}
    return [["create", vol, OWNER, True, INFO, False],
            ["setinfo", vol, "originstname+inst1-renamed.example.com"],
            ["find", vol],
            ["grow", vol, 4, True, True, False],
            ["grow", vol, 4, False, True, False],
            ["shutdown", vol],
            ["assemble", vol, True],
            ["shutdown", vol],
            ["remove", vol]]


def detach_loops(images: Path) -> None:
    for image in images.glob("*.img"):
        found = subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(image)],
                               capture_output=True, text=True, check=False).stdout.split()
        for loop in found:
            subprocess.run(["losetup", "-d", loop], capture_output=True, check=False)


@contextlib.contextmanager
def holding_loop0(directory: Path) -> Iterator[bool]:
    """/dev/loop0 taken by a file of ours for the duration when it is free within a few
    seconds (True), else left to whoever holds it (False). Both Ganeti's ExtStorageDevice and
    herder's treat a device of minor 0 as not attached (`if not self.minor`) and run `attach`
    once more before a `detach`; loop0 held gives both sides a nonzero minor, so their script
    sequences are comparable. A simulated cluster of another module may hold loop0 for
    minutes: then it is held, just not by us, and may be let go while we run."""
    filler = directory / "loop0.img"
    filler.write_bytes(b"\0" * 4096)
    deadline = time.monotonic() + 10
    while subprocess.run(["losetup", "/dev/loop0", str(filler)], capture_output=True,
                         check=False).returncode != 0:
        if time.monotonic() > deadline:
            yield False
            return
        time.sleep(0.5)
    try:
        yield True
    finally:
        subprocess.run(["losetup", "-d", "/dev/loop0"], capture_output=True, check=False)


def run_both_sides(tmp_path: Path, calls: list[list[Any]]) -> tuple[dict[str, Any], bool]:
    """Ganeti's and herder's runs of `calls`, and whether loop0 was ours throughout."""
    images = tmp_path / "images"  # EXTP_DIR: the same for both sides
    results = {}
    with holding_loop0(tmp_path) as ours:
        try:
            for side in ("ganeti", "herder"):
                logs = tmp_path / side / "logs"
                logs.mkdir(parents=True)
                env = {"SHAREDIMG_RUN_DIR": str(tmp_path / side / "run")}
                if side == "ganeti":
                    results[side] = run_ganeti(env, calls, es_search_path=[str(EXTSTORAGE)],
                                               es_log_dir=str(logs))
                else:
                    results[side] = run_herder(env, calls, es_search_path=(EXTSTORAGE,),
                                               es_log_dir=logs, ext_timeout=30.0)
                assert not list(images.iterdir()), f"{side} left the volume behind"
        finally:
            detach_loops(images)
    return results, ours


def test_ext_scripts_and_environment_equal_ganetis(tmp_path: Path) -> None:
    """Each provider script Ganeti runs, in its order, with the same VOL_*/EXTP_* environment
    and working directory, for the same disk; both make, grow and remove the volume."""
    if not harness.ganeti_available():
        pytest.skip("Ganeti 3.0.2 from ../shared/peers (/tmp/groot) is absent")
    free_loop = subprocess.run(["losetup", "-f"], capture_output=True, check=False)
    if os.geteuid() != 0 or free_loop.returncode != 0:
        pytest.skip("needs root and a free loop device")
    for attempt in range(3):
        # a fresh directory per attempt: the images and the EXTP_DIR paths stay the same
        # length, so the recorded environments compare equal between the sides
        work = tmp_path / f"attempt{attempt}"
        (work / "images").mkdir(parents=True)
        calls = ext_scenario(work / "images")
        results, loop0_ours = run_both_sides(work, calls)
        if loop0_ours or results["herder"]["scripts"] == results["ganeti"]["scripts"]:
            break  # else loop0 may have come free under one side only: run both again
    theirs, ours = results["ganeti"], results["herder"]
    assert ours["scripts"] == theirs["scripts"]
    assert ours["errors"] == [None] * len(calls)
    assert theirs["errors"] == [None] * len(calls)
    ran = [Path(argv[0]).name for argv, _cwd, _env in ours["scripts"]]
    assert ran[:2] == ["create", "attach"] and "grow" in ran and ran[-1] == "remove"
