"""`herder-oob-ipmi COMMAND NODE`: an out-of-band program (Ganeti's OOB protocol) over IPMI.

Set it as the node parameter `oob_program` (`herder cluster modify --node-parameters
oob_program=/opt/herder/bin/herder-oob-ipmi`); masterd runs it on the master as
`herder-oob-ipmi power-on|power-off|power-cycle|power-status|health NODE`. It runs `ipmitool -I
lanplus` against the node's BMC, as `/etc/herder/oob-ipmi.toml` (or `$HERDER_OOB_IPMI`) says:

    [defaults]                      # for every node (each key optional)
    user = "admin"
    password_file = "/etc/herder/bmc-password"   # root only (mode 0600): ipmitool -f
    port = 623
    cipher_suite = 3                # ipmitool -C (3: AES-CBC-128, HMAC-SHA1)
    timeout = 30                    # seconds ipmitool may take

    [nodes."node1.example.com"]     # one table per node: its BMC's address (and overrides)
    host = "10.0.0.101"

power-status prints `{"powered": true|false}`, health `[["chassis", "OK"], ...]` from the
chassis status' fault flags; the power commands print nothing. A failure is one line on stderr
and exit code 1 (masterd reports it and confirms no fence).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec

from herder.core import settingsfile
from herder.core.errors import HerderError

CONFIG = Path("/etc/herder/oob-ipmi.toml")
CONFIG_ENV = "HERDER_OOB_IPMI"
COMMANDS = {"power-on": ["chassis", "power", "on"], "power-off": ["chassis", "power", "off"],
            "power-cycle": ["chassis", "power", "cycle"],
            "power-status": ["chassis", "power", "status"], "health": ["chassis", "status"]}
# `ipmitool chassis status` lines whose "true" is a fault, and the health item they are
HEALTH_FLAGS = {"Main Power Fault": "power-supply", "Power Overload": "power-overload",
                "Cooling/Fan Fault": "cooling", "Drive Fault": "drives",
                "Power Control Fault": "power-control"}


class Bmc(msgspec.Struct, forbid_unknown_fields=True):
    host: str | None = None
    port: int | None = None
    user: str | None = None
    password_file: str | None = None
    cipher_suite: int | None = None
    timeout: float | None = None


class Settings(msgspec.Struct, forbid_unknown_fields=True):
    defaults: Bmc = msgspec.field(default_factory=Bmc)
    nodes: dict[str, Bmc] = msgspec.field(default_factory=dict)


def bmc_of(settings: Settings, node: str, path: Path) -> Bmc:
    """The node's BMC with the defaults filled in; HerderError when something is missing."""
    own = settings.nodes.get(node) or settings.nodes.get(node.split(".")[0])
    if own is None:
        raise HerderError(f"{path}: no [nodes.\"{node}\"] table (the node's BMC)")
    base = settings.defaults
    merged = Bmc(**{f: getattr(own, f) if getattr(own, f) is not None else getattr(base, f)
                    for f in Bmc.__struct_fields__})
    if not merged.host:
        raise HerderError(f"{path}: nodes.\"{node}\": no host (the BMC's address)")
    if not merged.password_file:
        raise HerderError(f"{path}: nodes.\"{node}\": no password_file")
    return merged


def ipmitool_argv(bmc: Bmc, command: str) -> list[str]:
    return ["ipmitool", "-I", "lanplus", "-H", str(bmc.host), "-p", str(bmc.port or 623),
            "-U", bmc.user or "admin", "-f", str(bmc.password_file),
            "-C", str(bmc.cipher_suite if bmc.cipher_suite is not None else 3),
            # a busy BMC answers late: 5 s per try, 3 tries (ipmitool's defaults are 2 s, 4)
            "-N", "5", "-R", "3", *COMMANDS[command]]


def answer(command: str, stdout: str) -> str:
    """What the OOB protocol prints for `command`, from ipmitool's output."""
    if command == "power-status":
        text = stdout.strip().lower()
        if text.endswith(" on"):
            return json.dumps({"powered": True})
        if text.endswith(" off"):
            return json.dumps({"powered": False})
        raise HerderError(f"unexpected answer of ipmitool: {stdout.strip()[:200]!r}")
    if command == "health":
        items = []
        for line in stdout.splitlines():
            key, _, value = line.partition(":")
            item = HEALTH_FLAGS.get(key.strip())
            if item is not None:
                items.append([item, "CRITICAL" if value.strip() == "true" else "OK"])
        if not items:
            raise HerderError(f"unexpected answer of ipmitool: {stdout.strip()[:200]!r}")
        return json.dumps(items)
    return ""


def run(command: str, node: str, config: Path) -> str:
    if command not in COMMANDS:
        raise HerderError(f"unknown command {command!r} (one of {', '.join(COMMANDS)})")
    settings = settingsfile.load(config, Settings, "OOB IPMI settings")
    bmc = bmc_of(settings, node, config)
    timeout = bmc.timeout or 30.0
    try:
        done = subprocess.run(ipmitool_argv(bmc, command), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise HerderError("ipmitool is not installed (apt-get install ipmitool)") from None
    except subprocess.TimeoutExpired:
        raise HerderError(f"the BMC of {node} at {bmc.host} did not answer within "
                          f"{timeout:g} s") from None
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split())[:300]
        raise HerderError(f"ipmitool {' '.join(COMMANDS[command])} on {node}'s BMC at "
                          f"{bmc.host} failed: {said or f'exit code {done.returncode}'}")
    return answer(command, done.stdout)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        sys.exit(0 if args[:1] in (["-h"], ["--help"]) else 2)
    config = Path(os.environ.get(CONFIG_ENV) or CONFIG)
    try:
        out = run(args[0], args[1], config)
    except HerderError as err:
        print(f"herder-oob-ipmi: {err}", file=sys.stderr)
        sys.exit(1)
    if out:
        print(out)


if __name__ == "__main__":
    main()
