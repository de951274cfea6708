"""The simulator's OS definitions carry a disk through an export and an import (Ganeti's OS
API: `export` writes `$EXPORT_DEVICE` to stdout, `import` writes stdin to `$IMPORT_DEVICE`,
once per disk): the herder-guest OS and the demo's debootstrap, run as noded runs them
(`noded.osdef.run_os_script`) on real files; a second disk's import leaves the first alone."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from herder.noded import osdef
from herder.sim import cluster, guest


def demo_os(search_dir: Path) -> Path:
    cluster.write_demo_os(search_dir)
    return search_dir / cluster.DEMO_OS


@pytest.mark.parametrize("install", [guest.install_os_definition, demo_os])
def test_export_then_import_carries_each_disk(tmp_path: Path,
                                              install: Callable[[Path], Path]) -> None:
    os_dir = install(tmp_path / "os")
    definition = osdef.load_os(os_dir.name, os_dir)
    first, second = tmp_path / "disk0", tmp_path / "disk1"
    data = os.urandom(3 << 20)
    first.write_bytes(b"\0" * len(data))
    second.write_bytes(data)
    dump = tmp_path / "dump1"
    env = {"DISK_COUNT": "2", "DISK_0_PATH": str(first), "DISK_1_PATH": str(second),
           "INSTANCE_NAME": "web1"}
    with open(dump, "wb") as out:
        osdef.run_os_script(definition, "export", {**env, "EXPORT_DEVICE": str(second),
                                                   "EXPORT_INDEX": "1"}, 60,
                            tmp_path / "export.log", stdout=out)
    assert dump.read_bytes() == data
    target = tmp_path / "target1"
    target.write_bytes(b"\0" * len(data))
    with open(dump, "rb") as source:
        osdef.run_os_script(definition, "import", {**env, "DISK_1_PATH": str(target),
                                                   "IMPORT_DEVICE": str(target),
                                                   "IMPORT_INDEX": "1"}, 60,
                            tmp_path / "import.log", stdin=source)
    assert target.read_bytes() == data
    assert first.read_bytes() == b"\0" * len(data)  # the first disk untouched
