"""Login sessions of the web console (pure: no I/O; the clock is injected).

A session is created by a login with a RAPI user's name and password and maps to that user;
it ends at logout, after `idle` seconds without a request, or `lifetime` seconds after the
login, whichever comes first; a user's logins beyond `MAX_SESSIONS_PER_USER` end that user's
oldest session (never another user's: no flood of logins logs anyone else out). Its id travels
in a cookie (HttpOnly, Secure, SameSite=Strict); its CSRF token is given to the page and must
come back in `CSRF_HEADER` on every request that may change something (docs/security.md "The
web console"). Sessions live in masterd's memory: a restart of masterd logs everyone out.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "herder_session"
CSRF_HEADER = "X-Herder-CSRF"
IDLE = 30 * 60.0  # seconds without a request before a session ends
LIFETIME = 12 * 3600.0  # seconds after the login a session ends in any case
MAX_SESSIONS_PER_USER = 32  # a user's oldest session ends beyond this (a flood of logins)


@dataclass
class Session:
    id: str
    user: str
    csrf: str
    created: float
    last_seen: float


class SessionStore:
    def __init__(self, *, idle: float = IDLE, lifetime: float = LIFETIME,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle = idle
        self.lifetime = lifetime
        self.clock = clock
        self._sessions: dict[str, Session] = {}
        self._by_user: dict[str, dict[str, None]] = {}  # user -> its session ids, oldest first

    def create(self, user: str) -> Session:
        now = self.clock()
        self._expire(now)
        while len(own := self._by_user.get(user, {})) >= MAX_SESSIONS_PER_USER:
            self.drop(next(iter(own)))
        session = Session(secrets.token_urlsafe(32), user, secrets.token_urlsafe(32), now, now)
        self._sessions[session.id] = session
        self._by_user.setdefault(user, {})[session.id] = None
        return session

    def count(self, user: str) -> int:
        """How many sessions `user` has (ended ones included until they are looked up)."""
        return len(self._by_user.get(user, {}))

    def lookup(self, session_id: str | None) -> Session | None:
        """The live session of this id (and it counts as used now); None: unknown or ended."""
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self.clock()
        if self._ended(session, now):
            self.drop(session_id)
            return None
        session.last_seen = now
        return session

    def peek(self, session_id: str) -> Session | None:
        """The live session of this id, without counting as a request (an open stream looks
        whether its session still lives: that alone must not keep it alive)."""
        session = self._sessions.get(session_id)
        if session is not None and self._ended(session, self.clock()):
            self.drop(session_id)
            return None
        return session

    def drop(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        own = self._by_user.get(session.user)
        if own is not None:
            own.pop(session_id, None)
            if not own:
                del self._by_user[session.user]

    def _ended(self, session: Session, now: float) -> bool:
        return now - session.last_seen > self.idle or now - session.created > self.lifetime

    def _expire(self, now: float) -> None:
        for session_id in [s.id for s in self._sessions.values() if self._ended(s, now)]:
            self.drop(session_id)


def csrf_matches(session: Session, token: str | None) -> bool:
    return token is not None and hmac.compare_digest(session.csrf.encode(), token.encode())
