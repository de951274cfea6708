"""The logical-unit interface and the environment LUs run in.

An LU declares the locks it needs (`declare_locks`, given a snapshot of the config), checks its
prerequisites against the config as it is once the locks are held (`check`), and then acts
(`execute`). Config changes go through `env.store.update()`, so they are atomic and validated;
an LU that fails changes nothing. With `dry_run` only `check` runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, get_args

from herder.core import model
from herder.core.errors import AmbiguousError, NotFoundError, OpPrereqError
from herder.core.noderpc import NodeRpc, UnavailableRpc
from herder.core.reachability import Reachability
from herder.core.store import ConfigStore
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.livecache import LiveCache

# What an LU answers: its opcode's result in the job (JSON data)
JobResult = (None | bool | int | float | str | Sequence["JobResult"]
             | Mapping[str, "JobResult"])


@dataclass
class MasterEnv:
    """What every LU may use."""

    store: ConfigStore
    locks: locking.LockManager
    rpc: NodeRpc = field(default_factory=UnavailableRpc)
    queue_dir: Path | None = None
    iallocator_path: tuple[Path, ...] = ()
    # the nodes' live figures (masterd.livecache); None: asked afresh for each placement
    live: LiveCache | None = None
    # which nodes masterd cannot reach (core.reachability), told by `rpc`'s calls; None:
    # each redistribution keeps its own
    reachability: Reachability | None = None


@dataclass(frozen=True)
class ResultWithJobs:
    """Ganeti's ResultWithJobs: what an LU answers when the work is jobs of their own (node
    and group evacuation, change-group, multi-allocation). Each job is a list of opcode dicts;
    the processor submits them once the LU ended, and the opcode's result is Ganeti's
    `{"jobs": [[true, job id], ...], **other}`."""

    jobs: list[list[dict[str, Any]]]
    other: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LockRequest:
    level: int
    names: list[str] | None  # None: the whole level
    shared: bool = False


OpT = TypeVar("OpT", bound=opcodes.OpCode)


class LogicalUnit(Generic[OpT]):
    """Executes one opcode: a concrete LU subclasses `LogicalUnit[opcodes.OpX]` (or a generic
    helper base the same way), which makes `self.op` an `OpX` for the type checker and sets
    `OP`, the opcode class the registry maps to this LU."""

    OP: ClassVar[type[opcodes.OpCode]]
    # The cluster lock exclusively (cluster-wide changes, adding objects without locks yet).
    REQ_BGL: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            for arg in get_args(base):
                if isinstance(arg, type) and issubclass(arg, opcodes.OpCode):
                    cls.OP = arg

    def __init__(self, op: OpT, env: MasterEnv,
                 feedback: Callable[[str], None] = lambda message: None) -> None:
        self.op = op
        self.env = env
        self.feedback = feedback
        # a job log entry of another type than a message (the processor gives the job's)
        self.log_entry: Callable[[str, object], None] = lambda kind, message: None

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        return []

    def check(self, config: model.ConfigData) -> None:
        """Prerequisites; raise OpPrereqError. Must not change anything."""

    def execute(self) -> JobResult | ResultWithJobs:
        raise NotImplementedError

    def dry_run_result(self) -> JobResult:
        """What a dry run answers once every check passed (e.g. the chosen nodes)."""
        return None

    @classmethod
    def after_master_death(cls, op: OpT) -> list[dict[str, object]]:
        """The opcodes (dicts) of a job to submit when `op` was running when the master died
        (its job is failed by the queue's recovery, never run again): none by default."""
        return []


FoundT = TypeVar("FoundT")


def lookup(find: Callable[[str], FoundT], key: str) -> FoundT:
    """A name-or-UUID lookup whose failure is a prerequisite error (HTTP 400 / job error)."""
    try:
        return find(key)
    except (NotFoundError, AmbiguousError) as err:
        raise OpPrereqError(str(err), "unknown_entity") from None


def instance_and_node_locks(config: model.ConfigData, instance_name: str,
                            node_name: str) -> list[LockRequest]:
    """The instance, and its primary node with another node (a move's or an export's
    target), exclusively."""
    inst = lookup(config.find_instance, instance_name)
    node = lookup(config.find_node, node_name)
    return [LockRequest(locking.LEVEL_INSTANCE, [inst.uuid]),
            LockRequest(locking.LEVEL_NODE, sorted({inst.primary_node, node.uuid}))]


def node_uuid_or_none(config: model.ConfigData, key: str | None) -> str | None:
    if not key:
        return None
    try:
        return config.find_node(key).uuid
    except (NotFoundError, AmbiguousError):
        return None
