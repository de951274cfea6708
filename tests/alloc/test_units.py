"""Focused behaviour of the allocator: score, protocol edges, text format, CLI, new modes."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from alloc_support import herder_bin

from herder.alloc import InputError, Options, answer
from herder.alloc.metrics import Stats
from herder.alloc.protocol import build_cluster, parse_message
from herder.alloc.textdata import parse_text, serialize, simulate

POLICY = {
    "minmax": [{"min": {"memory-size": 128, "cpu-count": 1, "disk-size": 1024, "disk-count": 1,
                        "nic-count": 1, "spindle-use": 1},
                "max": {"memory-size": 32768, "cpu-count": 8, "disk-size": 1048576,
                        "disk-count": 16, "nic-count": 8, "spindle-use": 12}}],
    "std": {"memory-size": 128, "cpu-count": 1, "disk-size": 1024, "disk-count": 1,
            "nic-count": 1, "spindle-use": 1},
    "disk-templates": ["drbd", "plain", "ext"], "vcpu-ratio": 4.0, "spindle-ratio": 32.0,
}


def cluster(n: int = 4, hv: str = "xen-pvm", groups: int = 1) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "cluster_tags": [], "enabled_hypervisors": [hv], "instances": {},
        "nodegroups": {f"g{g}": {"name": f"group{g}", "alloc_policy": "preferred",
                                 "networks": [], "ipolicy": POLICY, "tags": []}
                       for g in range(groups)},
        "nodes": {},
    }
    for k in range(n):
        msg["nodes"][f"node-{k:03d}"] = {
            "group": f"g{k * groups // n}", "offline": False, "drained": False,
            "ndparams": {"exclusive_storage": False, "spindle_count": 1},
            "total_memory": 32768, "reserved_memory": 1024, "free_memory": 31744,
            "total_disk": 1048576, "free_disk": 1048576, "total_cpus": 8, "reserved_cpus": 1,
            "free_spindles": 1, "total_spindles": 1, "tags": [],
        }
    return msg


def alloc_req(template: str = "plain", mem: int = 1024, **extra: Any) -> dict[str, Any]:
    return {"type": "allocate", "name": "new", "required_nodes": 2 if template == "drbd" else 1,
            "disk_template": template, "disks": [{"size": 10240}], "disk_space_total": 10240,
            "memory": mem, "vcpus": 1, "spindle_use": 1, "tags": [], "nics": [], **extra}


def ask(msg: dict[str, Any], **opts: Any) -> Any:
    return answer(json.dumps(msg), Options(**opts))


def test_worked_example_score_and_tie_break() -> None:
    """4 identical nodes: the scores hail 3.0.2 prints and the last node winning."""
    msg = cluster()
    msg["request"] = alloc_req()
    resp = ask(msg)
    assert resp.success and resp.result == ["node-003"]
    assert "score: 1.81746933" in resp.info
    msg["request"] = alloc_req("drbd")
    resp = ask(msg)
    assert resp.result == ["node-003", "node-002"]
    assert "score: 1.90854830, successes 12" in resp.info  # as hail 3.0.2 on this input


def test_reversed_node_order_reverses_the_tie() -> None:
    msg = cluster()
    msg["nodes"] = dict(reversed(list(msg["nodes"].items())))
    msg["request"] = alloc_req("drbd")
    assert ask(msg).result == ["node-000", "node-001"]


def test_kvm_reserves_static_node_memory() -> None:
    msg = cluster(2, hv="kvm")
    for d in msg["nodes"].values():
        d.update(total_memory=8192, free_memory=7168)
    msg["request"] = alloc_req(mem=6000)
    resp = ask(msg)
    assert not resp.success and "FailMem: 2" in resp.info
    assert ask(msg, static_kvm_mem=0).success


def test_drbd_with_one_node_is_an_answer_not_a_crash() -> None:
    msg = cluster()
    msg["request"] = {**alloc_req("drbd"), "required_nodes": 1}
    resp = ask(msg)
    assert not resp.success and "needs 2 nodes" in resp.info


def test_offline_and_drained_nodes_are_never_chosen() -> None:
    msg = cluster()
    msg["nodes"]["node-003"]["offline"] = True
    msg["nodes"]["node-002"]["drained"] = True
    msg["request"] = alloc_req("drbd")
    assert ask(msg).result == ["node-001", "node-000"]


def test_group_policy_last_resort_loses_ties() -> None:
    msg = cluster(4, groups=2)
    msg["nodegroups"]["g1"]["alloc_policy"] = "last_resort"
    msg["request"] = alloc_req()
    resp = ask(msg)
    assert resp.info.startswith("Selected group: group0")
    msg["nodegroups"]["g0"]["alloc_policy"] = "unallocable"
    assert ask(msg).info.startswith("Selected group: group1")


def test_multi_allocate_lists_failures_by_name() -> None:
    msg = cluster()
    msg["request"] = {"type": "multi-allocate", "instances": [
        {**alloc_req("drbd"), "name": "a"}, {**alloc_req(mem=60000), "name": "huge"},
        {**alloc_req(), "name": "b"}]}
    resp = ask(msg)
    assert resp.success
    ok, failed = resp.result
    assert [x[0] for x in ok] == ["a", "b"] and failed == ["huge"]


@pytest.mark.parametrize(("data", "needle"), [
    (b"", "Invalid JSON"), (b"[]", "Unable to read JSObject"),
    (b"{}", "key 'request' not found"), (b'{"request": 0}', "key 'request'"),
])
def test_unusable_input_raises(data: bytes, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        answer(data)


def test_unknown_request_type() -> None:
    msg = cluster()
    msg["request"] = {"type": "nonsense"}
    with pytest.raises(InputError, match="Invalid request type"):
        ask(msg)


def test_cli_exit_codes() -> None:
    exe = herder_bin()
    msg = cluster()
    msg["request"] = alloc_req(mem=60000)  # cannot be placed: an answer, exit 0
    proc = subprocess.run([exe, "alloc", "-"], input=json.dumps(msg), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and json.loads(proc.stdout)["success"] is False
    proc = subprocess.run([exe, "alloc", "-"], input="[]", capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("Error: ") and len(proc.stderr.splitlines()) == 1


def test_text_roundtrip_keeps_the_score() -> None:
    cl = simulate(["p,4,8T,64g,16"])
    msg = cluster()
    msg["request"] = alloc_req()
    again = parse_text(serialize(cl))
    assert [n.name for n in again.nodes] == [n.name for n in cl.nodes]
    assert Stats(again.nodes).score() == pytest.approx(Stats(cl.nodes).score())
    js = build_cluster(parse_message(json.dumps(msg)), Options())
    back = parse_text(serialize(js))
    assert Stats(back.nodes).score() == pytest.approx(Stats(js.nodes).score())


def test_incremental_score_matches_full_recompute() -> None:
    msg = cluster(6)
    msg["request"] = {"type": "multi-allocate", "instances": [
        {**alloc_req("drbd" if k % 2 else "plain"), "name": f"i{k}"} for k in range(10)]}
    cl = build_cluster(parse_message(json.dumps(msg)), Options())
    from herder.alloc.modes import handler

    handle = handler("multi-allocate")
    assert handle is not None
    resp = handle(cl, msg["request"], Options())
    assert len(resp.result[0]) == 10
    stats = Stats(cl.nodes)
    for node in cl.nodes:  # incremental updates of a fresh Stats equal a rebuild
        stats.update(node)
    assert stats.score() == pytest.approx(Stats(cl.nodes).score(), abs=1e-12)


def test_balance_request_improves_the_score() -> None:
    msg = cluster(4)
    msg["instances"] = {f"i{k}": {
        "memory": 1024, "vcpus": 1, "disk_template": "drbd", "disks": [{"size": 1024}],
        "disk_space_total": 1024, "spindle_use": 1, "nics": [], "tags": [],
        "nodes": ["node-000", "node-001"]} for k in range(4)}
    msg["nodes"]["node-000"]["free_memory"] -= 4096
    msg["request"] = {"type": "balance", "max_moves": 3}
    resp = ask(msg)
    assert resp.success
    res = resp.result
    assert 0 < len(res["moves"]) <= 3
    assert res["final_score"] < res["initial_score"]
    assert all(m["score"] < res["initial_score"] for m in res["moves"])
    assert sum(len(js) for js in res["jobs"]) == len(res["moves"])


def test_capacity_request_counts_what_fits() -> None:
    msg = cluster(2)
    msg["request"] = {"type": "capacity", "spec": {"memory": 8192, "disk": 10240, "vcpus": 1,
                                                   "disk_template": "plain"}}
    resp = ask(msg, capacity_checks=False)
    # 31744 MB free per node: three 8 GB instances each
    assert resp.result["count"] == 6 and resp.result["fail_reason"] == "FailMem"
    assert all(len(nodes) == 1 for _, nodes in resp.result["placements"])


def test_null_group_name_as_ganeti_sends_it() -> None:
    msg = cluster()
    msg["request"] = alloc_req(group_name=None)
    assert ask(msg).result == ["node-003"]
    msg["request"] = alloc_req(group_name="group0")
    resp = ask(msg)
    assert resp.result == ["node-003"] and not resp.info.startswith("Selected group")
    msg["request"] = alloc_req(group_name="nope")
    resp = ask(msg)
    assert not resp.success and "Wrong number of elems found with name nope" in resp.info


def test_module_entry_point_answers(tmp_path: Any) -> None:
    import sys

    msg = cluster()
    msg["request"] = alloc_req()
    path = tmp_path / "req.json"
    path.write_text(json.dumps(msg))
    proc = subprocess.run([sys.executable, "-m", "herder.cli.iallocator", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["result"] == ["node-003"]


def test_change_group_of_a_shared_storage_instance() -> None:
    """A sharedfile instance changes group by a move to the target group's best node (its
    old primary, in another group, is outside that group's score: no KeyError)."""
    msg = cluster(4, hv="kvm", groups=2)
    for group in msg["nodegroups"].values():
        group["ipolicy"] = {**POLICY, "disk-templates": ["sharedfile", "drbd", "plain"]}
    msg["instances"] = {"web": {
        "memory": 1024, "vcpus": 1, "disk_template": "sharedfile", "disks": [{"size": 1024}],
        "disk_space_total": 0, "spindle_use": 1, "nics": [], "tags": [],
        "nodes": ["node-000"]}}
    msg["request"] = {"type": "change-group", "instances": ["web"],
                      "target_groups": ["group1"]}
    resp = ask(msg)
    assert resp.success, resp.info
    moved, failed, jobs = resp.result
    assert failed == [] and moved[0][:2] == ["web", "group1"]
    assert moved[0][2][0] in ("node-002", "node-003")
    assert [op["OP_ID"] for op in jobs[0]] == ["OP_INSTANCE_MIGRATE"]  # hail's failover move
    assert jobs[0][0]["target_node"] == moved[0][2][0]
