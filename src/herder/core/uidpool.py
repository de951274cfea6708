"""The user-id pool's range syntax (design-2.1 "User-id pool").

A definition is a comma-separated list of user-ids and inclusive ranges `lo-hi`, e.g.
`1000-1009, 2000`. The pool is stored as a list of (lo, hi) tuples. herder keeps the pool
normalised (sorted, overlapping and adjacent ranges merged), so adding and removing are set
operations: removing one uid from a range splits it. `format_pool` prints the syntax that
`parse_pool` accepts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from herder.core.errors import ConfigError

Range = tuple[int, int]

# Linux uids are 32-bit; (uid_t)-1 is reserved.
MAX_UID = 2**32 - 2
# The most uids a pool may hold: a node expands the pool to pick a free uid (Ganeti's
# RequestUnusedUid), so a pool of every uid would cost it gigabytes (issue 35). One uid runs
# one instance's processes on a node: 65,536 is far more than any node runs.
MAX_POOL_SIZE = 65536


def _parse_uid(text: str, definition: str) -> int:
    text = text.strip()
    if not text.isdigit():
        raise ConfigError(f"invalid user-id {text!r} in uid pool definition {definition!r}")
    uid = int(text)
    if uid > MAX_UID:
        raise ConfigError(f"user-id {uid} is out of range (0-{MAX_UID})")
    return uid


def parse_pool(definition: str, separator: str = ",") -> list[Range]:
    """Parse `1000-1009,2000` into [(1000, 1009), (2000, 2000)] (not yet normalised)."""
    ranges: list[Range] = []
    for item in definition.split(separator):
        item = item.strip()
        if not item:
            continue
        lo_text, dash, hi_text = item.partition("-")
        lo = _parse_uid(lo_text, definition)
        hi = _parse_uid(hi_text, definition) if dash else lo
        if hi < lo:
            raise ConfigError(f"uid range {item!r}: the upper bound is below the lower bound")
        ranges.append((lo, hi))
    return ranges


def size(ranges: Iterable[Range]) -> int:
    """How many uids the ranges hold (overlaps counted once)."""
    return sum(hi - lo + 1 for lo, hi in normalise(ranges))


def check_size(ranges: list[Range], what: str = "the uid pool") -> list[Range]:
    """The ranges; ConfigError when they hold more than MAX_POOL_SIZE uids."""
    count = size(ranges)
    if count > MAX_POOL_SIZE:
        raise ConfigError(f"{what} holds {count} user-ids; at most {MAX_POOL_SIZE}")
    return ranges


def normalise(ranges: Iterable[Range]) -> list[Range]:
    """Sort and merge overlapping or adjacent ranges."""
    result: list[Range] = []
    for lo, hi in sorted(ranges):
        if result and lo <= result[-1][1] + 1:
            result[-1] = (result[-1][0], max(result[-1][1], hi))
        else:
            result.append((lo, hi))
    return result


def add(pool: Iterable[Range], extra: Iterable[Range]) -> list[Range]:
    return normalise([*pool, *extra])


def remove(pool: Iterable[Range], gone: Iterable[Range]) -> list[Range]:
    """Subtract ranges; refuses to remove uids that are not in the pool."""
    current = normalise(pool)
    for lo, hi in normalise(gone):
        if not any(a <= lo and hi <= b for a, b in current):
            raise ConfigError(f"user-id range {format_range((lo, hi))} is not in the uid pool")
        updated: list[Range] = []
        for a, b in current:
            if b < lo or a > hi:
                updated.append((a, b))
                continue
            if a < lo:
                updated.append((a, lo - 1))
            if b > hi:
                updated.append((hi + 1, b))
        current = updated
    return current


def format_range(rng: Range) -> str:
    lo, hi = rng
    return str(lo) if lo == hi else f"{lo}-{hi}"


def format_pool(pool: Iterable[Range], separator: str = ", ") -> str:
    return separator.join(format_range(r) for r in pool)


def expand(pool: Iterable[Range]) -> Iterator[int]:
    for lo, hi in pool:
        yield from range(lo, hi + 1)
