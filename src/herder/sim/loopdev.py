"""Loop devices of simulated hosts: attach, find the ones a simulation owns, detach.

A loop device is global (every namespace sees it), so the simulator detaches what its hosts
attached. Ownership is decided by the backing file's identity (device and inode, as the kernel
reports them: the same from every mount namespace), not by its path: a path is relative to the
namespace that attached it. A simulation owns the loop devices backed by a file of its
directory, and those backed by a file on a filesystem that lives on one of its loop devices
(an image inside a host's file storage).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from herder.core.errors import HerderError


@dataclass(frozen=True)
class LoopDevice:
    name: str  # /dev/loopN
    device: tuple[int, int]  # its major, minor
    backing_device: tuple[int, int]  # major, minor of the filesystem holding the backing file
    backing_inode: int
    backing_file: str  # as the kernel shows it (meaningful in the attacher's namespace)


def _majmin(text: str) -> tuple[int, int]:
    major, _, minor = text.strip().partition(":")
    return int(major), int(minor)


def parse_list(text: str) -> list[LoopDevice]:
    """`losetup --list --json --output NAME,MAJ:MIN,BACK-MAJ:MIN,BACK-INO,BACK-FILE`."""
    data = json.loads(text) if text.strip() else {"loopdevices": []}
    loops = []
    for entry in data.get("loopdevices", []):
        if entry.get("back-ino") is None or not entry.get("back-maj:min"):
            continue  # being set up or torn down
        loops.append(LoopDevice(
            name=entry["name"], device=_majmin(entry["maj:min"]),
            backing_device=_majmin(entry["back-maj:min"]), backing_inode=int(entry["back-ino"]),
            backing_file=entry.get("back-file") or ""))
    return loops


def list_loops() -> list[LoopDevice]:
    done = subprocess.run(["losetup", "--list", "--json", "--output",
                           "NAME,MAJ:MIN,BACK-MAJ:MIN,BACK-INO,BACK-FILE"],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise HerderError(f"losetup --list failed: {done.stderr.strip()}")
    return parse_list(done.stdout)


def file_identity(path: Path) -> tuple[int, int, int]:
    """(major, minor, inode) of a file, as a loop device reports its backing file."""
    st = os.stat(path)
    return os.major(st.st_dev), os.minor(st.st_dev), st.st_ino


def files_under(directory: Path) -> set[tuple[int, int, int]]:
    """The identities of the regular files under `directory` (not following links)."""
    found = set()
    for root, _dirs, files in os.walk(directory, onerror=lambda err: None):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            found.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    return found


def owned(loops: Iterable[LoopDevice], files: set[tuple[int, int, int]]) -> list[LoopDevice]:
    """The loop devices backed by one of `files`, and (transitively) those backed by a file on
    a filesystem on one of them; inner ones first (the order to detach them in)."""
    remaining = list(loops)
    levels: list[list[LoopDevice]] = []
    ours_devices: set[tuple[int, int]] = set()
    current = [lo for lo in remaining
               if (*lo.backing_device, lo.backing_inode) in files]
    while current:
        levels.append(current)
        ours_devices.update(lo.device for lo in current)
        taken = {lo.name for level in levels for lo in level}
        remaining = [lo for lo in remaining if lo.name not in taken]
        current = [lo for lo in remaining if lo.backing_device in ours_devices]
    return [lo for level in reversed(levels) for lo in level]


def attach(image: Path) -> str:
    """Attach `image` to a free loop device; returns its path."""
    done = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True,
                          text=True, timeout=30)
    if done.returncode != 0:
        raise HerderError(f"cannot attach {image} to a loop device: {done.stderr.strip()}")
    return done.stdout.strip()


def detach(loops: Iterable[LoopDevice], *, wait: float = 5.0) -> list[str]:
    """Detach the loop devices (a busy one is freed as soon as its last user closes it) and
    wait until they are gone; returns the names of those still there after `wait`."""
    wanted = list(loops)
    for lo in wanted:
        subprocess.run(["losetup", "--detach", lo.name], capture_output=True, timeout=30)
    deadline = time.monotonic() + wait
    while True:
        # The same device (name and backing file): the name alone may be reused at once.
        present = set(list_loops())
        left = [lo.name for lo in wanted if lo in present]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)
