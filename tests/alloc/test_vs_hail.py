"""herder alloc and the real hail 3.0.2 on generated clusters: same nodes, same score.

Skips when the peer (``$GROOT/bin/hail``, default /tmp/groot) is not installed.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
from alloc_support import HAIL, needs_hail

from herder.alloc import Options, answer

pytestmark = [pytest.mark.peer, needs_hail]

POLICY = {
    "minmax": [{"min": {"memory-size": 128, "cpu-count": 1, "disk-size": 1024, "disk-count": 1,
                        "nic-count": 1, "spindle-use": 1},
                "max": {"memory-size": 65536, "cpu-count": 16, "disk-size": 1048576,
                        "disk-count": 16, "nic-count": 8, "spindle-use": 12}}],
    "std": {"memory-size": 4096, "cpu-count": 1, "disk-size": 51200, "disk-count": 1,
            "nic-count": 1, "spindle-use": 1},
    "disk-templates": ["drbd", "plain", "ext", "diskless"], "vcpu-ratio": 4.0,
    "spindle-ratio": 32.0,
}


def generated(seed: int, n: int, groups: int) -> dict[str, Any]:
    rnd = random.Random(seed)
    msg: dict[str, Any] = {
        "cluster_tags": ["htools:iextags:svc"], "enabled_hypervisors": ["xen-pvm"],
        "nodegroups": {f"g{g}": {"name": f"group{g}", "alloc_policy": rnd.choice(
            ["preferred", "preferred", "last_resort"]), "networks": [], "ipolicy": POLICY,
            "tags": []} for g in range(groups)},
        "nodes": {}, "instances": {},
    }
    for k in range(n):
        mem = rnd.choice([32768, 65536])
        msg["nodes"][f"node-{k:02d}"] = {
            "group": f"g{k * groups // n}", "offline": rnd.random() < 0.1, "drained": False,
            "vm_capable": True, "ndparams": {"exclusive_storage": False, "spindle_count": 4},
            "total_memory": mem, "reserved_memory": 1024, "free_memory": mem - 1024,
            "total_disk": 2097152, "free_disk": 2097152, "total_cpus": 16, "reserved_cpus": 1,
            "free_spindles": 4, "total_spindles": 4, "tags": [],
        }
    online = [k for k, v in msg["nodes"].items() if not v["offline"]]
    for i in range(n * 3):
        p = rnd.choice(online)
        peers = [x for x in online if x != p and msg["nodes"][x]["group"] ==
                 msg["nodes"][p]["group"]]
        tpl = rnd.choice(["drbd", "drbd", "plain", "ext"]) if peers else "plain"
        nodes = [p, rnd.choice(peers)] if tpl == "drbd" else [p]
        mem = rnd.choice([1024, 2048, 4096])
        if msg["nodes"][p]["free_memory"] - mem < 2048:
            continue
        msg["nodes"][p]["free_memory"] -= mem
        for x in nodes if tpl != "ext" else []:
            msg["nodes"][x]["free_disk"] -= 20480
        msg["instances"][f"inst-{i:03d}"] = {
            "memory": mem, "vcpus": rnd.choice([1, 2]), "disk_template": tpl,
            "disks": [{"size": 20480}], "disk_space_total": 20480, "spindle_use": 1,
            "nics": [], "tags": rnd.choice([[], ["svc:a"], ["svc:b"]]), "admin_state": "up",
            "nodes": nodes,
        }
    return msg


CASES = [(seed, n, g, tpl) for seed in (1, 2, 3) for n, g in ((6, 1), (12, 2), (20, 1))
         for tpl in ("plain", "drbd", "ext")]


@pytest.mark.parametrize(("seed", "n", "groups", "template"), CASES)
def test_allocate_like_hail(seed: int, n: int, groups: int, template: str,
                            tmp_path: Path) -> None:
    msg = generated(seed, n, groups)
    msg["request"] = {"type": "allocate", "name": "new", "disk_template": template,
                      "required_nodes": 2 if template == "drbd" else 1,
                      "disks": [{"size": 10240}], "disk_space_total": 10240, "memory": 2048,
                      "vcpus": 1, "spindle_use": 1, "tags": ["svc:a"], "nics": []}
    path = tmp_path / "req.json"
    path.write_text(json.dumps(msg))
    ref = json.loads(subprocess.run([str(HAIL), str(path)], capture_output=True, text=True,
                                    timeout=60, check=True).stdout)
    ours = answer(path.read_bytes(), Options())
    assert ours.success == ref["success"], (ours.info, ref["info"])
    assert (ours.result if ours.success else []) == ref["result"]
    assert "Request successful: " * ours.success + ours.info == ref["info"].removeprefix(
        "Request failed: ")


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("mode", ["primary-only", "secondary-only", "all"])
def test_node_evacuate_like_hail(seed: int, mode: str, tmp_path: Path) -> None:
    msg = generated(seed, 10, 1)
    victim = next(k for k, v in msg["nodes"].items() if not v["offline"])
    names = [k for k, v in msg["instances"].items() if victim in v["nodes"]]
    msg["request"] = {"type": "node-evacuate", "instances": names, "evac_mode": mode}
    path = tmp_path / "req.json"
    path.write_text(json.dumps(msg))
    ref = json.loads(subprocess.run([str(HAIL), str(path)], capture_output=True, text=True,
                                    timeout=60, check=True).stdout)
    ours = answer(path.read_bytes(), Options())
    assert ours.success == ref["success"]
    assert ours.result[0] == ref["result"][0]
    assert [f[0] for f in ours.result[1]] == [f[0] for f in ref["result"][1]]
    assert ours.result[2] == ref["result"][2]
