"""Report objects and status codes (design-monitoring-agent "Format of the report"). Pure.

A report object carries, in this order: name, version ("B" for built-ins), format_version,
timestamp (ns since the epoch), category (or null), kind (0 performance, 1 status) and data.
Status collectors put `status: {code, message}` first in `data`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from enum import IntEnum
from typing import Any


class Kind(IntEnum):
    PERFORMANCE = 0
    STATUS = 1


class Status(IntEnum):
    """Status codes; a bitwise OR of all of them is 0 only for a healthy cluster."""

    OK = 0  # working as intended
    TEMP_BAD = 1  # temporarily wrong, being fixed automatically
    UNKNOWN = 2  # cannot tell: treat as potentially dangerous
    BAD = 4  # wrong, needs external intervention


CATEGORIES = ("instance", "storage", "daemon", "hypervisor", "node")
DEFAULT_CATEGORY = "default"  # what request paths and lists use for "no category"


def now_ns() -> int:
    return time.time_ns()


def status(code: Status | int, message: str = "") -> dict[str, Any]:
    return {"code": int(code), "message": message}


def merge_statuses(statuses: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The worst code; the non-empty messages joined by newlines, in the order given."""
    code = 0
    messages: list[str] = []
    for st in statuses:
        code = max(code, int(st["code"]))
        if st.get("message"):
            messages.append(str(st["message"]))
    return status(code, "\n".join(messages))


def with_status(st: Mapping[str, Any], data: Any) -> dict[str, Any]:
    """`data` with `status` first; non-object data goes under "data" (as Ganeti's addStatus)."""
    if isinstance(data, Mapping):
        return {"status": dict(st), **{k: v for k, v in data.items() if k != "status"}}
    return {"status": dict(st), "data": data}


def build(
    *,
    name: str,
    category: str | None,
    kind: Kind | int,
    data: Any,
    timestamp: int | None = None,
    version: str = "B",
    format_version: int = 1,
) -> dict[str, Any]:
    return {
        "name": name,
        "version": version,
        "format_version": format_version,
        "timestamp": now_ns() if timestamp is None else timestamp,
        "category": category,
        "kind": int(kind),
        "data": data,
    }


def failure_data(kind: Kind | int, reason: str) -> dict[str, Any]:
    """What a collector that failed reports: status 4 with the reason (the seed's rule: code 4's
    message says why no proper status could be determined), or an error object."""
    if int(kind) == Kind.STATUS:
        return {"status": status(Status.BAD, reason)}
    return {"error": reason}
