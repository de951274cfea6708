"""A node telling masterd it is up: `POST /2/herder/nodes/NAME/announce` (herder's, not
Ganeti's: docs/compat.md; the route is `masterd.rapi.announce`'s), sent by noded when it starts
(`noded.announce`).

The body is a call of `node_announce` signed for node NAME with the cluster key's announce key
(`core.purpose_keys.NODE_ANNOUNCE`, `core.rpcauth`): only a holder of the cluster key can
announce, for the node it names, within ±300 s, each body once. It changes nothing but
masterd's record of unreachable nodes (`core.reachability`): the node is seen again, so
the live cache asks it and the redistribution pushes it what it missed at once, instead of
when its back-off runs out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from herder.core import rpcauth
from herder.core.reachability import Reachability

METHOD = "node_announce"


@dataclass
class Announcements:
    """What the route needs: the cluster keys accepted (the current one, and during a
    rotation the retiring one), the record, and the nonces seen."""

    keys: Callable[[], list[bytes]]
    reachability: Reachability
    replay: rpcauth.ReplayCache = field(default_factory=rpcauth.ReplayCache)
