"""herder's snapshot routes on a real masterd (127.0.0.1; its nodes answer nowhere) and `herder
instance snapshot` through them: the list read from the config by read-only users, every
change a write user's job carrying exactly what was asked, bad names and bodies refused with
one 4xx line and nothing queued or changed. (The data path: tests/system/test_snapshots.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from herder.core import model
from herder.core.store import FileStore
from tests.security.test_rapi_access import READER, add_reader, admin_auth
from tests.system.masterd_fixture import RunningMaster, make_cluster, start_masterd

NAME = "web1.example.com"
ROUTE = f"/2/herder/instances/{NAME}/snapshots"
TAKEN = 1_780_000_000.0


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningMaster]:
    """A running ext instance with one recorded snapshot of its disk."""
    directory = tmp_path_factory.mktemp("snapshot-rapi")
    config_path = make_cluster(directory / "cluster")
    with FileStore(config_path).update() as config:
        config.cluster.enabled_disk_templates = [*config.cluster.enabled_disk_templates, "ext"]
        disk = model.Disk(uuid="d0000000-0000-4000-8000-000000000001", dev_type="ext",
                          size=64, iv_name="disk/0",
                          logical_id=model.ExtId(provider="sharedimg", name="vol0"))
        snapshot = model.InstanceSnapshot(name="before", ctime=TAKEN, volumes=[
            model.SnapshotVolume(disk=disk.uuid, logical_id=model.ExtId(
                provider="sharedimg", name="vol0.snap-before"))])
        inst = model.Instance(uuid=model.new_uuid(), name=NAME, admin_state="up",
                              primary_node=config.find_node("node2.example.com").uuid,
                              os="debootstrap+default", hypervisor="kvm", disks=[disk],
                              snapshots=[snapshot], ctime=model.now(), mtime=model.now())
        config.instances[inst.uuid] = inst
    with start_masterd(directory) as running:
        add_reader(running.config_path)
        yield running


EXPECTED = {"name": "before", "ctime": TAKEN, "disks": [
    {"uuid": "d0000000-0000-4000-8000-000000000001", "iv_name": "disk/0",
     "volume": ["sharedimg", "vol0.snap-before"]}]}


def state(master: RunningMaster) -> tuple[Any, int]:
    return master.client.get_jobs(), FileStore(master.config_path).load().serial_no


def test_readers_list_the_recorded_snapshots(master: RunningMaster) -> None:
    with httpx.Client(verify=False, timeout=60) as http:
        listed = http.get(master.url + ROUTE, auth=READER)
        assert listed.status_code == 200 and listed.json() == [EXPECTED]
        one = http.get(f"{master.url}{ROUTE}/before", auth=READER)
        assert one.status_code == 200 and one.json() == EXPECTED
        assert http.get(master.url + ROUTE).status_code == 401
        missing = http.get(f"{master.url}{ROUTE}/nosuch", auth=READER)
        assert missing.status_code == 404
        assert missing.json()["explain"] == f"instance {NAME} has no snapshot nosuch"
        bad = http.get(f"{master.url}{ROUTE}/-x", auth=READER)
        assert bad.status_code == 400 and "invalid snapshot name '-x'" in bad.json()["explain"]
        gone = http.get(f"{master.url}/2/herder/instances/nosuch/snapshots", auth=READER)
        assert gone.status_code == 404


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", ROUTE, {"snapshot_name": "s2"}),
    ("DELETE", f"{ROUTE}/before", None),
    ("PUT", f"{ROUTE}/before/rollback", None),
])
def test_readers_change_nothing(master: RunningMaster, method: str, path: str,
                                body: Any) -> None:
    before = state(master)
    with httpx.Client(verify=False, timeout=60) as http:
        answer = http.request(method, master.url + path, json=body, auth=READER)
    assert answer.status_code == 403, answer.text
    assert state(master) == before


@pytest.mark.parametrize(("method", "path", "body", "status", "fragment"), [
    ("POST", ROUTE, {}, 400, "invalid snapshot name None"),
    ("POST", ROUTE, {"snapshot_name": "a/b"}, 400, "invalid snapshot name 'a/b'"),
    ("POST", ROUTE, {"snapshot_name": "x" * 65}, 400, "1-64 letters"),
    ("POST", ROUTE, {"snapshot_name": ".."}, 400, "invalid snapshot name"),
    ("POST", ROUTE, {"snapshot_name": "s2", "colour": 1}, 400, "unknown field(s) colour"),
    ("POST", ROUTE, ["s2"], 400, "must be a JSON object"),
    ("PUT", f"{ROUTE}/nosuch/rollback", None, 404, "has no snapshot nosuch"),
    ("PUT", f"{ROUTE}/before/rollback", {"snapshot_name": "other"}, 400, "unknown field(s)"),
    ("DELETE", f"{ROUTE}/nosuch", None, 404, "has no snapshot nosuch"),
    ("DELETE", "/2/herder/instances/nosuch/snapshots/before", None, 404, "nosuch"),
])
def test_bad_requests_get_one_4xx_line_and_change_nothing(
        master: RunningMaster, method: str, path: str, body: Any, status: int,
        fragment: str) -> None:
    before = state(master)
    with httpx.Client(verify=False, timeout=60) as http:
        answer = http.request(method, master.url + path, json=body,
                              auth=admin_auth(master.config_path))
    assert answer.status_code == status, answer.text
    explain = answer.json()["explain"]
    assert fragment in explain and "\n" not in explain
    assert state(master) == before


def test_writers_changes_are_jobs_of_the_snapshot_opcodes(master: RunningMaster) -> None:
    api = master.client
    added = api.request("POST", ROUTE, [("dry-run", "1")], {"snapshot_name": "s2"})
    done = api.wait_for_job(added, timeout=60)
    assert done["status"] == "success", done
    removed = api.request("DELETE", f"{ROUTE}/before", [("dry-run", "1")])
    assert api.wait_for_job(removed, timeout=60)["status"] == "success"
    ops = [api.request("GET", f"/2/jobs/{job}")["ops"][0] for job in (added, removed)]
    assert [(op["OP_ID"], op["instance_name"], op["snapshot_name"], op["dry_run"])
            for op in ops] == [("OP_INSTANCE_SNAPSHOT_ADD", NAME, "s2", True),
                               ("OP_INSTANCE_SNAPSHOT_REMOVE", NAME, "before", True)]
    # a running instance is not rolled back: the job fails in one line, nothing changed
    serial = FileStore(master.config_path).load().serial_no
    rolled = api.request("PUT", f"{ROUTE}/before/rollback")
    failed = api.wait_for_job(rolled, timeout=60)
    assert failed["status"] == "error"
    assert f"instance {NAME} is running: stop it before rolling back to snapshot before" in \
        str(failed["opresult"])
    assert FileStore(master.config_path).load().serial_no == serial


def _cli(master: RunningMaster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HERDER_OFFLINE", "HERDER_MASTERD")}
    env.update(HERDER_CONFIG=str(master.config_path), HERDER_MASTERD=master.url)
    return subprocess.run([sys.executable, "-m", "herder.cli.main", "instance", "snapshot",
                           *args], env=env, capture_output=True, text=True, timeout=120)


def test_the_cli_goes_through_the_routes(master: RunningMaster) -> None:
    table = _cli(master, "list", NAME)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == ["Name", "Taken", "(UTC)", "Volumes"]
    assert row.split() == ["before", "2026-05-28", "20:26:40", "disk/0=sharedimg/vol0.snap-before"]
    assert json.loads(_cli(master, "list", NAME, "--json").stdout) == [EXPECTED]
    before = state(master)
    for verb in ("add", "rollback", "remove"):
        bad = _cli(master, verb, NAME, "../x")
        assert bad.returncode != 0 and "invalid snapshot name '../x'" in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
    assert state(master) == before
    running = _cli(master, "rollback", NAME, "before")
    assert running.returncode == 1
    assert "is running: stop it before rolling back to snapshot before" in running.stderr
    unknown = _cli(master, "list", "nosuch")
    assert unknown.returncode != 0 and len(unknown.stderr.strip().splitlines()) == 1
