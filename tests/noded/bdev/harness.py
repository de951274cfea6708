"""Run the same block-device calls through herder's `bdev.operations` and through Ganeti 3.0.2's
own backend, both on a `World`, and give back the commands each ran."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from herder.core.diskobjects import BlockDevStatus, decode_disk
from herder.noded.bdev import operations
from herder.noded.bdev.base import BlockDevError, CommandResult, Host
from tests.noded.bdev import world

HERE = Path(__file__).resolve().parent
GROOT = Path(os.environ.get("GROOT", "/tmp/groot")) / "usr/share/ganeti/3.0"
DEBIAN_PYTHON = Path("/usr/bin/python3")


def run_ganeti_driver(script: Path, request: object, what: str,
                      path: str = "/usr/bin:/bin") -> Any:
    """Run one of the tests' driver scripts in Debian's python3 over Ganeti 3.0.2's own library:
    `request` as JSON on its standard input, its JSON answer back (`what` names the code in
    the failure)."""
    proc = subprocess.run(
        [str(DEBIAN_PYTHON), str(script)], input=json.dumps(request), capture_output=True,
        text=True, timeout=120, check=False,
        env={"PATH": path, "PYTHONPATH": str(GROOT), "LC_ALL": "C"})
    if proc.returncode != 0:
        raise AssertionError(f"Ganeti's {what} did not run: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout)

PLAIN_PARAMS = {"stripes": 1}
DRBD_PARAMS = {"c-delay-target": 1, "c-fill-target": 0, "c-max-rate": 61440,
               "c-min-rate": 4096, "c-plan-ahead": 20, "default-metavg": "xenvg",
               "disable-meta-flush": False, "disabled-barriers": "n", "disk-custom": "",
               "dynamic-resync": False, "net-custom": "", "protocol": "C",
               "resync-rate": 61440}
LOCAL_IP, REMOTE_IP, PORT = "192.0.2.1", "192.0.2.2", 11000
SECRET = "shared_secret_123"


def plain_disk(lv: str, size: int = 1024, *, vg: str = "xenvg", stripes: int = 1,
               spindles: int | None = None) -> dict[str, Any]:
    return {"dev_type": "plain", "logical_id": [vg, lv], "children": [], "size": size,
            "params": {**PLAIN_PARAMS, "stripes": stripes}, "iv_name": "disk/0",
            "name": None, "uuid": f"uuid-{lv}", "mode": "rw", "spindles": spindles,
            "dynamic_params": {}}


def drbd_disk(minor: int = 0, size: int = 1024, *, data: str = "inst.disk0_data",
              meta: str = "inst.disk0_meta", params: Mapping[str, Any] | None = None,
              remote_ip: str = REMOTE_IP) -> dict[str, Any]:
    return {"dev_type": "drbd",
            "logical_id": ["node1-uuid", "node2-uuid", PORT, minor, minor + 10, SECRET],
            "children": [plain_disk(data, size), plain_disk(meta, 128)], "size": size,
            "params": {**DRBD_PARAMS, **(params or {})}, "iv_name": "disk/0", "name": None,
            "uuid": "uuid-drbd", "mode": "rw", "spindles": None,
            "dynamic_params": {"local-ip": LOCAL_IP, "remote-ip": remote_ip,
                               "local-minor": minor, "remote-minor": minor + 10}}


class WorldHost(Host):
    """A Host whose commands, /proc/drbd and LV device nodes are the World's."""

    def __init__(self, the_world: world.World) -> None:
        super().__init__(runner=self._run)
        self.world = the_world
        self.clock = 1_000_000.0

    def _run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
             timeout: float | None = None, cwd: str | None = None) -> CommandResult:
        code, out, err = self.world.run(list(argv))
        return CommandResult(tuple(argv), code, out, err)

    def read_text(self, path: str | Path) -> str:
        if str(path) == str(self.proc_drbd):
            return self.world.proc_drbd()
        return super().read_text(path)

    def exists(self, path: str | Path) -> bool:
        return self.world.lv_exists(str(path))

    def can_read_device(self, path: str | Path, size: int = 128 * 1024) -> bool:
        return True

    def sleep(self, seconds: float) -> None:
        self.clock += seconds

    def monotonic(self) -> float:
        return self.clock


def _status(value: BlockDevStatus) -> list[object]:
    return value.to_ganeti()


HERDER_CALLS: dict[str, Callable[..., Any]] = {
    "create": lambda h, d, owner, on_primary, info, excl: operations.blockdev_create(
        h, decode_disk(d), owner, on_primary, info, excl),
    "remove": lambda h, d: operations.blockdev_remove(h, decode_disk(d)),
    "assemble": lambda h, d, as_primary: operations.recursive_assemble(h, decode_disk(d),
                                                                       as_primary),
    "shutdown": lambda h, d: operations.blockdev_shutdown(h, decode_disk(d)),
    "find": lambda h, d: operations.blockdev_find(h, decode_disk(d)),
    "mirror_status": lambda h, ds: operations.blockdev_getmirrorstatus(
        h, [decode_disk(d) for d in ds]),
    "grow": lambda h, d, amount, dryrun, backingstore, excl: operations.blockdev_grow(
        h, decode_disk(d), amount, dryrun, backingstore, excl),
    "rename": lambda h, d, new_id: operations.blockdev_rename(h, [(decode_disk(d), new_id)]),
    "setinfo": lambda h, d, info: operations.blockdev_setinfo(h, decode_disk(d), info),
    "snapshot": lambda h, d, name, size: operations.blockdev_snapshot(h, decode_disk(d), name,
                                                                      size),
    "open": lambda h, ds, exclusive: operations.blockdev_open(h, [decode_disk(d) for d in ds],
                                                              exclusive),
    "close": lambda h, ds: operations.blockdev_close(h, [decode_disk(d) for d in ds]),
    "disconnect_net": lambda h, ds: operations.drbd_disconnect_net(
        h, [decode_disk(d) for d in ds]),
    "attach_net": lambda h, ds, multimaster: operations.drbd_attach_net(
        h, [decode_disk(d) for d in ds], multimaster),
    "wait_sync": lambda h, ds: operations.drbd_wait_sync(h, [decode_disk(d) for d in ds]),
    "add_children": lambda h, parent, new: operations.blockdev_addchildren(
        h, decode_disk(parent), [decode_disk(d) for d in new]),
    "remove_children": lambda h, parent, old: operations.blockdev_removechildren(
        h, decode_disk(parent), [decode_disk(d) for d in old]),
    "wipe": lambda h, d, offset, size: operations.blockdev_wipe(h, decode_disk(d), offset,
                                                                size),
}


def run_herder(state: dict[str, Any], calls: Sequence[Sequence[Any]]) -> dict[str, Any]:
    the_world = world.World(state)
    host = WorldHost(the_world)
    errors: list[str | None] = []
    results: list[Any] = []
    for name, *args in calls:
        try:
            value = HERDER_CALLS[name](host, *args)
        except BlockDevError as err:
            errors.append(str(err))
            results.append(None)
            continue
        errors.append(None)
        if isinstance(value, BlockDevStatus):
            value = _status(value)
        elif isinstance(value, list) and value and isinstance(value[0], BlockDevStatus):
            value = [_status(v) for v in value]
        results.append(value)
    return {"commands": the_world.commands, "errors": errors, "results": results,
            "state": the_world.state}


def ganeti_available() -> bool:
    return (GROOT / "ganeti" / "backend.py").is_file() and DEBIAN_PYTHON.is_file()


def run_ganeti_jobs(jobs: Sequence[tuple[dict[str, Any], Sequence[Sequence[Any]]]]
                    ) -> list[dict[str, Any]]:
    """Ganeti's results for many (state, calls) jobs, in one subprocess (its imports are slow)."""
    if not ganeti_available():
        pytest.skip("Ganeti 3.0.2 from ../shared/peers (/tmp/groot) is absent")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{GROOT}:{HERE}", "LC_ALL": "C"}
    payload = [{"state": state, "calls": calls} for state, calls in jobs]
    proc = subprocess.run([str(DEBIAN_PYTHON), str(HERE / "ganeti_driver.py")],
                          input=json.dumps(payload), env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"Ganeti's code did not run: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def run_ganeti(state: dict[str, Any], calls: Sequence[Sequence[Any]]) -> dict[str, Any]:
    return run_ganeti_jobs([(state, calls)])[0]
