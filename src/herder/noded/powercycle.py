"""Power-cycling the node (Ganeti's `node_powercycle` RPC), and the rule that keeps noded from
rebooting a machine that is not its node.

Ganeti's hypervisor code power-cycles by writing `b` to /proc/sysrq-trigger. herder calls
reboot(2) with LINUX_REBOOT_CMD_RESTART after sync(2) instead: on a host the same immediate
reboot, and in a PID namespace other than the initial one (a container, a simulated host) the
kernel ends only that namespace (its init gets SIGHUP), where sysrq would reboot the machine
the namespace runs on.

When noded may do it (`refusal` says why not):
- in a PID namespace other than the initial one: always (only that namespace ends);
- in the initial PID namespace (the machine's own) only when systemd started noded as a
  service: its parent is PID 1, PID 1 is systemd, and systemd's `$INVOCATION_ID` is set. That
  holds for noded on every host where herder's units run it, and for no noded that a shell, a
  test or a supervisor that is not PID 1 started. The check runs when the RPC arrives and again
  right before the system call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("herder.noded")

# The inode number of the initial PID namespace: a constant of the kernel (PROC_PID_INIT_INO).
INITIAL_PID_NAMESPACE_INODE = 0xEFFFFFFC
LINUX_REBOOT_CMD_RESTART = 0x01234567
REBOOT_DELAY = 1.0  # seconds: the RPC's answer goes out first


@dataclass(frozen=True)
class Facts:
    """What the rule looks at, read from /proc and the environment."""

    initial_namespace: bool
    parent_pid: int
    init_name: str  # /proc/1/comm as this process sees it
    invocation_id: str  # systemd's $INVOCATION_ID ("" when not set)


def facts() -> Facts:
    try:
        inode = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        inode = INITIAL_PID_NAMESPACE_INODE  # cannot tell: assume the machine's own
    try:
        init_name = Path("/proc/1/comm").read_text().strip()
    except OSError:
        init_name = ""
    return Facts(initial_namespace=inode == INITIAL_PID_NAMESPACE_INODE,
                 parent_pid=os.getppid(), init_name=init_name,
                 invocation_id=os.environ.get("INVOCATION_ID", ""))


def refusal(seen: Facts | None = None) -> str | None:
    """Why this noded must not reboot (None: it may)."""
    seen = seen if seen is not None else facts()
    if not seen.initial_namespace:
        return None
    if seen.parent_pid == 1 and seen.init_name == "systemd" and seen.invocation_id:
        return None
    return ("noded runs in the machine's initial PID namespace and was not started by systemd "
            "as a service; it reboots only a host it was started on as a service, or its own "
            "PID namespace")


def reboot_soon(delay: float = REBOOT_DELAY) -> None:
    """Reboot after `delay` seconds, in a thread (the answer to the RPC goes out first)."""
    threading.Thread(target=_reboot, args=(delay,), name="powercycle", daemon=True).start()


def _reboot(delay: float) -> None:  # pragma: no cover - ends the host
    time.sleep(delay)
    why_not = refusal()
    if why_not is not None:  # checked again right before the system call
        log.error("power cycle not done: %s", why_not)
        return
    os.sync()
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.reboot(LINUX_REBOOT_CMD_RESTART) != 0:
        log.error("reboot(2) failed: %s", os.strerror(ctypes.get_errno()))
