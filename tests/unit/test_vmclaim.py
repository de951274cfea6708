"""Issue 18, item 5: the pure rules that keep a VM from running twice: the node's guard
(`herder.noded.guard`), the hand-over after a failed move (`masterd.lu.handover`) and verify's
judgement of what the nodes run (`core.verify.running`)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from herder.core import verify, vmclaim
from herder.core.vmclaim import Claim, Move
from herder.masterd.lu import handover
from herder.noded.guard import InstanceGuard, Record, Refused, judge_restore, judge_run
from tests.conftest import build_config

U = "11111111-1111-4111-8111-111111111111"


def claim(primary: str = "n1", serial: int = 5, epoch: int = 1) -> Claim:
    return Claim(U, primary, serial, epoch)


def test_a_node_runs_only_what_it_is_the_primary_of() -> None:
    assert judge_run("web", None, claim("n1"), "n1", None) is None
    assert "primary node is n1, not this node (n2)" in (
        judge_run("web", None, claim("n1"), "n2", None) or "")


def test_the_target_of_a_move_may_run_it() -> None:
    assert judge_run("web", None, claim("n1"), "n2", Move("n1", "n2")) is None
    assert "goes to n3" in (judge_run("web", None, claim("n1"), "n2", Move("n1", "n3")) or "")
    assert "starts from n3" in (judge_run("web", None, claim("n1"), "n2", Move("n3", "n2"))
                                or "")


def test_stale_claims_are_refused() -> None:
    seen = Record(U, "n1", 7, 2)
    assert "stale order" in (judge_run("web", seen, claim("n1", 6, 2), "n1", None) or "")
    # a newer master epoch wins over a higher serial of the former master
    assert judge_run("web", seen, claim("n1", 3, 3), "n1", None) is None
    assert "stale order" in (judge_run("web", seen, claim("n1", 9, 1), "n1", None) or "")


def test_a_source_that_handed_over_refuses_the_old_claim() -> None:
    handed = Record(U, "n2", 5, 1)  # moved_away: same version, the target as primary
    assert "recorded n2" in (judge_run("web", handed, claim("n1", 5, 1), "n1", None) or "")
    assert judge_run("web", handed, claim("n1", 6, 1), "n1", None) is None  # moved back


def test_restore_after_a_libvirtd_restart() -> None:
    assert judge_restore("web", Record(U, "n1", 1, 1), "n1") is None
    assert judge_restore("web", Record(U, "n1", 1, 1, Move("n1", "n2")), "n2") is None
    assert "primary node is n1" in (judge_restore("web", Record(U, "n1", 1, 1), "n2") or "")
    assert "no record" in (judge_restore("web", None, "n1") or "")


def test_the_guard_keeps_its_records(tmp_path: Path) -> None:
    guard = InstanceGuard(tmp_path, "n2")
    guard.admit_run("web", claim("n1"), Move("n1", "n2"))
    assert guard.may_restore("web") is None
    with pytest.raises(Refused, match="primary node is n1"):
        guard.admit_run("web", claim("n1"))
    guard.not_mine("web", claim("n1", 6))  # the stray is stopped: the incoming move ends
    assert "primary node is n1" in (InstanceGuard(tmp_path, "n2").may_restore("web") or "")
    with pytest.raises(Refused, match="invalid instance name"):
        guard.admit_run("../x", claim("n2"))
    (tmp_path / "guard" / "web.json").write_text("{not json")
    assert "no record" in (guard.may_restore("web") or "")  # unreadable: grants nothing


@pytest.mark.parametrize("value, problem", [
    ({"uuid": U, "primary": "n1", "serial": -1, "epoch": 0}, "negative"),
    ({"uuid": U, "primary": "n1", "serial": 1}, "missing required field `epoch`"),
    ({"uuid": U, "primary": "", "serial": 1, "epoch": 0}, "empty names"),
])
def test_bad_claims(value: object, problem: str) -> None:
    """A claim is checked where it arrives (the node RPCs' arguments, `core.rpcdefs`)."""
    with pytest.raises(msgspec.ValidationError, match=problem):
        msgspec.convert(value, vmclaim.Claim)


def test_a_call_without_a_claim_is_refused() -> None:
    with pytest.raises(vmclaim.ClaimError, match="names no primary node"):
        vmclaim.required(None)
    assert vmclaim.required(claim()) == claim()


RUNS, STOPPED, UNKNOWN = (handover.Copy(True, True), handover.Copy(True, False),
                          handover.UNKNOWN)


@pytest.mark.parametrize("source, target, kind, keeper", [
    (RUNS, RUNS, handover.RESTART, handover.SOURCE),
    (STOPPED, RUNS, handover.RESTART, handover.TARGET),
    (UNKNOWN, RUNS, handover.RESTART, handover.SOURCE),  # proves nothing of the source's
    (UNKNOWN, RUNS, handover.LIVE, handover.TARGET),  # libvirt resumed it only after hand-over
    (UNKNOWN, handover.Copy(True, True, paused_for_move=True), handover.LIVE, handover.SOURCE),
    (STOPPED, STOPPED, handover.RESTART, handover.SOURCE),
    (UNKNOWN, UNKNOWN, handover.LIVE, handover.SOURCE),
])
def test_who_keeps_the_instance_after_a_failed_move(source: handover.Copy,
                                                     target: handover.Copy, kind: str,
                                                     keeper: str) -> None:
    assert handover.keeper(source, target, kind) == keeper


def test_verify_reports_an_instance_running_where_it_should_not() -> None:
    config = build_config(nodes=3, drbd_instances=2, plain_instances=0)
    insts = sorted(config.instances.values(), key=lambda i: i.name)
    answers: dict[str, dict[str, str] | str] = {n: {} for n in config.nodes}
    for inst in insts:
        answers[inst.primary_node] = {**answers[inst.primary_node], inst.name: "running"}
    assert verify.running(config, answers) == []
    stray_on = insts[0].secondary_nodes[0]
    answers[stray_on] = {**answers[stray_on], insts[0].name: "paused", "other": "running"}
    down = insts[1]
    answers[down.primary_node] = {**answers[down.primary_node], down.name: "shutoff"}
    found = {(f.severity, f.code, f.message) for f in verify.running(config, answers)}
    node = config.node_name(stray_on)
    assert found == {
        ("error", "instance-wrong-node", f"instance should not run on node {node} (its "
         f"primary node is {config.node_name(insts[0].primary_node)})"),
        ("warning", "node-unknown-domain", "node is running unknown domain other"),
        ("error", "instance-down", f"instance not running on its primary node "
         f"{config.node_name(down.primary_node)}")}
    answers[stray_on] = "connection refused"
    assert ("error", "node-rpc", "while contacting the node daemon: connection refused") in {
        (f.severity, f.code, f.message) for f in verify.running(config, answers)}
