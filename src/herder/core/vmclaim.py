"""Which node may run an instance: the claim the master's instance RPCs carry (issue 18, item 5).

Every node RPC that may start or define an instance's domain carries, in its signed arguments,
the instance's **claim**: its UUID, its primary node (by name), its config version (`serial_no`)
and the master epoch of the config it was read from. A node keeps, per instance, the newest
claim it has seen (`herder.noded.guard`) and runs a domain only under a claim that names it as
the primary and is not older than that one: `(epoch, serial)` compared in that order, since a
new master's config copy may lag the old master's serials but its epoch is higher.

The one exception is the target of a move the master is running: the calls to the target carry
the move (`MOVE_KEY`: source and target node names) beside the claim, which still names the
source as primary (the config changes only once the move is done).
"""

from __future__ import annotations

from typing import Any

import msgspec

from herder.core import model

CLAIM_KEY = "claim"  # in the arguments of instance RPCs
MOVE_KEY = "move"  # ... of the calls of a migration or failover to its target and source


class Claim(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the master's config says of an instance when it sends the call."""

    uuid: str
    primary: str  # node name
    serial: int  # the instance's serial_no
    epoch: int  # the cluster's master_epoch

    @property
    def version(self) -> tuple[int, int]:
        """The order of claims: a newer master epoch first, then a newer config version."""
        return (self.epoch, self.serial)


class Move(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A migration or failover the master is running: from `source` to `target` (names)."""

    source: str
    target: str


class ClaimError(ValueError):
    """A call's claim or move is missing or malformed (the message says which)."""


def claim_for(config: model.ConfigData, inst: model.Instance) -> dict[str, Any]:
    """The claim of `inst` as `config` has it, ready for the RPC arguments."""
    return {"uuid": inst.uuid, "primary": config.node_name(inst.primary_node),
            "serial": inst.serial_no, "epoch": config.cluster.master_epoch}


def move_for(config: model.ConfigData, inst: model.Instance,
             target: model.Node) -> dict[str, Any]:
    return {"source": config.node_name(inst.primary_node), "target": target.name}


def parse_claim(args: dict[str, Any]) -> Claim:
    value = args.get(CLAIM_KEY)
    if value is None:
        raise ClaimError("the call names no primary node and config version for the instance "
                         "(a master older than this node?)")
    try:
        claim = msgspec.convert(value, Claim)
    except msgspec.ValidationError as err:
        raise ClaimError(f"malformed instance claim: {err}") from None
    if claim.serial < 0 or claim.epoch < 0 or not claim.primary or not claim.uuid:
        raise ClaimError("malformed instance claim: empty names or negative versions")
    return claim


def parse_move(args: dict[str, Any]) -> Move | None:
    value = args.get(MOVE_KEY)
    if value is None:
        return None
    try:
        move = msgspec.convert(value, Move)
    except msgspec.ValidationError as err:
        raise ClaimError(f"malformed move: {err}") from None
    if not move.source or not move.target or move.source == move.target:
        raise ClaimError("malformed move: source and target must be two node names")
    return move
