"""The stand-in node of the DRBD command comparison (tests/noded/bdev/world.py: DRBD cannot
run here) answers as the real captures do: Ganeti 3.0.2's own parsers read its `/proc/drbd`
and `drbdsetup show` texts exactly as they read ../shared/conformance/ganeti/ for a device in
the same state. So herder's and Ganeti's DRBD commands are compared on answers Ganeti's code
cannot tell from a real node's (tests/noded/bdev/test_vs_ganeti.py).
Skips when Ganeti's code (/tmp/groot) or the captures are absent.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.conftest import SHARED
from tests.noded.bdev import harness, world

pytestmark = pytest.mark.peer

CAPTURES = SHARED / "conformance" / "ganeti"
DATA, META = "/dev/xenvg/test.data", "/dev/xenvg/test.meta"
LOCAL, REMOTE = ["192.0.2.1", 11000], ["192.0.2.2", 11000]

# Ganeti's parsers, run with Debian's python3 on [[kind, text, minor], ...]
PARSE = """
import json, sys
from ganeti.storage import drbd_info
out = []
for kind, text, minor in json.load(sys.stdin):
    if kind == "proc":
        status = drbd_info.DRBD8Info.CreateFromLines(text.splitlines()).GetMinorStatus(minor)
        out.append({k: v for k, v in vars(status).items() if k != "sync_percent"}
                   | {"syncing": status.sync_percent is not None})
    else:
        parser = {"8.4": drbd_info.DRBD84ShowInfo, "8.3": drbd_info.DRBD83ShowInfo}[kind]
        out.append(parser.GetDevInfo(text))
json.dump(out, sys.stdout, default=str)
"""

# (capture, minor in it, the stand-in's version and minor state)
PROC_CASES: list[tuple[str, int, str, dict[str, Any]]] = [
    ("proc_drbd84.txt", 0, "8.4", {"cs": "Connected", "roles": "Primary/Secondary"}),
    ("proc_drbd84.txt", 1, "8.4", {"cs": "Connected", "roles": "Secondary/Primary"}),
    ("proc_drbd84.txt", 4, "8.4", {"cs": "WFConnection", "roles": "Primary/Unknown",
                                   "disks": "UpToDate/DUnknown"}),
    ("proc_drbd84.txt", 6, "8.4", {"cs": "Connected", "roles": "Secondary/Primary",
                                   "disks": "Diskless/UpToDate"}),
    ("proc_drbd84.txt", 2, "8.4", {"cs": "Unconfigured"}),
    ("proc_drbd83_sync.txt", 0, "8.3", {"cs": "Connected", "roles": "Primary/Secondary"}),
    ("proc_drbd83_sync.txt", 3, "8.3", {"cs": "SyncTarget", "roles": "Primary/Secondary",
                                        "disks": "Inconsistent/UpToDate", "sync": True}),
]
SHOW_CASES = [("bdev-drbd-8.4.txt", "8.4"), ("bdev-drbd-8.4-no-disk-params.txt", "8.4"),
              ("bdev-drbd-8.3.txt", "8.3")]


def capture(name: str) -> str:
    path = CAPTURES / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path.read_text()


def ganeti_parse(items: list[list[Any]]) -> list[Any]:
    if not harness.ganeti_available():
        pytest.skip("Ganeti 3.0.2 from ../shared/peers (/tmp/groot) is absent")
    proc = subprocess.run([str(harness.DEBIAN_PYTHON), "-c", PARSE], input=json.dumps(items),
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(harness.GROOT)},
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"Ganeti's parsers did not run: {proc.stderr[-2000:]}")
    parsed: list[Any] = json.loads(proc.stdout)
    return parsed


def stand_in(version: str, minor: int, **state: Any) -> world.World:
    nodes = world.new_state(version)
    world.add_minor(nodes, minor, disk=DATA, meta=META, laddr=LOCAL, raddr=REMOTE, **state)
    return world.World(nodes)


@pytest.mark.parametrize(("name", "minor", "version", "state"), PROC_CASES)
def test_proc_drbd_reads_as_the_capture(name: str, minor: int, version: str,
                                        state: dict[str, Any]) -> None:
    text = stand_in(version, minor, **state).proc_drbd()
    real, ours = ganeti_parse([["proc", capture(name), minor], ["proc", text, minor]])
    assert ours == real


@pytest.mark.parametrize(("name", "version"), SHOW_CASES)
def test_drbdsetup_show_reads_as_the_capture(name: str, version: str) -> None:
    argv = ["drbdsetup", "show", "0"] if version == "8.4" else ["drbdsetup", "/dev/drbd0", "show"]
    code, text, _err = stand_in(version, 0).run(argv)
    assert code == 0
    real, ours = ganeti_parse([[version, capture(name), 0], [version, text, 0]])
    # the stand-in gives no meta-disk index (as some 8.4 outputs do; Ganeti reads both)
    assert {k: v for k, v in ours.items() if k != "meta_index"} == \
        {k: v for k, v in real.items() if k != "meta_index"}
    assert real.get("meta_index") in (None, 0)
