"""`plain` and `drbd`: per operation, the commands herder runs equal Ganeti 3.0.2's own.

Both run the same calls on the same stand-in node (world.py, shaped like the real captures):
herder through `bdev.operations`, Ganeti through its backend (`BlockdevCreate`, ...,
`DrbdAttachNet`) in a subprocess with Debian's python3. The argv lists must be equal, and so
must success or failure and the returned statuses. Skips when /tmp/groot is absent.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.noded.bdev import harness, world
from tests.noded.bdev.harness import drbd_disk, plain_disk

pytestmark = pytest.mark.peer

OWNER, INFO = "inst1.example.com", "originstname+inst1.example.com"


def plain_state() -> dict[str, Any]:
    state = world.new_state(drbd=None)
    world.add_lv(state, "xenvg", "lv1", 1024, tags=["old-owner"])
    return state


PLAIN_SCENARIOS: dict[str, tuple[Any, list[list[Any]]]] = {
    "create primary, two stripes": (
        world.new_state(None),
        [["create", plain_disk("new", stripes=2), OWNER, True, INFO, False]]),
    "create secondary": (
        world.new_state(None),
        [["create", plain_disk("new"), OWNER, False, INFO, False]]),
    "create falls back to fewer stripes": (
        {**world.new_state(None), "fail": ["lvcreate -Wn -L1024m -nnew -i2"]},
        [["create", plain_disk("new", stripes=2), OWNER, True, INFO, False]]),
    "create bigger than the VG": (
        world.new_state(None),
        [["create", plain_disk("big", size=20000), OWNER, True, INFO, False]]),
    "create in a missing VG": (
        world.new_state(None),
        [["create", plain_disk("new", vg="novg"), OWNER, True, INFO, False]]),
    "create with exclusive storage": (
        {**world.new_state(None), "pvs": [
            {"name": "/dev/sda5", "vg": "xenvg", "size": 10240.0, "free": 10240.0,
             "attr": "a--"},
            {"name": "/dev/sdb1", "vg": "xenvg", "size": 10240.0, "free": 10240.0,
             "attr": "a--"}]},
        [["create", plain_disk("new", spindles=2), OWNER, True, INFO, True]]),
    "assemble on primary and secondary": (
        plain_state(), [["assemble", plain_disk("lv1"), True],
                        ["assemble", plain_disk("lv1"), False]]),
    "find, status, shutdown": (
        plain_state(), [["find", plain_disk("lv1")], ["mirror_status", [plain_disk("lv1")]],
                        ["shutdown", plain_disk("lv1")], ["find", plain_disk("missing")]]),
    "grow": (
        plain_state(), [["grow", plain_disk("lv1"), 1000, True, False, False],
                        ["grow", plain_disk("lv1"), 1000, False, True, False],
                        ["grow", plain_disk("lv1"), 1000, False, False, False]]),
    "grow falls back to other allocation policies": (
        {**plain_state(), "fail": ["lvextend -L +1024000k --alloc contiguous"]},
        [["grow", plain_disk("lv1"), 1000, False, True, False]]),
    "rename": (
        plain_state(), [["rename", plain_disk("lv1"), ["xenvg", "lv1-renamed"]],
                        ["rename", plain_disk("lv1-renamed"), ["othervg", "x"]]]),
    "set info replaces the tags": (
        plain_state(), [["setinfo", plain_disk("lv1"), INFO]]),
    "snapshot": (
        plain_state(), [["snapshot", plain_disk("lv1"), None, None]]),
    "remove, then remove a missing LV": (
        plain_state(), [["remove", plain_disk("lv1")], ["remove", plain_disk("lv1")]]),
}


def drbd_state(version: str, **minor: Any) -> dict[str, Any]:
    """Data and metadata LVs in place; minor 0 configured as given (absent: free)."""
    state = world.new_state(version)
    world.add_lv(state, "xenvg", "inst.disk0_data", 1024)
    world.add_lv(state, "xenvg", "inst.disk0_meta", 128)
    if minor:
        world.add_minor(state, 0, **{
            "disk": "/dev/xenvg/inst.disk0_data", "meta": "/dev/xenvg/inst.disk0_meta",
            "laddr": [harness.LOCAL_IP, harness.PORT],
            "raddr": [harness.REMOTE_IP, harness.PORT], **minor})
    return state


def with_new_lvs(state: dict[str, Any]) -> dict[str, Any]:
    world.add_lv(state, "xenvg", "inst.disk0_data.new", 1024)
    world.add_lv(state, "xenvg", "inst.disk0_meta.new", 128)
    return state


def drbd_scenarios(version: str) -> dict[str, tuple[Any, list[list[Any]]]]:
    disk = drbd_disk()
    configured: dict[str, Any] = {"cs": "Connected", "roles": "Secondary/Primary"}
    new_children = [plain_disk("inst.disk0_data.new"), plain_disk("inst.disk0_meta.new", 128)]
    old_children = disk["children"]
    return {
        "create on the primary": (
            drbd_state(version), [["create", disk, OWNER, True, INFO, False]]),
        "create on the secondary": (
            drbd_state(version), [["create", disk, OWNER, False, INFO, False]]),
        "create on a used minor": (
            drbd_state(version, **configured), [["create", disk, OWNER, True, INFO, False]]),
        "create with barriers and custom options": (
            drbd_state(version),
            [["create", drbd_disk(params={"disabled-barriers": "bf", "disable-meta-flush": True,
                                          "disk-custom": "--al-extents 3389",
                                          "net-custom": "--max-buffers 8000"}),
              OWNER, True, INFO, False]]),
        "create with the dynamic resync controller": (
            drbd_state(version),
            [["create", drbd_disk(params={"dynamic-resync": True}), OWNER, True, INFO, False]]),
        "assemble a free minor (secondary), then again (configured)": (
            drbd_state(version), [["assemble", disk, False], ["assemble", disk, False]]),
        "assemble: local disk but no network": (
            drbd_state(version, cs="StandAlone", laddr=None, raddr=None,
                       roles="Secondary/Unknown", disks="UpToDate/DUnknown"),
            [["assemble", disk, True]]),
        "assemble: network but no local disk": (
            drbd_state(version, disk=None, meta=None, disks="Diskless/UpToDate"),
            [["assemble", disk, False]]),
        "assemble: connected to the wrong peer": (
            drbd_state(version), [["assemble", disk, False],
                                  ["assemble", drbd_disk(remote_ip="192.0.2.3"), False]]),
        "a dead primary's return: the survivor, primary, waiting for its peer": (
            drbd_state(version, cs="WFConnection", roles="Primary/Unknown",
                       disks="UpToDate/DUnknown"),
            [["assemble", disk, True], ["find", disk], ["mirror_status", [disk]]]),
        "a dead primary's return: its free minor assembled as secondary resyncs": (
            {**drbd_state(version), "peer": {"role": "Primary", "ahead": True}},
            [["assemble", disk, False], ["find", disk], ["mirror_status", [disk]]]),
        "role swap: primary, secondary": (
            drbd_state(version, **configured),
            [["open", [disk], True], ["close", [disk]], ["open", [disk], False]]),
        "disconnect, dual-primary attach (migration), back to single primary": (
            drbd_state(version, **configured),
            [["disconnect_net", [disk]], ["attach_net", [disk], True],
             ["open", [disk], False], ["disconnect_net", [disk]],
             ["attach_net", [disk], False]]),
        "attach net refuses a connected device": (
            drbd_state(version, **configured), [["attach_net", [disk], False]]),
        "replace disks: remove and add children": (
            with_new_lvs(drbd_state(version, **configured)),
            [["remove_children", disk, old_children],
             ["add_children", disk, new_children]]),
        "grow: the LV, then DRBD": (
            drbd_state(version, **configured),
            [["grow", disk, 512, False, True, False], ["grow", disk, 512, False, False, False],
             ["grow", disk, 512, True, False, False]]),
        "rename is refused": (
            drbd_state(version, **configured),
            [["rename", disk, ["a", "b", 1, 2, 3, "s"]]]),
        "sync status while resyncing, wait for sync": (
            drbd_state(version, cs="SyncTarget", disks="Inconsistent/UpToDate", sync=True),
            [["find", disk], ["mirror_status", [disk]], ["wait_sync", [disk]]]),
        "sync status of a diskless minor": (
            drbd_state(version, disk=None, meta=None, disks="Diskless/UpToDate"),
            [["find", disk]]),
        "shutdown": (
            drbd_state(version, **configured), [["shutdown", disk], ["shutdown", disk]]),
        "remove": (
            drbd_state(version, **configured), [["remove", disk]]),
        "wipe": (
            drbd_state(version, **configured), [["wipe", disk, 0, 512]]),
    }


ALL_SCENARIOS: dict[str, tuple[Any, list[list[Any]]]] = {
    **{f"plain: {name}": scenario for name, scenario in PLAIN_SCENARIOS.items()},
    **{f"drbd {version}: {name}": scenario
       for version in ("8.4", "8.3") for name, scenario in drbd_scenarios(version).items()},
}


@pytest.fixture(scope="module")
def ganeti_results() -> dict[str, dict[str, Any]]:
    """Ganeti's commands for every scenario, from one run of its code."""
    names = list(ALL_SCENARIOS)
    results = harness.run_ganeti_jobs([ALL_SCENARIOS[name] for name in names])
    return dict(zip(names, results, strict=True))


@pytest.mark.parametrize("name", list(ALL_SCENARIOS))
def test_commands_equal_ganeti(name: str, ganeti_results: dict[str, dict[str, Any]]) -> None:
    theirs = ganeti_results[name]
    ours = harness.run_herder(*ALL_SCENARIOS[name])
    assert ours["commands"] == theirs["commands"]
    assert [e is None for e in ours["errors"]] == [e is None for e in theirs["errors"]], (
        ours["errors"], theirs["errors"])
    for mine, their in zip(ours["results"], theirs["results"], strict=True):
        if isinstance(mine, list) and isinstance(their, list):
            assert mine == their
    assert ours["state"] == theirs["state"]


def test_plain_scenarios_run_what_they_say() -> None:
    """The comparison is only worth something if the scenarios exercise the commands."""
    ours = harness.run_herder(*PLAIN_SCENARIOS["create falls back to fewer stripes"])
    creates = [c for c in ours["commands"] if c[0] == "lvcreate"]
    assert [c[4] for c in creates] == ["-i2", "-i1"]
    big = harness.run_herder(*PLAIN_SCENARIOS["create bigger than the VG"])
    assert big["errors"] == ["not enough free space in volume group 'xenvg': 20000 MiB"
                             " required, 16384 MiB available"]
    assert not any(c[0] == "lvcreate" for c in big["commands"])


def test_drbd_create_runs_ganetis_sequence() -> None:
    ours = harness.run_herder(*drbd_scenarios("8.4")["create on the primary"])
    verbs = [c[1] if c[0] == "drbdsetup" else c[0] for c in ours["commands"]]
    for expected in ("dd", "drbdmeta", "new-resource", "attach", "disk-options", "connect",
                     "primary"):
        assert expected in verbs
    connect = next(c for c in ours["commands"] if c[:2] == ["drbdsetup", "connect"])
    assert connect[-4:] == ["--cram-hmac-alg", "md5", "--shared-secret", harness.SECRET]
    assert "--allow-two-primaries" not in connect
    migration = harness.run_herder(*drbd_scenarios("8.4")[
        "disconnect, dual-primary attach (migration), back to single primary"])
    connects = [c for c in migration["commands"] if c[:2] == ["drbdsetup", "connect"]]
    assert ["--allow-two-primaries" in c for c in connects] == [True, False]


def test_drbd9_kernel_refused_with_ganetis_message() -> None:
    state, calls = drbd_state("9"), [["create", drbd_disk(), OWNER, True, INFO, False]]
    ours = harness.run_herder(state, calls)
    message = ("Mismatch in DRBD kernel version and requested ganeti usage: kernel is 9.0,"
               " ganeti wants 8.x")
    assert ours["errors"] == [message]
    # herder refuses before writing anything; Ganeti 3.0.2 wipes the metadata LV first.
    assert not any(c[0] in ("dd", "drbdmeta") for c in ours["commands"])
    if harness.ganeti_available():
        theirs = harness.run_ganeti(state, calls)
        assert message in theirs["errors"][0]


def test_a_returning_secondary_attaches_connects_and_resyncs() -> None:
    """The return's scenarios are worth something only if they show the resync: the
    returning node attaches its disks and connects to the survivor, then reports itself
    resyncing (SyncTarget); the survivor reports its mirror degraded until then."""
    scenarios = drbd_scenarios("8.4")
    back = harness.run_herder(*scenarios[
        "a dead primary's return: its free minor assembled as secondary resyncs"])
    verbs = [c[1] for c in back["commands"] if c[0] == "drbdsetup"]
    assert verbs.index("attach") < verbs.index("connect")
    status = back["results"][1]
    assert status[3] == 34.9 and status[5] is True  # sync_percent, is_degraded
    survivor = harness.run_herder(*scenarios[
        "a dead primary's return: the survivor, primary, waiting for its peer"])
    assert not any(c[:2] == ["drbdsetup", "connect"] for c in survivor["commands"])
    assert survivor["results"][1][5] is True
