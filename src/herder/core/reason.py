"""Reason trails: lists of `[source, reason, timestamp_ns]` attached to every opcode.

Sources follow Ganeti's convention: `gnt:client:<tool>`, `gnt:library:rlib2:<resource>`,
`gnt:opcode:<opcode>`, `gnt:daemon:<daemon>` (e.g. `gnt:daemon:maintd`), `gnt:user`.
"""

from __future__ import annotations

import time
from typing import Any

ReasonTrail = list[list[Any]]

CLIENT_PREFIX = "gnt:client"
LIBRARY_PREFIX = "gnt:library"
OPCODE_PREFIX = "gnt:opcode"
DAEMON_PREFIX = "gnt:daemon"
USER = "gnt:user"
MAINTD = f"{DAEMON_PREFIX}:maintd"
INSTMON = f"{DAEMON_PREFIX}:instmon"
MOND = f"{DAEMON_PREFIX}:mond"  # herder: what maintd acts on from mond's reports


def entry(source: str, reason: str = "") -> list[Any]:
    return [source, reason, time.time_ns()]


def client(tool: str, reason: str = "") -> list[Any]:
    return entry(f"{CLIENT_PREFIX}:{tool}", reason)


def rapi(resource: str) -> list[Any]:
    return entry(f"{LIBRARY_PREFIX}:rlib2:{resource}", "")


def validate(trail: Any) -> ReasonTrail:
    """A trail from a client: a list of [str, str, int]; ValueError names the problem."""
    if not isinstance(trail, list):
        raise ValueError("reason must be a list of [source, reason, timestamp] entries")
    for index, item in enumerate(trail):
        if (not isinstance(item, list) or len(item) != 3 or not isinstance(item[0], str)
                or not isinstance(item[1], str) or isinstance(item[2], bool)
                or not isinstance(item[2], int)):
            raise ValueError(f"reason entry {index} must be [source, reason, timestamp_ns]")
    return [list(item) for item in trail]
