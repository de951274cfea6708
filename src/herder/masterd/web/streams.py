"""How long masterd's open streams go on (docs/security.md "Streams"): the events stream
(`web.api`) and the consoles' websockets (`masterd.rapi.console`) end when the authority that let
them in goes: the session ends (logout, expiry), the user leaves the users file or changes its
password, or, for the consoles, loses the `write` option. Each looks every `AUTHORITY_EVERY`
seconds (`web.auth.authority_lost`).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from herder.core import access
from herder.masterd.rapi.base import ctx_of
from herder.masterd.web import auth

AUTHORITY_EVERY = 1.0  # seconds between two looks


def authority_lost(request: web.Request, rule: access.Rule) -> str | None:
    """Why the stream `request` opened may no longer go on (None: it may)."""
    ctx = ctx_of(request)
    return auth.authority_lost(request, ctx.users, None if ctx.web is None else ctx.web.sessions,
                               ctx.reads_open, rule)


async def authority_gone(request: web.Request, rule: access.Rule) -> str:
    """Returns, with the reason, once the stream's authority has gone."""
    while True:
        await asyncio.sleep(AUTHORITY_EVERY)
        lost = authority_lost(request, rule)
        if lost is not None:
            return lost
