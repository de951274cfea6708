"""A bounded back-off against password guessing (docs/security.md "Password guessing").

Every door that checks a RAPI user's password (HTTP Basic on masterd's RAPI, the web console's
`/ui/login`, maintd's HTTPS cancel) asks `Backoff.wait(user, source)` first: a positive answer
means the attempt is held, answered 429 with `Retry-After`, and its password is not looked at.
Holds are kept per (user, source address) pair, so that nobody holds back anybody else's right
password: only the wrong passwords of a pair hold that pair, at most `MAX_HOLD` seconds after
its last one. How soon and how long a pair is held grows with the failures of the pair
(`FREE` free ones: typos cost nothing), of its user (`FREE_USER`: a user guessed from many
addresses) and of its source (`FREE_SOURCE`: an address guessing many users), doubling from
`FIRST_HOLD` up to `MAX_HOLD`. A pair, user or source without a failure for `FORGET` seconds
starts afresh; at most `most_kept` of each are remembered (the oldest go first).

Pure logic: the clock is injected, the callers do the I/O (and the logging, `log_failure`).
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from herder.core.rapi_users import User, UsersFile

log = logging.getLogger("herder.login")

FREE = 3  # wrong passwords of one (user, source) pair before it is held
FREE_USER = 10  # ... of one user (any source) before its every failing pair is held at once
FREE_SOURCE = 10  # ... of one source (any user) before its every failing pair is held at once
FIRST_HOLD = 0.5  # seconds of the first hold; each further failure doubles it
MAX_HOLD = 4.0  # the longest hold: the right password waits at most this after a wrong one
FORGET = 600.0  # seconds without a failure after which a pair, user or source starts afresh
MOST_KEPT = 65_536  # pairs (and users, and sources) remembered at most
_K = TypeVar("_K", tuple[str, str], str)


@dataclass
class _Failures:
    count: int = 0
    last: float = 0.0
    held_until: float = 0.0
    held_requests: int = 0  # requests answered 429 since the last failure was logged


class Backoff:
    """The failures seen lately and the holds they set (see the module docstring)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 most_kept: int = MOST_KEPT) -> None:
        self.clock = clock
        self.most_kept = most_kept
        self._pairs: OrderedDict[tuple[str, str], _Failures] = OrderedDict()
        self._users: OrderedDict[str, _Failures] = OrderedDict()
        self._sources: OrderedDict[str, _Failures] = OrderedDict()

    def wait(self, user: str, source: str) -> float:
        """Seconds this attempt is held (0: check its password now)."""
        now = self.clock()
        pair = self._live(self._pairs, (user, source), now)
        if pair is None or pair.held_until <= now:
            return 0.0
        pair.held_requests += 1
        return pair.held_until - now

    def failed(self, user: str, source: str) -> float:
        """A wrong password of `user` from `source`: the hold it sets on the pair (seconds)."""
        now = self.clock()
        over = max(self._count(self._pairs, (user, source), now) - FREE,
                   self._count(self._users, user, now) - FREE_USER,
                   self._count(self._sources, source, now) - FREE_SOURCE)
        hold = 0.0 if over <= 0 else min(MAX_HOLD, FIRST_HOLD * 2.0 ** min(over - 1, 16))
        self._pairs[(user, source)].held_until = now + hold
        return hold

    def succeeded(self, user: str, source: str) -> None:
        """The right password: the pair starts afresh (its user's and source's counts stay,
        so that a known password between guesses does not reset the guessing)."""
        self._pairs.pop((user, source), None)

    def held_requests(self, user: str, source: str) -> int:
        """Requests of the pair held since its last failure was logged (and restart the count)."""
        pair = self._pairs.get((user, source))
        if pair is None:
            return 0
        held, pair.held_requests = pair.held_requests, 0
        return held

    def kept(self) -> int:
        """How many pairs, users and sources are remembered."""
        return len(self._pairs) + len(self._users) + len(self._sources)

    def _live(self, table: OrderedDict[_K, _Failures], key: _K, now: float) -> _Failures | None:
        found = table.get(key)
        if found is not None and now - found.last > FORGET:
            del table[key]
            return None
        return found

    def _count(self, table: OrderedDict[_K, _Failures], key: _K, now: float) -> int:
        found = self._live(table, key, now) or _Failures()
        found.count += 1
        found.last = now
        table[key] = found
        table.move_to_end(key)
        while len(table) > self.most_kept:
            table.popitem(last=False)
        return found.count


def retry_after(hold: float) -> str:
    """The Retry-After header of a hold: whole seconds, at least 1."""
    return str(max(1, math.ceil(hold)))


def log_failure(backoff: Backoff, user: str, source: str, door: str, hold: float) -> None:
    """One line per wrong password (holds bound their rate), with the requests held since."""
    held = backoff.held_requests(user, source)
    log.warning("%s: wrong password for user %r from %s%s%s", door, user, source,
                f"; held {hold:.1f} s" if hold else "",
                f" ({held} requests held before)" if held else "")


@dataclass(frozen=True)
class Attempt:
    """A password check through the back-off: the user when the password was right; `hold`
    > 0 when the attempt was held (nothing was checked: answer 429)."""

    user: User | None
    hold: float = 0.0


def attempt(users: UsersFile, backoff: Backoff, name: str, password: str, source: str,
            door: str) -> Attempt:
    """Check `name`'s password from `source` unless the pair is held; a wrong one is counted
    and logged, a right one clears the pair."""
    hold = backoff.wait(name, source)
    if hold > 0:
        return Attempt(None, hold)
    user = users.check(name, password)
    if user is None:
        log_failure(backoff, name, source, door, backoff.failed(name, source))
        return Attempt(None)
    backoff.succeeded(name, source)
    return Attempt(user)


def attempt_basic(users: UsersFile, backoff: Backoff, header: str | None, source: str,
                  door: str) -> Attempt:
    """`attempt` with the credentials of an `Authorization: Basic` header (a header that
    names no user and password is no attempt: refused, not counted)."""
    credentials = users.basic_credentials(header)
    if credentials is None:
        return Attempt(None)
    return attempt(users, backoff, *credentials, source, door)
