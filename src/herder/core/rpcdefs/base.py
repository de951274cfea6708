"""The shape of every master->node call (Ganeti's `rpc_defs`, typed): a `Call` Struct holds a
call's arguments and says, once, its method name on the wire, the type of its answer, whether the
node runs it alone (`SERIAL`: it changes domains or disks), whether it leaves the node as it was
(`READ_ONLY`: masterd's live figures of the node stay valid), and its timeout.

On the wire nothing changed: `POST /rpc/<METHOD>` with the arguments as a JSON object (every
field that is not None), signed by `core.rpcauth`; the answer's `result` is decoded into
`ANSWER` on the master. The node decodes the arguments into the same Struct at its door
(`__post_init__` checks what the types cannot: names, ranges, file name components), so a
malformed call is a 400 naming the argument and the handler gets typed arguments. Arguments a
call does not declare are ignored (a newer master may send more); an answer's fields the
master does not declare are ignored too (a newer node may answer more: docs/architecture.md
"Mixed builds").

The calls are defined per area in this package's `*_calls` modules; `herder.core.rpcdefs.
registry()` finds them all.
"""

from __future__ import annotations

import ipaddress
from typing import Any, ClassVar, Generic, TypeVar, get_args

import msgspec

from herder.core import names, paths

AnswerT = TypeVar("AnswerT")
# A reason trail ([source, reason, timestamp ns] per entry, core.jobs.reason)
ReasonTrail = list[list[Any]]


class Call(msgspec.Struct, Generic[AnswerT], kw_only=True):
    """One node RPC's arguments. A concrete call subclasses `Call[TheAnswer]` (directly or
    through a generic base of its area) and sets `METHOD`; `ANSWER` is taken from that base."""

    METHOD: ClassVar[str] = ""
    ANSWER: ClassVar[object] = None  # the answer's type, from the class's `Call[...]` base
    SERIAL: ClassVar[bool] = False  # the node runs it while no other serial call runs
    READ_ONLY: ClassVar[bool] = False  # it changes nothing on the node
    TIMEOUT: ClassVar[float | None] = None  # seconds; None: the transport's default (120 s)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            for arg in get_args(base):
                if not isinstance(arg, TypeVar):
                    cls.ANSWER = arg

    def rpc_timeout(self) -> float | None:
        """This call's timeout (a call whose own argument is a duration adds to it)."""
        return self.TIMEOUT

    def arguments(self) -> dict[str, Any]:
        """The JSON object the call sends: every field but those that are None (absent, as
        masters before the contract sent them: a node of that time tells some of them by
        their presence)."""
        encoded: dict[str, Any] = msgspec.to_builtins(self)
        return {key: value for key, value in encoded.items() if value is not None}

    def answer(self, raw: object) -> AnswerT:
        """The node's `result` as this call's answer; msgspec.ValidationError when it is not
        one."""
        decoded: AnswerT = msgspec.convert(raw, type=self.ANSWER)
        return decoded


# --- checks the Structs' __post_init__ share (ValueError names the argument) ------------------


def instance_name(name: str, what: str = "name") -> None:
    names.hostname(name, f"instance {what}")
    paths.check_component(name, f"instance {what}")


def storage_dir(path: str) -> None:
    if not path.startswith("/") or "\0" in path or ".." in path.split("/"):
        raise ValueError(f"invalid file storage directory {path!r}")


def unit_name(name: str) -> None:
    """A PV's device path or a VG's name, handed to LVM as one argument."""
    if not name or name.startswith("-") or any(ch in name for ch in "\0\n\r"):
        raise ValueError(f"invalid storage unit name {name!r}")


def ip_address(address: str) -> None:
    ipaddress.ip_address(address)  # ValueError names the value


def in_range(value: float, low: float, high: float, what: str) -> None:
    if not low <= value <= high:
        raise ValueError(f"{what} {value} out of range ({low:g}-{high:g})")
