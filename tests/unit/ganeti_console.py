"""Print the console objects Ganeti 3.0's hypervisors build (JSON cases in on stdin, Ganeti's
`InstanceConsole.ToDict()` of each out, after its `Validate()`). Run with Debian's
/usr/bin/python3 and PYTHONPATH=<Ganeti 3.0's tree>, GANETI_ROOTDIR and GANETI_HOSTNAME set
(tests/unit/test_console.py)."""

import json
import sys

from ganeti.hypervisor import hv_fake, hv_kvm

from ganeti import objects


def main() -> None:
    out = []
    for case in json.load(sys.stdin):
        inst = objects.Instance(name=case["name"], network_port=case["network_port"],
                                hypervisor=case["hypervisor"])
        node = objects.Node(name=case["node"], ndparams={})
        group = objects.NodeGroup(name="default", ndparams=case["ndparams"])
        hypervisor = hv_kvm.KVMHypervisor if case["hypervisor"] == "kvm" \
            else hv_fake.FakeHypervisor
        console = hypervisor.GetInstanceConsole(inst, node, group, case["hvparams"], {})
        console.Validate()
        out.append(console.ToDict())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
