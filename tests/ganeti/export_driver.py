"""Run Ganeti 3.0.2's own export code (backend.FinalizeExport, backend.ExportInfo) on this
machine's files.

Run with Debian's /usr/bin/python3 and PYTHONPATH=/tmp/groot/usr/share/ganeti/3.0. Reads
`{"export_dir": DIR, "instance": Instance dict, "snap_disks": [Disk dict], "read": [DIR]}`
on stdin: writes the instance's export under DIR (pathutils.EXPORT_DIR) as Ganeti does (when
an instance is given), then reads each export directory of `read` as Ganeti's ExportInfo
does; prints `{"read": [config text or the error], "listed": ListExports' names}`.
"""

import json
import os
import sys

from ganeti import backend, objects, pathutils

REQUEST = json.load(sys.stdin)
pathutils.EXPORT_DIR = REQUEST["export_dir"]
if "instance" in REQUEST:
    instance = objects.Instance.FromDict(REQUEST["instance"])
    snap_disks = [objects.Disk.FromDict(disk) for disk in REQUEST["snap_disks"]]
    os.makedirs(os.path.join(REQUEST["export_dir"], instance.name + ".new"), exist_ok=True)
    backend.FinalizeExport(instance, snap_disks)
read = []
for directory in REQUEST.get("read", []):
    try:
        read.append(backend.ExportInfo(directory))
    except Exception as err:  # backend._Fail raises RPCFail
        read.append(f"error: {err}")
print(json.dumps({"read": read, "listed": backend.ListExports()}))
