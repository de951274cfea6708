"""Run Ganeti 3.0.2's own cmdlib steps on a Ganeti config, recording the node RPCs they make.

Run with Debian's /usr/bin/python3 -O (asserts about held locks off) and
PYTHONPATH=/tmp/groot/usr/share/ganeti/3.0 (and this directory). Reads
`{"config": PATH, "jobs": [{"op": NAME, ...}, ...]}` on stdin; prints, per job, the RPCs
made: `[[procedure, node name, {argument name: value, ...}], ...]` with the arguments as they
go over the wire (Ganeti's encoders, `rpc_defs` names).

What is replaced: the HTTP transport of Ganeti's real `RpcRunner` (every request is
recorded and answered with a plausible node answer: the disks found, in sync, assembled),
WConfd (the config is Ganeti's `ConfigWriter` in offline mode on a copy of the file; DRBD
minor allocation answers the minor the job names), locks, sleeping. The LUs and tasklets run
from their `Exec` with the attributes their `CheckPrereq` would have set.
"""

import json
import logging
import shutil
import sys
import tempfile
import time
import types

import rpc_summary

time.sleep = lambda seconds: None

from ganeti import config, constants, errors, objects, rpc_defs, serializer  # noqa: E402
from ganeti.cmdlib import (  # noqa: E402
    instance,
    instance_create,
    instance_migration,
    instance_storage,
    instance_utils,
)
from ganeti.rpc import node as rpc_node  # noqa: E402

logging.disable(logging.CRITICAL)
REQUEST = json.load(sys.stdin)
def _arg_names():
    names = {}
    for group in ("RpcClientDefault", "RpcClientBootstrap", "RpcClientDnsOnly",
                  "RpcClientConfig"):
        for call in rpc_defs.CALLS[group].values():
            names[call[0]] = [arg[0] for arg in call[4]]
    return names


ARG_NAMES = _arg_names()
STATUS_OK = {"dev_path": "/dev/drbd0", "major": 147, "minor": 0, "sync_percent": None,
             "estimated_time": None, "is_degraded": False,
             "ldisk_status": constants.LDS_OKAY}
DEGRADED = [False]  # the job's: the mirrors report degraded


FAULTY = [{}]  # the job's: node name -> indices of its disks whose local storage failed


def answer(procedure, args, node):
    """What a healthy node answers (the disks there, in sync, assembled)."""
    if procedure == "blockdev_find":
        return STATUS_OK
    if procedure == "blockdev_getmirrorstatus":
        faulty = FAULTY[0].get(node, [])
        return [dict(STATUS_OK, is_degraded=DEGRADED[0] or index in faulty,
                     ldisk_status=constants.LDS_FAULTY if index in faulty
                     else constants.LDS_OKAY)
                for index, _disk in enumerate(args[0])]
    if procedure == "blockdev_assemble":
        return ["/dev/drbd0", "/var/run/ganeti/instance-disks/disk0", None]
    if procedure == "drbd_wait_sync":
        return [True, 100.0]
    if procedure == "blockdev_getdimensions":
        return [[1 << 30, None]]
    if procedure == "node_info":
        return ["boot-id", [], [{}]]
    if procedure == "migration_info":
        return "migration-info"
    if procedure == "instance_get_migration_status":
        return {"status": constants.HV_MIGRATION_COMPLETED}
    if procedure == "vg_list":
        return {"xenvg": 20480}
    if procedure == "instance_info":  # it runs where it is marked up
        inst = CONFIG[0].GetInstanceInfoByName(args[0])
        if inst.admin_state == constants.ADMINST_UP:
            return {"memory": 128, "state": "running", "vcpus": 1, "time": 1}
        return {}
    return None


class Recorder:
    """The HTTP transport: records each request, answers it (`fail`: [procedure, node name]
    makes the first such call fail)."""

    def __init__(self, cfg, fail=None):
        self.calls = []
        self.fail = fail
        self.by_ip = {node.primary_ip: node.name for node in cfg.GetAllNodesInfo().values()}

    def __call__(self, requests, lock_monitor_cb=None):
        for req in requests:
            procedure = req.path.lstrip("/")
            args = serializer.LoadJson(req.post_data)
            named = dict(zip(ARG_NAMES.get(procedure, []), args, strict=False))
            node = self.by_ip[req.host]
            self.calls.append([procedure, node, named])
            req.success = True
            req.error = None
            req.resp_status_code = 200
            if self.fail == [procedure, node]:
                self.fail = None
                req.resp_body = serializer.DumpJson([False, "injected by the test"])
            else:
                req.resp_body = serializer.DumpJson([True, answer(procedure, args, node)])


class Getents:
    masterd_uid = confd_uid = luxid_uid = rapi_uid = noded_uid = 0
    daemons_gid = confd_gid = admin_gid = masterd_gid = luxid_gid = 0


class WConfd:
    """WConfd's state changes done on the offline config; its bookkeeping calls (ports,
    reservations) accepted and ignored (Ganeti retries a call until it answers True)."""

    def __init__(self, cfg):
        self.cfg = cfg

    def _edit(self, change):
        with self.cfg.GetConfigManager(shared=False):
            return change(self.cfg._ConfigData())  # pylint: disable=protected-access

    def SetInstanceStatus(self, inst_uuid, status, disks_active, admin_state_source):
        def change(data):
            inst = data.instances[inst_uuid]
            if status is not None:
                inst.admin_state = status
            if disks_active is not None:
                inst.disks_active = disks_active
            if admin_state_source is not None:
                inst.admin_state_source = admin_state_source
            return inst.ToDict()
        return self._edit(change)

    def SetInstancePrimaryNode(self, inst_uuid, node_uuid):
        def change(data):
            data.instances[inst_uuid].primary_node = node_uuid
            return True
        return self._edit(change)

    def _update(self, table, kind, data):
        def change(config_data):
            obj = kind.FromDict(data)
            obj.serial_no = (obj.serial_no or 0) + 1
            getattr(config_data, table)[obj.uuid] = obj
            return [obj.serial_no, time.time()]
        return self._edit(change)

    def UpdateInstance(self, data):
        return self._update("instances", objects.Instance, data)

    def UpdateDisk(self, data):
        return self._update("disks", objects.Disk, data)

    def __getattr__(self, name):
        return lambda *args, **kwargs: True


class FakeLU:
    """What cmdlib's helpers use of their LU: the config, the RPC runner, logging."""

    def __init__(self, cfg, rpc, **op):
        self.cfg = cfg
        self.rpc = rpc
        self.op = types.SimpleNamespace(reason=[], **op)
        self.owned_locks = lambda level: []
        self.proc = types.SimpleNamespace(GetECId=lambda: "ec-id")

    def LogInfo(self, *args, **kwargs):
        pass

    LogWarning = LogStep = LogInfo

    def AssertReleasedLocks(self, level):
        pass

    def WConfdClient(self):
        return types.SimpleNamespace(DownGradeLocksLevel=lambda level: None)


def _no_locks(*args, **kwargs):
    return None


for module in (instance_storage, instance_migration, instance):
    if hasattr(module, "ReleaseLocks"):
        module.ReleaseLocks = _no_locks


def _feedback(message):
    pass


CONFIG = [None]  # the job's ConfigWriter, for the answers that depend on it
RECORDER = [None]  # the job's transport (a job may start recording afresh)


def run_job(job, path):
    cfg = config.ConfigWriter(cfg_file=path, offline=True, _getents=Getents,
                              accept_foreign=True)
    CONFIG[0] = cfg
    DEGRADED[0] = job.get("degraded", False)
    FAULTY[0] = job.get("faulty", {})
    recorder = Recorder(cfg, job.get("fail"))
    RECORDER[0] = recorder
    rpc = rpc_node.RpcRunner(cfg, None, _req_process_fn=recorder, _getents=Getents)
    minors = list(job.get("new_minors", []))
    cfg.AllocateDRBDMinor = lambda nodes, owner: [minors.pop(0) for _ in nodes]
    cfg.ReleaseDRBDMinors = lambda owner: None
    cfg._wconfd = WConfd(cfg)  # pylint: disable=protected-access
    cfg.OutDate = lambda: None  # WConfd's changes are made on the data held in memory
    lu = FakeLU(cfg, rpc)
    # one read of the file for the whole job (each access would read and upgrade it again)
    with cfg.GetConfigManager(shared=False):
        for name in job.get("offline", []):  # the RPC layer answers for these itself
            node = cfg.GetNodeInfoByName(name)
            node.offline, node.master_candidate = True, False
        inst = cfg.GetInstanceInfoByName(job["instance"])
        try:
            getattr(Ops, job["op"])(lu, inst, job)
        except errors.GenericError:
            if not (job.get("fail") or job.get("degraded")):
                raise
    return recorder.calls


class Ops:
    """One Ganeti operation each, by the functions its cmdlib runs."""

    @staticmethod
    def create(lu, inst, job):
        """LUInstanceCreate's disk part: CreateDisks, then _RemoveDegradedDisks."""
        instance_storage.CreateDisks(lu, inst)
        create = object.__new__(instance_create.LUInstanceCreate)
        create.__dict__.update(
            cfg=lu.cfg, rpc=lu.rpc, LogWarning=lu.LogWarning, LogInfo=lu.LogInfo,
            op=types.SimpleNamespace(wait_for_sync=job.get("wait_for_sync", True)))
        create._RemoveDegradedDisks(_feedback, False, inst)  # pylint: disable=W0212

    @staticmethod
    def remove(lu, inst, job):
        instance_utils.RemoveDisks(lu, inst)

    @staticmethod
    def activate(lu, inst, job):
        activate = object.__new__(instance_storage.LUInstanceActivateDisks)
        activate.__dict__.update(
            cfg=lu.cfg, rpc=lu.rpc, instance=inst, LogWarning=lu.LogWarning,
            LogInfo=lu.LogInfo, op=types.SimpleNamespace(ignore_size=False,
                                                         wait_for_sync=False))
        activate.Exec(_feedback)

    @staticmethod
    def start_disks(lu, inst, job):
        instance_storage.StartInstanceDisks(lu, inst, False)

    @staticmethod
    def deactivate(lu, inst, job):
        deactivate = object.__new__(instance_storage.LUInstanceDeactivateDisks)
        deactivate.__dict__.update(
            cfg=lu.cfg, rpc=lu.rpc, instance=inst, LogWarning=lu.LogWarning,
            LogInfo=lu.LogInfo, op=types.SimpleNamespace(force=job.get("force", False)))
        deactivate.Exec(_feedback)

    @staticmethod
    def grow(lu, inst, job):
        grow = object.__new__(instance_storage.LUInstanceGrowDisk)
        disk = lu.cfg.GetInstanceDisks(inst.uuid)[job["disk"]]
        grow.__dict__.update(
            cfg=lu.cfg, rpc=lu.rpc, instance=inst, disk=disk, delta=job["amount"],
            target=disk.size + job["amount"], owned_locks=lambda level: [],
            node_es_flags={n: False for n in lu.cfg.GetInstanceNodes(inst.uuid)},
            op=types.SimpleNamespace(disk=job["disk"], amount=job["amount"],
                                     wait_for_sync=job.get("wait_for_sync", True)),
            LogWarning=lu.LogWarning, LogInfo=lu.LogInfo, WConfdClient=lu.WConfdClient)
        grow.Exec(_feedback)

    @staticmethod
    def replace_disks(lu, inst, job):
        """TLReplaceDisks as LUInstanceReplaceDisks makes it: CheckPrereq (the auto mode's
        search for faulty disks), then Exec."""
        new = lu.cfg.GetNodeInfoByName(job["new_node"]).uuid if job.get("new_node") else None
        task = instance_storage.TLReplaceDisks(
            lu, inst.uuid, inst.name, job["mode"], None, new, job.get("disks", []),
            job.get("early_release", False), True)
        task.CheckPrereq()
        task.Exec(_feedback)

    @staticmethod
    def _migration(lu, inst, job, failover):
        task = object.__new__(instance_migration.TLMigrateInstance)
        task.__dict__.update(
            lu=lu, cfg=lu.cfg, rpc=lu.rpc, instance=inst, instance_uuid=inst.uuid,
            instance_name=inst.name, live=True, cleanup=False, failover=failover,
            fallback=False, ignore_consistency=False, ignore_hvversions=True,
            allow_runtime_changes=True, current_mem=128, tgt_free_mem=4096,
            shutdown_timeout=120,
            target_node_uuid=lu.cfg.GetNodeInfoByName(job["target"]).uuid
            if job.get("target") else None)
        task.Exec(_feedback)

    @staticmethod
    def node_returns(lu, inst, job):
        """A dead primary's return (issue 29): the failover its death brought (the node
        offline), the node online again (`gnt-node modify --offline no`, which sends no
        storage RPC), then what the watcher runs for an instance whose secondary rebooted
        (_CheckDisks: OpInstanceActivateDisks), recorded from the node's return on."""
        Ops._migration(lu, inst, job, True)
        for name in job.get("offline", []):
            lu.cfg.GetNodeInfoByName(name).offline = False
        del RECORDER[0].calls[:]
        Ops.activate(lu, lu.cfg.GetInstanceInfo(inst.uuid), job)

    @staticmethod
    def migrate(lu, inst, job):
        Ops._migration(lu, inst, job, False)

    @staticmethod
    def failover(lu, inst, job):
        Ops._migration(lu, inst, job, True)

    @staticmethod
    def move(lu, inst, job):
        """LUInstanceMove; the data copy (import/export daemons) is not a storage RPC: it is
        taken as done."""
        move = object.__new__(instance.LUInstanceMove)
        move.__dict__.update(
            cfg=lu.cfg, rpc=lu.rpc, instance=inst, LogWarning=lu.LogWarning,
            LogInfo=lu.LogInfo, owned_locks=lambda level: [], proc=lu.proc,
            target_node_uuid=lu.cfg.GetNodeInfoByName(job["target"]).uuid,
            op=types.SimpleNamespace(shutdown_timeout=120, ignore_consistency=False,
                                     compress="none", reason=[]))
        instance.masterd.instance.TransferInstanceData = \
            lambda lu, feedback, src, dst, ip, compress, inst, transfers: [True] * len(transfers)
        move.Exec(_feedback)

    @staticmethod
    def recreate(lu, inst, job):
        recreate = object.__new__(instance_storage.LUInstanceRecreateDisks)
        recreate.__dict__.update(
            cfg=lu.cfg, rpc=lu.rpc, instance=inst, LogWarning=lu.LogWarning,
            LogInfo=lu.LogInfo, owned_locks=lambda level: [],
            disks={index: {} for index in job["disks"]},
            op=types.SimpleNamespace(node_uuids=[]))
        recreate.Exec(_feedback)

    @staticmethod
    def rename(lu, inst, job):
        rename = object.__new__(instance.LUInstanceRename)
        rename.__dict__.update(
            cfg=lu.cfg, rpc=lu.rpc, instance=inst, owned_locks=lambda level: [],
            op=types.SimpleNamespace(new_name=job["new_name"], reason=[], debug_level=0),
            LogWarning=lu.LogWarning, LogInfo=lu.LogInfo)
        rename.Exec(_feedback)


def main():
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for job in REQUEST["jobs"]:
            path = tmp + "/config.data"
            shutil.copy(REQUEST["config"], path)
            calls = run_job(job, path)
            results.append([rpc_summary.summary(name, node, args)
                            for name, node, args in calls])
    json.dump(results, sys.stdout)


main()
