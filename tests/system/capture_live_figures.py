"""Capture Ganeti 3.0.2's live answers into tests/data/ganeti_live_figures.json, from a fresh
vcluster (../shared/peers/vcluster; root): `python -m tests.system.capture_live_figures [PATH]`.

The cluster is set up as the snapshot's `how` says, then changed step by step behind Ganeti's
back (its fake hypervisor keeps one file per running instance on each node) and asked again:
the instance statuses herder must produce for the same situations (test_live_figures.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from herder.core.rapi import RapiClient
from tests.ganeti.vcluster import VC, VCluster, running_vcluster
from tests.system.rapi_shapes import (
    INSTANCE_QUERY,
    LIVE_SNAPSHOT,
    NODE_QUERY,
    run_live_sequence,
    scrub,
)

HOW = ("3 nodes, fake hypervisor; inst1 diskless on node2 (up), inst2 file on node3 (up), "
       "inst3 diskless on node2 (shut down), inst4 diskless on node3 (offline). _states: inst1 "
       "removed from node2's fake hypervisor (ERROR_down), inst3 added there (ERROR_up), inst2 "
       "moved from node3 to node1 (node1 is no instance's primary, so Ganeti does not ask it: "
       "ERROR_down); _nodedown: node2's noded killed; _nodeoffline: node3 marked offline")
NODE1, NODE2, NODE3 = (f"node{i}.vcluster.test" for i in (1, 2, 3))
SHORT_INSTANCE_QUERY = "name,status,oper_state,oper_ram"
SHORT_NODE_QUERY = "name,mtotal,mfree,bootid,dtotal"


def fake_hypervisor(node: str) -> Path:
    """Where Ganeti's fake hypervisor on `node` keeps its running instances."""
    return VC / "nodes" / node / "var" / "run" / "ganeti" / "fake-hypervisor"


def add_instances(vcl: VCluster) -> None:
    for name, node, template, params, start in (
            ("inst1", NODE2, "diskless", "memory=128,vcpus=2", True),
            ("inst2", NODE3, "file", "memory=256", True),
            ("inst3", NODE2, "diskless", "memory=128", False),
            ("inst4", NODE3, "diskless", "memory=128", False)):
        disks = ("--disk", "0:size=512") if template == "file" else ()
        vcl.vc(NODE1, "gnt-instance", "add", "-t", template, *disks, "-o", "noop+default",
               "--no-ip-check", "-n", node, "-B", params, *(() if start else ("--no-start",)),
               f"{name}.vcluster.test")
    vcl.vc(NODE1, "gnt-instance", "modify", "--offline", "inst4.vcluster.test")


def capture(client: RapiClient, vcl: VCluster) -> dict[str, Any]:
    def query(resource: str, fields: str) -> Any:
        return client.request("GET", f"/2/query/{resource}", {"fields": fields})

    def bulk(kind: str) -> Any:
        return client.request("GET", f"/2/{kind}", {"bulk": 1})

    steps = run_live_sequence(client, NODE2, "inst1.vcluster.test")
    # behind Ganeti's back: inst1 crashed, inst3 started, inst2 runs on node1
    (fake_hypervisor(NODE2) / "inst1.vcluster.test").unlink()
    (fake_hypervisor(NODE2) / "inst3.vcluster.test").write_text("0\n128\n1\n")
    moved = fake_hypervisor(NODE3) / "inst2.vcluster.test"
    (fake_hypervisor(NODE1) / moved.name).write_text(moved.read_text())
    moved.unlink()
    steps["instances_states"] = bulk("instances")
    vcl.vc(NODE2, "/usr/lib/ganeti/daemon-util", "stop", "ganeti-noded")
    steps.update(nodes_nodedown=bulk("nodes"), instances_nodedown=bulk("instances"),
                 query_instance_nodedown=query("instance", SHORT_INSTANCE_QUERY))
    vcl.vc(NODE1, "gnt-node", "modify", "--offline=yes", "--force", NODE3)
    steps.update(nodes_nodeoffline=bulk("nodes"), instances_nodeoffline=bulk("instances"),
                 query_instance_offline=query("instance", SHORT_INSTANCE_QUERY),
                 query_node_offline=query("node", SHORT_NODE_QUERY))
    return steps


def main(path: Path = LIVE_SNAPSHOT) -> None:
    with running_vcluster() as vcl:
        add_instances(vcl)
        with RapiClient(vcl.url, vcl.user, vcl.password, verify=False) as client:
            steps = capture(client, vcl)
    document = {
        "how": HOW, "source": "Ganeti 3.0.2 (vcluster, ../shared/peers/vcluster)",
        "query_fields": {"query_node": NODE_QUERY, "query_instance": INSTANCE_QUERY,
                         "query_instance_nodedown": SHORT_INSTANCE_QUERY,
                         "query_instance_offline": SHORT_INSTANCE_QUERY,
                         "query_node_offline": SHORT_NODE_QUERY},
        "steps": scrub(steps, keep_items=100),  # whole query answers
    }
    path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else LIVE_SNAPSHOT)
