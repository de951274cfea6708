"""The node as a whole: is it there, what runs on it, its live figures, its OS definitions, its
repair commands and power (Ganeti's node_info, instance_list, os_diagnose, node_powercycle;
herder's master epoch and failover vote)."""

from __future__ import annotations

import msgspec

from herder.core import livefigures, names
from herder.core.rpcdefs.base import Call, storage_dir, unit_name


class PingAnswer(msgspec.Struct, kw_only=True):
    node: str
    version: str
    time: float
    uptime: float
    hypervisor: bool  # libvirt answers
    vm_lock_kb: int  # noded's locked memory (mlockall)


class Ping(Call[PingAnswer], kw_only=True):
    METHOD = "ping"
    READ_ONLY = True


class EpochAnswer(msgspec.Struct, kw_only=True):
    node: str
    epoch: int


class MasterEpoch(Call[EpochAnswer], kw_only=True):
    """The highest master epoch the node has accepted."""

    METHOD = "master_epoch"
    READ_ONLY = True


class VoteAnswer(msgspec.Struct, kw_only=True):
    node: str
    master: str | None
    reachable: bool  # false: a vote that the master is gone
    detail: str
    epoch: int


class MasterVote(Call[VoteAnswer], kw_only=True):
    """For a master failover's vote: can the node reach the master's masterd (a TCP connect to
    `address`:`port`)?"""

    METHOD = "master_vote"
    READ_ONLY = True
    address: str
    port: int
    timeout: float = 2.0
    master: str | None = None

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536 or not 0 < self.timeout <= 60:
            raise ValueError("port or timeout out of range")


class ReachableAnswer(msgspec.Struct, kw_only=True):
    node: str  # the node that answers
    reachable: bool  # it reaches the asked node's noded
    detail: str
    asked_age: float | None  # seconds since the asked node asked it for its lease (None: never)


class NodeReachable(Call[ReachableAnswer], kw_only=True):
    """For maintd's decision that a node failed (masterd.leases): does this node reach `node`'s
    noded at `address`, and how long ago did that node ask it for its lease?"""

    METHOD = "node_reachable"
    READ_ONLY = True
    node: str
    address: str
    timeout: float = 2.0

    def __post_init__(self) -> None:
        names.hostname(self.node, "node")
        names.ip_address(self.address, "address")
        if not 0 < self.timeout <= 30:
            raise ValueError(f"timeout must be in (0, 30] seconds, got {self.timeout}")


class NodeInfo(Call[livefigures.NodeInfo], kw_only=True):
    """The node's live figures: the storage units asked for ([type, name] pairs, Ganeti's),
    with `instances` every live instance's run state."""

    METHOD = "node_info"
    READ_ONLY = True
    instances: bool = False
    storage_units: list[tuple[str, str]] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        for kind, name in self.storage_units:
            if kind == "file":
                storage_dir(name)
            elif kind == "lvm-vg":
                unit_name(name)
            else:
                raise ValueError(f"storage unit type {kind!r} is neither lvm-vg nor file")


class InstanceList(Call[dict[str, str]], kw_only=True):
    """Every domain defined on the node: name -> state."""

    METHOD = "instance_list"
    READ_ONLY = True
    TIMEOUT = 30.0


class OsList(Call[list[str]], kw_only=True):
    """The OS definitions of the node, with their variants (`name+variant`)."""

    METHOD = "os_list"
    READ_ONLY = True
    TIMEOUT = 30.0


class NodePowercycle(Call[str], kw_only=True):
    """Reboot at once (refused where it would reboot a machine that is not this node)."""

    METHOD = "node_powercycle"
    TIMEOUT = 30.0


class RepairAnswer(msgspec.Struct, kw_only=True):
    stdout: str
    exit_code: int


class RepairCommand(Call[RepairAnswer], kw_only=True):
    """A white-listed repair command, with the diagnose object on its stdin (live-repair)."""

    METHOD = "repair_command"
    TIMEOUT = 900.0
    command: str
    input: object = None

    def __post_init__(self) -> None:
        names.plain_name(self.command, "repair command")

