"""One JSON request to a running herder daemon's HTTP API, for the CLI (stdlib only, so the
status commands start fast); every failure becomes a one-line HerderError."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

from herder.core import untrusted
from herder.core.errors import HerderError


def call(url: str, daemon: str, method: str = "GET") -> Any:
    """The decoded JSON answer of `method url`; `daemon` names the peer in errors
    (e.g. "maintd", "the agent")."""
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return untrusted.loads(response.read(), what=f"{daemon}'s answer")
    except untrusted.BadDocument as err:
        raise HerderError(f"{url}: {err}") from None
    except urllib.error.HTTPError as err:
        body = err.read().decode(errors="replace")
        try:
            message = untrusted.loads(body).get("message", body)
        except (ValueError, AttributeError):
            message = body
        raise HerderError(f"{url}: HTTP {err.code}: {message}") from None
    except (TimeoutError, urllib.error.URLError, ConnectionError) as err:
        reason = getattr(err, "reason", err)
        raise HerderError(f"cannot reach {daemon} at {url}: {reason}") from None
