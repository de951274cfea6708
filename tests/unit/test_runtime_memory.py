"""`modify --runtime-memory` (OP_INSTANCE_SET_PARAMS runtime_mem) as Ganeti 3.0's
LUInstanceSetParams (cmdlib/instance_set_params.py): CheckPrereq refuses a stopped instance, a
size outside the proposed minmem..maxmem without force, and an increase beyond the primary's
free memory (CheckNodeFreeMemory); Exec balloons the guest on the primary
(instance_balloon_memory) and reports ("runtime_memory", size). Against a recording node RPC."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from herder.cli import remote
from herder.cli.main import cli
from herder.core.errors import HerderError, OpExecError, OpPrereqError
from herder.core.noderpc import RpcTransport
from herder.core.store import FileStore
from herder.masterd.jobs import opcodes
from herder.masterd.lu.instance import InstanceSetParams
from tests.conftest import build_config
from tests.rpcfakes import nothing_answer
from tests.unit.test_migration_order import node_info

DRBD0 = "drbd0.example.com"  # primary node1, minmem 512, maxmem 1024


class Recorder(RpcTransport):
    """node1 runs DRBD0 with `current` MiB (0: not running) and has `free` MiB free."""

    def __init__(self, current: int = 768, free: int = 4096) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.current = current
        self.free = free
        self.balloon_fails = False

    def send(self, node: Any, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        self.calls.append((node.name, method, dict(args)))
        if method == "node_info":
            return node_info(self.free, {DRBD0: self.current} if self.current else {})
        if method == "instance_balloon_memory" and self.balloon_fails:
            raise HerderError("cannot set the memory of drbd0.example.com: no balloon")
        return nothing_answer(method)

    def methods(self) -> list[tuple[str, str]]:
        return [(node.split(".")[0], method) for node, method, _ in self.calls]


@pytest.fixture
def env(tmp_path: Path) -> Any:
    store = FileStore(tmp_path / "config.json")
    store.create(build_config())
    return SimpleNamespace(rpc=Recorder(), store=store)


def modify(env: Any, **fields: Any) -> Any:
    lu = InstanceSetParams(opcodes.OpInstanceSetParams(instance_name=DRBD0, **fields), env,
                           lambda line: None)
    lu.check(env.store.load())
    return lu.execute()


def test_the_guest_is_ballooned_on_its_primary_and_the_change_listed(env: Any) -> None:
    serial = env.store.load().find_instance(DRBD0).serial_no
    assert modify(env, runtime_mem=1024) == [["runtime_memory", 1024]]
    assert env.rpc.methods() == [("node1", "node_info"), ("node1", "instance_balloon_memory")]
    asked = env.rpc.calls[0][2]
    assert asked == {"instances": True, "storage_units": []}
    balloon = env.rpc.calls[1][2]
    assert balloon["name"] == DRBD0 and balloon["memory"] == 1024
    # the config is not changed: the memory is the running guest's only
    assert env.store.load().find_instance(DRBD0).serial_no == serial


def test_a_stopped_instance_is_refused(env: Any) -> None:
    env.rpc.current = 0
    with pytest.raises(OpPrereqError, match=f"Instance {DRBD0} is not running") as caught:
        modify(env, runtime_mem=768)
    assert caught.value.ganeti_args[1] == "wrong_state"
    assert "instance_balloon_memory" not in [m for _, m in env.rpc.methods()]


@pytest.mark.parametrize("size", [256, 2048])
def test_outside_minmem_maxmem_is_refused_unless_forced(env: Any, size: int) -> None:
    with pytest.raises(OpPrereqError, match=f"Instance {DRBD0} must have memory between 512 "
                       "and 1024 MB of memory unless --force is given"):
        modify(env, runtime_mem=size)
    assert [m for _, m in env.rpc.methods()] == ["node_info"]
    assert modify(env, runtime_mem=size, force=True) == [["runtime_memory", size]]
    assert env.rpc.methods()[-1] == ("node1", "instance_balloon_memory")


def test_the_bounds_are_those_the_change_proposes(env: Any) -> None:
    """Ganeti checks against be_proposed: a maxmem raised in the same change admits more."""
    assert modify(env, runtime_mem=1536, beparams={"maxmem": 2048}) == [
        ["runtime_memory", 1536], ["be/maxmem", "2048"]]


def test_an_increase_beyond_the_nodes_free_memory_is_refused(env: Any) -> None:
    env.rpc.current, env.rpc.free = 600, 300
    with pytest.raises(OpPrereqError, match="Not enough memory on node node1.example.com for "
                       f"ballooning memory for instance {DRBD0}: needed 400 MiB, available "
                       "300 MiB") as caught:
        modify(env, runtime_mem=1000)
    assert caught.value.ganeti_args[1] == "insufficient_resources"
    # an increase that fits, and a decrease (whatever the free memory), go through
    assert modify(env, runtime_mem=900) == [["runtime_memory", 900]]
    env.rpc.free = 0
    assert modify(env, runtime_mem=512) == [["runtime_memory", 512]]


def test_a_failed_balloon_changes_nothing_else(env: Any) -> None:
    env.rpc.balloon_fails = True
    before = env.store.load().find_instance(DRBD0)
    with pytest.raises(OpExecError, match="Cannot modify instance runtime memory: cannot set "
                       "the memory of drbd0.example.com: no balloon"):
        modify(env, runtime_mem=900, beparams={"vcpus": 1})
    after = env.store.load().find_instance(DRBD0)
    assert after.beparams == before.beparams and after.serial_no == before.serial_no


@pytest.mark.parametrize("value", [0, -512, True])
def test_the_opcode_wants_a_positive_size(value: object) -> None:
    with pytest.raises(opcodes.OpcodeError, match="runtime_mem"):
        opcodes.parse({"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": DRBD0,
                       "runtime_mem": value})


def test_the_cli_sends_the_size_in_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, Any]] = []

    def run(ctx: Any, ops: list[dict[str, Any]]) -> list[Any]:
        sent.extend(ops)
        return [[["runtime_memory", ops[0]["runtime_mem"]]]]

    monkeypatch.setattr(remote, "run", run)
    result = CliRunner().invoke(cli, ["instance", "modify", DRBD0, "--runtime-memory", "1.5G",
                                      "-f"])
    assert result.exit_code == 0, result.output
    assert sent[0]["runtime_mem"] == 1536 and sent[0]["force"] is True
    assert " - runtime_memory -> 1536" in result.output
    sent.clear()
    result = CliRunner().invoke(cli, ["instance", "modify", DRBD0, "-m", "768"])
    assert result.exit_code == 0 and sent[0]["runtime_mem"] == 768 and "force" not in sent[0]
    result = CliRunner().invoke(cli, ["instance", "modify", DRBD0, "-m", "lots"])
    assert result.exit_code != 0 and "--runtime-memory" in result.output


def test_rapi_modify_takes_runtime_mem_from_the_body() -> None:
    from herder.masterd.rapi import base as rapi_base

    assert "runtime_mem" in rapi_base.body_fields(opcodes.OpInstanceSetParams,
                                                  fixed=rapi_base.INSTANCE_TARGET)
