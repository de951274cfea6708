"""The keeper of a simulation's hosts: `python -m herder.sim.keeper DIRECTORY`.

It also serves every host's watchdog device (`herder.sim.watchdog`): a host whose armed
watchdog is not petted in time is reset (its PID 1 killed), then booted like a rebooted one.

A host ends its own PID namespace when something in it calls reboot(2) (noded's power cycle):
the kernel kills the namespace's PID 1 and everything in it. A real machine then boots again;
the keeper does that for simulated hosts: every `INTERVAL` seconds it looks for hosts the
simulator wants powered (`HostRecord.powered`) whose PID 1 is gone, and powers them on (their
disks and directories stayed). One keeper runs per simulation, started by
`HostSimulation.keep_powered` and ended first by the teardown.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path

from herder.core.errors import HerderError
from herder.sim import hoststate
from herder.sim.host import HostSimulation
from herder.sim.watchdog import Watchdogs

log = logging.getLogger("herder.sim.keeper")
INTERVAL = 0.5


def rebooted(record: hoststate.SimRecord) -> list[str]:
    """Hosts that should run and whose PID 1 ended on its own."""
    return sorted(name for name, host in record.hosts.items()
                  if host.powered and host.init is not None and not hoststate.alive(host.init))


def run(directory: Path) -> None:
    sim = HostSimulation.open(directory)
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("keeping the hosts of %s powered", directory)
    dogs = Watchdogs()  # each host's watchdog device (herder.sim.watchdog)
    while not stopping:
        try:
            record = sim.record
        except HerderError:
            return  # the simulation is gone
        if dogs.check(record):
            record = sim.record  # the hosts just reset: booted below
        for name in rebooted(record):
            log.info("%s ended its PID namespace (a reboot): powering it on", name)
            try:
                sim.host(name).power_on()
                log.info("%s is up again", name)
            except HerderError as err:
                log.error("%s did not come up again: %s", name, err)
        time.sleep(INTERVAL)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    run(Path(sys.argv[1]))


if __name__ == "__main__":
    main()
