"""The storage RPCs of each disk operation, in order, equal those of Ganeti 3.0.2's own cmdlib.

Both run on the same cluster: Ganeti's own `config.data` of a 3.0 cluster
(`../shared/conformance/ganeti/cluster_config_3.0.json`: a DRBD instance on node1/node3, plain
instances; four more added in its shapes), read by Ganeti's `ConfigWriter` and imported into
herder (`cli.ganeti_import`). Ganeti's side runs its cmdlib (CreateDisks with
_RemoveDegradedDisks, RemoveDisks, StartInstanceDisks, LUInstanceActivateDisks,
LUInstanceDeactivateDisks, LUInstanceGrowDisk, TLReplaceDisks, TLMigrateInstance,
LUInstanceMove, LUInstanceRecreateDisks, LUInstanceRename) with its real RPC runner over a
recording transport (`cmdlib_driver.py`, Debian's python3); herder's side runs its LUs and
`masterd.lu.disks` with the node RPC client replaced by a recorder at its seam
(`env.rpc.call`). Both record (procedure, node, the disks and flags sent: `rpc_summary.py`);
the storage RPCs (blockdev_*, drbd_*, file_storage_dir_*, vg_list) must be equal, or differ
exactly as docs/compat.md says (`EXPECTED_DIFFERENCES`: rows B11, B15, B16, B42-B45).
Failures are injected on both sides alike (a node's RPC fails, mirrors stay degraded, nodes
offline). Skips when Ganeti's code (/tmp/groot) or the capture (../shared) is absent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from herder.cli import ganeti_import
from herder.core import model
from herder.core.errors import HerderError, RpcError
from herder.core.noderpc import RpcTransport
from herder.core.store import FileStore
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu import disks
from herder.masterd.lu.base import LogicalUnit, MasterEnv
from herder.masterd.lu.grow import InstanceGrowDisk
from herder.masterd.lu.instance import (
    InstanceActivateDisks,
    InstanceDeactivateDisks,
    InstanceFailover,
    InstanceMigrate,
    InstanceRename,
    InstanceReplaceDisks,
)
from herder.masterd.lu.move import InstanceMove
from herder.masterd.lu.recreate import InstanceRecreateDisks
from tests.conftest import SHARED
from tests.ganeti import rpc_summary
from tests.rpcfakes import nothing_answer

pytestmark = pytest.mark.peer

HERE = Path(__file__).resolve().parent
GROOT = Path(os.environ.get("GROOT", "/tmp/groot")) / "usr/share/ganeti/3.0"
DEBIAN_PYTHON = Path("/usr/bin/python3")
CLUSTER = SHARED / "conformance/ganeti/cluster_config_3.0.json"

DRBD, PLAIN = "instance1.example.com", "instance3.example.com"
# added to the capture (`cluster_config`): a stopped two-disk DRBD instance with its disks
# inactive, a stopped two-disk file instance, a sharedfile one, an adopted block device
DRBD2, FILE, SHARED = "instance4.example.com", "instance5.example.com", "instance6.example.com"
ADOPTED = "instance7.example.com"  # a blockdev disk
NEW_SECONDARY, NEW_MINOR = "node2.example.com", 2  # the first free minor there

# name -> the job for Ganeti's driver (its op, instance and arguments)
OPERATIONS: dict[str, dict[str, Any]] = {
    "create drbd": {"op": "create", "instance": DRBD},
    "create plain": {"op": "create", "instance": PLAIN},
    "remove drbd": {"op": "remove", "instance": DRBD},
    "remove plain": {"op": "remove", "instance": PLAIN},
    "activate-disks drbd": {"op": "activate", "instance": DRBD},
    "activate-disks plain": {"op": "activate", "instance": PLAIN},
    "deactivate-disks --force drbd": {"op": "deactivate", "instance": DRBD, "force": True},
    "grow-disk drbd": {"op": "grow", "instance": DRBD, "disk": 0, "amount": 512},
    "grow-disk plain": {"op": "grow", "instance": PLAIN, "disk": 0, "amount": 512},
    "replace-disks -s": {"op": "replace_disks", "instance": DRBD,
                         "mode": "replace_on_secondary"},
    "replace-disks -p": {"op": "replace_disks", "instance": DRBD,
                         "mode": "replace_on_primary"},
    "replace-disks -n": {"op": "replace_disks", "instance": DRBD,
                         "mode": "replace_new_secondary", "new_node": NEW_SECONDARY,
                         "new_minors": [NEW_MINOR]},
    "migrate drbd (role swap, dual primary)": {"op": "migrate", "instance": DRBD},
    "migrate drbd, the migration fails": {
        "op": "migrate", "instance": DRBD, "fail": ["instance_migrate", "node1.example.com"],
        "herder_fail": ["migrate_instance", "node1.example.com"]},  # herder's name for it
    "failover drbd (role swap)": {"op": "failover", "instance": DRBD},
    "remove drbd, the secondary offline": {"op": "remove", "instance": DRBD,
                                           "offline": ["node3.example.com"]},
    "activate-disks drbd, the secondary offline": {"op": "activate", "instance": DRBD,
                                                   "offline": ["node3.example.com"]},
    "deactivate-disks --force drbd, the primary offline": {
        "op": "deactivate", "instance": DRBD, "force": True, "offline": ["node1.example.com"]},
    "migrate sharedfile": {"op": "migrate", "instance": SHARED, "target": "node3.example.com"},
    "failover sharedfile": {"op": "failover", "instance": SHARED,
                            "target": "node3.example.com"},
    "failover sharedfile, the primary offline": {"op": "failover", "instance": SHARED,
                                                 "target": "node3.example.com",
                                                 "offline": ["node2.example.com"]},
    "failover drbd, the primary offline": {"op": "failover", "instance": DRBD,
                                           "offline": ["node1.example.com"]},
    "the dead primary returns: activate-disks resyncs it as the secondary": {
        "op": "node_returns", "instance": DRBD, "offline": ["node1.example.com"]},
    "rename drbd, stopped": {"op": "rename", "instance": DRBD2,
                             "new_name": "instance9.example.com"},
    "create drbd, two disks": {"op": "create", "instance": DRBD2},
    "create drbd, the secondary fails": {"op": "create", "instance": DRBD,
                                         "fail": ["blockdev_create", "node3.example.com"]},
    "create drbd, no wait for sync": {"op": "create", "instance": DRBD,
                                      "wait_for_sync": False},
    "create drbd, degraded mirrors": {"op": "create", "instance": DRBD, "degraded": True},
    "create plain, no wait for sync": {"op": "create", "instance": PLAIN,
                                       "wait_for_sync": False},
    "remove drbd, two disks": {"op": "remove", "instance": DRBD2},
    "activate-disks drbd, two disks": {"op": "activate", "instance": DRBD2},
    "activate-disks drbd, the secondary fails": {
        "op": "activate", "instance": DRBD,
        "fail": ["blockdev_assemble", "node3.example.com"]},
    "start (disks), the secondary fails": {
        "op": "start_disks", "instance": DRBD,
        "fail": ["blockdev_assemble", "node3.example.com"]},
    "deactivate-disks drbd, two disks": {"op": "deactivate", "instance": DRBD2},
    "grow-disk drbd disk/1, disks inactive": {"op": "grow", "instance": DRBD2, "disk": 1,
                                              "amount": 256},
    "replace-disks -s, disks inactive": {"op": "replace_disks", "instance": DRBD2,
                                         "mode": "replace_on_secondary"},
    "replace-disks -s --disks 1, two disks": {"op": "replace_disks", "instance": DRBD2,
                                              "mode": "replace_on_secondary", "disks": [1]},
    "replace-disks -p, two disks": {"op": "replace_disks", "instance": DRBD2,
                                    "mode": "replace_on_primary"},
    "replace-disks -a, disk/0 faulty on the secondary": {
        "op": "replace_disks", "instance": DRBD, "mode": "replace_auto",
        "faulty": {"node3.example.com": [0]}},
    "replace-disks -a, disk/1 faulty on the primary, two disks": {
        "op": "replace_disks", "instance": DRBD2, "mode": "replace_auto",
        "faulty": {"node2.example.com": [1]}},
    "replace-disks -a, nothing faulty": {"op": "replace_disks", "instance": DRBD,
                                         "mode": "replace_auto"},
    "replace-disks -s --early-release": {"op": "replace_disks", "instance": DRBD,
                                         "mode": "replace_on_secondary",
                                         "early_release": True},
    "replace-disks -n --early-release": {"op": "replace_disks", "instance": DRBD,
                                         "mode": "replace_new_secondary",
                                         "new_node": NEW_SECONDARY,
                                         "new_minors": [NEW_MINOR], "early_release": True},
    "replace-disks -n, two disks": {"op": "replace_disks", "instance": DRBD2,
                                    "mode": "replace_new_secondary",
                                    "new_node": "node1.example.com", "new_minors": [1, 2]},
    "failover drbd, stopped": {"op": "failover", "instance": DRBD2},
    "create file, two disks": {"op": "create", "instance": FILE},
    "remove file, two disks": {"op": "remove", "instance": FILE},
    "activate-disks file": {"op": "activate", "instance": FILE},
    "deactivate-disks file": {"op": "deactivate", "instance": FILE},
    "grow-disk file": {"op": "grow", "instance": FILE, "disk": 0, "amount": 256},
    "create sharedfile": {"op": "create", "instance": SHARED},
    "remove sharedfile": {"op": "remove", "instance": SHARED},
    "rename file": {"op": "rename", "instance": FILE, "new_name": "instance8.example.com"},
    "move plain": {"op": "move", "instance": PLAIN, "target": "node1.example.com"},
    "move file, stopped": {"op": "move", "instance": FILE, "target": "node2.example.com"},
    "recreate-disks file disk/1": {"op": "recreate", "instance": FILE, "disks": [1]},
    "recreate-disks drbd disk/0": {"op": "recreate", "instance": DRBD2, "disks": [0]},
    "create blockdev": {"op": "create", "instance": ADOPTED},
    "remove blockdev": {"op": "remove", "instance": ADOPTED},
    "activate-disks blockdev": {"op": "activate", "instance": ADOPTED},
}


def _disk(uuid: str, dev_type: str, logical_id: list[Any], size: int, nodes: list[str],
          index: int, children: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"uuid": uuid, "dev_type": dev_type, "logical_id": logical_id, "size": size,
            "nodes": nodes, "iv_name": f"disk/{index}", "mode": "rw", "params": {},
            "children": children or [], "serial_no": 1, "ctime": 1.0, "mtime": 1.0}


def _lv(name: str, size: int, nodes: list[str]) -> dict[str, Any]:
    return {"dev_type": "plain", "logical_id": ["xenvg", name], "size": size, "nodes": nodes,
            "params": {}, "serial_no": 1, "ctime": 1.0, "mtime": 1.0}


def cluster_config() -> dict[str, Any]:
    """The captured Ganeti 3.0 config.data, with four instances more (same shapes)."""
    data = json.loads(CLUSTER.read_text())
    node = {n["name"].split(".")[0]: uuid for uuid, n in data["nodes"].items()}
    template = next(i for i in data["instances"].values() if i["name"] == DRBD)

    def add(name: str, uuid: str, primary: str, disks: list[dict[str, Any]],
            **state: Any) -> None:
        for disk in disks:
            data["disks"][disk["uuid"]] = disk
        data["instances"][uuid] = {
            **template, "name": name, "uuid": uuid, "primary_node": node[primary],
            "disks": [d["uuid"] for d in disks],
            "nics": [{**template["nics"][0], "mac": f"aa:00:00:00:00:{uuid[-2:]}",
                      "uuid": f"{uuid[:-2]}ff"}], **state}

    pair = [node["node2"], node["node3"]]
    add(DRBD2, "00000000-0000-4000-8000-000000000004", "node2", [
        _disk(f"00000000-0000-4000-8000-0000000004d{i}", "drbd",
              [*pair, 32110 + i, i, 1 + i, f"secret{i}"], 1024, pair, i,
              [_lv(f"inst4.disk{i}_data", 1024, pair), _lv(f"inst4.disk{i}_meta", 128, pair)])
        for i in range(2)], admin_state="down", disks_active=False)
    add(FILE, "00000000-0000-4000-8000-000000000005", "node1", [
        _disk(f"00000000-0000-4000-8000-0000000005d{i}", "file",
              ["loop", f"/srv/ganeti/file-storage/{FILE}/disk{i}"], 512, [node["node1"]], i)
        for i in range(2)], admin_state="down", disks_active=False)
    add(SHARED, "00000000-0000-4000-8000-000000000006", "node2", [
        _disk("00000000-0000-4000-8000-0000000006d0", "sharedfile",
              ["loop", f"/srv/ganeti/shared-file-storage/{SHARED}/disk0"], 512,
              [node["node2"]], 0)])
    add(ADOPTED, "00000000-0000-4000-8000-000000000007", "node1", [
        _disk("00000000-0000-4000-8000-0000000007d0", "blockdev",
              ["manual", "/dev/disk/by-id/scsi-adopted0"], 2048, [node["node1"]], 0)])
    data["cluster"]["enabled_disk_templates"].append("blockdev")
    data["cluster"]["file_storage_dir"] = "/srv/ganeti/file-storage"
    return data


def ganeti_available() -> bool:
    return (GROOT / "ganeti" / "cmdlib" / "instance_storage.py").is_file() \
        and DEBIAN_PYTHON.is_file()


@pytest.fixture(scope="module")
def ganeti_calls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[list[Any]]]:
    """Ganeti's RPCs for every operation, from one run of its code."""
    if not ganeti_available():
        pytest.skip("Ganeti 3.0.2 from ../shared/peers (/tmp/groot) is absent")
    if not CLUSTER.is_file():
        pytest.skip(f"the Ganeti 3.0 cluster capture is absent ({CLUSTER})")
    config_file = tmp_path_factory.mktemp("ganeti") / "config.data"
    config_file.write_text(json.dumps(cluster_config()))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{GROOT}:{HERE}", "LC_ALL": "C"}
    request = {"config": str(config_file), "jobs": list(OPERATIONS.values())}
    proc = subprocess.run([str(DEBIAN_PYTHON), "-O", str(HERE / "cmdlib_driver.py")],
                          input=json.dumps(request), env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"Ganeti's cmdlib did not run: {proc.stderr[-3000:]}")
    return dict(zip(OPERATIONS, json.loads(proc.stdout), strict=True))


# --- herder's side --------------------------------------------------------------------------


class RecordingRpc(RpcTransport):
    """herder's node RPC client at its seam (what `env.rpc.call` sends), answering as a
    healthy node."""

    def __init__(self, fail: list[str] | None = None, degraded: bool = False,
                 faulty: dict[str, list[int]] | None = None) -> None:
        self.calls: list[list[Any]] = []
        self.fail = fail  # [procedure, node name]: its first such call fails
        self.degraded = degraded  # the mirrors report degraded
        self.faulty = faulty or {}  # node name -> indices of disks whose storage failed

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        self.calls.append(rpc_summary.summary(method, node.name, args, herder=True))
        if self.fail == [method, node.name]:
            self.fail = None
            raise RpcError(f"node {node.name}: {method} failed: injected by the test")
        status = ["/dev/drbd0", 147, 0, None, None, False, 1]
        faulty = self.faulty.get(node.name, [])
        answers: dict[str, Any] = {
            "blockdev_find": status,
            "blockdev_getmirrorstatus": [
                ["/dev/drbd0", 147, 0, None, None, self.degraded or index in faulty,
                 4 if index in faulty else 1]
                for index, _disk in enumerate(args.get("disks", []))],
            "blockdev_assemble": ["/dev/drbd0", None],
            "drbd_wait_sync": [True, 100.0],
            "instance_migratable": {"running": True, "state": "running", "method": "libvirt",
                                    "reason": ""},
            "migration_info": {"xml": "<domain/>", "state": "running"},
            "instance_get_migration_status": {"status": "completed"},
            "instance_list": {},
            # a healthy node with room for the instance (the migration's memory check)
            "node_info": {"bootid": "b", "memory_total": 8192, "memory_free": 8192,
                          "memory_dom0": 512, "cpu_total": 2, "cpu_dom0": 2, "cpu_nodes": 1,
                          "cpu_sockets": 1, "instances": {}},
            "blockdev_import_prepare": {"token": "token"},
            "blockdev_export": {"bytes": 1 << 20, "checksum": ""},
            "vg_list": {"xenvg": 20480},  # the cluster's VG is there (replace-disks' check)
        }
        return answers[method] if method in answers else nothing_answer(method)


def herder_env(tmp_path: Path, job: dict[str, Any]) -> tuple[MasterEnv, RecordingRpc]:
    config, _notes = ganeti_import.import_ganeti(cluster_config())
    for name in job.get("offline", []):
        node = config.find_node(name)
        node.offline, node.master_candidate = True, False
    store = FileStore(tmp_path / "config.json")
    store.create(config)
    rpc = RecordingRpc(job.get("herder_fail", job.get("fail")), job.get("degraded", False),
                       job.get("faulty"))
    return MasterEnv(store=store, locks=locking.LockManager(), rpc=rpc), rpc


def run_lu(env: MasterEnv, lu_class: type[LogicalUnit[Any]], op: opcodes.OpCode) -> None:
    lu = lu_class(op, env)
    lu.check(env.store.load())
    lu.execute()


def _instance(env: MasterEnv, name: str) -> tuple[model.ConfigData, model.Instance]:
    config = env.store.load()
    return config, config.find_instance(name)


def node_returns(env: MasterEnv, job: dict[str, Any]) -> None:
    """The failover of a dead primary, the node online again (config only: `node modify
    --offline no` sends no storage RPC), then the activate-disks maintd submits for the
    instances it is a secondary of (`maintd.nodefail`); recorded from the node's return on."""
    run_lu(env, InstanceFailover, opcodes.OpInstanceFailover(
        instance_name=job["instance"], ignore_consistency=True))
    with env.store.update() as config:
        for name in job["offline"]:
            config.find_node(name).offline = False
    assert isinstance(env.rpc, RecordingRpc)
    del env.rpc.calls[:]
    run_lu(env, InstanceActivateDisks, opcodes.OpInstanceActivateDisks(
        instance_name=job["instance"]))


HERDER_OPS: dict[str, Callable[[MasterEnv, dict[str, Any]], None]] = {
    "node_returns": node_returns,
    "create": lambda env, job: disks.create_and_sync(env, *_instance(env, job["instance"]),
                                                     wait=job.get("wait_for_sync", True)),
    "remove": lambda env, job: disks.remove_disks(env, *_instance(env, job["instance"])),
    "activate": lambda env, job: run_lu(env, InstanceActivateDisks,
                                        opcodes.OpInstanceActivateDisks(
        instance_name=job["instance"])),
    "start_disks": lambda env, job: disks.assemble_disks(env, *_instance(env, job["instance"])),
    "deactivate": lambda env, job: run_lu(env, InstanceDeactivateDisks,
                                          opcodes.OpInstanceDeactivateDisks(
        instance_name=job["instance"], force=job.get("force", False))),
    "grow": lambda env, job: run_lu(env, InstanceGrowDisk, opcodes.OpInstanceGrowDisk(
        instance_name=job["instance"], disk=job["disk"], amount=job["amount"])),
    "replace_disks": lambda env, job: run_lu(env, InstanceReplaceDisks,
                                             opcodes.OpInstanceReplaceDisks(
        instance_name=job["instance"], mode=job["mode"], remote_node=job.get("new_node"),
        disks=job.get("disks", []), early_release=job.get("early_release", False))),
    "migrate": lambda env, job: run_lu(env, InstanceMigrate, opcodes.OpInstanceMigrate(
        instance_name=job["instance"], target_node=job.get("target"))),
    "failover": lambda env, job: run_lu(env, InstanceFailover, opcodes.OpInstanceFailover(
        instance_name=job["instance"], target_node=job.get("target"))),
    # Ganeti's side runs LUInstanceMove's Exec alone (its CheckPrereq's policy check is left
    # out there: the capture's file disks are smaller than the policy's minimum)
    "move": lambda env, job: run_lu(env, InstanceMove, opcodes.OpInstanceMove(
        instance_name=job["instance"], target_node=job["target"], ignore_ipolicy=True)),
    "recreate": lambda env, job: run_lu(env, InstanceRecreateDisks,
                                        opcodes.OpInstanceRecreateDisks(
        instance_name=job["instance"], disks=job["disks"])),
    "rename": lambda env, job: run_lu(env, InstanceRename, opcodes.OpInstanceRename(
        instance_name=job["instance"], new_name=job["new_name"], ip_check=False,
        name_check=False)),
}


# --- comparison -----------------------------------------------------------------------------


def storage_only(calls: list[list[Any]]) -> list[list[Any]]:
    return [call for call in calls if call[0].startswith(rpc_summary.STORAGE_PREFIXES)]


def normalised(calls: list[list[Any]], known_lvs: set[str]) -> list[list[Any]]:
    """LV names made up during the operation (new LVs, `_replaced-<time>`) become NEW1,
    NEW2... in order of appearance: each side names them its own way."""
    fresh: dict[str, str] = {}

    def rename(value: Any) -> Any:
        if isinstance(value, list):
            if len(value) == 2 and all(isinstance(v, str) for v in value) and \
                    value[0] == "xenvg":
                lv = re.sub(r"_replaced-\d+$", "_replaced-T", value[1])
                if lv.replace("_replaced-T", "") not in known_lvs:
                    lv = fresh.setdefault(lv, f"NEW{len(fresh) + 1}")
                return [value[0], lv]
            return [rename(v) for v in value]
        if isinstance(value, dict):
            return {k: rename(v) for k, v in value.items()}
        return value

    return [rename(call) for call in calls]


def known_lvs() -> set[str]:
    data = cluster_config()
    names = set()
    for disk in data["disks"].values():
        for item in [disk, *disk.get("children", [])]:
            if item["dev_type"] == "plain":
                names.add(item["logical_id"][1])
    return names


def herder_calls(name: str, tmp_path: Path) -> list[list[Any]]:
    job = OPERATIONS[name]
    env, rpc = herder_env(tmp_path, job)
    try:
        HERDER_OPS[job["op"]](env, job)
    except HerderError:
        if not (job.get("fail") or job.get("degraded")):
            raise
    return rpc.calls


def new_secondary_with_port(calls: list[list[Any]]) -> list[list[Any]]:
    """Row B15: -n creates the new secondary's DRBD device with the port it keeps, not with
    Ganeti's intermediate port-less "standalone" logical id."""
    port_of_secret = {d["logical_id"][5]: d["logical_id"][2]
                      for d in cluster_config()["disks"].values() if d["dev_type"] == "drbd"}
    result = []
    for call in calls:
        disk = call[2].get("disk")
        if call[0] == "blockdev_create" and disk and disk[0] == "drbd" and disk[1][2] is None:
            lid = disk[1]
            disk = [disk[0], [*lid[:2], port_of_secret[lid[5]], *lid[3:]], *disk[2:]]
            call = [call[0], call[1], {**call[2], "disk": disk}]
        result.append(call)
    return result


def assembled_with_its_index(index: int) -> Callable[[list[list[Any]]], list[list[Any]]]:
    """Row B43: assembling some of an instance's disks (grow-disk), herder sends each disk's
    index in the instance; Ganeti sends its position in the list assembled (0)."""
    def change(calls: list[list[Any]]) -> list[list[Any]]:
        return [[c[0], c[1], {**c[2], "idx": index}] if c[0] == "blockdev_assemble" else c
                for c in calls]
    return change


def activation_undone(calls: list[list[Any]]) -> list[list[Any]]:
    """Row B44: a failed activate-disks shuts down what it assembled (as Ganeti's
    StartInstanceDisks does); Ganeti's LUInstanceActivateDisks leaves it assembled."""
    disk = calls[0][2]["disk"]
    return calls + [["blockdev_shutdown", node, {"disk": disk}]
                    for node in ("node1.example.com", "node3.example.com")]


def primary_first_after_failover(calls: list[list[Any]]) -> list[list[Any]]:
    """Row B42: once the primary changed, herder's DRBD logical id lists the new primary
    (and its minor) first, where Ganeti keeps the order the disk was made with; herder walks
    a disk's nodes primary first, so the first (secondary) assembly pass starts there."""
    def swapped(disk: list[Any]) -> list[Any]:
        nodes, port, minors, secret = disk[1][:2], disk[1][2], disk[1][3:5], disk[1][5]
        return [disk[0], [nodes[1], nodes[0], port, minors[1], minors[0], secret], *disk[2:]]

    result = []
    for call in calls:
        if call[0] == "blockdev_assemble":
            call = [call[0], call[1], {**call[2], "disk": swapped(call[2]["disk"])}]
        result.append(call)
    first_pass = [i for i, call in enumerate(result)
                  if call[0] == "blockdev_assemble" and not call[2]["on_primary"]]
    ordered = [result[i] for i in reversed(first_pass)]
    for i, call in zip(first_pass, ordered, strict=True):
        result[i] = call
    return result


def shared_storage_attached_not_opened(calls: list[list[Any]]) -> list[list[Any]]:
    """Row B45: migrating shared or external storage, herder assembles the disks on the
    target (as its primary) before the memory moves and shuts them down on the source after;
    Ganeti closes them on the target, opens them shared on both, closes them on the source
    and opens them exclusively on the target."""
    (source,) = {c[1] for c in calls if c[0] == "blockdev_open" and c[2]["exclusive"] is False
                 and c[1] != calls[0][1]}
    target = calls[0][1]
    assert [c[0] for c in calls] == ["blockdev_close", "blockdev_open", "blockdev_open",
                                     "blockdev_close", "blockdev_open"]
    return [["blockdev_assemble", target, {"disk": disk, "on_primary": True, "idx": index}]
            for index, disk in enumerate(calls[0][2]["disks"])] + \
        [["blockdev_shutdown", source, {"disk": disk}] for disk in calls[0][2]["disks"]]


def adopted_device_assembled(calls: list[list[Any]]) -> list[list[Any]]:
    """Row B11: an adopted device (`blockdev`) is assembled at create (both passes), where
    Ganeti sends `blockdev_create` (which only finds the device)."""
    result = []
    for call in calls:
        if call[0] == "blockdev_create":
            disk = call[2]["disk"]
            result += [["blockdev_assemble", call[1], {"disk": disk, "on_primary": primary,
                                                       "idx": 0}] for primary in (False, True)]
        else:
            result.append(call)
    return result


def copied_by_the_nodes(calls: list[list[Any]]) -> list[list[Any]]:
    """Row B16: a move copies each disk node to node (`blockdev_import_prepare` on the target,
    `blockdev_export` on the source) where Ganeti runs its import/export daemons; row B48:
    before the disks are made on the target, what an interrupted move may have left there is
    removed (each disk, then a file disk's directory)."""
    made = [i for i, call in enumerate(calls) if call[0] == "blockdev_create"]
    target = calls[made[0]][1]
    source = next(call[1] for call in calls if call[0] == "blockdev_remove")
    leftovers = [["blockdev_remove", target, {"disk": calls[i][2]["disk"]}] for i in made]
    leftovers += [["file_storage_dir_remove", target, call[2]] for call in calls[:made[0]]
                  if call[0] == "file_storage_dir_create"]
    copies = [[name, node, {}] for _ in made
              for name, node in (("blockdev_import_prepare", target),
                                 ("blockdev_export", source))]
    first = min(made + [i for i, call in enumerate(calls)
                        if call[0] == "file_storage_dir_create"])
    return calls[:first] + leftovers + calls[first:made[-1] + 1] + copies + \
        calls[made[-1] + 1:]


# Where herder differs on purpose (docs/compat.md): operation -> a function that turns
# Ganeti's storage RPCs into what herder must send.
EXPECTED_DIFFERENCES: dict[str, Callable[[list[list[Any]]], list[list[Any]]]] = {
    "replace-disks -n": new_secondary_with_port,
    "failover drbd (role swap)": primary_first_after_failover,
    "failover drbd, the primary offline": primary_first_after_failover,
    "the dead primary returns: activate-disks resyncs it as the secondary":
        primary_first_after_failover,
    "replace-disks -n, two disks": new_secondary_with_port,
    "replace-disks -n --early-release": new_secondary_with_port,
    "grow-disk drbd disk/1, disks inactive": assembled_with_its_index(1),
    "activate-disks drbd, the secondary fails": activation_undone,
    "migrate sharedfile": shared_storage_attached_not_opened,
    "create blockdev": adopted_device_assembled,
    "move plain": copied_by_the_nodes,
    "move file, stopped": copied_by_the_nodes,
}


@pytest.fixture(autouse=True)
def no_sleeping(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waits between the polls (degraded mirrors) are Ganeti's; the test does not sit them."""
    monkeypatch.setattr(time, "sleep", lambda seconds: None)


@pytest.mark.parametrize("name", OPERATIONS)
def test_storage_rpcs_equal_ganetis(name: str, ganeti_calls: dict[str, list[list[Any]]],
                                    tmp_path: Path) -> None:
    lvs = known_lvs()
    theirs = normalised(storage_only(ganeti_calls[name]), lvs)
    ours = normalised(storage_only(herder_calls(name, tmp_path)), lvs)
    expected = EXPECTED_DIFFERENCES.get(name, lambda calls: calls)(theirs)
    assert ours == expected


def test_the_comparison_sees_ganetis_rpcs(ganeti_calls: dict[str, list[list[Any]]]) -> None:
    """Worth something only if Ganeti's side made the calls: every operation sent storage
    RPCs, the DRBD create its six creations (data, metadata, DRBD on both nodes)."""
    empty = [name for name, calls in ganeti_calls.items() if not storage_only(calls)]
    assert empty == []
    creates = [c[1] for c in ganeti_calls["create drbd"] if c[0] == "blockdev_create"]
    assert creates == ["node1.example.com"] * 3 + ["node3.example.com"] * 3
    migrate = [c[2].get("multimaster") for c in ganeti_calls[
        "migrate drbd (role swap, dual primary)"] if c[0] == "drbd_attach_net"]
    assert migrate == [True, True, False, False]
