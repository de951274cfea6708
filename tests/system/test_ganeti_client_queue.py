"""Ganeti 3.0.2's own RAPI client (`ganeti.rapi.client.GanetiRapiClient`, run with Debian's
python3 on the peers' unpacked library) against a real herder masterd, for the job queue's and
the job filters' methods: GetJobs (plain and bulk), GetJobStatus, WaitForJobChange, CancelJob,
GetFilters (plain and bulk), AddFilter, GetFilter, ReplaceFilter, DeleteFilter. Each answer is
checked in the shape Ganeti's rlib2 gives (J_FIELDS, FILTER_RULE_FIELDS, the `uri` lists), and
a filter added through Ganeti's client acts on herder's queue.
Ganeti's RAPI has no route for archiving, priorities or the drain flag (luxi only): herder's
are under /2/herder/ (docs/rapi.md).
Skips when Ganeti's code (/tmp/groot) is absent.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from herder.core.rapi import read_rapi_users
from tests.noded.bdev import harness
from tests.system.masterd_fixture import RunningMaster, start_masterd

pytestmark = pytest.mark.peer

# Ganeti's rlib2 field lists
J_FIELDS = ["id", "ops", "status", "summary", "opstatus", "received_ts", "start_ts", "end_ts",
            "oplog", "opresult"]
FILTER_RULE_FIELDS = ["watermark", "priority", "predicates", "action", "reason_trail", "uuid"]

# Runs the calls given on stdin ([[method, args, kwargs], ...]) with Ganeti's client; prints
# [["ok", answer] or ["error", class, message, code], ...]
DRIVER = """
import json, sys
from ganeti.rapi import client
host, port, user, password, cafile = sys.argv[1:6]
api = client.GanetiRapiClient(
    host, port=int(port), username=user, password=password,
    curl_config_fn=client.GenericCurlConfig(cafile=cafile, verify_hostname=False))
out = []
for method, args, kwargs in json.load(sys.stdin):
    try:
        out.append(["ok", getattr(api, method)(*args, **kwargs)])
    except client.Error as err:
        out.append(["error", type(err).__name__, str(err), getattr(err, "code", None)])
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningMaster]:
    if not harness.ganeti_available():
        pytest.skip("Ganeti 3.0.2 from ../shared/peers (/tmp/groot) is absent")
    with start_masterd(tmp_path_factory.mktemp("ganeti-client")) as running:
        yield running


def ganeti(master: RunningMaster, *calls: tuple[str, list[Any], dict[str, Any]]) -> list[Any]:
    """The answers of Ganeti's client to `calls`, in order."""
    directory = Path(master.config_path).parent
    user, password, _ = next(u for u in read_rapi_users(directory / "rapi_users")
                             if "write" in u[2])
    where = urlsplit(master.url)
    proc = subprocess.run(
        [str(harness.DEBIAN_PYTHON), "-c", DRIVER, str(where.hostname), str(where.port), user,
         password, str(directory / "server.pem")],
        input=json.dumps(calls), env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(harness.GROOT)},
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"Ganeti's client did not run: {proc.stderr[-2000:]}"
    answers: list[Any] = json.loads(proc.stdout)
    return answers


def answered(result: list[Any]) -> Any:
    assert result[0] == "ok", result
    return result[1]


def test_job_methods(master: RunningMaster) -> None:
    client = master.client
    job_id = int(client.request("POST", "/2/herder/jobs", None, {"ops": [
        {"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["ganeti-client"]}]}))
    client.wait_for_job(job_id, timeout=60)
    plain, bulk, status, change, cancel, missing = ganeti(
        master, ("GetJobs", [], {}), ("GetJobs", [], {"bulk": True}),
        ("GetJobStatus", [job_id], {}),
        ("WaitForJobChange", [job_id, ["status"], None, None], {}),
        ("CancelJob", [job_id], {}), ("GetJobStatus", [999999], {}))
    assert job_id in answered(plain)
    jobs = answered(bulk)
    assert [j["id"] for j in jobs] == answered(plain)
    assert set(J_FIELDS) - {"oplog", "opresult"} <= set(jobs[0])
    shown = answered(status)
    assert set(J_FIELDS) <= set(shown) and shown["status"] == "success"
    assert shown["summary"] == ["TAGS_SET"]
    assert answered(change) == {"job_info": ["success"], "log_entries": []}
    assert answered(cancel) == [False, f"Job {job_id} is finished (success)"]
    assert missing[0] == "error" and missing[3] == 404
    # an archived job: still shown by id, no longer listed
    assert client.archive_job(job_id) == (True, f"Job {job_id} archived")
    plain, status = ganeti(master, ("GetJobs", [], {}), ("GetJobStatus", [job_id], {}))
    assert job_id not in answered(plain) and answered(status)["status"] == "success"


def test_filter_methods(master: RunningMaster) -> None:
    client = master.client
    predicates = [["opcode", ["=", "OP_ID", "OP_TAGS_SET"]]]
    (added,) = ganeti(master, ("AddFilter", [5, predicates, "REJECT"],
                               {"reason_trail": [["gnt:user", "no tags", 1]]}))
    uuid = answered(added)
    rejected = int(client.request("POST", "/2/herder/jobs", None, {"ops": [
        {"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["rejected"]}]}))
    assert client.wait_for_job(rejected, timeout=60)["status"] == "canceled"
    plain, bulk, one, replaced, after = ganeti(
        master, ("GetFilters", [], {}), ("GetFilters", [], {"bulk": True}),
        ("GetFilter", [uuid], {}),
        ("ReplaceFilter", [uuid, 2, predicates, ["RATE_LIMIT", 3]], {}),
        ("GetFilter", [uuid], {}))
    assert answered(plain) == [uuid]
    (rule,) = answered(bulk)
    assert sorted(rule) == sorted(FILTER_RULE_FIELDS) and answered(one) == rule
    assert rule["priority"] == 5 and rule["action"] == "REJECT"
    assert rule["predicates"] == predicates and rule["watermark"] >= 1
    sources = [entry[0] for entry in rule["reason_trail"]]
    assert sources[:2] == ["gnt:user", "gnt:client"]  # Ganeti's client adds its own entry
    assert answered(replaced) == uuid
    rule = answered(after)
    assert rule["priority"] == 2 and rule["action"] == ["RATE_LIMIT", 3]
    made_uuid = "0b6d3c1f-5f0a-4d6e-9a55-0f7d2e3c4b5a"
    created, deleted, gone, again, bad = ganeti(
        master, ("ReplaceFilter", [made_uuid, 0, [], "ACCEPT"], {}),
        ("DeleteFilter", [uuid], {}), ("GetFilter", [uuid], {}),
        ("DeleteFilter", [uuid], {}), ("AddFilter", [0, [["owner", ["?", "x"]]], "ACCEPT"], {}))
    assert answered(created) == made_uuid
    assert answered(deleted) is None
    assert gone[0] == "error" and gone[3] == 404
    assert again[0] == "error" and again[3] == 404
    assert bad[0] == "error" and bad[3] == 400 and "predicates" in bad[2]
    assert client.get_filters() == [made_uuid]
    client.delete_filter(made_uuid)
