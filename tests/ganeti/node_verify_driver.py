"""Run Ganeti 3.0.2's own judgement of node_verify answers (LUClusterVerifyGroup's
_UpdateVerifyNodeLVM, _VerifyNodeBridges, _VerifyNodeDrbdHelper, _VerifyNodeTime,
_VerifyGroupDRBDVersion, _UpdateNodeOS/_VerifyNodeOS) and its `-H` parser (cli_opts'
_SplitIdentKeyVal).

Run with Debian's /usr/bin/python3 and PYTHONPATH=/tmp/groot/usr/share/ganeti/3.0. Reads
`{"node": NAME, "reference": NAME, "answer": {NV_* key: value}, "reference_oslist": [...],
"vg_name", "bridges", "drbd_helper", "window": [start, end], "drbd_versions": {name: v},
"hv_options": [...]}` on stdin; prints `{"findings": [[code, node, message, severity]],
"hv_options": [[ident, {key: value}]]}`.
"""

import json
import sys
from types import SimpleNamespace

from ganeti import cli_opts
from ganeti.cmdlib.cluster.verify import LUClusterVerifyGroup


def main():
    request = json.load(sys.stdin)
    lu = object.__new__(LUClusterVerifyGroup)
    found = []

    def error(ecode, item, message, *args, **kwargs):
        found.append([ecode[1], item, message % args if args else message,
                      kwargs.get("code") or "ERROR"])

    lu._Error = error
    lu.op = SimpleNamespace(debug_simulate_errors=False, ignore_errors=[], error_codes=False)
    lu._exclusive_storage = False
    lu.cfg = SimpleNamespace(GetNodeName=lambda uuid: uuid)
    name, answer = request["node"], request["answer"]
    node = SimpleNamespace(name=name, uuid=name, vm_capable=True)
    image = LUClusterVerifyGroup.NodeImage(uuid=name)
    lu._UpdateVerifyNodeLVM(node, answer, request["vg_name"], image)
    lu._VerifyNodeBridges(node, answer, request["bridges"])
    lu._VerifyNodeDrbdHelper(node, answer, request["drbd_helper"])
    lu._VerifyNodeTime(node, answer, *request["window"])
    lu._VerifyGroupDRBDVersion({
        uuid: SimpleNamespace(payload={"drbd-version": version})
        for uuid, version in request["drbd_versions"].items()})
    reference = LUClusterVerifyGroup.NodeImage(uuid=request["reference"])
    lu._UpdateNodeOS(SimpleNamespace(name=request["reference"]),
                     {"oslist": request["reference_oslist"]}, reference)
    lu._UpdateNodeOS(node, answer, image)
    lu._VerifyNodeOS(node, image, reference)
    options = [list(cli_opts._SplitIdentKeyVal("-H", value, True))
               for value in request["hv_options"]]
    print(json.dumps({"findings": found, "hv_options": options}))


if __name__ == "__main__":
    main()
