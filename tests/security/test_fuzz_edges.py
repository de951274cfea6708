"""Fuzzing RAPI bodies and node RPC envelopes (issue 18): whatever a client sends, the answer is
an answer (never a 500 or a traceback in the daemon's log).

Bodies are random JSON values (plain, shaped like the routes' bodies with the parameters they
name, and nested up to thousands deep) and random bytes, sent to a real `herder masterd`'s
write routes as its admin, and to a real noded as unsigned, malformed or correctly signed node
RPC calls with random arguments. For noded, a signed call whose arguments pass the check may
fail in the method (an instance that does not exist): that is noded's way to report a failure
(500 with the reason in `error`), so there the test asks for that reason, and no bug
("internal error") and no traceback.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herder.core import rpcauth
from tests.noded.noded_fixture import KEY, running_noded
from tests.security.test_rapi_access import admin_auth
from tests.system.masterd_fixture import start_masterd

FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])

SCALARS = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
           | st.sampled_from(["", "..", "../../etc/x", "wéb1", "-rf", "default", "none",
                              "node2.example.com", "kvm", "plain", "drbd", "1G", "-100"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=16)
# the names the routes' bodies and the node RPCs use, so values reach the checks behind them
KEYS = ["name", "new_name", "instance_name", "disks", "nics", "beparams", "hvparams",
        "osparams", "ndparams", "nicparams", "diskparams", "ipolicy", "OP_ID", "ops",
        "__version__", "disk_template", "pnode", "snode", "os_type", "maxmem", "vcpus",
        "size", "mode", "iallocator", "tags", "instance", "uuid", "memory", "timeout",
        "command", "path", "data", "type", "disks", "master_netdev", "candidate_pool_size",
        "name_check", "ip_check", "priority", "reason", "drained", "offline", "kvm"]
SHAPED = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6)
DEEP = st.integers(min_value=60, max_value=20_000).map(lambda depth: "[" * depth + "]" * depth)
BODIES = (VALUES.map(msgspec.json.encode) | SHAPED.map(msgspec.json.encode)
          | DEEP.map(str.encode) | st.binary(max_size=64))

RAPI_WRITES = [("PUT", "/2/modify"), ("POST", "/2/instances"), ("POST", "/2/groups"),
               ("POST", "/2/herder/jobs"), ("PUT", "/2/nodes/node2.example.com/role"),
               ("POST", "/2/nodes/node2.example.com/modify"),
               ("POST", "/2/nodes/node2.example.com/migrate"),
               ("PUT", "/2/groups/default/modify"), ("PUT", "/2/groups/default/rename"),
               ("PUT", "/2/tags")]

# every node RPC but the ones that reach out of the test (a vote connects to an address)
NODE_METHODS = ["ping", "node_info", "instance_list", "instance_shutdown", "instance_reboot",
                "instance_remove", "instance_define", "instance_start", "blockdev_create",
                "blockdev_remove", "migrate_prepare", "migrate_finish", "storage_list",
                "storage_modify", "repair_command", "write_ssconf", "no_such_method"]


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    tracebacks = [record for record in caplog.records if record.exc_info]
    assert not tracebacks, tracebacks[0].getMessage()


def test_rapi_bodies(tmp_path: Path) -> None:
    with start_masterd(tmp_path) as master, \
            httpx.Client(verify=False, timeout=60, auth=admin_auth(master.config_path)) as http:

        @FUZZ
        @given(route=st.sampled_from(RAPI_WRITES), body=BODIES)
        def answers(route: tuple[str, str], body: bytes) -> None:
            method, path = route
            answer = http.request(method, master.url + path, content=body,
                                  headers={"Content-Type": "application/json"})
            assert answer.status_code < 500, (method, path, body[:200], answer.text[:300])
            if answer.status_code >= 400:
                assert "explain" in answer.json()  # Ganeti's error shape, not plain text

        answers()
        assert master.proc.poll() is None
    assert master.proc.stderr is not None
    log = master.proc.stderr.read()
    assert "Traceback" not in log, log[-2000:]


def test_node_rpc_envelopes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    node = "node1.example.com"
    with running_noded(tmp_path, node) as noded:

        @FUZZ
        @given(method=st.sampled_from(NODE_METHODS), body=BODIES)
        def unsigned(method: str, body: bytes) -> None:
            answer = noded.post(method, body)
            assert answer.status_code in (400, 403, 404), (method, body[:200], answer.text)
            assert "error" in answer.json()

        @FUZZ
        @given(method=st.sampled_from(NODE_METHODS),
               args=SHAPED | st.dictionaries(st.text(max_size=8), VALUES, max_size=4))
        def signed(method: str, args: dict[str, Any]) -> None:
            answer = noded.post(method, rpcauth.sign_call(KEY, method, node, args))
            error = answer.json().get("error")
            if answer.status_code == 500:
                assert error and "\n" not in error and "internal error" not in error, error
            else:
                assert answer.status_code in (200, 400, 404), (method, args, answer.text)

        @FUZZ
        @given(outer=st.fixed_dictionaries({"msg": VALUES | st.text(), "salt": VALUES,
                                            "hmac": VALUES}))
        def envelope_shaped(outer: dict[str, Any]) -> None:
            answer = noded.post("ping", msgspec.json.encode(outer))
            assert answer.status_code == 403, answer.text

        unsigned()
        signed()
        envelope_shaped()
    no_tracebacks(caplog)
