"""Print the QEMU command line Ganeti 3.0's KVM hypervisor builds for an instance (JSON in on
stdin, JSON argv out). Run with Debian's /usr/bin/python3 and PYTHONPATH=<Ganeti 3.0's tree>,
GANETI_ROOTDIR=<a scratch directory> and GANETI_HOSTNAME set.

Ganeti's own `_GenerateKVMRuntime` and `_ExecuteKVMRuntime` run unchanged; what would touch
the machine is replaced: command execution is captured (the QEMU start and the NIC script),
tap devices are fake file descriptors, the monitor is a recorder, and the help/device/machine
listings come from the real QEMU binary given as kvm_path.
"""

import json
import os
import sys

from ganeti.hypervisor import hv_kvm

from ganeti import objects, utils


class _Result:
    failed = False
    fail_reason = ""
    output = ""
    exit_code = 0


def main() -> None:
    request = json.load(sys.stdin)
    for directory in ("var/run/ganeti", "var/log/ganeti/kvm", "var/lib/ganeti"):
        os.makedirs(os.path.join(os.environ["GANETI_ROOTDIR"], directory), exist_ok=True)
    kvm_path = request["hvparams"]["kvm_path"]
    listings = {option: hv_kvm.KVMHypervisor._GetKVMOutput(kvm_path, option)
                for option in ("help", "mlist", "devicelist")}
    hv_kvm.KVMHypervisor._GetKVMOutput = classmethod(lambda cls, path, option: listings[option])
    commands = []

    def run_cmd(cmd, *args, **kwargs):
        commands.append(list(cmd) if not isinstance(cmd, str) else cmd)
        return _Result()

    utils.RunCmd = run_cmd
    hv_kvm.utils.RunCmd = run_cmd
    fake_fds = iter(range(100, 200))
    hv_kvm.OpenTap = lambda features=None, name="": (f"tap{next(fake_fds)}", [next(fake_fds)], [])
    hv_kvm.utils_wrapper.CloseFdNoError = lambda fd: None

    class Monitor:
        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    hypervisor = hv_kvm.KVMHypervisor()
    hypervisor.qmp = Monitor()
    hypervisor._InstancePidAlive = lambda name: ("pidfile", 1, True)
    hypervisor._CheckDown = lambda name: None
    hypervisor._CallMonitorCommand = lambda *args, **kwargs: None
    hypervisor._ExecuteCpuAffinity = lambda *args, **kwargs: None
    hypervisor._ConfigureNIC = lambda *args, **kwargs: None

    nics = [objects.NIC(mac=nic["mac"], uuid=nic["uuid"], name=None,
                        nicparams={"mode": nic["mode"], "link": nic["link"], "vlan": ""})
            for nic in request["nics"]]
    disks = [objects.Disk(dev_type=disk["dev_type"], uuid=disk["uuid"], mode="rw", params={},
                          iv_name=f"disk/{index}")
             for index, disk in enumerate(request["disks"])]
    instance = objects.Instance(
        name=request["name"], uuid=request["uuid"], hypervisor="kvm",
        hvparams=request["hvparams"], beparams=request["beparams"], nics=nics,
        network_port=request["network_port"], disks=disks, os="herder-guest")
    block_devices = [(disk, spec["path"], None)
                     for disk, spec in zip(disks, request["disks"], strict=True)]
    kvmhelp = listings["help"]
    runtime = hypervisor._GenerateKVMRuntime(instance, block_devices, False, kvmhelp)
    hypervisor._ExecuteKVMRuntime(instance, runtime, kvmhelp)
    qemu = [cmd for cmd in commands if isinstance(cmd, list) and cmd and cmd[0] == kvm_path]
    json.dump({"argv": qemu[-1] if qemu else None}, sys.stdout)


if __name__ == "__main__":
    main()
