"""Issue 30 item 6: scheduled backups. The planner on its own (pure), then a real maintd
(`Maintd` over `RapiCluster`, its state in the config through `RapiState`) against a real
masterd process, the clock driven by the test: a schedule added through the route (bad ones
refused in one line, nothing changed) runs when its time comes and not before, its run
recorded with its export job and outcome, shown by `/1/backups` and `herder maintd status`;
maintenance disabled pauses it; a second maintd over the same config (a master failover)
does not run it again; a run saved but never submitted (a crash) is submitted once.
(The export itself on real disks: tests/system/test_backup_schedule_exports.py.)"""

from __future__ import annotations

import asyncio
import calendar
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from herder.core import backupsched, model
from herder.core.backupsched import BackupRun, BackupSchedule
from herder.core.rapi import RapiError
from herder.core.store import FileStore
from herder.maintd import backups
from herder.maintd.daemon import Maintd, RapiCluster
from herder.maintd.rounds import Instance
from herder.maintd.state import FileState, RapiState
from tests.maintd.fakes import Server
from tests.system.masterd_fixture import RunningMaster, make_cluster, start_masterd

DAY0 = float(calendar.timegm((2030, 1, 7, 0, 0, 0)))  # after any schedule made now
WEB1, WEB2, DB1 = "web1.example.com", "web2.example.com", "db1.example.com"


def at(hours: float) -> float:
    return DAY0 + hours * 3600


# --- the planner -------------------------------------------------------------------------------


def sched(when: str = "daily 02:00", **kw: Any) -> BackupSchedule:
    fields: dict[str, Any] = {"name": "nightly", "when": when,
                              "target_node": "node3.example.com", "tag": "backup",
                              "ctime": at(1)}
    fields.update(kw)
    if "instance" in kw:
        fields["tag"] = ""
    return BackupSchedule(**fields)


INSTANCES = [Instance(name=WEB1, pnode="node2", tags=("backup",)),
             Instance(name=WEB2, pnode="node2", tags=("backup", "x")),
             Instance(name=DB1, pnode="node2")]


def test_a_daily_schedule_runs_each_tagged_instance_once_per_day() -> None:
    schedules = [sched()]
    assert backups.plan(schedules, INSTANCES, [], at(1.5)) == []  # made at 01:00: not yet
    runs = backups.plan(schedules, INSTANCES, [], at(2))
    assert [(r.instance, r.due, r.target_node) for r in runs] == [
        (WEB1, at(2), "node3.example.com"), (WEB2, at(2), "node3.example.com")]
    assert backups.export_op(runs[0])["OP_ID"] == "OP_BACKUP_EXPORT"
    assert backups.export_op(runs[0])["reason"][-1][1] == runs[0].uuid
    assert backups.plan(schedules, INSTANCES, runs, at(5)) == []  # still going
    assert backups.exporting(runs) == {WEB1, WEB2}  # the watcher leaves them be meanwhile
    for run in runs:
        run.status = "success"
    assert backups.plan(schedules, INSTANCES, runs, at(20)) == []  # done for the day
    again = backups.plan(schedules, INSTANCES, runs, at(24 + 2))
    assert [(r.instance, r.due) for r in again] == [(WEB1, at(26)), (WEB2, at(26))]


def test_missed_times_are_run_once_and_a_busy_instance_waits() -> None:
    schedules = [sched(), sched("every 6 hours", name="often", instance=WEB1)]
    ran = BackupRun(uuid="u", schedule="nightly", instance=WEB1,
                    target_node="node3.example.com", due=at(2), status="failed")
    runs = backups.plan(schedules, INSTANCES, [ran], at(24 * 3 + 7))
    # three days later: one run per instance of each schedule (WEB1 once: it is busy then)
    assert sorted((r.schedule, r.instance, r.due) for r in runs) == [
        ("nightly", WEB1, at(74)), ("nightly", WEB2, at(74))]


def test_a_cron_schedule_runs_on_its_days_in_utc() -> None:
    """`0 2 * * mon-fri` (DAY0 is a Monday): due at 02:00 UTC on weekdays, the weekend
    skipped; a nickname (`weekly`, cron's Sunday 00:00) too; the old forms unchanged."""
    weekdays = sched("0 2 * * mon-fri", ctime=at(-1))
    assert backupsched.last_due(weekdays.when, at(1.99)) == at(2) - 3 * 86400  # Friday's
    assert backupsched.last_due(weekdays.when, at(2)) == at(2)  # at the time: due
    assert backupsched.next_due(weekdays.when, at(2)) == at(24 + 2)
    assert backupsched.next_due(weekdays.when, at(4 * 24 + 3)) == at(7 * 24 + 2)  # Fri->Mon
    runs: list[BackupRun] = []
    days = []
    for hour in range(0, 7 * 24, 1):
        new = backups.plan([weekdays], INSTANCES[:1], runs, at(hour))
        for run in new:
            run.status = "success"
        runs += new
        days += [(hour, r.due) for r in new]
    assert days == [(d * 24 + 2, at(d * 24 + 2)) for d in range(5)]
    assert backupsched.next_due("weekly", at(0)) == at(6 * 24)  # Sunday 00:00
    assert backupsched.next_due("@weekly", at(0)) == at(6 * 24)
    assert backupsched.next_due("*/30 * * * *", at(0.25)) == at(0.5)
    assert backupsched.next_due("daily 02:00", at(2)) == at(26)
    assert backupsched.last_due("every 6 hours", at(7)) == at(6)


@pytest.mark.parametrize(("raw", "fragment"), [
    ({"when": "daily 24:00"}, "give 'daily HH:MM'"),
    ({"when": "every 2 minutes"}, "between every 5 minutes"),
    ({"when": "sat 3:30"}, "give 'daily HH:MM'"),
    ({"when": "0 2 * * mon..fri"}, "or a cron expression"),
    ({"when": "61 * * * *"}, "not a cron expression croniter takes"),
    ({"when": "0 0 31 2 *"}, "not a cron expression croniter takes"),
    ({"when": "*/2 * * * *"}, "closer than every 5 minutes"),
    ({"when": "58,1 * * * *"}, "closer than every 5 minutes"),
    ({"when": "0 2 * * 1-5 2030"}, "give 'daily HH:MM'"),
    ({"tag": "", "instance": ""}, "give an instance or a tag"),
    ({"instance": WEB1}, "give an instance or a tag"),
    ({"keep": 0}, "1 to 100 exports"),
    ({"keep": 101}, "1 to 100 exports"),
    ({"name": "a b"}, "invalid backup schedule name"),
    ({"targetNode": "no de"}, "target node"),
    ({"colour": "red"}, "unknown field"),
])
def test_bad_schedules_are_refused_in_one_line(raw: dict[str, Any], fragment: str) -> None:
    body = {"name": "n", "when": "daily 02:00", "targetNode": "node3", "tag": "backup", **raw}
    with pytest.raises(backupsched.BadSchedule) as err:
        backupsched.parse_schedule(body)
    assert fragment in str(err.value) and "\n" not in str(err.value)


# --- a real maintd against a real masterd --------------------------------------------------------


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningMaster]:
    """A masterd whose instances live on node2, marked offline: an export of them fails at
    once, in one line, before any node is asked (their data path: the other module)."""
    directory = tmp_path_factory.mktemp("bkpsched")
    config_path = make_cluster(directory / "cluster")
    with FileStore(config_path).update() as config:
        node = config.find_node("node2.example.com")
        node.offline, node.master_candidate = True, False
        for name, tags in ((WEB1, ["backup"]), (WEB2, ["backup"]), (DB1, [])):
            disk = model.Disk(uuid=model.new_uuid(), dev_type="file", size=64,
                              iv_name="disk/0",
                              logical_id=model.FileId(driver="loop", path=f"/srv/x/{name}/d0"))
            inst = model.Instance(uuid=model.new_uuid(), name=name, primary_node=node.uuid,
                                  os="debootstrap+default", hypervisor="kvm", disks=[disk],
                                  tags=tags, ctime=model.now(), mtime=model.now())
            config.instances[inst.uuid] = inst
    with start_masterd(directory) as running:
        yield running


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def maintd(master: RunningMaster, tmp: Path, clock: Clock) -> Maintd:
    store = RapiState(master.client, FileState(tmp / "maintd-state.json"))
    return Maintd(RapiCluster(master.client), store, [], watcher=False, node_recovery=False,
                  clock=clock)


def add(master: RunningMaster, **body: Any) -> dict[str, Any]:
    return dict(master.client.request("POST", "/2/herder/backup-schedules", None, body))


def settle(daemon: Maintd, master: RunningMaster) -> list[BackupRun]:
    """Ticks until no run is pending or running (the jobs fail at once: node2 is offline)."""
    for job in (j for r in daemon.state.backups for j in r.jobs):
        master.client.wait_for_job(job, timeout=120)
    asyncio.run(daemon.tick())
    return daemon.state.backups


@pytest.mark.parametrize(("body", "status", "fragment"), [
    ({"name": "n", "when": "sat 3:30", "targetNode": "node3", "tag": "t"}, 400,
     "give 'daily HH:MM'"),
    ({"name": "n", "when": "* * * * *", "targetNode": "node3", "tag": "t"}, 400,
     "closer than every 5 minutes"),
    ({"name": "n", "when": "daily 02:00", "targetNode": "nosuch", "tag": "t"}, 404, "nosuch"),
    ({"name": "n", "when": "daily 02:00", "targetNode": "node3", "instance": "nosuch"}, 404,
     "nosuch"),
    ({"name": "n", "when": "daily 02:00", "targetNode": "node2", "tag": "t"}, 400, "offline"),
])
def test_the_route_refuses_bad_schedules_and_changes_nothing(
        master: RunningMaster, body: dict[str, Any], status: int, fragment: str) -> None:
    before = FileStore(master.config_path).load().maintenance.backup_schedules
    with pytest.raises(RapiError) as err:
        master.client.request("POST", "/2/herder/backup-schedules", None, body)
    assert err.value.status == status and fragment in str(err.value)
    assert FileStore(master.config_path).load().maintenance.backup_schedules == before


def test_a_schedule_runs_when_due_is_recorded_paused_and_survives_failover(
        master: RunningMaster, tmp_path: Path) -> None:
    listing = add(master, name="nightly", when="daily 02:00", targetNode="node3",
                  tag="backup")
    (made,) = listing["schedules"]
    assert made["targetNode"] == "node3.example.com" and made["ctime"] > 0
    with pytest.raises(RapiError) as err:
        add(master, name="nightly", when="daily 03:00", targetNode="node3", tag="backup")
    assert err.value.status == 409
    first = backupsched.next_due("daily 02:00", made["ctime"])  # the first 02:00 after it
    clock = Clock(first - 60)
    daemon = maintd(master, tmp_path, clock)
    asyncio.run(daemon.tick())
    assert daemon.state.backups == []  # not yet
    clock.now = first + 5
    asyncio.run(daemon.tick())
    runs = daemon.state.backups
    assert sorted(r.instance for r in runs) == [WEB1, WEB2]  # the tagged ones
    assert all(len(r.jobs) == 1 and r.status == "pending" and r.due == first for r in runs)
    jobs = {r.instance: r.jobs[0] for r in runs}
    ops = master.client.request("GET", f"/2/jobs/{jobs[WEB1]}")["ops"]
    assert (ops[0]["OP_ID"], ops[0]["instance_name"], ops[0]["target_node"]) == (
        "OP_BACKUP_EXPORT", WEB1, "node3.example.com")
    runs = settle(daemon, master)
    assert {r.status for r in runs} == {"failed"}
    assert all("offline" in r.error and r.end == clock.now for r in runs)
    shown = daemon.overview()["backups"]  # maintd's HTTP status (/1/overview, /1/backups)
    assert [r["uuid"] for r in shown["runs"]] == [r.uuid for r in runs]
    # a second maintd over the same config (the master failed over): nothing runs again
    clock.now = first + 18 * 3600
    other = maintd(master, tmp_path / "other", clock)
    asyncio.run(other.tick())
    assert [r.uuid for r in other.state.backups] == [r.uuid for r in runs]
    # maintenance off: the next day's time passes without a run; on again: it runs once
    master.client.put_herder("maintenance", {"enabled": False})
    _wait_settings(master, enabled=False)
    clock.now = first + backupsched.DAY + 60
    asyncio.run(other.tick())
    assert len(other.state.backups) == 2
    master.client.put_herder("maintenance", {"enabled": True})
    _wait_settings(master, enabled=True)
    clock.now = first + backupsched.DAY + 3600
    asyncio.run(other.tick())
    new = other.state.backups[2:]
    assert sorted((r.instance, r.due) for r in new) == [(WEB1, first + backupsched.DAY),
                                                         (WEB2, first + backupsched.DAY)]
    settle(other, master)
    master.client.request("DELETE", "/2/herder/backup-schedules/nightly")
    clock.now = first + 5 * backupsched.DAY
    asyncio.run(other.tick())
    assert len(other.state.backups) == 4  # removed: no more runs
    stored = FileStore(master.config_path).load().maintenance
    assert stored.backup_schedules == [] and len(stored.backup_runs) == 4


def _wait_settings(master: RunningMaster, enabled: bool) -> None:
    import time

    deadline = time.monotonic() + 60
    while master.client.get_herder("maintenance")["enabled"] != enabled:
        assert time.monotonic() < deadline, "the maintenance switch did not change"
        time.sleep(0.2)


def test_a_run_saved_before_its_job_is_submitted_once_after_a_crash(
        master: RunningMaster, tmp_path: Path) -> None:
    clock = Clock(at(3))
    orphan = BackupRun(uuid=model.new_uuid(), schedule="gone", instance=DB1,
                       target_node="node3.example.com", due=at(2), start=clock.now)
    stored = FileStore(master.config_path).load().maintenance.backup_runs
    master.client.put_herder("maintenance/state",
                             {"backupRuns": model.to_builtins([*stored, orphan])})
    daemon = maintd(master, tmp_path, clock)
    asyncio.run(daemon.start())
    (run,) = [r for r in daemon.state.backups if r.uuid == orphan.uuid]
    assert len(run.jobs) == 1
    again = maintd(master, tmp_path / "again", clock)  # crashed before its job id was saved
    again_state = again.store.load()
    for r in again_state.backups:
        if r.uuid == orphan.uuid:
            r.jobs = []
    again.store.save(again_state)
    asyncio.run(again.start())
    (adopted,) = [r for r in again.state.backups if r.uuid == orphan.uuid]
    assert adopted.jobs == run.jobs  # found in the queue by its reason, not submitted again


def _cli(master: RunningMaster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HERDER_OFFLINE", "HERDER_MASTERD")}
    env.update(HERDER_CONFIG=str(master.config_path), HERDER_MASTERD=master.url)
    return subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_commands_add_list_and_remove_schedules_and_maintd_status_shows_runs(
        master: RunningMaster, tmp_path: Path) -> None:
    added = _cli(master, "backup", "schedule", "add", "web1-often", "--when",
                 "every 6 hours", "-n", "node3", "--instance", "web1")
    assert added.returncode == 0 and "web1-often added" in added.stdout, added.stderr
    bad = _cli(master, "backup", "schedule", "add", "x", "--when", "mon..fri 02:00", "-n",
               "node3", "--tag", "t")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1
    assert "give 'daily HH:MM'" in bad.stderr
    yearly = _cli(master, "backup", "schedule", "add", "new-year", "--when", "0 3 1 1 *",
                  "-n", "node3", "--tag", "t", "--keep", "5")
    assert yearly.returncode == 0, yearly.stderr
    listed = _cli(master, "backup", "schedule", "list")
    assert any(line.split()[:3] == ["web1-often", "every", "6"] and WEB1 in line
               for line in listed.stdout.splitlines()), listed.stdout
    (line,) = [x for x in listed.stdout.splitlines() if x.startswith("new-year")]
    next_year = time.gmtime().tm_year + 1  # (unless this runs at 03:00 on January 1st)
    assert "keep 5" in line and f"next {next_year}-01-01 03:00:00 UTC" in line, line
    assert _cli(master, "backup", "schedule", "remove", "new-year").returncode == 0
    # a maintd runs it; its HTTP status and `herder maintd status` show the run
    (made,) = [s for s in json.loads(_cli(master, "backup", "schedule", "list",
                                          "--json").stdout)["schedules"]
               if s["name"] == "web1-often"]
    clock = Clock(backupsched.next_due("every 6 hours", made["ctime"]) + 1)
    daemon = maintd(master, tmp_path, clock)
    asyncio.run(daemon.tick())
    (run,) = [r for r in daemon.state.backups if r.schedule == "web1-often"]
    settle(daemon, master)
    with Server(daemon) as server:
        url = f"http://127.0.0.1:{server.port}"
        over_http = httpx.get(f"{url}/1/backups").json()
        assert run.uuid in [r["uuid"] for r in over_http["runs"]]
        status = _cli(master, "maintd", "status", "--url", url)
    assert status.returncode == 0, status.stderr
    (line,) = [x for x in status.stdout.splitlines() if x.startswith(run.uuid)]
    assert "web1-often" in line and WEB1 in line and "failed" in line and "offline" in line
    removed = _cli(master, "backup", "schedule", "remove", "web1-often")
    assert removed.returncode == 0, removed.stderr
    gone = _cli(master, "backup", "schedule", "remove", "web1-often")
    assert gone.returncode != 0 and "not found" in gone.stderr
