"""Ganeti 3.0.2's own RAPI client (`ganeti.rapi.client.GanetiRapiClient`, all 81 public
methods) against herder's masterd RAPI over HTTPS (issue 32).

Each method either works with Ganeti's request and answer shapes (a job-submitting method's
job holds the opcode with every parameter the client sent) or answers a clear 4xx naming what
herder does not support. The jobs are
queued and not run: what is checked here is the wire, not the LUs. Skips cleanly without
the peers (/tmp/groot, unpacked by ../shared/peers/setup.sh); the answers' shapes are compared
with the real vcluster's in tests/system/test_rapi_shapes.py.
"""

from __future__ import annotations

import json
import ssl
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herder.core import model
from herder.masterd.rapi import base as rapi_base
from herder.masterd.rapi import cluster as rapi_cluster
from tests.ganeti.vcluster import GROOT
from tests.security.serving import serving
from tests.security.test_route_table import (  # noqa: F401
    WRITER,
    Daemon,
    certificate,
    masterd,
)

pytestmark = pytest.mark.peer

HERE = Path(__file__).resolve().parent
GANETI_LIB = GROOT / "usr" / "share" / "ganeti" / "3.0"
DEBIAN_PYTHON = Path("/usr/bin/python3")
INSTANCE, NODE, OTHER_NODE, GROUP = ("drbd0.example.com", "node1.example.com",
                                     "node3.example.com", "default")
NEW_INSTANCE = {"mode": "create", "name": "web9.example.com", "disk_template": "plain",
                "disks": [{"size": 1024}], "nics": [{}], "os": "debootstrap+default",
                "pnode": NODE}
PLACED = {key: value for key, value in NEW_INSTANCE.items() if key != "pnode"}
NET2 = "net2"


@dataclass(frozen=True)
class Call:
    """One client call and what herder must answer: `op` (the queued opcode's OP_ID and the
    fields it must carry), `check` (the answer itself), or `refused` (a 4xx saying this)."""
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] | None = None
    op: tuple[str, dict[str, Any]] | None = None
    check: Callable[[Any], bool] | None = None
    refused: tuple[int, str] | None = None


def names(answer: Any) -> bool:
    return isinstance(answer, list) and all(isinstance(item, str) for item in answer)


def bulk(answer: Any) -> bool:
    return isinstance(answer, list) and all("name" in item for item in answer)


RULE = "00000000-0000-4000-8000-000000000000"

CALLS: dict[str, Call] = {
    # the cluster
    "GetVersion": Call("GetVersion", check=lambda v: v == 2),
    "GetFeatures": Call("GetFeatures", check=lambda v: "instance-create-reqv1" in v),
    "GetInfo": Call("GetInfo", check=lambda v: v["name"] == "cluster.example.com"),
    # its OP_OS_DIAGNOSE job is waited for and not run here: the route's time limit answers
    "GetOperatingSystems": Call("GetOperatingSystems", refused=(504, "listing the OSes")),
    "ModifyCluster": Call("ModifyCluster", kwargs={"candidate_pool_size": 5},
                          op=("OP_CLUSTER_SET_PARAMS", {"candidate_pool_size": 5})),
    "RedistributeConfig": Call("RedistributeConfig", op=("OP_CLUSTER_REDIST_CONF", {})),
    "GetClusterTags": Call("GetClusterTags", check=names),
    "AddClusterTags": Call("AddClusterTags", (["probe"],),
                           op=("OP_TAGS_SET", {"kind": "cluster", "tags": ["probe"]})),
    "DeleteClusterTags": Call("DeleteClusterTags", (["probe"],),
                              op=("OP_TAGS_DEL", {"kind": "cluster", "tags": ["probe"]})),
    # instances
    "GetInstances": Call("GetInstances", check=names),
    "GetInstance": Call("GetInstance", (INSTANCE,), check=lambda v: v["name"] == INSTANCE),
    "GetInstanceInfo": Call("GetInstanceInfo", (INSTANCE,), {"static": True},
                            op=("OP_INSTANCE_QUERY_DATA", {"instances": [INSTANCE],
                                                           "static": True})),
    # a masterd without node daemons (tests/system/test_console_live.py has the console)
    "GetInstanceConsole": Call("GetInstanceConsole", (INSTANCE,),
                               refused=(503, "Instance console unavailable")),
    "CreateInstance": Call("CreateInstance", (), {**NEW_INSTANCE},
                           op=("OP_INSTANCE_CREATE", {"instance_name": "web9.example.com",
                                                      "os_type": "debootstrap+default",
                                                      "pnode": NODE})),
    "InstanceAllocation": Call("InstanceAllocation", (), {**NEW_INSTANCE},
                               check=lambda v: v["name"] == "web9.example.com"),
    "InstancesMultiAlloc": Call(
        "InstancesMultiAlloc", ([PLACED, {**PLACED, "name": "web8.example.com"}],),
        {"iallocator": "hail"}, op=("OP_INSTANCE_MULTI_ALLOC", {"iallocator": "hail"})),
    "DeleteInstance": Call("DeleteInstance", (INSTANCE,), {"shutdown_timeout": 30},
                           op=("OP_INSTANCE_REMOVE", {"instance_name": INSTANCE,
                                                      "shutdown_timeout": 30})),
    "ModifyInstance": Call("ModifyInstance", (INSTANCE,), {"beparams": {"vcpus": 4}},
                           op=("OP_INSTANCE_SET_PARAMS", {"beparams": {"vcpus": 4}})),
    "RenameInstance": Call("RenameInstance", (INSTANCE, "drbd9.example.com"),
                           {"ip_check": False, "name_check": False},
                           op=("OP_INSTANCE_RENAME", {"new_name": "drbd9.example.com"})),
    "StartupInstance": Call("StartupInstance", (INSTANCE,), {"no_remember": True},
                            op=("OP_INSTANCE_STARTUP", {"no_remember": True})),
    "ShutdownInstance": Call("ShutdownInstance", (INSTANCE,), {"timeout": 30},
                             op=("OP_INSTANCE_SHUTDOWN", {"timeout": 30})),
    "RebootInstance": Call("RebootInstance", (INSTANCE,), {"reboot_type": "hard"},
                           op=("OP_INSTANCE_REBOOT", {"reboot_type": "hard"})),
    "ReinstallInstance": Call("ReinstallInstance", (INSTANCE,),
                              {"os": "debootstrap+default", "no_startup": True},
                              op=("OP_INSTANCE_REINSTALL", {"os_type": "debootstrap+default"})),
    "MigrateInstance": Call("MigrateInstance", (INSTANCE,), {"mode": "live"},
                            op=("OP_INSTANCE_MIGRATE", {"mode": "live"})),
    "FailoverInstance": Call("FailoverInstance", (INSTANCE,), {"ignore_consistency": True},
                             op=("OP_INSTANCE_FAILOVER", {"ignore_consistency": True})),
    "ActivateInstanceDisks": Call("ActivateInstanceDisks", (INSTANCE,), {"ignore_size": True},
                                  op=("OP_INSTANCE_ACTIVATE_DISKS", {"ignore_size": True})),
    "DeactivateInstanceDisks": Call("DeactivateInstanceDisks", (INSTANCE,), {"force": True},
                                    op=("OP_INSTANCE_DEACTIVATE_DISKS", {"force": True})),
    "GrowInstanceDisk": Call("GrowInstanceDisk", (INSTANCE, 0, 512),
                             op=("OP_INSTANCE_GROW_DISK", {"disk": 0, "amount": 512})),
    "RecreateInstanceDisks": Call("RecreateInstanceDisks", (INSTANCE,), {"disks": [0]},
                                  op=("OP_INSTANCE_RECREATE_DISKS", {})),
    "ReplaceInstanceDisks": Call(
        "ReplaceInstanceDisks", (INSTANCE,),
        {"disks": [0], "mode": "replace_new_secondary", "remote_node": OTHER_NODE},
        op=("OP_INSTANCE_REPLACE_DISKS", {"mode": "replace_new_secondary",
                                          "remote_node": OTHER_NODE, "disks": [0]})),
    "GetInstanceTags": Call("GetInstanceTags", (INSTANCE,), check=names),
    "AddInstanceTags": Call("AddInstanceTags", (INSTANCE, ["probe"]),
                            op=("OP_TAGS_SET", {"kind": "instance", "name": INSTANCE})),
    "DeleteInstanceTags": Call("DeleteInstanceTags", (INSTANCE, ["probe"]),
                               op=("OP_TAGS_DEL", {"kind": "instance", "name": INSTANCE})),
    "PrepareExport": Call("PrepareExport", (INSTANCE, "local"),
                          op=("OP_BACKUP_PREPARE", {"mode": "local"})),
    "ExportInstance": Call("ExportInstance", (INSTANCE, "local", NODE),
                           {"shutdown": True, "remove_instance": False},
                           op=("OP_BACKUP_EXPORT", {"target_node": NODE, "mode": "local",
                                                    "shutdown": True,
                                                    "remove_instance": False})),
    # nodes
    "GetNodes": Call("GetNodes", check=names),
    "GetNode": Call("GetNode", (NODE,), check=lambda v: v["name"] == NODE),
    "GetNodeRole": Call("GetNodeRole", (NODE,), check=lambda v: v == "master"),
    "SetNodeRole": Call("SetNodeRole", (OTHER_NODE, "drained"),
                        op=("OP_NODE_SET_PARAMS", {"drained": True})),
    "ModifyNode": Call("ModifyNode", (OTHER_NODE,), {"offline": False},
                       op=("OP_NODE_SET_PARAMS", {"offline": False})),
    "EvacuateNode": Call("EvacuateNode", (OTHER_NODE,), {"mode": "secondary-only",
                                                         "iallocator": "hail"},
                         op=("OP_NODE_EVACUATE", {"mode": "secondary-only"})),
    "MigrateNode": Call("MigrateNode", (OTHER_NODE,), {"mode": "live"},
                        op=("OP_NODE_MIGRATE", {"mode": "live"})),
    "PowercycleNode": Call("PowercycleNode", (OTHER_NODE,), {"force": True},
                           op=("OP_NODE_POWERCYCLE", {"force": True})),
    "GetNodeStorageUnits": Call("GetNodeStorageUnits", (NODE, "lvm-vg", "name,size"),
                                op=("OP_NODE_QUERY_STORAGE", {"storage_type": "lvm-vg"})),
    "ModifyNodeStorageUnits": Call("ModifyNodeStorageUnits", (NODE, "lvm-pv", "/dev/sda"),
                                   op=("OP_NODE_MODIFY_STORAGE", {"name": "/dev/sda"})),
    "RepairNodeStorageUnits": Call("RepairNodeStorageUnits", (NODE, "lvm-vg", "xenvg"),
                                   op=("OP_REPAIR_NODE_STORAGE", {"name": "xenvg"})),
    "GetNodeTags": Call("GetNodeTags", (NODE,), check=names),
    "AddNodeTags": Call("AddNodeTags", (NODE, ["probe"]),
                        op=("OP_TAGS_SET", {"kind": "node", "name": NODE})),
    "DeleteNodeTags": Call("DeleteNodeTags", (NODE, ["probe"]),
                           op=("OP_TAGS_DEL", {"kind": "node", "name": NODE})),
    # groups
    "GetGroups": Call("GetGroups", check=names),
    "GetGroup": Call("GetGroup", (GROUP,), check=lambda v: v["name"] == GROUP),
    "CreateGroup": Call("CreateGroup", ("rack2",), {"alloc_policy": "preferred"},
                        op=("OP_GROUP_ADD", {"group_name": "rack2"})),
    "ModifyGroup": Call("ModifyGroup", (GROUP,), {"custom_ndparams": {"spindle_count": 2}},
                        op=("OP_GROUP_SET_PARAMS", {"ndparams": {"spindle_count": 2}})),
    "RenameGroup": Call("RenameGroup", (GROUP, "rack1"),
                        op=("OP_GROUP_RENAME", {"new_name": "rack1"})),
    "DeleteGroup": Call("DeleteGroup", (GROUP,), op=("OP_GROUP_REMOVE", {})),
    "AssignGroupNodes": Call("AssignGroupNodes", (GROUP, [OTHER_NODE]), {"force": True},
                             op=("OP_GROUP_ASSIGN_NODES", {"nodes": [OTHER_NODE]})),
    "GetGroupTags": Call("GetGroupTags", (GROUP,), check=names),
    "AddGroupTags": Call("AddGroupTags", (GROUP, ["probe"]),
                         op=("OP_TAGS_SET", {"kind": "nodegroup", "name": GROUP})),
    "DeleteGroupTags": Call("DeleteGroupTags", (GROUP, ["probe"]),
                            op=("OP_TAGS_DEL", {"kind": "nodegroup", "name": GROUP})),
    # queries
    "Query": Call("Query", ("node", ["name", "pinst_cnt"]),
                  check=lambda v: len(v["data"]) == 3 and len(v["fields"]) == 2),
    "QueryFields": Call("QueryFields", ("node",),
                        check=lambda v: any(f["name"] == "name" for f in v["fields"])),
    # jobs (the last job submitted above)
    "GetJobs": Call("GetJobs", check=lambda v: all(str(j).isdigit() for j in v) and v),
    "GetJobStatus": Call("GetJobStatus", ("$job",), check=lambda v: v["status"] == "queued"),
    "WaitForJobCompletion": Call("WaitForJobCompletion", ("$job",),
                                 {"period": 0, "retries": 0}, check=lambda v: v is False),
    "CancelJob": Call("CancelJob", ("$job",), check=lambda v: v[0] is True),
    "WaitForJobChange": Call("WaitForJobChange", ("$job", ["status"], None, None),
                             check=lambda v: v["job_info"] == ["canceled"]),
    # networks (`net1` is in the config and connected to the group; NET2 is new)
    "GetNetworks": Call("GetNetworks", check=lambda v: v == ["net1"]),
    "GetNetwork": Call("GetNetwork", ("net1",),
                       check=lambda v: v["network"] == "10.0.0.0/24" and v["free_count"] == 256
                       and v["group_list"] == [[GROUP, "bridged", "br0", ""]]),
    "CreateNetwork": Call("CreateNetwork", (NET2, "10.1.0.0/24"),
                          {"gateway": "10.1.0.1", "add_reserved_ips": "10.1.0.5,10.1.0.6"},
                          op=("OP_NETWORK_ADD", {"network_name": NET2, "network": "10.1.0.0/24",
                                                 "gateway": "10.1.0.1",
                                                 "add_reserved_ips": ["10.1.0.5",
                                                                      "10.1.0.6"]})),
    "ModifyNetwork": Call("ModifyNetwork", ("net1",), {"gateway": "10.0.0.1"},
                          op=("OP_NETWORK_SET_PARAMS", {"network_name": "net1",
                                                        "gateway": "10.0.0.1"})),
    "DeleteNetwork": Call("DeleteNetwork", ("net1",),
                          op=("OP_NETWORK_REMOVE", {"network_name": "net1"})),
    "ConnectNetwork": Call("ConnectNetwork", ("net1", GROUP, "routed", "100", ".20"),
                           op=("OP_NETWORK_CONNECT", {"group_name": GROUP,
                                                      "network_mode": "routed",
                                                      "network_link": "100",
                                                      "network_vlan": ".20"})),
    "DisconnectNetwork": Call("DisconnectNetwork", ("net1", GROUP),
                              op=("OP_NETWORK_DISCONNECT", {"network_name": "net1",
                                                            "group_name": GROUP})),
    "GetNetworkTags": Call("GetNetworkTags", ("net1",), check=names),
    "AddNetworkTags": Call("AddNetworkTags", ("net1", ["probe"]),
                           op=("OP_TAGS_SET", {"kind": "network", "name": "net1"})),
    "DeleteNetworkTags": Call("DeleteNetworkTags", ("net1", ["probe"]),
                              op=("OP_TAGS_DEL", {"kind": "network", "name": "net1"})),
    # job filters (the rule under RULE made by ReplaceFilter, read, then deleted)
    "GetFilters": Call("GetFilters", check=lambda v: isinstance(v, list)),
    "AddFilter": Call("AddFilter", (0, [], "ACCEPT"),
                      check=lambda v: isinstance(v, str) and len(v) == 36),
    "ReplaceFilter": Call("ReplaceFilter", (RULE, 10, [["jobid", [">", "id", "watermark"]]],
                                            "PAUSE"), check=lambda v: v == RULE),
    "GetFilter": Call("GetFilter", (RULE,),
                      check=lambda v: v["uuid"] == RULE and v["action"] == "PAUSE"),
    "DeleteFilter": Call("DeleteFilter", (RULE,), check=lambda v: v is None),
}


def ganeti_methods() -> list[str]:
    """The public methods of Ganeti's GanetiRapiClient, as its own Python lists them."""
    listed = subprocess.run(
        [str(DEBIAN_PYTHON), "-c", "import inspect; from ganeti.rapi import client; print("
         "[n for n, _ in inspect.getmembers(client.GanetiRapiClient, inspect.isfunction) "
         "if not n.startswith('_')])"],
        capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(GANETI_LIB)},
        check=True)
    return list(json.loads(listed.stdout.replace("'", '"')))


@pytest.fixture
def answers(masterd: tuple[Daemon, rapi_base.RapiContext],  # noqa: F811
            tmp_path: Path, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[tuple[dict[str, dict[str, Any]], Any]]:
    """Every call of CALLS made by Ganeti's client (in CALLS' order: the job calls last) over
    HTTPS against herder's masterd RAPI, and the context to read the queued jobs."""
    if not (GANETI_LIB / "ganeti" / "rapi" / "client.py").is_file() \
            or not DEBIAN_PYTHON.exists():
        pytest.skip("Ganeti peers absent (/tmp/groot's ganeti.rapi.client: "
                    "../shared/peers/setup.sh)")
    daemon, ctx = masterd
    ctx.queue.recover()  # the queue's directory: jobs are queued, not run
    with ctx.store.update() as config:  # a network for the network calls
        net = model.Network(uuid=model.new_uuid(), name="net1", network="10.0.0.0/24")
        config.networks[net.uuid] = net
        config.find_group(GROUP).networks[net.uuid] = model.NetworkLink(mode="bridged",
                                                                        link="br0")
    monkeypatch.setattr(rapi_cluster, "OS_WAIT", 2.0)
    pem = certificate(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(pem)
    with serving(daemon.app, tls) as server:
        assert server.secure is not None
        port = int(server.secure.rsplit(":", 1)[1])
        request = {"host": "127.0.0.1", "port": port, "user": WRITER[0],
                   "password": WRITER[1], "cafile": str(pem),
                   "calls": [[label, c.method, list(c.args), c.kwargs or {}]
                             for label, c in CALLS.items()]}
        done = subprocess.run([str(DEBIAN_PYTHON), str(HERE / "ganeti_rapi_driver.py")],
                              input=json.dumps(request), capture_output=True, text=True,
                              timeout=600, env={"PYTHONPATH": str(GANETI_LIB)})
        assert done.returncode == 0, done.stderr[-2000:]
        yield {a["label"]: a for a in json.loads(done.stdout)}, ctx


def test_every_client_method_is_called() -> None:
    if not (GANETI_LIB / "ganeti" / "rapi" / "client.py").is_file():
        pytest.skip("Ganeti peers absent (/tmp/groot's ganeti.rapi.client)")
    assert sorted(ganeti_methods()) == sorted(c.method for c in CALLS.values())


def test_ganeti_client_against_herder(
        answers: tuple[dict[str, dict[str, Any]], Any]) -> None:
    by_label, ctx = answers
    problems: list[str] = []
    for label, call in CALLS.items():
        answer = by_label[label]
        if call.refused is not None:
            code, says = call.refused
            if answer.get("code") != code or says not in answer.get("error", ""):
                problems.append(f"{label}: expected {code} saying {says!r}, got {answer}")
            continue
        if "error" in answer:
            problems.append(f"{label}: {answer['code']} {answer['error']}")
            continue
        result = answer["result"]
        if call.check is not None and not call.check(result):
            problems.append(f"{label}: unexpected answer {result!r}")
        if call.op is not None:
            op_id, fields = call.op
            if not str(result).isdigit():
                problems.append(f"{label}: answered {result!r}, not a job id")
                continue
            (op,) = ctx.queue.info(int(result), ["ops"])["ops"]
            if op["OP_ID"] != op_id:
                problems.append(f"{label}: queued {op['OP_ID']}, not {op_id}")
            for key, value in fields.items():
                if op.get(key) != value:
                    problems.append(f"{label}: the opcode's {key} is {op.get(key)!r}, "
                                    f"not {value!r}")
    assert not problems, "\n".join(problems)

    # the multi-allocation carries every instance; GET /2/os queued Ganeti's OP_OS_DIAGNOSE
    (multi,) = ctx.queue.info(int(by_label["InstancesMultiAlloc"]["result"]), ["ops"])["ops"]
    assert [i["instance_name"] for i in multi["instances"]] == \
        ["web9.example.com", "web8.example.com"]
    assert all(i["os_type"] == "debootstrap+default" for i in multi["instances"])
    diagnoses = [op for job in ctx.queue.job_ids()
                 for op in ctx.queue.info(job, ["ops"])["ops"] if op["OP_ID"] == "OP_OS_DIAGNOSE"]
    assert [op["output_fields"] for op in diagnoses] == [["name", "variants"]]
