"""Routed NICs on the node, as Ganeti's `kvm-ifup` (its tools `kvm-ifup` and `net-common`).

libvirt creates a routed NIC's tap (`<interface type='ethernet'>`, `kvm.domain.tap_name`) when
the domain starts; noded then configures it the way Ganeti's hypervisor does after QEMU opened
its taps, with Ganeti's environment (`domain.ifup_environment` + PATH):

- the operator's hook `/etc/herder/kvm-vif-bridge`, when it is executable, does everything
  instead (Ganeti's `$CONF_DIR/kvm-vif-bridge`, exec'd by its kvm-ifup);
- otherwise Ganeti's `setup_route`: the tap up; with a link (a routing table) `ip rule del dev
  TAP` until none is left, `ip rule add dev TAP table LINK`, `ip route replace IP table LINK
  proto static dev TAP`; without one `ip route replace IP proto static dev TAP`; then
  `proxy_arp` and `forwarding` (IPv4), `proxy_ndp` and `forwarding` (IPv6) on the tap.

When: at every start (a failure stops the domain again: Ganeti's start fails too); on a
migration's target only once the guest arrived (`finalize_migration_dst`, as Ganeti's
FinalizeMigrationDst), never for the incoming copy, so the routes do not point at two nodes at
once. The route and the sysctls go with the tap when QEMU ends (shutdown, or the source after a
migration), as on Ganeti; herder also removes the tap's `ip rule` then (`unconfigure`), which
Ganeti leaves until the next start."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from herder.core.errors import HerderError
from herder.noded.kvm.domain import InstanceSpec, ifup_environment, tap_name

HOOK = Path("/etc/herder/kvm-vif-bridge")
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
TIMEOUT = 60.0
MAX_RULES = 100  # `ip rule del dev TAP` until none is left, with a bound


class IfupError(HerderError):
    """A routed NIC could not be configured; one line."""


@dataclass(frozen=True)
class Outcome:
    returncode: int
    output: str


Runner = Callable[[Sequence[str], Mapping[str, str]], Outcome]


def run_command(argv: Sequence[str], env: Mapping[str, str]) -> Outcome:
    try:
        done = subprocess.run(list(argv), env=dict(env), capture_output=True, text=True,
                              timeout=TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return Outcome(124, f"{argv[0]} did not finish within {TIMEOUT:g}s")
    except OSError as err:
        return Outcome(127, f"{argv[0]}: {err.strerror or err}")
    return Outcome(done.returncode, (done.stdout + done.stderr).strip())


def routed_nics(spec: InstanceSpec) -> list[int]:
    return [index for index, nic in enumerate(spec.nics) if nic.mode == "routed"]


def hook_environment(spec: InstanceSpec, index: int) -> dict[str, str]:
    """Ganeti's ConfigureNIC environment for NIC `index` (its PATH included)."""
    return {"PATH": PATH, **ifup_environment(spec, index)}


def route_commands(env: Mapping[str, str]) -> list[list[str]]:
    """Ganeti's setup_route as argument lists (without the rule cleanup loop and the sysctls,
    which `configure` does itself)."""
    tap = env["INTERFACE"]
    ip = env.get("IP")
    if not ip:
        raise IfupError(f"routed NIC {tap} of {env.get('INSTANCE')}: no IP address "
                        "(a routed NIC needs one)")
    link = env.get("LINK", "")
    if link:
        return [["ip", "link", "set", tap, "up"],
                ["ip", "rule", "add", "dev", tap, "table", link],
                ["ip", "route", "replace", ip, "table", link, "proto", "static", "dev", tap]]
    return [["ip", "link", "set", tap, "up"],
            ["ip", "route", "replace", ip, "proto", "static", "dev", tap]]


def sysctl_files(tap: str, proc: Path = Path("/proc/sys/net")) -> list[Path]:
    """The switches Ganeti's setup_route turns on, where the family exists on the tap."""
    found: list[Path] = []
    for family, names in (("ipv4", ("proxy_arp", "forwarding")),
                          ("ipv6", ("proxy_ndp", "forwarding"))):
        directory = proc / family / "conf" / tap
        if directory.is_dir():
            found.extend(directory / name for name in names)
    return found


def _drop_rules(tap: str, env: Mapping[str, str], runner: Runner) -> None:
    for _ in range(MAX_RULES):
        if runner(["ip", "rule", "del", "dev", tap], env).returncode != 0:
            return


def configure_nic(spec: InstanceSpec, index: int, *, hook: Path = HOOK,
                  runner: Runner = run_command, proc: Path = Path("/proc/sys/net")) -> str:
    """Configure routed NIC `index` of a running domain; answers what did it ("hook" or
    "routes"). IfupError with Ganeti's words on failure."""
    env = hook_environment(spec, index)
    tap = env["INTERFACE"]
    if hook.is_file() and os.access(hook, os.X_OK):
        done = runner([str(hook)], env)
        if done.returncode != 0:
            raise IfupError(f"Failed to configure interface {tap}: {hook} exited with "
                            f"{done.returncode}; network configuration script output: "
                            f"{' '.join(done.output.split())[-300:]}")
        return "hook"
    commands = route_commands(env)
    for position, argv in enumerate(commands):
        if position == 1 and env.get("LINK"):
            _drop_rules(tap, env, runner)  # Ganeti: `while ip rule del dev TAP`
        done = runner(argv, env)
        if done.returncode != 0:
            raise IfupError(f"Failed to configure interface {tap}: {' '.join(argv)}: "
                            f"{' '.join(done.output.split())[-300:]}")
    for switch in sysctl_files(tap, proc):
        try:
            switch.write_text("1\n")
        except OSError as err:
            raise IfupError(f"Failed to configure interface {tap}: {switch}: "
                            f"{err.strerror or err}") from None
    return "routes"


def configure(spec: InstanceSpec, *, hook: Path = HOOK, runner: Runner = run_command,
              proc: Path = Path("/proc/sys/net")) -> list[str]:
    """Every routed NIC of the instance, in order; what configured each."""
    return [configure_nic(spec, index, hook=hook, runner=runner, proc=proc)
            for index in routed_nics(spec)]


def unconfigure(spec: InstanceSpec, *, runner: Runner = run_command) -> None:
    """After QEMU ended (its taps are gone, and with them the routes and the switches): the
    taps' `ip rule`s, which outlive them."""
    env = {"PATH": PATH}
    for index in routed_nics(spec):
        if spec.nics[index].link:
            _drop_rules(tap_name(spec.uuid, index), env, runner)
