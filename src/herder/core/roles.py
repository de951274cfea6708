"""A node's role, as Ganeti names it: one letter (`gnt-node list`'s role column) and RAPI's
word for it (`/2/nodes/NAME/role`). Standard library only (the RAPI client uses it).

Ganeti 3.0 decides a node's role in two places with two precedences, which agree on any node
Ganeti lets exist (a master candidate is never drained or offline) and differ only on a
hand-made config: its query code (`query._GetNodeRole`: `gnt-node list`, RAPI) puts master
candidate before drained and offline; its confd (`Ganeti.Confd.Server.nodeRole`) puts drained
and offline first. Both are here, so each answer keeps Ganeti's.
"""

from __future__ import annotations

from typing import Protocol

MASTER, CANDIDATE, DRAINED, OFFLINE, REGULAR = "M", "C", "D", "O", "R"
# RAPI's words (rlib2's _NR_MAP)
NAMES = {MASTER: "master", CANDIDATE: "master-candidate", DRAINED: "drained",
         OFFLINE: "offline", REGULAR: "regular"}


class NodeFlags(Protocol):
    @property
    def uuid(self) -> str: ...
    @property
    def master_candidate(self) -> bool: ...
    @property
    def drained(self) -> bool: ...
    @property
    def offline(self) -> bool: ...


def node_role(node: NodeFlags, master_uuid: str | None) -> str:
    """Ganeti's role letter: master, master candidate, drained, offline, regular."""
    if node.uuid == master_uuid:
        return MASTER
    if node.master_candidate:
        return CANDIDATE
    if node.drained:
        return DRAINED
    if node.offline:
        return OFFLINE
    return REGULAR


def confd_node_role(node: NodeFlags, master_uuid: str | None) -> str:
    """The role Ganeti's confd answers: master, drained, offline, master candidate, regular."""
    if node.uuid == master_uuid:
        return MASTER
    if node.drained:
        return DRAINED
    if node.offline:
        return OFFLINE
    if node.master_candidate:
        return CANDIDATE
    return REGULAR
