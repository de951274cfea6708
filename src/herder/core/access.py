"""Who may call each route of herder's HTTP servers (docs/security.md).

Every server module keeps a `Routes` table and declares, for each handler it routes to, the
`Rule` of its callers (`@ROUTES.allow(access.RAPI_WRITE)` or `ROUTES.declare(handler, rule)`).
masterd's RAPI enforces its table (a route without a rule is refused); the other servers check
their callers in the handler, and tests/security walks every router (`app.router.routes()`)
and fails on a route whose handler declares no rule, so a route added later must say who may
call it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    """A kind of caller: `name` (docs/security.md), whether such a request may change
    something, and how the caller authenticates."""

    name: str
    changes: bool
    how: str


ANYONE = Rule("anyone", False, "no authentication; the route only reads")
RAPI_READ = Rule("rapi-read", False, "HTTP Basic: any RAPI user (or no credentials when the "
                 "RAPI allows anonymous reads)")
RAPI_USER = Rule("rapi-user", False, "HTTP Basic: any RAPI user, even when the RAPI allows "
                 "anonymous reads (Ganeti's /2/query)")
RAPI_WRITE = Rule("rapi-write", True, "HTTP Basic: a RAPI user with the write option")
NODE_RPC = Rule("node-rpc", True, "TLS client certificate of the cluster, and the body signed "
                "with the node-RPC key for this method and node, fresh and never replayed")
NODE_CONSOLE = Rule("node-console", True, "TLS client certificate of the cluster, and a call "
                   "signed with the node-RPC key for this stream, node and instance in the "
                   "X-Herder-Signed-Call header, fresh and never replayed")
MOND_REPAIR = Rule("mond-repair", True, "the body signed with the repair key, its timestamp "
                   "newer than the last accepted one")
NOTIFICATION = Rule("notification", True, "HTTPS, and the notification token (X-Auth-Token)")
JOIN_TOKEN = Rule("join-token", True, "only on a node that has not joined: TLS pinned by the "
                  "master, and an HMAC with the join token's secret over a fresh challenge")
NODE_IMPORT = Rule("node-import", True, "TLS client certificate of a node of the cluster, and "
                   "the one-time token of an import the master prepared (node RPC)")
NODE_ANNOUNCE = Rule("node-announce", True, "the body signed with the announce key for "
                     "this node, fresh and never replayed (it changes masterd's record of "
                     "unreachable nodes only: the node is tried again)")
NODE_LEASE = Rule("node-lease", True, "the body signed with the node-lease key for this node, "
                  "its counter above the node's last one, over TLS showing that very node's "
                  "certificate (it changes the record of when the node last renewed its "
                  "lease)")
WEB_LOGIN = Rule("web-login", True, "the web console's login (a RAPI user's name and password "
                 "from this server's own origin) and logout (the session's CSRF token)")
RULES = (ANYONE, RAPI_READ, RAPI_USER, RAPI_WRITE, NODE_RPC, NODE_CONSOLE, MOND_REPAIR,
         NOTIFICATION, JOIN_TOKEN, NODE_IMPORT, NODE_ANNOUNCE, NODE_LEASE, WEB_LOGIN)

Handler = Callable[..., Any]


class Routes:
    """One server's table: handler -> rule."""

    def __init__(self, server: str) -> None:
        self.server = server
        self._rules: dict[Handler, Rule] = {}

    def declare(self, handler: Handler, rule: Rule) -> Handler:
        self._rules[handler] = rule
        return handler

    def allow(self, rule: Rule) -> Callable[[Handler], Handler]:
        """Decorator: the handler's callers."""
        def mark(handler: Handler) -> Handler:
            return self.declare(handler, rule)

        return mark

    def rule(self, handler: Handler) -> Rule | None:
        return self._rules.get(handler)


def route_table(app: Any, routes: Routes) -> list[tuple[str, str, Rule | None]]:
    """(method, path, rule) of every route of an aiohttp application, None: undeclared."""
    table = []
    for route in app.router.routes():
        resource = route.resource
        path = resource.canonical if resource is not None else "?"
        table.append((route.method, path, routes.rule(route.handler)))
    return table
