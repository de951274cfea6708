"""An instance's domain on its primary node: define, start, stop, reboot, balloon, remove, its
OS scripts and its serial log (Ganeti's instance_* RPCs), and the removal of a stray copy on a
node that is not the primary (issue 18).

Every call that acts on an instance carries its reason trail and config version (the node
records them for mond's instance-status collector) and, where the node may start or define the
domain, the instance's claim (`core.vmclaim`): the node runs only what it is the primary of."""

from __future__ import annotations

import msgspec

from herder.core import console, diskobjects
from herder.core.rpcdefs.base import AnswerT, Call, ReasonTrail, instance_name
from herder.core.rpcdefs.payload import InstancePayload
from herder.core.vmclaim import Claim, Move


class InstanceCall(Call[AnswerT], kw_only=True):
    """What every call acting on an instance may carry."""

    reason: ReasonTrail | None = None
    version: int | None = None  # the instance's serial_no
    claim: Claim | None = None  # the instance's primary and config version (core.vmclaim)


class Named(InstanceCall[AnswerT], kw_only=True):
    """A call naming the instance (its domain)."""

    name: str

    def __post_init__(self) -> None:
        instance_name(self.name)


class WithPayload(InstanceCall[AnswerT], kw_only=True):
    """A call carrying the whole instance (to define or run its domain)."""

    instance: InstancePayload
    name: str | None = None

    def __post_init__(self) -> None:
        if self.name is not None:
            instance_name(self.name)


class InstanceDefine(WithPayload[None], kw_only=True):
    """Define the domain from the config (not started); `move`: on the target of a move the
    master is running."""

    METHOD = "instance_define"
    SERIAL = True
    move: Move | None = None


class InstanceStart(WithPayload[None], kw_only=True):
    """Define the domain from the config, as it is now, and start it; `move`: on the target
    of a move the master is running."""

    METHOD = "instance_start"
    SERIAL = True
    move: Move | None = None


class InstanceShutdown(Named[None], kw_only=True):
    """A clean shutdown within `timeout` seconds (then the domain is destroyed); `instance`:
    its routed NICs' rules go with it."""

    METHOD = "instance_shutdown"
    timeout: float = 120
    instance: InstancePayload | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.timeout <= 86400:
            raise ValueError(f"timeout {self.timeout} out of range (0-86400 s)")

    def rpc_timeout(self) -> float:
        return self.timeout + 60  # the shutdown's own time, then the call's


class InstanceReboot(Named[None], kw_only=True):
    METHOD = "instance_reboot"
    type: str = "hard"
    instance: InstancePayload | None = None  # a hard reboot: its routed NICs' rules again

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.type not in ("soft", "hard", "full"):
            raise ValueError(f"reboot type {self.type!r} is none of soft, hard, full")


class InstanceBalloonMemory(Named[None], kw_only=True):
    """The running guest's memory, through its balloon (Ganeti's instance_balloon_memory)."""

    METHOD = "instance_balloon_memory"
    TIMEOUT = 120.0
    memory: int  # MiB

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.memory <= diskobjects.MAX_DISK_MIB:
            raise ValueError(f"memory {self.memory} MiB out of range")


class InstanceRemove(Named[None], kw_only=True):
    """Undefine the domain and remove the disks given (their disk objects)."""

    METHOD = "instance_remove"
    SERIAL = True
    disks: list[diskobjects.Disk] = msgspec.field(default_factory=list)


class StopStrayAnswer(msgspec.Struct, kw_only=True):
    node: str
    name: str
    was: str | None  # the copy's state before (None: absent)


class InstanceStopStray(Named[StopStrayAnswer], kw_only=True):
    """Destroy and undefine this node's copy of an instance whose primary is another node (the
    claim says which); its disks stay."""

    METHOD = "instance_stop_stray"
    SERIAL = True


class InstanceConsoleLog(Call[str], kw_only=True):
    """The tail of the instance's serial log."""

    METHOD = "instance_console_log"
    instance: str
    lines: int = console.LOG_LINES_DEFAULT

    def __post_init__(self) -> None:
        instance_name(self.instance, "instance")
        if not 1 <= self.lines <= console.LOG_LINES_MAX:
            raise ValueError(f"lines must be 1..{console.LOG_LINES_MAX}, got {self.lines}")


class OsScriptAnswer(msgspec.Struct, kw_only=True):
    os: str
    log: str  # the script's log file on the node


class InstanceOsAdd(WithPayload[OsScriptAnswer], kw_only=True):
    """Install the OS (the OS definition's `create` script); an unknown variant is refused
    unless forced."""

    METHOD = "instance_os_add"
    TIMEOUT = 900.0
    force_variant: bool = False


class InstanceRunRename(WithPayload[OsScriptAnswer], kw_only=True):
    """The OS definition's `rename` script after an instance rename."""

    METHOD = "instance_run_rename"
    TIMEOUT = 900.0
    old_name: str

    def __post_init__(self) -> None:
        super().__post_init__()
        instance_name(self.old_name)


class ConsoleStream(msgspec.Struct, kw_only=True):
    """The signed call of a console stream (`core.console.STREAM_METHODS`; a websocket, not an
    RPC): which instance's console."""

    instance: str

    def __post_init__(self) -> None:
        instance_name(self.instance, "instance")
