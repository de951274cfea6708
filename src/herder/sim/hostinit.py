"""PID 1 of a simulated host until it becomes the host's supervisor.

`python -m herder.sim.hostinit SPEC.json`, run by `unshare` in the host's fresh PID, mount,
network, UTS and IPC namespaces (docs/real-nodes.md §1): sets the host name; detaches what the
machine's /run mounts into the copy of its mount table (other simulations' network
namespaces among them, which this host must not keep alive); mounts a sysfs of its own
network namespace; mounts the host's private
directories, its file storage and the shared ones; waits until the simulator has connected its
network (a byte on an inherited pipe); creates its volume group on first boot (its own LVM
config sees only its own loop device); then becomes `herder supervise` (exec: it stays PID 1).
Any failure ends PID 1 and with it the host; the simulator shows the host's console.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
from pathlib import Path

import msgspec


class Mount(msgspec.Struct, frozen=True):
    kind: str  # "bind", "tmpfs", "ext4"
    target: str
    source: str = ""
    options: str = ""


class HostSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    hostname: str
    mounts: list[Mount]
    volume_group: str
    vg_device: str
    ready_fd: int
    argv: list[str]
    environment: dict[str, str]


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True,
                          env={**os.environ, "LVM_SUPPRESS_FD_WARNINGS": "1"})
    if done.returncode != 0:
        raise SystemExit(f"hostinit: {' '.join(argv)}: {done.stderr.strip()}")


_libc = ctypes.CDLL(None, use_errno=True)
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_NOATIME = 1024
MS_BIND = 4096
MS_REC = 16384
MNT_DETACH = 2


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str) -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                   flags, data.encode() if data else None) != 0:
        raise SystemExit(f"hostinit: cannot mount {source} on {target}: "
                         f"{os.strerror(ctypes.get_errno())}")


def _detach_machine_mounts() -> None:
    """Lazily unmount the machine's mounts under /run and every namespace handle (nsfs)."""
    targets = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        target = fields[4].encode().decode("unicode_escape")
        fstype = fields[fields.index("-") + 1]
        if target.startswith("/run/") or fstype == "nsfs":
            targets.append(target)
    for target in sorted(targets, key=len, reverse=True):
        _libc.umount2(target.encode(), MNT_DETACH)  # gone already with its parent: fine


def _fresh_sysfs() -> None:
    """sysfs shows the network devices of the namespace that mounts it: mount one for this
    host's namespace (so /sys/class/net is its own), keeping the machine's cgroup tree."""
    cgroup = os.open("/sys/fs/cgroup", os.O_PATH | os.O_CLOEXEC)
    try:
        _mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "")
        _mount(f"/proc/self/fd/{cgroup}", "/sys/fs/cgroup", None, MS_BIND | MS_REC, "")
    finally:
        os.close(cgroup)


def mount_all(mounts: list[Mount]) -> None:
    """Mount in order. Bind sources are opened first and bound through /proc/self/fd: a
    private directory mounted earlier (/tmp, /run, /srv) may cover the simulation's
    directory they are in."""
    sources = {m.source: os.open(m.source, os.O_PATH | os.O_CLOEXEC)
               for m in mounts if m.kind == "bind"}
    for entry in mounts:
        if entry.kind == "bind":
            _mount(f"/proc/self/fd/{sources[entry.source]}", entry.target, None, MS_BIND, "")
        elif entry.kind == "tmpfs":
            _mount("tmpfs", entry.target, "tmpfs", 0, entry.options or "mode=0755")
        elif entry.kind == "ext4":
            _mount(entry.source, entry.target, "ext4", MS_NOATIME, entry.options)
        else:
            raise SystemExit(f"hostinit: unknown mount kind {entry.kind!r}")
    for fd in sources.values():
        os.close(fd)


def _wait_for_network(fd: int) -> None:
    with os.fdopen(fd, "rb") as ready:
        if ready.read() != b"go":
            raise SystemExit("hostinit: the simulator gave up on this host")


def _volume_group(name: str, device: str) -> None:
    found = subprocess.run(["vgs", "--noheadings", "-o", "vg_name", name],
                           capture_output=True, text=True,
                           env={**os.environ, "LVM_SUPPRESS_FD_WARNINGS": "1"})
    if found.returncode == 0 and found.stdout.strip() == name:
        return
    _run(["pvcreate", "--quiet", "--yes", device])
    _run(["vgcreate", "--quiet", name, device])


def boot(spec: HostSpec) -> None:
    socket.sethostname(spec.hostname)
    _detach_machine_mounts()
    _fresh_sysfs()
    mount_all(spec.mounts)
    _wait_for_network(spec.ready_fd)
    _volume_group(spec.volume_group, spec.vg_device)
    os.chdir("/")
    os.execve(spec.argv[0], spec.argv, spec.environment)


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit("usage: python -m herder.sim.hostinit SPEC.json")
    spec = msgspec.json.decode(Path(argv[1]).read_bytes(), type=HostSpec)
    boot(spec)


if __name__ == "__main__":
    main(sys.argv)
