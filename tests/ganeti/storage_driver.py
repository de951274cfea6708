"""Run Ganeti 3.0.2's own node storage code (backend.Blockdev* over storage/bdev.py) against
the real LVM tools, recording every command it runs.

Run with Debian's /usr/bin/python3 and PYTHONPATH=/tmp/groot/usr/share/ganeti/3.0. Reads
`{"env": {NAME: VALUE}, "calls": [[name, args...], ...]}` (and for ExtStorage
`es_search_path`, `es_log_dir`) on stdin (disks as Ganeti's disk dicts); prints
`{"commands": [[argv...], ...], "scripts": [[argv, cwd, env], ...], "errors": [message or
null per call]}` (`scripts`: the commands run with an environment: provider scripts).
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


def run_for_real(cmd, env=None, cwd=None, output=None, **kwargs):
    argv = [str(arg) for arg in cmd]
    COMMANDS.append(argv)
    if env is not None or cwd is not None:  # a provider script: its environment counts
        SCRIPT_RUNS.append([argv, cwd, dict(env or {})])
    full_env = dict(os.environ, LC_ALL="C", **REQUEST["env"], **(env or {}))
    proc = subprocess.run(argv, env=full_env, cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, check=False)
    if output:
        with open(output, "a") as log:
            log.write(proc.stdout + proc.stderr)
    return Result(argv, proc.returncode, proc.stdout, proc.stderr)


SCRIPT_RUNS = []
process.RunCmd = run_for_real
utils.RunCmd = run_for_real

from ganeti import backend, objects, pathutils  # noqa: E402

if REQUEST.get("es_search_path"):  # where the ExtStorage providers are, their logs go
    pathutils.ES_SEARCH_PATH = REQUEST["es_search_path"]
    pathutils.LOG_ES_DIR = REQUEST["es_log_dir"]

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
    json.dump({"commands": COMMANDS, "scripts": SCRIPT_RUNS, "errors": errors}, sys.stdout)


main()
