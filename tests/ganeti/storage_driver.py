"""Run Ganeti 3.0.2's own node storage code (backend.Blockdev* over storage/bdev.py) against
the real LVM tools, recording every command it runs.

Run with Debian's /usr/bin/python3 and PYTHONPATH=/tmp/groot/usr/share/ganeti/3.0. Reads
`{"env": {NAME: VALUE}, "calls": [[name, args...], ...]}` on stdin (disks as Ganeti's disk
dicts); prints `{"commands": [[argv...], ...], "errors": [message or null per call]}`.
Ganeti's command runner (utils.RunCmd) is replaced by one that records the argv and runs it
for real with `env` added (an LVM configuration for a loop-device volume group), so Ganeti
parses the real `lvs`/`vgs`/`pvs` outputs of this machine. The device cache and the
instance-disk symlinks (files under /var/run/ganeti) are left out.
"""

import json
import logging
import os
import subprocess
import sys

from ganeti import utils
from ganeti.utils import process

REQUEST = json.load(sys.stdin)
COMMANDS = []


class Result:
    """What Ganeti's code reads of utils.RunResult."""

    def __init__(self, argv, code, out, err):
        self.cmd = " ".join(argv)
        self.exit_code = code
        self.stdout = out
        self.stderr = err
        self.output = out + err
        self.failed = code != 0
        self.fail_reason = f"exited with exit code {code}"
        self.signal = None


def run_for_real(cmd, *args, **kwargs):
    argv = [str(arg) for arg in cmd]
    COMMANDS.append(argv)
    env = dict(os.environ, LC_ALL="C", **REQUEST["env"])
    proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, check=False)
    return Result(argv, proc.returncode, proc.stdout, proc.stderr)


process.RunCmd = run_for_real
utils.RunCmd = run_for_real

from ganeti import backend, objects  # noqa: E402

logging.disable(logging.CRITICAL)
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
    "grow": lambda d, amount, dryrun, backingstore, excl: backend.BlockdevGrow(
        disk(d), amount, dryrun, backingstore, excl),
    "rename": lambda d, new_id: backend.BlockdevRename([(disk(d), tuple(new_id))]),
    "setinfo": lambda d, info: backend.BlockdevSetInfo(disk(d), info),
}


def main():
    errors = []
    for name, *args in REQUEST["calls"]:
        try:
            CALLS[name](*args)
            errors.append(None)
        except Exception as err:  # Ganeti's RPCFail and BlockDeviceError alike
            errors.append(f"{type(err).__name__}: {err}")
    json.dump({"commands": COMMANDS, "errors": errors}, sys.stdout)


main()
