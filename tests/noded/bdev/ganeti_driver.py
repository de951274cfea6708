"""Run Ganeti 3.0.2's own node storage code on `World`s, recording its commands.

Run with Debian's /usr/bin/python3 and PYTHONPATH=/tmp/groot/usr/share/ganeti/3.0 (and this
directory). Reads a list of jobs `[{"state": ..., "calls": [[name, args...], ...]}, ...]` on
stdin; prints, per job, `{"commands": [[argv...], ...], "errors": [message or null per call],
"results": [...], "state": ...}`. Command execution (utils.RunCmd), /proc/drbd, the
meta-device read check, the device cache, the instance-disk symlinks and sleeping are
replaced; everything else is Ganeti's code as shipped.
"""

import json
import logging
import sys
import time

import world

JOBS = json.load(sys.stdin)
WORLD = world.World(world.new_state())
CLOCK = [1_000_000.0]


class FakeResult:
    def __init__(self, argv, code, out, err):
        self.cmd = " ".join(argv)
        self.exit_code = code
        self.stdout = out
        self.stderr = err
        self.output = out + err
        self.failed = code != 0
        self.fail_reason = f"exited with exit code {code}"
        self.signal = None


def fake_run(cmd, *args, **kwargs):
    code, out, err = WORLD.run(list(cmd))
    return FakeResult([str(a) for a in cmd], code, out, err)


def fake_sleep(seconds):
    CLOCK[0] += seconds


time.sleep = fake_sleep
time.time = lambda: CLOCK[0]

from ganeti.utils import process  # noqa: E402

process.RunCmd = fake_run
from ganeti import utils  # noqa: E402

utils.RunCmd = fake_run
from ganeti.storage import drbd, drbd_info  # noqa: E402

from ganeti import backend, objects  # noqa: E402

logging.disable(logging.CRITICAL)
drbd_info.DRBD8Info.CreateFromFile = staticmethod(
    lambda filename=None: drbd_info.DRBD8Info.CreateFromLines(WORLD.proc_drbd().splitlines()))
drbd._CanReadDevice = lambda path: True
backend.DevCacheManager.UpdateCache = classmethod(lambda cls, *a, **k: None)
backend.DevCacheManager.RemoveCache = classmethod(lambda cls, *a, **k: None)
backend._SymlinkBlockDev = lambda *a, **k: None
backend._RemoveBlockDevLinks = lambda *a, **k: None


def disk(data):
    return objects.Disk.FromDict(dict(data))


CALLS = {
    "create": lambda d, owner, on_primary, info, excl: backend.BlockdevCreate(
        disk(d), d["size"], owner, on_primary, info, excl),
    "remove": lambda d: backend.BlockdevRemove(disk(d)),
    "assemble": lambda d, as_primary: backend._RecursiveAssembleBD(disk(d), "inst", as_primary),
    "shutdown": lambda d: backend.BlockdevShutdown(disk(d)),
    "find": lambda d: backend.BlockdevFind(disk(d)),
    "mirror_status": lambda ds: backend.BlockdevGetmirrorstatus([disk(d) for d in ds]),
    "grow": lambda d, amount, dryrun, backingstore, excl: backend.BlockdevGrow(
        disk(d), amount, dryrun, backingstore, excl),
    "rename": lambda d, new_id: backend.BlockdevRename([(disk(d), tuple(new_id))]),
    "setinfo": lambda d, info: backend.BlockdevSetInfo(disk(d), info),
    "snapshot": lambda d, name, size: backend.BlockdevSnapshot(disk(d), name, size),
    "open": lambda ds, exclusive: backend.BlockdevOpen("inst", [disk(d) for d in ds],
                                                       exclusive),
    "close": lambda ds: backend.BlockdevClose("", [disk(d) for d in ds]),
    "disconnect_net": lambda ds: backend.DrbdDisconnectNet([disk(d) for d in ds]),
    "attach_net": lambda ds, multimaster: backend.DrbdAttachNet([disk(d) for d in ds],
                                                                multimaster),
    "wait_sync": lambda ds: backend.DrbdWaitSync([disk(d) for d in ds]),
    "add_children": lambda parent, new: backend.BlockdevAddchildren(
        disk(parent), [disk(d) for d in new]),
    "remove_children": lambda parent, old: backend.BlockdevRemovechildren(
        disk(parent), [disk(d) for d in old]),
    "wipe": lambda d, offset, size: backend.BlockdevWipe(disk(d), offset, size),
}


def run_job(job):
    global WORLD
    WORLD = world.World(job["state"])
    errors = []
    results = []
    for name, *args in job["calls"]:
        run_call(name, args, errors, results)
    return {"commands": WORLD.commands, "errors": errors, "results": results,
            "state": WORLD.state}


def run_call(name, args, errors, results):
    try:
        value = CALLS[name](*args)
        errors.append(None)
        if isinstance(value, objects.BlockDevStatus):
            value = [value.dev_path, value.major, value.minor, value.sync_percent,
                     value.estimated_time, value.is_degraded, value.ldisk_status]
        elif isinstance(value, list) and value and isinstance(value[0], objects.BlockDevStatus):
            value = [[v.dev_path, v.major, v.minor, v.sync_percent, v.estimated_time,
                      v.is_degraded, v.ldisk_status] for v in value]
        results.append(value if isinstance(value, (str, int, float, list, tuple, type(None)))
                       else str(value))
    except Exception as err:  # Ganeti's RPCFail and BlockDeviceError alike
        errors.append(f"{type(err).__name__}: {err}")
        results.append(None)


json.dump([run_job(job) for job in JOBS], sys.stdout,
          default=lambda value: value.Get() if hasattr(value, "Get") else str(value))
