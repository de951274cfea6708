"""Each simulated host's BMC: OpenIPMI's `ipmi_sim` (IPMI 2.0 over LAN, RMCP+) whose chassis
power commands switch the host as a power switch would.

One `ipmi_sim` per host runs in the simulation's network namespace (the simulator's side, not
the host's: a host whose network is cut keeps its BMC reachable, as a BMC's own port does),
listening at the simulator's address on port `BASE_PORT + slot`. Its `chassis_control` is
`python -m herder.sim.bmc control DIR HOST`, which ipmi_sim runs with `get power`, `set power
0|1`, `set reset 1`: off is `SimHost.power_off(grace=0)` (its processes and guests gone at
once), on boots it, reset is both. So `ipmitool -I lanplus ... chassis power off` ends the host
for real, and `herder-oob-ipmi` (the shipped OOB program) is what the cluster's nodes use as
`oob_program`: the path a real cluster takes.

Each host gets `/etc/herder/oob-ipmi.toml` naming every host's BMC and
`/etc/herder/bmc-password` (0600), as an operator installs them on master candidates.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

from herder.core.errors import HerderError
from herder.sim import netns
from herder.sim.host import HostSimulation, SimHost, node_environment

log = logging.getLogger("herder.sim.bmc")
IPMI_SIM = "ipmi_sim"  # Debian: /usr/bin/ipmi_sim
BASE_PORT = 6230  # host slot i's BMC listens on BASE_PORT + i at the simulator's address
USER = "herder"
PASSWORD_FILE = "/etc/herder/bmc-password"
OOB_SETTINGS = "/etc/herder/oob-ipmi.toml"
START_TIMEOUT = 10.0

EMULATION = """mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
mc_enable 0x20
"""


def missing() -> str | None:
    """Why this machine cannot run the BMCs (None: it can)."""
    for tool in (IPMI_SIM, "ipmitool"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install openipmi ipmitool)"
    return None


def ipmi_sim_path() -> str:
    found = shutil.which(IPMI_SIM)
    if found is None:
        raise HerderError(f"{IPMI_SIM} is not installed (apt-get install openipmi)")
    return found


def directory(sim: HostSimulation, name: str) -> Path:
    return sim.directory / "bmc" / name


def lan_conf(name: str, address: str, port: int, password: str, control: list[str]) -> str:
    """ipmi_sim's configuration: one LAN channel, one admin user, the chassis control."""
    return "\n".join([
        f'name "{name}"',
        "set_working_mc 0x20",
        "  startlan 1",
        f"    addr {address} {port}",
        "    priv_limit admin",
        "    allowed_auths_callback none md2 md5 straight",
        "    allowed_auths_user none md2 md5 straight",
        "    allowed_auths_operator none md2 md5 straight",
        "    allowed_auths_admin none md2 md5 straight",
        "    guid a123456789abcdefa123456789abcdef",
        "  endlan",
        f'  chassis_control "{" ".join(control)}"',
        f'  user 2 true "{USER}" "{password}" admin 10 md5 md2 straight',
        "",
    ])


def oob_settings(sim: HostSimulation) -> str:
    """/etc/herder/oob-ipmi.toml: every host's BMC."""
    lines = ["[defaults]", f'user = "{USER}"', f'password_file = "{PASSWORD_FILE}"',
             "cipher_suite = 3", "timeout = 30", ""]
    for name, host in sorted(sim.record.hosts.items()):
        lines += [f'[nodes."{name}"]', f'host = "{sim.address(netns.SIMULATOR_HOST)}"',
                  f"port = {BASE_PORT + host.slot}", ""]
    return "\n".join(lines)


def start(sim: HostSimulation, host: SimHost, password: str) -> None:
    """Start the host's BMC (in the simulation's network namespace) and wait until it
    answers."""
    record = sim.record.hosts[host.name]
    where = directory(sim, host.name)
    (where / "state").mkdir(parents=True, exist_ok=True)
    address = sim.address(netns.SIMULATOR_HOST)
    port = BASE_PORT + record.slot
    control = [sys.executable, "-m", "herder.sim.bmc", "control", str(sim.directory),
               host.name]
    (where / "lan.conf").write_text(lan_conf(host.name, address, port, password, control))
    (where / "lan.conf").chmod(0o600)
    (where / "sim.emu").write_text(EMULATION)
    with open(where / "bmc.log", "ab") as out:
        subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{sim.netns}", "--", ipmi_sim_path(), "-c",
             str(where / "lan.conf"), "-f", str(where / "sim.emu"), "-s", str(where / "state"),
             "-n"], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env=node_environment(), cwd="/")
    deadline = time.monotonic() + START_TIMEOUT
    password_file = where / "password"
    password_file.write_text(password)
    password_file.chmod(0o600)
    while True:
        probe = subprocess.run(
            ["nsenter", f"--net=/run/netns/{sim.netns}", "--", "ipmitool", "-I", "lanplus",
             "-H", address, "-p", str(port), "-U", USER, "-f", str(password_file), "-C", "3",
             "-N", "1", "-R", "1", "mc", "info"], capture_output=True, text=True, timeout=10)
        if probe.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise HerderError(f"{host.name}'s BMC did not answer at {address}:{port}: "
                              f"{probe.stderr.strip()[:200]}")
        time.sleep(0.2)


def start_all(sim: HostSimulation, hosts: list[SimHost]) -> None:
    """A BMC for every host; every host gets the OOB program's settings and the password."""
    reason = missing()
    if reason is not None:
        raise HerderError(f"the simulated BMCs: {reason}")
    password = secrets.token_hex(8)  # IPMI passwords: at most 20 bytes (16 for IPMI 1.5)
    for host in hosts:
        start(sim, host, password)
    settings = oob_settings(sim)
    for host in hosts:
        host.path(OOB_SETTINGS).write_text(settings)
        secret = host.path(PASSWORD_FILE)
        secret.write_text(password)
        secret.chmod(0o600)


# --- the chassis control (run by ipmi_sim) --------------------------------------------------------

def control(sim_dir: Path, name: str, args: list[str]) -> str:
    """ipmi_sim's chassis control: `get power` -> "power:1|0"; `set power 0|1`,
    `set reset 1`."""
    sim = HostSimulation.open(sim_dir)
    host = sim.host(name)
    if args[:1] == ["get"]:
        return "\n".join(f"{item}:{int(host.running)}" if item == "power" else f"{item}:0"
                         for item in args[1:])
    if args[:1] != ["set"] or len(args) < 3:
        raise HerderError(f"unknown chassis control {' '.join(args)!r}")
    item, value = args[1], args[2]
    if item == "power" and value == "0":
        log.info("%s: power off (no grace)", name)
        host.power_off(grace=0)
    elif (item == "power" and value == "1") or (item == "reset" and value == "1"):
        if item == "reset":
            log.info("%s: reset", name)
            host.power_off(grace=0)
        # the boot takes a second or two: in a process of its own, the BMC answers at once
        subprocess.Popen([sys.executable, "-m", "herder.sim.bmc", "boot", str(sim_dir), name],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True,
                         env=node_environment(), cwd="/")
    return ""


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    action, sim_dir, name, *rest = sys.argv[1:]
    if action == "control":
        out = control(Path(sim_dir), name, rest)
        if out:
            print(out)
    elif action == "boot":
        host = HostSimulation.open(Path(sim_dir)).host(name)
        with contextlib.suppress(HerderError):
            host.power_on()
    else:
        raise SystemExit(f"unknown action {action}")


if __name__ == "__main__":
    main()
