"""Running a node's out-of-band program (Ganeti's OOB framework: `backend.RunOob` and the
payload checks of `LUOobCommand`); herder's RAPI route for OP_OOB_COMMAND is
`masterd.rapi.oob`'s.

The program is the node parameter `oob_program`, called as `PROGRAM COMMAND NODE` (COMMAND one
of power-on, power-off, power-cycle, power-status, health; NODE the node's name) with a timeout
(Ganeti's `OOB_TIMEOUT`, 60 s, or the opcode's). It fails when it exits non-zero or does not end
in time (it is killed, with its process group). Its stdout, when not empty, is JSON: for
`power-status` an object with a boolean `powered`, for `health` a list of `[item, status]` pairs
with status one of OK, WARNING, CRITICAL, UNKNOWN; the power commands print nothing.

Ganeti's master asks its own node daemon to run the program (the `run_oob` RPC to the master
node); herder's masterd, which runs on the master, runs it itself (docs/compat.md N3).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

from herder.core import untrusted
from herder.masterd.jobs import opcodes

POWER_ON, POWER_OFF, POWER_CYCLE, POWER_STATUS, HEALTH = opcodes.OOB_COMMANDS
POWER_COMMANDS = (POWER_ON, POWER_OFF, POWER_CYCLE)
STATUSES = frozenset({"OK", "WARNING", "CRITICAL", "UNKNOWN"})  # Ganeti's OOB_STATUSES
POWERED = "powered"  # Ganeti's OOB_POWER_STATUS_POWERED
OUTPUT_LIMIT = 64 * 1024  # bytes of stdout read: a BMC's answer is small
SHOWN = 200  # characters of the program's output in an error line


class OobError(Exception):
    """The program failed or answered what its command does not answer (one line)."""


@dataclass(frozen=True)
class Outcome:
    """What the program printed, checked for its command (None: no payload)."""

    payload: Any


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= SHOWN else line[:SHOWN] + "..."


def run(program: str, command: str, node: str, timeout: float) -> Outcome:
    """Run `program command node`; its checked payload, or OobError with the reason."""
    if command not in opcodes.OOB_COMMANDS:
        raise OobError(f"unknown out-of-band command {command!r}")
    argv = [program, command, node]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, cwd="/")
    except OSError as err:
        raise OobError(f"'{' '.join(argv)}' cannot run: {err.strerror or err}") from None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise OobError(f"'{' '.join(argv)}' failed with reason 'timeout after "
                       f"{timeout:g} s'") from None
    out = stdout[:OUTPUT_LIMIT].decode(errors="replace")
    if proc.returncode != 0:
        why = (f"exited with {proc.returncode}" if proc.returncode > 0
               else f"killed by signal {-proc.returncode}")
        said = _short(stderr.decode(errors="replace") or out)
        raise OobError(f"'{' '.join(argv)}' failed with reason '{why}'"
                       + (f"; output: {said}" if said else ""))
    return Outcome(check_payload(command, parse_output(out)))


def parse_output(out: str) -> object:
    """The program's stdout: None when empty, else its JSON (Ganeti's `run_oob` handler)."""
    if not out.strip():
        return None
    try:
        return untrusted.loads(out, what="the out-of-band program's output")
    except untrusted.BadDocument as err:
        raise OobError(f"{err} (got {_short(out)!r})") from None


def check_payload(command: str, payload: object) -> object:
    """Ganeti's `LUOobCommand._CheckPayload`, with herder's one more rule: power-status must
    say `powered` as a boolean (Ganeti reads it unchecked)."""
    errors: list[str] = []
    if command == HEALTH:
        if not isinstance(payload, list):
            errors.append(f"command 'health' is expected to return a list but got "
                          f"{type(payload).__name__}")
        else:
            for entry in payload:
                if (not isinstance(entry, list) or len(entry) != 2
                        or not isinstance(entry[0], str)):
                    errors.append(f"health entry {entry!r} is not an [item, status] pair")
                elif entry[1] not in STATUSES:
                    errors.append(f"health item '{entry[0]}' has invalid status '{entry[1]}'")
    elif command == POWER_STATUS:
        if not isinstance(payload, dict):
            errors.append(f"power-status is expected to return a dict but got "
                          f"{type(payload).__name__}")
        elif not isinstance(payload.get(POWERED), bool):
            errors.append(f"power-status is expected to say '{POWERED}': true or false")
    elif payload is not None:
        errors.append(f"{command} is expected to not return payload but got "
                      f"'{_short(str(payload))}'")
    if errors:
        raise OobError("Check of out-of-band payload failed due to " + ", ".join(errors))
    return payload
