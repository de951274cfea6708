"""A Ganeti config scaled from the conformance capture: N instances on N/10 nodes.

Used by bench/scale.py (and the scale tests at small sizes): each node, instance and disk is a
copy of one of the capture's, with fresh names, UUIDs, IPs, MACs, DRBD ports and minors, so the
result imports like a real cluster of that size.
"""

from __future__ import annotations

import copy
import json
import os
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# ../shared beside the checkout, or HERDER_SHARED (a worktree elsewhere), as the tests take it
SHARED = Path(os.environ.get("HERDER_SHARED", REPO.parent / "shared"))
SOURCE = SHARED / "conformance" / "ganeti" / "cluster_config_3.0.json"


def _uuid(kind: str, index: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{kind}-{index}.scale.herder"))


def scaled_ganeti(instances: int, source: Path = SOURCE) -> dict[str, Any]:
    """The capture with `instances` instances on max(2, instances // 10) nodes."""
    data = json.loads(source.read_text())
    nodes_n = max(2, instances // 10)
    node_templates = list(data["nodes"].values())
    inst_templates = sorted(data["instances"].values(), key=lambda i: i["name"])
    disks = data["disks"]
    group = next(iter(data["nodegroups"]))
    new_nodes: dict[str, Any] = {}
    node_uuids = []
    for index in range(nodes_n):
        node = copy.deepcopy(node_templates[index % len(node_templates)])
        node_uuid = _uuid("node", index)
        node.update(uuid=node_uuid, name=f"node{index}.example.com", group=group,
                    # loopback: a push to a node without a noded is refused at once
                    primary_ip=f"127.{10 + index // 250}.{index % 250}.1",
                    secondary_ip=f"127.{50 + index // 250}.{index % 250}.1",
                    master_candidate=index < 10, offline=False, drained=False)
        new_nodes[node_uuid] = node
        node_uuids.append(node_uuid)
    data["cluster"]["master_node"] = node_uuids[0]
    new_instances: dict[str, Any] = {}
    new_disks: dict[str, Any] = {}
    minors = [0] * nodes_n
    port = 11000
    for index in range(instances):
        template = inst_templates[index % len(inst_templates)]
        inst = copy.deepcopy(template)
        inst_uuid = _uuid("instance", index)
        primary = index % nodes_n
        secondary = (primary + 1 + index // nodes_n % (nodes_n - 1)) % nodes_n
        inst.update(uuid=inst_uuid, name=f"inst{index}.example.com",
                    primary_node=node_uuids[primary])
        for nic_index, nic in enumerate(inst["nics"]):
            nic["uuid"] = _uuid(f"nic{nic_index}", index)
            nic["mac"] = f"aa:00:{index >> 16 & 255:02x}:{index >> 8 & 255:02x}:" \
                         f"{index & 255:02x}:{nic_index:02x}"
            nic.pop("network", None)
        disk_uuids = []
        for disk_index, disk_uuid in enumerate(template["disks"]):
            disk = copy.deepcopy(disks[disk_uuid])
            new_uuid = _uuid(f"disk{disk_index}", index)
            disk["uuid"] = new_uuid
            if disk["dev_type"] == "drbd":
                port += 1
                pnode, snode = node_uuids[primary], node_uuids[secondary]
                disk["logical_id"] = [pnode, snode, port, minors[primary], minors[secondary],
                                      disk["logical_id"][5]]
                minors[primary] += 1
                minors[secondary] += 1
                disk["nodes"] = [pnode, snode]
                for child in disk.get("children", []):
                    child["nodes"] = [pnode, snode]
                    child["logical_id"] = [child["logical_id"][0],
                                           f"{inst_uuid}.{child['logical_id'][1].split('.')[-1]}"]
            else:
                disk["nodes"] = [node_uuids[primary]]
                disk["logical_id"] = [disk["logical_id"][0], f"{inst_uuid}.disk{disk_index}"]
            new_disks[new_uuid] = disk
            disk_uuids.append(new_uuid)
        inst["disks"] = disk_uuids
        new_instances[inst_uuid] = inst
    data["cluster"]["highest_used_port"] = port
    data.update(nodes=new_nodes, instances=new_instances, disks=new_disks)
    return data


def scaled_herder(instances: int) -> Any:
    """The scaled capture imported into a herder `ConfigData`."""
    from herder.cli import ganeti_import

    config, _notes = ganeti_import.import_ganeti(scaled_ganeti(instances))
    return config
