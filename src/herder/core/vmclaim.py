"""Which node may run an instance: the claim the master's instance RPCs carry (issue 18, item 5).

Every node RPC that may start or define an instance's domain carries, in its signed arguments,
the instance's **claim** (the calls' `claim` argument, `core.rpcdefs.instance_calls`): its
UUID, its primary node (by name), its config version (`serial_no`) and the master epoch of the
config it was read from. A node keeps, per instance, the newest
claim it has seen (`herder.noded.guard`) and runs a domain only under a claim that names it as
the primary and is not older than that one: `(epoch, serial)` compared in that order, since a
new master's config copy may lag the old master's serials but its epoch is higher.

The one exception is the target of a move the master is running: the calls to the target carry
the move (`move`: source and target node names) beside the claim, which still names the
source as primary (the config changes only once the move is done).
"""

from __future__ import annotations

import msgspec

from herder.core import model


class ClaimError(ValueError):
    """A call's claim or move is missing or malformed (the message says which)."""


class Claim(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the master's config says of an instance when it sends the call."""

    uuid: str
    primary: str  # node name
    serial: int  # the instance's serial_no
    epoch: int  # the cluster's master_epoch

    def __post_init__(self) -> None:
        if self.serial < 0 or self.epoch < 0 or not self.primary or not self.uuid:
            raise ClaimError("malformed instance claim: empty names or negative versions")

    @property
    def version(self) -> tuple[int, int]:
        """The order of claims: a newer master epoch first, then a newer config version."""
        return (self.epoch, self.serial)


class Move(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A migration or failover the master is running: from `source` to `target` (names)."""

    source: str
    target: str

    def __post_init__(self) -> None:
        if not self.source or not self.target or self.source == self.target:
            raise ClaimError("malformed move: source and target must be two node names")


def claim_for(config: model.ConfigData, inst: model.Instance) -> Claim:
    """The claim of `inst` as `config` has it."""
    return Claim(inst.uuid, config.node_name(inst.primary_node), inst.serial_no,
                 config.cluster.master_epoch)


def move_for(config: model.ConfigData, inst: model.Instance, target: model.Node) -> Move:
    return Move(config.node_name(inst.primary_node), target.name)


def required(claim: Claim | None) -> Claim:
    """The call's claim; ClaimError when it carries none (a master older than the node)."""
    if claim is None:
        raise ClaimError("the call names no primary node and config version for the instance "
                         "(a master older than this node?)")
    return claim
