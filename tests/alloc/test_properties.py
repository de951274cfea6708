"""Property tests: on generated clusters, no answer breaks a placement rule.

The rules are re-derived here from the request (not from herder's model), so a wrong check in
the allocator shows up as a counter-example.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herder.alloc import Options, answer, answer_message
from herder.alloc.metrics import Stats, pri_vec, sec_vec
from herder.alloc.model import Node
from herder.alloc.protocol import build_cluster, checked_message, parse_message, request_instance
from herder.alloc.textdata import serialize
from herder.alloc.wire import Message

POLICY = {
    "minmax": [{"min": {"memory-size": 128, "cpu-count": 1, "disk-size": 128, "disk-count": 1,
                        "nic-count": 1, "spindle-use": 1},
                "max": {"memory-size": 16384, "cpu-count": 8, "disk-size": 204800,
                        "disk-count": 4, "nic-count": 8, "spindle-use": 8}}],
    "std": {"memory-size": 1024, "cpu-count": 1, "disk-size": 1024, "disk-count": 1,
            "nic-count": 1, "spindle-use": 1},
    "disk-templates": ["drbd", "plain", "ext"], "vcpu-ratio": 4.0, "spindle-ratio": 32.0,
}
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def clusters(draw: st.DrawFn, templates: tuple[str, ...] = ("drbd", "plain", "ext")
             ) -> dict[str, Any]:
    ngroups = draw(st.integers(1, 2))
    groups = {f"g{g}": {"name": f"group{g}", "alloc_policy": draw(st.sampled_from(
        ["preferred", "preferred", "last_resort"])), "networks": draw(st.sampled_from(
            [[], ["net-a"]])), "ipolicy": POLICY, "tags": []} for g in range(ngroups)}
    nodes: dict[str, Any] = {}
    for g in range(ngroups):
        for k in range(draw(st.integers(1, 5))):
            mem = draw(st.sampled_from([4096, 8192, 16384]))
            nodes[f"n{g}-{k}"] = {
                "group": f"g{g}", "offline": draw(st.booleans()) and k > 0,
                "drained": draw(st.integers(0, 5)) == 0, "vm_capable": True,
                "ndparams": {"exclusive_storage": False, "spindle_count": 4},
                "total_memory": mem, "reserved_memory": 512, "free_memory": mem - 512,
                "total_disk": 100000, "free_disk": 100000, "total_cpus": 4,
                "reserved_cpus": 1, "free_spindles": 4, "total_spindles": 4, "tags": [],
            }
    online = [n for n, d in nodes.items() if not d["offline"]]
    instances: dict[str, Any] = {}
    for i in range(draw(st.integers(0, 8))):
        if not online:
            break
        tpl = draw(st.sampled_from(templates))
        p = draw(st.sampled_from(online))
        same = [n for n in online if n != p and nodes[n]["group"] == nodes[p]["group"]]
        if tpl == "drbd" and not same:
            tpl = "plain"
        placed = [p] + ([draw(st.sampled_from(same))] if tpl == "drbd" else [])
        mem = draw(st.sampled_from([256, 512, 1024, 2048]))
        dsk = draw(st.sampled_from([1024, 10240]))
        if nodes[p]["free_memory"] - mem <= 0:
            continue
        if any(nodes[n]["free_disk"] - dsk <= 0 for n in placed):
            continue
        nodes[p]["free_memory"] -= mem
        for n in placed:
            if tpl in ("drbd", "plain"):
                nodes[n]["free_disk"] -= dsk
        instances[f"i{i}"] = {
            "memory": mem, "vcpus": draw(st.integers(1, 2)), "disk_template": tpl,
            "disks": [{"size": dsk}], "disk_space_total": dsk, "spindle_use": 1,
            "nics": [], "tags": draw(st.sampled_from([[], ["svc:web"], ["svc:db"]])),
            "admin_state": draw(st.sampled_from(["up", "up", "down"])), "nodes": placed,
        }
    return {"cluster_tags": ["htools:iextags:svc"], "enabled_hypervisors": ["xen-pvm"],
            "nodegroups": groups, "nodes": nodes, "instances": instances}


@st.composite
def alloc_requests(draw: st.DrawFn) -> dict[str, Any]:
    msg = draw(clusters())
    tpl = draw(st.sampled_from(["drbd", "plain", "ext"]))
    dsk = draw(st.sampled_from([1024, 20480, 90000, 300000]))
    msg["request"] = {
        "type": "allocate", "name": "new", "required_nodes": 2 if tpl == "drbd" else 1,
        "disk_template": tpl, "disks": [{"size": dsk}], "disk_space_total": dsk,
        "memory": draw(st.sampled_from([128, 1024, 4096, 12000, 20000])),
        "vcpus": draw(st.integers(1, 10)), "spindle_use": 1, "tags": draw(
            st.sampled_from([[], ["svc:web"]])),
        "nics": draw(st.sampled_from([[], [{"network": "net-a"}]])),
    }
    return msg


def _state(msg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per node: memory available for placements, reserved N+1 memory, cpu use, tags."""
    out: dict[str, dict[str, Any]] = {}
    for name, d in msg["nodes"].items():
        out[name] = {"pri_mem": 0, "peers": {}, "ucpu": d["reserved_cpus"], "tags": set(),
                     "disk": d["free_disk"]}
    for inst in msg["instances"].values():
        p = inst["nodes"][0]
        if inst["admin_state"] == "up":
            out[p]["pri_mem"] += inst["memory"]
        out[p]["ucpu"] += inst["vcpus"]
        out[p]["tags"] |= set(inst["tags"])
        if len(inst["nodes"]) > 1:
            peers = out[inst["nodes"][1]]["peers"]
            peers[p] = peers.get(p, 0) + inst["memory"]
    for name, d in msg["nodes"].items():
        recorded = d["total_memory"] - d["reserved_memory"] - out[name]["pri_mem"]
        out[name]["free"] = min(recorded, d["free_memory"])
        out[name]["rmem"] = max(out[name]["peers"].values(), default=0)
    return out


@SETTINGS
@given(alloc_requests(), st.booleans())
def test_allocate_respects_every_rule(msg: dict[str, Any], soft: bool) -> None:
    resp = answer(json.dumps(msg), Options(ignore_soft_errors=soft))
    req = msg["request"]
    if not resp.success:
        assert resp.result == [] or resp.result is not None
        return
    nodes = resp.result
    assert len(nodes) == req["required_nodes"]
    assert len(set(nodes)) == len(nodes)
    info = msg["nodes"]
    group = info[nodes[0]]["group"]
    for n in nodes:
        assert not info[n]["offline"] and not info[n]["drained"]
        assert info[n]["group"] == group
    for nic in req["nics"]:
        assert nic["network"] in msg["nodegroups"][group]["networks"]
    # policy (always, even with --ignore-soft-errors)
    pol = POLICY["minmax"][0]
    assert pol["min"]["memory-size"] <= req["memory"] <= pol["max"]["memory-size"]
    assert pol["min"]["cpu-count"] <= req["vcpus"] <= pol["max"]["cpu-count"]
    for disk in req["disks"]:
        assert pol["min"]["disk-size"] <= disk["size"] <= pol["max"]["disk-size"]
    state = _state(msg)
    p = state[nodes[0]]
    assert p["free"] - req["memory"] > 0, "primary out of memory"
    if req["disk_template"] in ("drbd", "plain"):
        for n in nodes:
            assert state[n]["disk"] - req["disk_space_total"] > 0, "out of disk"
    if not soft:
        assert (p["ucpu"] + req["vcpus"]) / info[nodes[0]]["total_cpus"] <= 4.0
        assert not (set(req["tags"]) & p["tags"]), "exclusion tag shared on the primary"
        if p["free"] > p["rmem"]:
            assert p["free"] - req["memory"] > p["rmem"], "primary loses N+1 redundancy"
    if len(nodes) == 2:  # the secondary is always checked strictly
        s = state[nodes[1]]
        peer = s["peers"].get(nodes[0], 0) + req["memory"]
        assert req["memory"] < s["free"]
        if s["free"] > s["rmem"]:
            assert s["free"] > max(s["rmem"], peer), "secondary loses N+1 redundancy"


@SETTINGS
@given(clusters(templates=("drbd",)), st.data())
def test_drbd_allocate_keeps_global_n1(msg: dict[str, Any], data: st.DataObject) -> None:
    """On DRBD clusters every primary can still fail over to its secondary after placement."""
    mem = data.draw(st.sampled_from([256, 1024, 3000]))
    msg["request"] = {"type": "allocate", "name": "new", "required_nodes": 2,
                      "disk_template": "drbd", "disks": [{"size": 1024}],
                      "disk_space_total": 1024, "memory": mem, "vcpus": 1, "spindle_use": 1,
                      "tags": [], "nics": []}
    resp = answer(json.dumps(msg), Options())
    if not resp.success:
        return
    p, s = resp.result
    msg["instances"]["new"] = {"memory": mem, "vcpus": 1, "disk_template": "drbd",
                               "disks": [{"size": 1024}], "disk_space_total": 1024,
                               "spindle_use": 1, "nics": [], "tags": [], "admin_state": "up",
                               "nodes": [p, s]}
    msg["nodes"][p]["free_memory"] -= mem
    state = _state(msg)
    for x in msg["nodes"]:
        load: dict[str, int] = {}
        for inst in msg["instances"].values():
            if inst["nodes"][0] == x and inst["admin_state"] == "up":
                sec = inst["nodes"][1]
                load[sec] = load.get(sec, 0) + inst["memory"]
        for sec, need in load.items():
            assert not msg["nodes"][sec]["offline"]
            assert state[sec]["free"] - need > 0, f"{x}'s instances cannot fail over to {sec}"


@SETTINGS
@given(clusters(), st.sampled_from(["primary-only", "secondary-only", "all"]), st.data())
def test_evacuation_moves_to_allowed_nodes(msg: dict[str, Any], mode: str,
                                           data: st.DataObject) -> None:
    if not msg["instances"]:
        return
    names = data.draw(st.lists(st.sampled_from(sorted(msg["instances"])), min_size=1,
                               max_size=3, unique=True))
    msg["request"] = {"type": "node-evacuate", "instances": names, "evac_mode": mode}
    resp = answer(json.dumps(msg), Options())
    assert resp.success
    moved, failed, jobs = resp.result
    assert len(moved) + len(failed) == len(names)
    assert len(jobs) == len(moved)
    evacuated: set[str] = set()
    for name in names:
        nodes = msg["instances"][name]["nodes"]
        if mode in ("primary-only", "all"):
            evacuated.add(nodes[0])
        if mode in ("secondary-only", "all") and len(nodes) > 1:
            evacuated.add(nodes[1])
    for name, group, new_nodes in moved:
        old = msg["instances"][name]["nodes"]
        assert group == msg["nodegroups"][msg["nodes"][old[0]]["group"]]["name"]
        # a new primary is always online (secondary-only keeps the old one); a node may keep
        # (or, after a failover, take) the secondary role of an instance it already held
        p = new_nodes[0]
        if p != old[0]:
            assert not msg["nodes"][p]["offline"] and not msg["nodes"][p]["drained"]
        for n in new_nodes[1:]:
            assert (not msg["nodes"][n]["offline"] and not msg["nodes"][n]["drained"]) or \
                n in old
        if mode == "secondary-only":
            assert new_nodes[0] == old[0] and new_nodes[1] not in evacuated
        elif mode == "primary-only" and msg["instances"][name]["disk_template"] == "drbd":
            assert new_nodes == [old[1], old[0]]
        else:
            assert new_nodes[0] not in evacuated


OPTIONAL_NODE_KEYS = ("drained", "offline", "vm_capable", "ndparams", "tags", "reserved_memory",
                      "reserved_cpus", "free_spindles", "total_spindles")
OPTIONAL_INSTANCE_KEYS = ("disk_space_total", "admin_state", "tags", "spindle_use", "nics")


@SETTINGS
@given(alloc_requests(), st.data())
def test_typed_and_checked_paths_build_the_same_cluster(msg: dict[str, Any],
                                                        data: st.DataObject) -> None:
    """The typed decoder (``alloc.wire``, one C pass) and the key-by-key path (what a refusal
    is worded by) make the same model of any message both take: optional keys absent or null,
    numbers written as integers where hail reads a double, NICs on a network or on none."""
    absent_or_null = st.sampled_from(["keep", "keep", "drop", "null"])
    objects = [(node, OPTIONAL_NODE_KEYS) for node in msg["nodes"].values()] + \
        [(inst, OPTIONAL_INSTANCE_KEYS) for inst in msg["instances"].values()]
    for obj, keys in objects:
        for key in keys:
            how = data.draw(absent_or_null)
            if how == "drop":
                obj.pop(key, None)
            elif how == "null":
                obj[key] = None
    for inst in msg["instances"].values():
        inst["nics"] = data.draw(st.sampled_from(
            [inst.get("nics"), [{"mode": "bridged", "network": "net-a"}], [{"network": ""}]]))
    text = json.dumps(msg)
    typed = parse_message(text)
    assert isinstance(typed, Message), "the typed decoder refused a message hail takes"
    checked = checked_message(json.loads(text))
    typed_cluster = build_cluster(typed, Options())
    checked_cluster = build_cluster(checked, Options())
    assert serialize(typed_cluster) == serialize(checked_cluster)
    assert typed_cluster.instances == checked_cluster.instances
    assert [vars_of(n) for n in typed_cluster.nodes] == \
        [vars_of(n) for n in checked_cluster.nodes]
    assert answer(text, Options()) == answer_message(checked, Options())


def vars_of(node: Node) -> dict[str, Any]:
    return {name: getattr(node, name) for name in Node.__slots__}


@SETTINGS
@given(alloc_requests(), st.floats(-3, 3))
def test_score_change_is_score_delta_bit_for_bit(msg: dict[str, Any], locx: float) -> None:
    """The hot loops' one-node score (``Stats.score_change``) is the general one's float for
    float: candidates rank, and ties break, as they did."""
    cl = build_cluster(parse_message(json.dumps(msg)), Options())
    inst, _ = request_instance(cl, msg["request"])
    stats = Stats(cl.nodes)
    for node in cl.nodes:
        if node.offline:
            continue
        old = stats.vecs[node.idx]
        for new in (pri_vec(node, inst), sec_vec(node, inst, -1), old):
            assert stats.score_change(old, new, locx) == \
                stats.score_delta(((old, new),), locx)


@SETTINGS
@given(alloc_requests())
def test_stats_sums_are_add_nodes_bit_for_bit(msg: dict[str, Any]) -> None:
    """A group's statistics made at once (a component at a time over the nodes) hold the same
    floats as the same nodes added one by one (``add_node``, as moves re-add them)."""
    cl = build_cluster(parse_message(json.dumps(msg)), Options())
    stats = Stats(cl.nodes)
    one_by_one = Stats([])
    one_by_one.shift = list(stats.shift)
    for node in cl.nodes:
        one_by_one.add_node(node)
    for name in ("s", "q", "n", "vecs", "off_all", "off_pri", "offc", "maps", "total", "keys"):
        assert getattr(stats, name) == getattr(one_by_one, name), name


@SETTINGS
@given(alloc_requests())
def test_model_instances_hold_the_message_values(msg: dict[str, Any]) -> None:
    """Each instance of the model carries its own message values in the right fields (they
    are given to the model by position)."""
    cl = build_cluster(parse_message(json.dumps(msg)), Options())
    status = {None: "running", "up": "running", "down": "ADMIN_down",
              "offline": "ADMIN_offline"}
    assert [i.name for i in cl.instances] == list(msg["instances"])
    for idx, inst in enumerate(cl.instances):
        src = msg["instances"][inst.name]
        names = [cl.nodes[inst.pnode].name] + ([cl.nodes[inst.snode].name] if inst.snode >= 0
                                                else [])
        assert (inst.idx, names, inst.mem, inst.vcpus, inst.template) == \
            (idx, src["nodes"], src["memory"], src["vcpus"], src["disk_template"])
        assert inst.disks == [(d["size"], d.get("spindles")) for d in src["disks"]]
        assert inst.dsk == src.get("disk_space_total", sum(d["size"] for d in src["disks"]))
        assert inst.status == status[src.get("admin_state")]
        assert inst.tags == tuple(src.get("tags") or ())
        assert inst.spindle_use == src.get("spindle_use", 1)
        assert inst.forthcoming is (src.get("forthcoming") is True)
        assert inst.auto_balance is True
        assert inst.nic_count == len(src.get("nics") or ())
        assert inst.nets == tuple(n["network"] for n in src.get("nics") or () if n.get("network"))
        assert cl.inst_by_name[inst.name] == idx
