"""Issue 18, items 7-9 at the daemons' and commands' edges: a real `herder masterd`, the real
`herder` command and a real noded.

- 7: `maxmem=-100` was accepted and applied; now refused with 400 (RAPI) or one line (CLI),
  naming the parameter, and nothing changes;
- 8: `..`, `../../etc/x` and non-ASCII instance names passed (and `..` reached node file
  paths); now refused at the edge, and by noded's argument check;
- 9: a JSON body nested 100,000 deep gave a plain-text 500 on RAPI and tracebacks from
  `herder alloc` and `cluster import-ganeti`; now 400 in Ganeti's JSON error shape, one line.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from herder.core import rpcauth
from herder.core.rapi import RapiError
from tests.conftest import run_cli, stored_files
from tests.noded.noded_fixture import KEY, running_noded
from tests.security.test_rapi_access import admin_auth
from tests.system.masterd_fixture import start_masterd

DEEP = "[" * 100_000 + "]" * 100_000


def one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_rapi_refuses_bad_parameters_names_and_deep_bodies(tmp_path: Path) -> None:
    with start_masterd(tmp_path) as master:
        client = master.client
        before = client.get_info()["beparams"]
        for path, body, named in [
            ("/2/modify", {"beparams": {"maxmem": -100}}, "maxmem"),
            ("/2/modify", {"hvparams": {"kvm": {"migration_port": 70000}}}, "migration_port"),
            ("/2/instances", {"__version__": 1, "name": "../../etc/x", "disk_template": "plain",
                              "disks": [{"size": 1024}], "nics": [], "name_check": False,
                              "ip_check": False, "pnode": "node2.example.com"},
             "instance name"),
            ("/2/instances", {"__version__": 1, "name": "..", "disk_template": "plain",
                              "disks": [{"size": 1024}], "nics": [], "name_check": False,
                              "ip_check": False}, "instance name"),
            ("/2/instances", {"__version__": 1, "name": "wéb1", "disk_template": "plain",
                              "disks": [{"size": 1024}], "nics": [], "name_check": False,
                              "ip_check": False}, "instance name"),
        ]:
            method = "PUT" if path == "/2/modify" else "POST"
            with pytest.raises(RapiError) as err:
                client.request(method, path, None, body)
            assert err.value.status == 400, (path, body, err.value)
            assert named in str(err.value), str(err.value)
        assert client.get_info()["beparams"] == before  # nothing changed
        assert client.get_instances() == []
        with httpx.Client(verify=False, timeout=60) as http:
            for path in ("/2/modify", "/2/instances", "/2/herder/jobs"):
                method = "PUT" if path == "/2/modify" else "POST"
                answer = http.request(method, master.url + path, content=DEEP.encode(),
                                      auth=admin_auth(master.config_path),
                                      headers={"Content-Type": "application/json"})
                assert answer.status_code == 400, (path, answer.text[:200])
                assert "nested too deeply" in answer.json()["explain"]


def test_cli_refuses_bad_parameters_in_one_line(herder) -> None:  # type: ignore[no-untyped-def]
    assert herder("cluster", "init", "cluster.example.com", "--master-node",
                  "node1.example.com", "--primary-ip", "192.0.2.11", "--force").code == 0
    before = stored_files(herder.config_path)
    for option, value, named in [("-B", "maxmem=-100", "maxmem"), ("-B", "vcpus=0", "vcpus"),
                                 ("-H", "kvm:migration_port=70000", "migration_port")]:
        refused = herder("cluster", "modify", option, value)
        assert refused.code != 0, value
        assert named in one_line_error(refused.err)
        assert stored_files(herder.config_path) == before
    refused = herder("instance", "add", "../../etc/x", "-t", "diskless", "--no-name-check",
                     "-n", "node1.example.com")
    assert refused.code != 0
    assert "instance name" in one_line_error(refused.err)
    assert stored_files(herder.config_path) == before


def test_alloc_and_import_answer_deep_documents_in_one_line(tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text(DEEP)
    answer = run_cli("alloc", str(request))
    assert answer.code != 0
    assert "nested too deeply" in one_line_error(answer.err + answer.out)
    answer = run_cli("cluster", "import-ganeti", str(request),
                     config=tmp_path / "cluster" / "config.json")
    assert answer.code != 0
    assert "nested too deeply" in one_line_error(answer.err)
    assert not (tmp_path / "cluster" / "config.json").exists()


def test_noded_refuses_unsafe_names_and_deep_calls(tmp_path: Path) -> None:
    node = "node1.example.com"
    with running_noded(tmp_path, node) as noded:
        for method, args in [("instance_shutdown", {"name": "../../etc/x"}),
                             ("instance_remove", {"name": ".."}),
                             ("blockdev_remove", {"disks": ["../../etc/passwd"]})]:
            answer = noded.post(method, rpcauth.sign_call(KEY, method, node, args))
            assert answer.status_code == 400, (method, answer.text)
            assert "bad arguments" in answer.json()["error"]
        answer = noded.post("ping", DEEP.encode())
        assert answer.status_code == 403 and "error" in answer.json()
        assert not (tmp_path / "etc").exists()
