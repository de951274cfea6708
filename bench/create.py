"""Instance creation of a real 128 MiB guest on a simulated cluster (`herder cluster simulate
--guests qemu`: namespaced hosts, each its own libvirtd with the QEMU driver): through herder
(`herder instance add`: RAPI, masterd's job, the node RPCs in Ganeti's order: the disk, the
domain's definition, the OS create script, the start) beside the bare tools doing the same on
the same node (the limit): the disk file made the same way (`truncate`, as noded's ftruncate),
the same OS create script (`herder-guest`'s, with Ganeti's OS API variables), `virsh define`
of the same domain XML (the one herder defined for the template's first, untimed instance,
with its own name, disk and serial log) and `virsh start`.

Each figure is the wall time from the command to the domain running (`herder instance add`
returned; `virsh start` returned) and to the guest's first heartbeat on its serial log (the
issue's measure: a guest that runs its init; the same boot on both paths, minutes for a TCG
guest on a loaded machine: `--to running` leaves it out). Herder and bare runs alternate;
the load average is shown with each run. `plain` needs device-mapper activation, which the simulated
hosts lack (LVM metadata only): it is left out unless asked for.

    PYTHONPATH=src python bench/create.py [--runs 5] [--templates file,sharedfile]
                                          [--to heartbeat|running]

Needs root, qemu-system-x86, libvirt-daemon, libvirt-clients, linux-image-amd64 and
busybox-static (scripts/sysdeps.sh). Run it under the suite lock on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import statistics
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from herder.sim import cluster, guest
from simcommands import herder, on_node

MEMORY = "maxmem=128,minmem=128"
DISK = "64M"
LOGS = "/var/log/herder/instances"
BOOT_TIMEOUT = 900  # s: TCG guests on a loaded 2-core machine boot slowly
VIRSH = "virsh -c qemu:///system"




def _wait_for_heartbeat(state: cluster.SimState, node: str, name: str) -> None:
    """Until the guest's serial log holds a heartbeat (one process in the host polling
    every 50 ms, the same for both paths)."""
    log = shlex.quote(f"{LOGS}/{name}.serial.log")
    on_node(state, node, ["sh", "-c", f"until grep -q 'herder-guest boot_id=' {log} 2>/dev/null;"
                       " do sleep 0.05; done"], timeout=BOOT_TIMEOUT)


def _load() -> float:
    return os.getloadavg()[0]


def _through_herder(state: cluster.SimState, node: str, name: str, template: str, *,
                    heartbeat: bool) -> dict[str, float]:
    load = _load()
    started = time.monotonic()
    herder(state, "instance", "add", name, "--no-name-check", "-t", template, "-o",
            guest.OS_NAME, "--disk", DISK, "--ignore-ipolicy", "-B", MEMORY, "-n", node)
    found = {"running_s": time.monotonic() - started, "load": load}
    if heartbeat:
        _wait_for_heartbeat(state, node, name)
        found["heartbeat_s"] = time.monotonic() - started
    return found


def _bare_xml(herder_xml: str, name: str, disk: str) -> str:
    """herder's domain XML with another name, disk and serial log; libvirt gives the
    domain its own UUID and MAC address."""
    root = ET.fromstring(herder_xml)
    root.find("name").text = name  # type: ignore[union-attr]
    uuid = root.find("uuid")
    if uuid is not None:
        root.remove(uuid)
    for interface in root.iterfind("devices/interface"):
        for tag in ("mac", "target"):
            child = interface.find(tag)
            if child is not None:
                interface.remove(child)
    disks = root.findall("devices/disk")
    if len(disks) != 1:
        raise SystemExit(f"expected one disk in herder's domain, found {len(disks)}")
    source = disks[0].find("source")
    if source is None or "file" not in source.attrib:
        raise SystemExit("herder's disk is no file: the bare path knows files only")
    source.set("file", disk)
    for log in root.iterfind("devices/*/log"):
        log.set("file", f"{LOGS}/{name}.serial.log")
    return ET.tostring(root, encoding="unicode")


def _bare_script(name: str, disk: str, xml_path: str) -> str:
    """The bare tools in one shell in the node: the disk file, the OS create script with
    Ganeti's OS API variables, virsh define and start."""
    q = shlex.quote
    return (f"set -e; mkdir -p {q(str(Path(disk).parent))}; truncate -s {DISK} {q(disk)}; "
            f"INSTANCE_NAME={q(name)} DISK_COUNT=1 DISK_0_PATH={q(disk)} OS_API_VERSION=20 "
            f"/srv/herder/os/{guest.OS_NAME}/create; "
            f"{VIRSH} define {q(xml_path)} >/dev/null; {VIRSH} start {q(name)} >/dev/null")


def _bare(state: cluster.SimState, node: str, name: str, herder_xml: str,
          herder_disk: str, herder_name: str, *, heartbeat: bool) -> dict[str, float]:
    disk = herder_disk.replace(f"/{herder_name}/", f"/{name}/")
    if disk == herder_disk:
        raise SystemExit(f"cannot place the bare disk beside {herder_disk}")
    xml_path = f"/tmp/{name}.xml"
    state.host(node).run(["sh", "-c", f"cat > {shlex.quote(xml_path)}"],
                         input=_bare_xml(herder_xml, name, disk), timeout=60)
    load = _load()
    started = time.monotonic()
    on_node(state, node, ["sh", "-c", _bare_script(name, disk, xml_path)])
    found = {"running_s": time.monotonic() - started, "load": load}
    if heartbeat:
        _wait_for_heartbeat(state, node, name)
        found["heartbeat_s"] = time.monotonic() - started
    return found


def _remove_bare(state: cluster.SimState, node: str, name: str, disk: str) -> None:
    q = shlex.quote
    on_node(state, node, ["sh", "-c", f"{VIRSH} destroy {q(name)} >/dev/null; "
                       f"{VIRSH} undefine {q(name)} >/dev/null; "
                       f"rm -rf {q(str(Path(disk).parent))} {q(f'{LOGS}/{name}.serial.log')} "
                       f"{q(f'/tmp/{name}.xml')}"])


def _herder_domain(state: cluster.SimState, node: str, name: str) -> tuple[str, str]:
    """The domain XML herder defined for `name` and its disk's file."""
    xml = on_node(state, node, ["virsh", "-c", "qemu:///system", "dumpxml", "--inactive", name])
    source = ET.fromstring(xml).find("devices/disk/source")
    if source is None or "file" not in source.attrib:
        raise SystemExit(f"the domain of {name} has no file disk")
    return xml, source.attrib["file"]


def _spread(values: list[float]) -> str:
    return (f"median {statistics.median(values):6.2f} s (min {min(values):6.2f}, "
            f"max {max(values):6.2f})")


def _template(state: cluster.SimState, node: str, template: str, runs: int, *,
              heartbeat: bool) -> dict[str, list[dict[str, float]]]:
    """A first, untimed instance (its XML is the bare path's; the node's first guest also
    pays one-time costs: the KVM probe), then `runs` of each path, alternating."""
    first = f"{template}-warm"
    _through_herder(state, node, first, template, heartbeat=False)
    herder_xml, herder_disk = _herder_domain(state, node, first)
    herder(state, "instance", "remove", first)
    found: dict[str, list[dict[str, float]]] = {"herder": [], "bare": []}
    for number in range(1, runs + 1):
        name = f"{template}-h{number}"
        found["herder"].append(_through_herder(state, node, name, template,
                                               heartbeat=heartbeat))
        herder(state, "instance", "remove", name)
        bare = f"{template}-b{number}"
        found["bare"].append(_bare(state, node, bare, herder_xml, herder_disk, first,
                                   heartbeat=heartbeat))
        _remove_bare(state, node, bare, herder_disk.replace(f"/{first}/", f"/{bare}/"))
        print(f"{template} run {number}: herder {found['herder'][-1]}, bare {found['bare'][-1]}",
              flush=True)
    return found


def _report(template: str, found: dict[str, list[dict[str, float]]]) -> None:
    print(f"\n{template}, {len(found['herder'])} runs each, load average "
          f"{min(r['load'] for p in found.values() for r in p):.1f}-"
          f"{max(r['load'] for p in found.values() for r in p):.1f}")
    for key, label in (("running_s", "command to running domain"),
                       ("heartbeat_s", "command to first heartbeat")):
        herder = [r[key] for r in found["herder"] if key in r]
        bare = [r[key] for r in found["bare"] if key in r]
        if not herder or not bare:
            continue
        print(f"  {label}: herder {_spread(herder)}; bare {_spread(bare)}; "
              f"ratio {statistics.median(herder) / statistics.median(bare):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--templates", default="file,sharedfile")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/herder-bench-create"))
    parser.add_argument("--first-ip", type=int, default=228)
    parser.add_argument("--to", choices=("heartbeat", "running"), default="heartbeat",
                        help="what each run waits for: the guest's first heartbeat, or the "
                        "domain running")
    options = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # the cluster stops
    state = cluster.start(options.dir, 2, mond=False, maintd=False, first_ip=options.first_ip,
                          guests="qemu", progress=print)
    try:
        node = state.nodes[0].name
        for template in options.templates.split(","):
            _report(template, _template(state, node, template, options.runs,
                                        heartbeat=options.to == "heartbeat"))
        print("goal (issue 36, goal 7): herder at most 1.3x the bare path")
    finally:
        cluster.stop(options.dir)


if __name__ == "__main__":
    main()
