"""An instance's domain handed from its primary to another node (Ganeti's instance_utils for
moves): the config's new primary, where the domain runs now, and the hand-over of its definition
(herder's stand-in move where libvirt cannot migrate: the test driver, a dead source).

Every call carries the instance's claim; the target's and the finish also the move (the target's
guard admits it only so). When the hand-over fails half way, the nodes are asked where the
instance runs and exactly one copy is kept (`handover`)."""

from __future__ import annotations

from typing import NoReturn

from herder.core import model, vmclaim
from herder.core.errors import HerderError, OpExecError
from herder.core.rpcdefs import instance_calls, migration_calls, node_calls
from herder.core.rpcdefs.base import ReasonTrail
from herder.core.rpcdefs.payload import instance_payload
from herder.masterd.lu import handover
from herder.masterd.lu.base import MasterEnv
from herder.masterd.lu.disks import Feedback, quiet


def set_primary(env: MasterEnv, inst: model.Instance, target: model.Node) -> None:
    """The config names `target` as the primary (DRBD: the target first in the logical id)."""
    with env.store.update() as fresh:
        moved = fresh.instances[inst.uuid]
        moved.primary_node = target.uuid
        for disk in moved.disks:
            lid = disk.logical_id
            if isinstance(lid, model.DrbdId) and lid.nodes[0] != target.uuid:
                lid.nodes.reverse()
                lid.minors.reverse()
        moved.touch()


def where_it_runs(env: MasterEnv, inst: model.Instance, node: model.Node) -> handover.Copy:
    """The node's copy of the instance, as its domain list says (UNKNOWN: no answer)."""
    try:
        return handover.Copy.from_domains(env.rpc.call(node, node_calls.InstanceList()),
                                          inst.name)
    except HerderError:
        return handover.UNKNOWN


class Order:
    """What the calls of one move (a hand-over, a migration, a failover) carry: the
    instance's name, reason trail, config version and claim, and the move to `target` (None:
    for the calls that need none)."""

    def __init__(self, config: model.ConfigData, inst: model.Instance,
                 target: model.Node | None, reason: ReasonTrail) -> None:
        self.name = inst.name
        self.reason = reason
        self.version = inst.serial_no
        self.claim = vmclaim.claim_for(config, inst)
        self.move = vmclaim.move_for(config, inst, target) if target is not None else None


def move_instance(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                  target: model.Node, *, live: bool, reason: ReasonTrail,
                  ignore_source: bool = False, feedback: Feedback = quiet) -> None:
    """Move an instance's domain from its primary node to `target` with libvirt's own calls
    (prepare on the source, accept on the target, finish on the source), then update the
    config: new primary, and for DRBD the target first in the logical id.

    When the move fails half way, the target's copy is stopped and the instance stays on the
    source, or (the source's copy is gone) the move is completed; OpExecError says which."""
    source = config.nodes[inst.primary_node]
    payload = instance_payload(config, inst)
    running = inst.admin_state == "up"
    order = Order(config, inst, target, reason)
    source_stopped = False  # the source's copy was shut down for a non-live move
    xml: str | None
    try:
        prepared = env.rpc.call(source, migration_calls.MigratePrepare(
            name=order.name, reason=reason, version=order.version, claim=order.claim))
        xml = prepared.xml
        if not live and running:
            env.rpc.call(source, instance_calls.InstanceShutdown(
                name=order.name, reason=reason, version=order.version, claim=order.claim,
                timeout=30))
            source_stopped = True
    except HerderError:
        if not ignore_source:
            raise
        xml = None  # the source is dead: define afresh on the target (failover)
    feedback(f"{inst.name}: prepared on {source.name}, handing over to {target.name}")
    try:
        if xml is None:
            kind = instance_calls.InstanceStart if running else instance_calls.InstanceDefine
            env.rpc.call(target, kind(instance=payload, name=order.name, reason=reason,
                                      version=order.version, claim=order.claim,
                                      move=order.move))
        else:
            env.rpc.call(target, migration_calls.MigrateAccept(
                instance=payload, name=order.name, reason=reason, version=order.version,
                claim=order.claim, move=order.move, xml=xml, start=running))
    except HerderError as err:
        _abandon_move(env, inst, source, target, order, err, restart_source=source_stopped,
                      feedback=feedback)
    if xml is not None:
        try:
            env.rpc.call(source, _finish(order))
        except HerderError as err:
            if not ignore_source:
                _settle_failed_finish(env, inst, source, target, order, err,
                                      source_stopped=source_stopped, feedback=feedback)
    set_primary(env, inst, target)


def _finish(order: Order) -> migration_calls.MigrateFinish:
    return migration_calls.MigrateFinish(name=order.name, reason=order.reason,
                                         version=order.version, claim=order.claim,
                                         move=order.move)


def _stop_copy(env: MasterEnv, node: model.Node, order: Order) -> str:
    """Stop the copy on a node that is not the instance's primary; "" or why it failed."""
    try:
        env.rpc.call(node, instance_calls.InstanceStopStray(
            name=order.name, reason=order.reason, version=order.version, claim=order.claim))
    except HerderError as err:
        return str(err)
    return ""


def _abandon_move(env: MasterEnv, inst: model.Instance, source: model.Node,
                  target: model.Node, order: Order, err: HerderError, *,
                  restart_source: bool, feedback: Feedback) -> NoReturn:
    """The target did not take the instance: remove whatever it started, start the source's
    copy again when it was shut down for the move, and fail (OpExecError)."""
    notes = []
    problem = _stop_copy(env, target, order)
    if problem:
        notes.append(f"a copy may remain on {target.name} ({problem}); cluster verify reports "
                     "it and maintd stops it")
    if restart_source:
        try:
            env.rpc.call(source, instance_calls.InstanceStart(
                instance=instance_payload(env.store.load(), inst), name=order.name,
                reason=order.reason, version=order.version, claim=order.claim))
        except HerderError as again:
            notes.append(f"restarting it on {source.name} failed too: {again}")
    feedback(f"{inst.name}: the move to {target.name} failed; it stays on {source.name}")
    raise OpExecError(f"moving {inst.name} to {target.name} failed: {err}; it stays on "
                      f"{source.name}" + "".join(f"; {n}" for n in notes))


def _settle_failed_finish(env: MasterEnv, inst: model.Instance, source: model.Node,
                          target: model.Node, order: Order, err: HerderError, *,
                          source_stopped: bool, feedback: Feedback) -> None:
    """The target runs the instance, the source's finish failed: keep exactly one copy. Returns
    when the move is to be completed (the source's copy is gone); raises OpExecError when the
    instance stays on the source (the target's copy stopped)."""
    source_copy = handover.Copy(known=True) if source_stopped \
        else where_it_runs(env, inst, source)
    keeper = handover.keeper(source_copy, where_it_runs(env, inst, target), handover.RESTART)
    if keeper == handover.TARGET:
        feedback(f"{inst.name}: finishing on {source.name} failed ({err}), but its copy there "
                 f"no longer runs: the move to {target.name} is completed")
        try:  # best effort: undefine the stopped copy, the source records the move
            env.rpc.call(source, _finish(order))
        except HerderError as again:
            feedback(f"{inst.name}: cleaning up on {source.name} failed: {again}")
        return
    problem = _stop_copy(env, target, order)
    where = ("it stays on" if source_copy.known else "its copy there could not be checked; the "
             "config keeps it on")
    raise OpExecError(
        f"moving {inst.name} to {target.name} failed when finishing on {source.name}: {err}; "
        f"{where} {source.name}" + (
            f"; stopping the copy on {target.name} failed too ({problem}): cluster verify "
            "reports it and maintd stops it" if problem else
            f"; the copy on {target.name} was stopped"))
