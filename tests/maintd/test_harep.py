from __future__ import annotations

import pytest

from herder.maintd import harep as H

P = H.PREFIX


def test_policy_of_one_object() -> None:
    assert H.policy_of([]) == H.DISABLED
    assert H.policy_of([P + "failover", P + "migrate"]) == H.Policy("enabled", "migrate")
    assert H.policy_of([P + "reinstall", P + "suspend"]).kind == "suspended"
    assert H.policy_of([P + "reinstall", P + "suspend:200"], now=100) == H.Policy(
        "suspended", until=200)
    assert H.policy_of([P + "reinstall", P + "suspend:50"], now=100) == H.Policy(
        "enabled", "reinstall")
    assert H.policy_of([P + "bogus", "other", P + "suspend:x"]) == H.DISABLED


def test_resolve_instance_then_group_then_cluster() -> None:
    assert H.resolve([], [], [P + "failover"]) == H.Policy("enabled", "failover")
    assert H.resolve([], [P + "fix-storage"], [P + "failover"]).max_type == "fix-storage"
    assert H.resolve([P + "reinstall"], [P + "fix-storage"], []).max_type == "reinstall"
    assert H.resolve([P + "suspend"], [P + "reinstall"], []).kind == "suspended"


@pytest.mark.parametrize(("template", "p", "s", "want"), [
    ("drbd", True, True, "reinstall"), ("drbd", True, False, "failover"),
    ("drbd", False, True, "fix-storage"), ("drbd", False, False, None),
    ("plain", True, False, "reinstall"), ("plain", False, False, None),
    ("sharedfile", True, False, None),
])
def test_detect(template: str, p: bool, s: bool, want: str | None) -> None:
    offline = {"a": p, "b": s}
    snodes = ("b",) if template == "drbd" else ()
    assert H.detect(template, "a", snodes, offline) == want


def test_allowed() -> None:
    pol = H.Policy("enabled", "failover")
    assert H.allowed(pol, "fix-storage") and H.allowed(pol, "failover")
    assert not H.allowed(pol, "reinstall")
    assert not H.allowed(H.Policy("suspended"), "fix-storage")


def test_repair_ops() -> None:
    (op,) = H.repair_ops("i1", "fix-storage", "node4")
    assert op["mode"] == "replace_new_secondary" and op["remote_node"] == "node4"
    assert H.repair_ops("i1", "failover")[0]["OP_ID"] == "OP_INSTANCE_FAILOVER"
    assert H.repair_ops("i1", "reinstall")[0]["OP_ID"] == "OP_INSTANCE_REINSTALL"
    with pytest.raises(ValueError):
        H.repair_ops("i1", "nope")


def test_state_tags_round_trip_and_state() -> None:
    pend = H.pending_tag("failover", "u1", 100, [5, 6])
    assert pend == P + "pending:failover:u1:100:5+6"
    parsed = H.parse_state_tag(pend)
    assert parsed is not None and parsed.jobs == (5, 6) and parsed.kind == "pending"
    ok = H.result_tag("failover", "u1", 110, "success", [5, 6])
    fail = H.result_tag("fix-storage", "u0", 90, "failure", [3])
    assert H.repair_state([]) == ("healthy", None)
    assert H.repair_state([pend])[0] == "pending"
    assert H.repair_state([pend, ok])[0] == "healthy"
    assert H.repair_state([fail, ok])[0] == "failed"
    assert H.repair_state([H.result_tag("reinstall", "u2", 1, "enoperm", [])])[0] == "healthy"
    assert H.parse_state_tag(P + "pending:bogus:u:1:2") is None
    assert H.parse_state_tag(P + "result:failover:u:x:success:") is None
