"""The simulated hosts' watchdog devices (`herder.sim.watchdog`) driven by noded's own watchdog
code (`herder.noded.fence.Watchdog`): a real FIFO, a real process standing for the host's PID 1,
the Linux watchdog semantics (armed by the first write, petted by writes, disarmed by a `V`
written last, the host reset when it is armed and not petted in time)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from herder.core import ssconf
from herder.noded.fence import Watchdog
from herder.sim import hoststate
from herder.sim.watchdog import DEVICE, Watchdogs, timeout_of

NAME = "node1.sim.herder.test"


@pytest.fixture
def host(tmp_path: Path) -> Iterator[tuple[hoststate.SimRecord, subprocess.Popen[bytes]]]:
    """A host record whose PID 1 is a real process, its private /run, ssconf with its
    watchdog_timeout (4 s)."""
    (tmp_path / "root" / "run").mkdir(parents=True)
    data_dir = tmp_path / "root" / "var" / "lib" / "herder"
    data_dir.mkdir(parents=True)
    ssconf.path("herder_ndparams", data_dir).write_text(ssconf.format_ndparams(
        [(NAME, {"watchdog_timeout": 4, "watchdog_device": DEVICE})]))
    init = subprocess.Popen(["sleep", "600"])
    record = hoststate.SimRecord(index=1, directory=str(tmp_path), hosts={
        NAME: hoststate.HostRecord(name=NAME, address="198.18.1.11", slot=1,
                                   directory=str(tmp_path), powered=True,
                                   init=hoststate.process_record(init.pid))})
    try:
        yield record, init
    finally:
        init.kill()
        init.wait()


def test_a_watchdog_not_petted_in_time_resets_the_host(host) -> None:
    record, init = host
    dogs = Watchdogs()
    assert dogs.check(record, now=0.0) == []  # the device appears (a FIFO in the host's /run)
    device = Path(record.hosts[NAME].directory) / "root" / DEVICE.lstrip("/")
    assert device.is_fifo()
    assert timeout_of(record.hosts[NAME]) == 4.0
    assert dogs.check(record, now=100.0) == []  # never written: not armed
    dog = Watchdog(str(device), 4)
    dog.open()  # noded's side: the first write arms it
    assert dogs.check(record, now=101.0) == []
    for now in (102.0, 104.0, 106.0):
        dog.pet()
        assert dogs.check(record, now=now) == []
    assert dogs.check(record, now=109.0) == []  # 3 s without a write: within the timeout
    assert dogs.check(record, now=110.5) == [NAME]  # 4.5 s: the host is reset
    assert init.wait(timeout=10) == -9  # its PID 1 killed, no grace
    dog.close(disarm=False)


def test_the_magic_close_disarms_it_and_a_host_that_is_off_counts_nothing(host) -> None:
    record, init = host
    dogs = Watchdogs()
    dogs.check(record, now=0.0)
    device = Path(record.hosts[NAME].directory) / "root" / DEVICE.lstrip("/")
    dog = Watchdog(str(device), 4)
    dog.open()
    assert dogs.check(record, now=1.0) == []
    dog.close(disarm=True)  # "V", then close
    assert dogs.check(record, now=2.0) == []
    assert dogs.check(record, now=60.0) == []  # disarmed: no reset
    dog = Watchdog(str(device), 4)
    dog.open()  # armed again
    dogs.check(record, now=61.0)
    record.hosts[NAME].powered = False  # powered off (its BMC): nothing counts
    assert dogs.check(record, now=90.0) == []
    assert init.poll() is None
    dog.close(disarm=False)
