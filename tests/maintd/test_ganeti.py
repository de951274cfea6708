"""maintd's Ganeti adapter without a cluster: which RAPI call each opcode becomes, the reason
text Ganeti records, reading maintd's events back from Ganeti's job reason trails, and running a
job of several opcodes one Ganeti job after another (against a recording fake RAPI client; the
real thing is tests/ganeti/test_vcluster_maintd.py)."""

from __future__ import annotations

from typing import Any

import pytest

from herder.maintd import ganeti
from herder.maintd.rounds import annotate


def test_every_maintd_opcode_has_its_ganeti_route() -> None:
    ops = [
        {"OP_ID": "OP_NODE_SET_PARAMS", "node_name": "n2", "drained": True, "force": True,
         "auto_promote": True},
        {"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": "i1", "target_node": "n3",
         "mode": "live", "allow_failover": False},
        {"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": "i1", "iallocator": "hail",
         "ignore_consistency": True, "target_node": None},
        {"OP_ID": "OP_INSTANCE_REPLACE_DISKS", "instance_name": "i1",
         "mode": "replace_new_secondary", "remote_node": "n3"},
        {"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": "i1", "force": False},
        {"OP_ID": "OP_INSTANCE_ACTIVATE_DISKS", "instance_name": "i1"},
        {"OP_ID": "OP_INSTANCE_REINSTALL", "instance_name": "i1"},
        {"OP_ID": "OP_TAGS_SET", "kind": "node", "name": "n2", "tags": ["a:b"]},
        {"OP_ID": "OP_TAGS_SET", "kind": "instance", "name": "i1", "tags": ["x"]},
        {"OP_ID": "OP_TAGS_DEL", "kind": "cluster", "tags": ["y"]},
        {"OP_ID": "OP_REPAIR_COMMAND", "node_name": "n2", "command": "fix"},
    ]
    assert ganeti.split_steps(ops) == [
        "POST /2/nodes/n2/modify", "PUT /2/instances/i1/migrate", "PUT /2/instances/i1/failover",
        "POST /2/instances/i1/replace-disks", "PUT /2/instances/i1/startup",
        "PUT /2/instances/i1/activate-disks", "POST /2/instances/i1/reinstall",
        "PUT /2/nodes/n2/tags",
        "PUT /2/instances/i1/tags", "DELETE /2/tags", "mond POST /1/repair"]
    assert ganeti.route(ops[0])[3] == {"drained": True, "force": True, "auto_promote": True}
    assert ganeti.route(ops[2])[3] == {"iallocator": "hail", "ignore_consistency": True}
    assert ganeti.route(ops[6])[3] == {"__version__": 1}
    assert ganeti.route(ops[7])[2] == [("tag", "a:b")]
    with pytest.raises(ganeti.UnsupportedOp, match="OP_CLUSTER_VERIFY"):
        ganeti.route({"OP_ID": "OP_CLUSTER_VERIFY"})


def test_the_reason_names_the_event_and_is_read_back() -> None:
    op = annotate({"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": "i1"}, "ev-1")
    op["reason"].insert(0, ["gnt:daemon:instmon", "LIFECYCLE/STOPPED_FAILED on n1 at t", 1])
    text = ganeti.reason_text(op)
    assert text == "gnt:daemon:maintd ev-1; gnt:daemon:instmon LIFECYCLE/STOPPED_FAILED on n1 at t"
    job = {"ops": [{"reason": [["gnt:user", text, 5], ["gnt:opcode:x", "", 6]]}]}
    assert ganeti.events_of(job) == {"ev-1"}
    assert ganeti.events_of({"ops": [{"reason": [["gnt:user", "someone else", 1]]}]}) == set()


class FakeRapi:
    """Records requests; jobs get ids 1, 2, ...; `fail` lists ids that end in error."""

    def __init__(self, fail: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.sent: list[tuple[str, str, Any, Any]] = []
        self.fail = fail

    def request(self, method: str, path: str, query: Any = None, body: Any = None) -> int:
        self.sent.append((method, path, query, body))
        return len(self.sent)

    def wait_for_job(self, job_id: int, timeout: float | None = None) -> dict[str, Any]:
        return {"status": "error" if job_id in self.fail else "success"}


def test_a_job_of_several_opcodes_runs_them_in_order_and_stops_at_a_failure() -> None:
    ops = [annotate({"OP_ID": "OP_NODE_SET_PARAMS", "node_name": "n2", "offline": True}, "e"),
           annotate({"OP_ID": "OP_TAGS_SET", "kind": "node", "name": "n2",
                     "tags": ["maintd:repairready:e"]}, "e")]
    rapi = FakeRapi()
    cluster = ganeti.GanetiCluster(rapi)
    assert cluster.submit(ops) == 2
    assert [(m, p) for m, p, _q, _b in rapi.sent] == [("POST", "/2/nodes/n2/modify"),
                                                      ("PUT", "/2/nodes/n2/tags")]
    assert all(("reason", "gnt:daemon:maintd e") in q for _m, _p, q, _b in rapi.sent)
    assert ("tag", "maintd:repairready:e") in rapi.sent[1][2]
    assert cluster.calls == 2
    failing = FakeRapi(fail={1})
    assert ganeti.GanetiCluster(failing).submit(ops) == 1  # the failed step's job: maintd sees it
    assert len(failing.sent) == 1


def test_a_repair_without_a_route_is_a_failed_local_job() -> None:
    cluster = ganeti.GanetiCluster(FakeRapi())
    job = cluster.submit([{"OP_ID": "OP_REPAIR_COMMAND", "node_name": "n2", "command": "x"}])
    assert job < 0 and cluster.job_status(job) == "error"


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="white-list checks need root")
def test_a_live_repair_runs_through_herder_monds_signed_route(tmp_path) -> None:
    """OP_REPAIR_COMMAND on a Ganeti cluster: the adapter signs a request to the node's herder
    mond (a real one, repair enabled), which runs the white-listed command with the diagnose
    object on stdin; exit 0 is a successful local job, anything else a failed one."""
    import json

    from herder.maintd.rounds import Node
    from tests.mond.agent_fixture import running_mond
    from tests.mond.test_repair_route import KEY, make_ctx, script

    whitelist = tmp_path / "repair-commands"
    whitelist.mkdir()
    seen = tmp_path / "seen.json"
    event = "6f1c2a34-9a1e-4a43-8b1e-0c1f2b3a4d5e"
    script(whitelist, "fix", f'cat > {seen}; test "$HERDER_REPAIR_EVENT" = {event}')
    script(whitelist, "broken", "exit 3")
    diagnose = {"status": "live-repair", "command": "fix", "details": {"disk": "sdb"}}
    with running_mond(make_ctx(tmp_path, whitelist), {}) as mond:
        port = int(mond.url.rsplit(":", 1)[1])
        repair = ganeti.repair_via_mond(lambda: KEY, port, address=lambda n: "127.0.0.1")

        name = "node1.example.com"  # mond's node: a request signed for another is refused

        class Nodes(ganeti.GanetiCluster):
            def nodes(self) -> list[Node]:
                return [Node(name, "u2", "127.0.0.1")]

        cluster = Nodes(FakeRapi(), repair=repair)
        good = cluster.submit([annotate({"OP_ID": "OP_REPAIR_COMMAND", "node_name": name,
                                         "command": "fix", "input": diagnose}, event)])
        assert cluster.job_status(good) == "success"
        assert json.loads(seen.read_text()) == diagnose
        bad = cluster.submit([annotate({"OP_ID": "OP_REPAIR_COMMAND", "node_name": name,
                                        "command": "broken", "input": diagnose},
                                       "0d9b7e1c-2f6a-4f0e-9d51-3b2a1c0e9f88")])
        assert cluster.job_status(bad) == "error"
