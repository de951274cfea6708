"""The daemons' async HTTP clients (httpx over httpcore) find what they look for on every
request: httpcore asks for `sniffio` at each async lock it sets up and silently falls back
when it is missing, paying a failed import (a search of sys.path) each time, a third of
maintd's CPU when it polls 1,000 agents (encode/httpcore#1103). The pin in pyproject.toml
keeps it installed."""

from __future__ import annotations

import asyncio
import sys

from httpcore import _synchronization


def test_httpcore_finds_sniffio_and_keeps_it() -> None:
    async def detect() -> str:
        return _synchronization.current_async_library()

    assert asyncio.run(detect()) == "asyncio"
    # a failed import leaves no module behind, and is tried again on the next lock
    assert "sniffio" in sys.modules
