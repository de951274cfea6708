"""Issue 35 item 15: whatever an opcode's fields hold, an accepted opcode never fails its job with
a Python exception (`{"disks": [["remove", -1]]}` on `/modify` was a `TypeError`, `{"disks":
["x"]}` on `/recreate-disks` an `IndexError`): the submission refuses malformed values with one
line (RAPI 400), and what it accepts reaches the LU's checks, which answer with herder's errors.

Hypothesis fills every opcode with values shaped like its fields (random JSON, the list and
tuple shapes Ganeti's modification lists use, names of the config's objects), submits it
(`opcodes.parse`, the queue's edge) and runs what a dry run runs: the LU's lock declaration
and its checks, against a real config store of four nodes and three instances.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herder.core import model
from herder.core.errors import HerderError
from herder.core.noderpc import UnavailableRpc
from herder.core.store import FileStore
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu.base import MasterEnv
from herder.masterd.processor import Processor
from tests.conftest import build_config
from tests.security.test_rapi_access import admin_auth
from tests.system.masterd_fixture import add_plain_instance, start_masterd

FIELDS = settings(max_examples=150, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.function_scoped_fixture,
                                         HealthCheck.too_slow, HealthCheck.data_too_large])
NAMES = ["plain0.example.com", "drbd0.example.com", "node2.example.com", "node1.example.com",
         "default", "xenvg", "plain", "drbd", "file", "kvm"]
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-3, max_value=20)
           | st.integers(min_value=-2**64, max_value=2**64) | st.floats(allow_nan=False)
           | st.text(max_size=8)
           | st.sampled_from(["add", "remove", "modify", "attach", "detach", "x", "-1", "0",
                              "1G", "rw", "ro", "none", "default", *NAMES]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(["size", "mode", "name", "vg", "x",
                                                         "spindles", "adopt", "provider"]),
                                        inner, max_size=3), max_leaves=10)
# the shape of Ganeti's modification lists ([[op, params]], [[op, index, params]]) and of
# recreate-disks' ([index, params]), with anything in each place
PLACE = (st.integers(min_value=-2, max_value=3) | st.sampled_from(["x", "", None])
         | st.dictionaries(st.sampled_from(["size", "mode", "x"]), SCALARS, max_size=2))
OP = st.sampled_from(["add", "remove", "modify", "x", 0, -1, 1, 99])
MODS = st.lists(st.tuples(OP, PLACE).map(list) | st.tuples(OP, PLACE, PLACE).map(list)
                | st.lists(PLACE, max_size=4) | PLACE, min_size=1, max_size=3)
# the job's plumbing, and the fields that would reach out of the test (name resolution, a
# TCP connection to a new node's address)
LEFT_ALONE = {"dry_run", "debug_level", "priority", "depends", "comment", "reason",
              "name_check", "ip_check", "node_check"}
REQUIRED = {"instance_name": "plain0.example.com", "node_name": "node2.example.com",
            "group_name": "default", "target_node": "node3.example.com",
            "disk_template": "plain", "kind": "instance", "tags": ["a"], "disk": 0,
            "amount": 1, "duration": 0.0, "command": "x", "new_name": "new.example.com",
            "changes": {}, "name": "xenvg"}
OPCODES = sorted(opcodes.BY_ID)


class NodesRunningNothing(UnavailableRpc):
    """Nodes that answer `instance_list` (nothing runs: the checks that ask go on to the
    disk changes) and fail every other call as an unreachable node does."""

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        if method == "instance_list":
            return {}
        return super().send(node, method, args, timeout)


@pytest.fixture(scope="module")
def processor(tmp_path_factory: pytest.TempPathFactory) -> tuple[Processor, FileStore]:
    store = FileStore(tmp_path_factory.mktemp("fields") / "config.json")
    store.create(build_config(nodes=4))
    config = store.load()
    env = MasterEnv(store=store, locks=locking.LockManager(
        nodes=config.nodes, nodegroups=config.nodegroups, instances=config.instances),
        rpc=NodesRunningNothing())
    return Processor(env), store


def opcode_values(op_id: str) -> st.SearchStrategy[dict[str, Any]]:
    """An opcode's dict: its required fields set, then some of its fields random."""
    cls = opcodes.BY_ID[op_id]
    fields = [f for f in msgspec.structs.fields(cls) if f.name not in LEFT_ALONE]
    base: dict[str, Any] = {"OP_ID": op_id, "dry_run": True}
    for field in fields:
        if field.required:
            base[field.name] = REQUIRED.get(field.name, "x")
    if "name_check" in {f.name for f in msgspec.structs.fields(cls)}:
        base.update(name_check=False, ip_check=False)
    # msgspec checks a typed field's type; a field holding `Any` somewhere is checked by the
    # opcode's own code only: those are drawn most
    hints = typing.get_type_hints(cls)
    loose = [f.name for f in fields if "Any" in str(hints[f.name])]
    names = [f.name for f in fields]
    if not names:
        return st.just(base)
    one = st.sampled_from(loose or names).flatmap(
        lambda name: shaped(hints[name]).map(lambda value: {name: value}))
    other = st.dictionaries(st.sampled_from(names), VALUES, max_size=1)
    return st.tuples(one, other).map(lambda pair: {**base, **pair[1], **pair[0]})


def shaped(hint: Any) -> st.SearchStrategy[Any]:
    """Values for a field: mostly of its outer shape (a list: modification lists), but
    anything too."""
    text = str(hint)
    if text.startswith(("list", "typing.List")) or "list[" in text.split("|")[0]:
        return MODS | VALUES
    if text.startswith("dict") or "dict[" in text.split("|")[0]:
        return st.dictionaries(st.text(max_size=6) | st.sampled_from(["size", "mode"]),
                               VALUES, max_size=3) | VALUES
    return VALUES


@pytest.mark.parametrize("op_id", OPCODES)
def test_an_accepted_opcode_fails_only_with_herders_errors(
        processor: tuple[Processor, FileStore], op_id: str) -> None:
    run, store = processor

    @FIELDS
    @given(data=opcode_values(op_id))
    def checked(data: dict[str, Any]) -> None:
        try:
            op = opcodes.parse(data)
        except opcodes.OpcodeError as err:
            assert "\n" not in str(err)
            return
        unit = run.make_lu(op)
        config = store.snapshot()
        try:
            unit.declare_locks(config)
            unit.check(config)
        except HerderError as err:
            assert "\n" not in str(err), str(err)

    checked()


def test_rapi_refuses_malformed_disk_changes_with_one_line(tmp_path: Path) -> None:
    """The two bodies of the issue: 400 with one line at submission, no job queued."""
    import httpx

    add_plain_instance(tmp_path)
    with start_masterd(tmp_path) as master, \
            httpx.Client(verify=False, timeout=60, auth=admin_auth(master.config_path)) as http:
        jobs_before = http.get(master.url + "/2/jobs").json()
        for method, path, body in [
            ("PUT", "/modify", {"disks": [["remove", -1]]}),
            ("PUT", "/modify", {"disks": [["add", {"size": 1}], ["add", -1, {"size": 1}]]}),
            ("PUT", "/modify", {"disks": [[0, {"mode": ["ro"]}]]}),
            ("POST", "/recreate-disks", {"disks": ["x"]}),
            ("POST", "/recreate-disks", {"disks": [[0]]}),
            ("POST", "/recreate-disks", {"disks": [[-1, {}]]}),
        ]:
            answer = http.request(method, f"{master.url}/2/instances/web1{path}", json=body)
            assert answer.status_code == 400, (path, body, answer.text)
            explain = answer.json()["explain"]
            assert "disks" in explain and "\n" not in explain, explain
        assert http.get(master.url + "/2/jobs").json() == jobs_before
