"""masterd's RAPI and issue 18's holes (items 3, 4, 6), against a real `herder masterd`.

- `GET /2/nodes/N/storage` runs a job that makes a node measure a directory: write users only
  (as in Ganeti's rlib2), and only the node's configured storage units;
- a file-valued hypervisor parameter made redistribution copy any master file to every node:
  such a parameter must name a file in the cluster's hypervisor file directory (400);
- a dozen long polls `GET /2/jobs/ID/wait` held every worker thread and an admin's change
  waited 19.5 s: waits hold no thread, and (as in Ganeti) are for write users only.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from herder.core.rapi import RapiError
from tests.system.masterd_fixture import RunningMaster, start_masterd

READER = ("viewer", "l00k-only")


def add_reader(config_path: Path) -> None:
    users = config_path.parent / "rapi_users"
    users.write_text(users.read_text() + f"{READER[0]} {READER[1]}\n")


def admin_auth(config_path: Path) -> tuple[str, str]:
    for line in (config_path.parent / "rapi_users").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == "write":
            return parts[0], parts[1]
    raise AssertionError("no write user")


def test_storage_queries_are_for_writers_and_configured_units_only(tmp_path: Path) -> None:
    with start_masterd(tmp_path) as master:
        add_reader(master.config_path)
        path = "/2/nodes/node2.example.com/storage"
        query = {"storage_type": "file", "name": "/root", "output_fields": "name,size"}
        with httpx.Client(verify=False) as http:
            as_reader = http.get(master.url + path, params=query, auth=READER)
            assert as_reader.status_code == 403, as_reader.text  # (Ganeti: GET_ACCESS write)
            assert http.get(master.url + path, params=query).status_code == 401
            admin = admin_auth(master.config_path)
            outside = http.get(master.url + path, params=query, auth=admin)
            assert outside.status_code == 400
            assert "not one of the node's file storage directories" in \
                outside.json()["explain"]
            for kind, name in [("lvm-vg", "--config=x"), ("lvm-vg", "othervg"),
                               ("lvm-pv", "/dev/../etc/passwd")]:
                answer = http.get(master.url + path, auth=admin,
                                  params={"storage_type": kind, "name": name})
                assert answer.status_code == 400, (kind, name, answer.text)
            info = master.client.get_info()
            configured = {"storage_type": "file", "name": info["file_storage_dir"],
                          "output_fields": "name"}
            assert isinstance(http.get(master.url + path, params=configured,
                                       auth=admin).json(), int)  # a job
        # the same rule through herder's job route (an opcode from any client): the job fails
        job = master.client.request("POST", "/2/herder/jobs", None, {"ops": [{
            "OP_ID": "OP_NODE_QUERY_STORAGE", "nodes": ["node2.example.com"],
            "storage_type": "file", "name": "/root"}]})
        with pytest.raises(RapiError, match="file storage directories"):
            master.client.wait_for_job(job, timeout=60, raise_on_error=True)


def test_file_valued_hypervisor_parameters_stay_in_the_clusters_directory(
        tmp_path: Path) -> None:
    with start_masterd(tmp_path) as master:
        hv_dir = master.config_path.parent / "hypervisor"
        client = master.client
        refused = [
            ("PUT", "/2/modify", {"hvparams": {"kvm": {"vnc_password_file": "/etc/hostname"}}}),
            ("PUT", "/2/modify", {"hvparams": {"kvm": {
                "spice_password_file": f"{hv_dir}/../hmac.key"}}}),
            ("POST", "/2/herder/jobs", {"ops": [{"OP_ID": "OP_CLUSTER_SET_PARAMS", "os_hvp": {
                "debootstrap": {"kvm": {"vnc_password_file": "/etc/shadow"}}}}]}),
        ]
        for method, path, body in refused:
            with pytest.raises(RapiError) as err:
                client.request(method, path, None, body)
            assert err.value.status == 400, (path, body)
            assert "hypervisor file directory" in str(err.value) \
                or "normalized absolute path" in str(err.value)
        before = client.get_info()["hvparams"]["kvm"].get("vnc_password_file")
        assert before in ("", None)
        # inside the directory: taken
        good = f"{hv_dir}/vnc-cluster-password"
        job = client.modify_cluster(hvparams={"kvm": {"vnc_password_file": good}})
        client.wait_for_job(job, timeout=60, raise_on_error=True)
        assert client.get_info()["hvparams"]["kvm"]["vnc_password_file"] == good


def running_job(master: RunningMaster) -> tuple[int, str, dict[str, object]]:
    """A job that runs for a minute, its wait URL and a wait body that blocks (10 s)."""
    client = master.client
    job = client.request("POST", "/2/herder/jobs", None, {"ops": [{
        "OP_ID": "OP_TEST_DELAY", "duration": 60, "on_master": True}]})
    deadline = time.monotonic() + 30
    while client.get_job_status(job)["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    body = {"fields": ["status"], "previous_job_info": ["running"], "previous_log_serial": None}
    return job, f"{master.url}/2/jobs/{job}/wait", body


def test_long_polls_are_for_writers(tmp_path: Path) -> None:
    with start_masterd(tmp_path) as master:
        add_reader(master.config_path)
        _, wait, body = running_job(master)
        with httpx.Client(verify=False, timeout=30) as http:
            refused = http.request("GET", wait, json=body, auth=READER)
            assert refused.status_code == 403, refused.text  # Ganeti: GET_ACCESS write
            assert http.request("GET", wait, json=body).status_code == 401


def test_long_polls_hold_no_thread(tmp_path: Path) -> None:
    with start_masterd(tmp_path) as master:
        admin = admin_auth(master.config_path)
        _, wait, body = running_job(master)
        started = threading.Barrier(13)
        answers: list[int] = []

        def poll() -> None:
            with httpx.Client(verify=False, timeout=60) as http:
                started.wait()
                answers.append(http.request("GET", wait, json=body, auth=admin).status_code)

        pollers = [threading.Thread(target=poll) for _ in range(12)]
        for thread in pollers:
            thread.start()
        started.wait()
        time.sleep(1.0)  # the polls are in (each blocks up to 10 s)
        began = time.monotonic()
        tagged = master.client.add_cluster_tags(["busy"])
        took = time.monotonic() - began
        for thread in pollers:
            thread.join(60)
        assert isinstance(tagged, int)
        assert took < 2.0, f"an admin's change took {took:.1f} s behind 12 long polls"
        assert answers == [200] * 12
