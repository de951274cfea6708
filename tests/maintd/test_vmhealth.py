"""Issue 18: unwell instances mond reports become maintd incidents (item 11: hung, paused on an
I/O error; item 5: a stray copy is stopped only while the primary's copy runs), and a failed
restart falls back to another node (item 12)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from herder.core import notification
from herder.core.errors import HerderError
from herder.maintd import vmhealth
from herder.maintd.daemon import Maintd
from herder.maintd.rounds import Instance
from herder.maintd.state import FileState

from .fakes import FakeAgents, FakeCluster, FakeSource

U_A = "11111111-1111-4111-8111-111111111111"


def drbd(name: str = "a") -> Instance:
    return Instance(name, "node2", snodes=("node3",), disk_template="drbd", uuid=U_A)


def plain(name: str = "a") -> Instance:
    return Instance(name, "node2", disk_template="plain", uuid=U_A)


def make(tmp_path: Path, instance: Instance,
         recovery: notification.Recovery | None = None) -> tuple[FakeCluster, Maintd]:
    cluster = FakeCluster(4, [instance])
    daemon = Maintd(cluster, FileState(tmp_path / "s.json"), [FakeSource()], interval=0.01,
                    watcher=False, round_delay=3600, agents=FakeAgents(cluster),
                    recovery=recovery)
    return cluster, daemon


def ops_of(cluster: FakeCluster) -> list[str]:
    return [op["OP_ID"] for _, ops in cluster.submitted for op in ops]


# --- item 11: hung and paused instances -------------------------------------------------------


def test_a_hung_instance_is_rebooted_after_several_reports(tmp_path: Path) -> None:
    cluster, daemon = make(tmp_path, drbd())
    cluster.actual["a"] = "hung"

    async def go() -> None:
        for _ in range(notification.HUNG_POLLS - 1):
            await daemon.tick()
        assert cluster.submitted == []  # one report is no hang
        await daemon.tick()
        (_, ops), = cluster.submitted
        assert ops[0]["OP_ID"] == "OP_INSTANCE_REBOOT" and ops[0]["reboot_type"] == "hard"
        assert ops[0]["reason"][0][0] == "gnt:daemon:mond"
        (inc,) = daemon.state.incidents
        assert inc.action == "restart" and vmhealth.kind_of(inc) == "hung"
        cluster.run_all()
        await daemon.tick()
        assert inc.repair_status == "completed" and cluster.reboots == ["a"]
        for _ in range(notification.HUNG_POLLS + 1):
            await daemon.tick()
        assert len(cluster.submitted) == 1  # well again: nothing more

    asyncio.run(go())


def test_paused_on_an_io_error_fails_over_mirrored_disks(tmp_path: Path) -> None:
    cluster, daemon = make(tmp_path, drbd())
    cluster.actual["a"], cluster.reasons["a"] = "paused", "ioerror"

    async def go() -> None:
        await daemon.tick()
        (_, ops), = cluster.submitted
        assert ops[0]["OP_ID"] == "OP_INSTANCE_FAILOVER" and ops[0]["instance_name"] == "a"
        (inc,) = daemon.state.incidents
        assert inc.action == "relocate" and vmhealth.kind_of(inc) == "paused-io-error"

    asyncio.run(go())


def test_paused_on_an_io_error_with_local_disks_notifies_and_opens_a_storage_incident(
        tmp_path: Path) -> None:
    cluster, daemon = make(tmp_path, plain())
    cluster.actual["a"], cluster.reasons["a"] = "paused", "ioerror"

    async def go() -> None:
        for _ in range(3):
            await daemon.tick()
        assert cluster.submitted == []
        inst_inc, node_inc = daemon.state.incidents
        assert inst_inc.action == "notify" and inst_inc.instance == U_A
        assert node_inc.action == "notify" and node_inc.instance is None
        assert node_inc.node == "u2" and node_inc.original["details"]["storage-io-error"] == "a"
        # the operator fixed it and resumed the guest: the instance's incident completes
        cluster.actual["a"], cluster.reasons["a"] = "up", "unpaused"
        await daemon.tick()
        assert inst_inc.repair_status == "completed"
        assert node_inc.repair_status == "noted"  # the storage stays the operator's

    asyncio.run(go())


def test_the_actions_are_configurable(tmp_path: Path) -> None:
    table = tmp_path / "recovery.toml"
    table.write_text('hung_polls = 2\n[actions]\nhung = "notify"\n'
                     '"paused-io-error" = "restart"\n')
    recovery = notification.load_recovery(table)
    cluster, daemon = make(tmp_path, drbd(), recovery)
    cluster.actual["a"] = "hung"

    async def go() -> None:
        await daemon.tick()
        await daemon.tick()
        assert cluster.submitted == []
        (inc,) = daemon.state.incidents
        assert inc.action == "notify"

    asyncio.run(go())


@pytest.mark.parametrize("text, problem", [
    ('[actions]\nhung = "reboot"\n', "must be one of restart, failover, notify"),
    ('[actions]\nfrozen = "notify"\n', "unknown condition 'frozen'"),
    ("hung_polls = 1\n", "at least 2 reports"),
])
def test_bad_recovery_settings_are_one_line(tmp_path: Path, text: str, problem: str) -> None:
    table = tmp_path / "recovery.toml"
    table.write_text(text)
    with pytest.raises(HerderError, match=problem) as caught:
        notification.load_recovery(table)
    assert "\n" not in str(caught.value)


# --- item 12: a failed restart tries another node -----------------------------------------------


def restart_fails(tmp_path: Path, instance: Instance) -> tuple[FakeCluster, Maintd]:
    cluster, daemon = make(tmp_path, instance)
    cluster.fail_ops.add("OP_INSTANCE_STARTUP")
    return cluster, daemon


def crash() -> notification.Notification:
    return notification.Notification("VM", "node2", "2027-01-15T08:00:00.000001", {
        "event": "LIFECYCLE", "instance_uuid": U_A, "vir_domain_event": "STOPPED_FAILED"})


def test_a_failed_restart_fails_over_mirrored_disks(tmp_path: Path) -> None:
    cluster, daemon = restart_fails(tmp_path, drbd())

    async def go() -> None:
        await daemon.start()
        assert (await daemon.notify(crash()))[0] == 202
        await daemon.tick()
        cluster.run_all()  # the restart fails
        await daemon.tick()
        (inc,) = daemon.state.incidents
        assert ops_of(cluster) == ["OP_INSTANCE_STARTUP", "OP_INSTANCE_FAILOVER"]
        assert inc.action == "relocate" and inc.repair_status == "pending"
        assert len(inc.jobs) == 2
        cluster.run_all()
        await daemon.tick()
        assert inc.repair_status == "completed"
        assert cluster.instances()[0].pnode == "node3"
        assert not cluster.instance_tags("a")

    asyncio.run(go())


def test_a_failed_restart_of_local_disks_still_fails(tmp_path: Path) -> None:
    cluster, daemon = restart_fails(tmp_path, plain())

    async def go() -> None:
        await daemon.start()
        await daemon.notify(crash())
        await daemon.tick()
        cluster.run_all()
        await daemon.tick()
        (inc,) = daemon.state.incidents
        assert inc.repair_status == "failed"
        assert ops_of(cluster) == ["OP_INSTANCE_STARTUP", "OP_TAGS_SET"]

    asyncio.run(go())


# --- item 5: stray copies -------------------------------------------------------------------------


def test_a_stray_copy_is_stopped_when_the_primary_runs(tmp_path: Path) -> None:
    cluster, daemon = make(tmp_path, drbd())
    cluster.strays["node3"] = {"a"}

    async def go() -> None:
        await daemon.tick()
        assert cluster.submitted == []  # one report is not enough
        await daemon.tick()
        (_, ops), = cluster.submitted
        assert ops[0]["OP_ID"] == "OP_INSTANCE_STOP_STRAY"
        assert ops[0]["instance_name"] == "a" and ops[0]["node_name"] == "node3"
        cluster.run_all()
        await daemon.tick()
        (inc,) = daemon.state.incidents
        assert inc.repair_status == "completed" and cluster.strays["node3"] == set()

    asyncio.run(go())


def test_a_stray_copy_is_left_alone_while_the_primary_does_not_run(tmp_path: Path) -> None:
    cluster, daemon = make(tmp_path, drbd())
    cluster.strays["node3"] = {"a"}
    cluster.actual["a"] = "down"

    async def go() -> None:
        for _ in range(4):
            await daemon.tick()
        assert "OP_INSTANCE_STOP_STRAY" not in ops_of(cluster)

    asyncio.run(go())
