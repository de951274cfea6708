"""The web console's sessions as RAPI callers: masterd's RAPI middleware takes a request
without `Authorization` whose session cookie names a live session as a request of that
session's RAPI user (re-read from the users file at every request, so a removed user's
sessions stop working), with two more checks for such requests:

- a request that may change something (any method but GET and HEAD) carries the session's
  CSRF token in `X-Herder-CSRF` (a forged form or a foreign page's request cannot know it);
- a request with an `Origin` header (browsers send it on cross-origin requests and on every
  websocket) comes from this server's own origin (no cross-site websocket to a console).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from herder.core import access
from herder.core.rapi_users import User, UsersFile
from herder.masterd.web.sessions import COOKIE, CSRF_HEADER, Session, SessionStore, csrf_matches

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class SessionCaller:
    user: User | None  # None: no live session, or its user is gone
    session: Session | None
    problem: str | None  # why a session cookie did not count


def session_caller(request: web.Request, users: UsersFile,
                   store: SessionStore | None) -> SessionCaller:
    cookie = request.cookies.get(COOKIE)
    if store is None or not cookie:
        return SessionCaller(None, None, None)
    session = store.lookup(cookie)
    if session is None:
        return SessionCaller(None, None, "your session has ended or is not valid; log in again")
    user = users.users().get(session.user)
    if user is None:
        store.drop(session.id)
        return SessionCaller(None, None, f"user {session.user} no longer exists; log in again")
    return SessionCaller(user, session, None)


def same_origin(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc == request.host


def session_refusal(request: web.Request, session: Session) -> str | None:
    """Why this session's request must be refused (None: it may go on)."""
    if not same_origin(request):
        return f"a request from {request.headers.get('Origin')} may not use this session"
    if request.method not in SAFE_METHODS and not csrf_matches(
            session, request.headers.get(CSRF_HEADER)):
        return ("the request carries no valid CSRF token (a form or request not made by "
                "this console); nothing was changed")
    return None


def authority_lost(request: web.Request, users: UsersFile, sessions: SessionStore | None,
                   anonymous_reads: bool, rule: access.Rule) -> str | None:
    """Why a request let in earlier (an open stream's) would no longer be, None: it would.
    Looked at again while the stream is open: its HTTP Basic user still in the users file with
    the same password, or its session alive (not counted as a request) and its user there;
    for a route of writers, the user still with the `write` option."""
    header = request.headers.get("Authorization")
    user: User | None
    if header is not None:
        credentials = users.basic_credentials(header)
        user = users.check(*credentials) if credentials is not None else None
        if user is None:
            return "its user is no longer in the users file with that password"
    elif request.cookies.get(COOKIE):
        session = sessions.peek(request.cookies[COOKIE]) if sessions is not None else None
        if session is None:
            return "its session has ended"
        user = users.users().get(session.user)
        if user is None:
            return f"user {session.user} no longer exists"
    elif anonymous_reads and rule == access.RAPI_READ:
        return None
    else:
        return "it has no credentials"
    if rule == access.RAPI_WRITE and not user.can_write:
        return f"user {user.name} may no longer make changes"
    return None
