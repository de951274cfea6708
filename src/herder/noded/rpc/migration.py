"""Moving a domain between nodes: live migration in Ganeti's RPC order (herder.noded.migrations:
libvirt's peer-to-peer migration) and the hand-over of a domain definition (prepare, accept,
finish: libvirt's test driver, a failover from a dead source)."""

from __future__ import annotations

import contextlib
import logging

import libvirt

from herder.core import ordered
from herder.core.errors import HerderError
from herder.core.rpcdefs import migration_calls
from herder.noded import domains
from herder.noded.kvm import migration
from herder.noded.node import Node, RpcFailure

log = logging.getLogger("herder.noded")


def migrate_prepare(node: Node, call: migration_calls.MigratePrepare
                    ) -> migration_calls.DomainAnswer:
    domains.note_claim(node, call.name, call.claim)
    return migration_calls.DomainAnswer(xml=node.hv.xml_of(call.name),
                                        state=node.hv.state(call.name))


def migrate_accept(node: Node, call: migration_calls.MigrateAccept) -> None:
    inst = call.instance
    if call.move is None:
        raise RpcFailure(f"migrate_accept of {inst.name} names no move")
    domains.admit_run(node, call.claim, call.move, inst)
    node.disks.instance_disks(inst)  # the disks attached here before the domain comes
    node.hv.define_xml(inst.name, call.xml)
    if call.start:
        node.hv.start(inst.name)
        ordered.clear(node.settings.run_dir, inst.name)
    node.record(inst.name, "up" if call.start else "down", call.reason, call.version)


def migrate_finish(node: Node, call: migration_calls.MigrateFinish) -> None:
    if call.move is not None:  # from now on the old claim cannot start it here
        node.guard.moved_away(call.name, domains.claim_of(call.claim), call.move)
    with ordered.expect(node.settings.run_dir, call.name, "migrate", 60):
        node.hv.undefine(call.name)
    if call.remove_disks:
        node.disks.remove_all(call.disks)
    node.forget(call.name)


def instance_migratable(node: Node, call: migration_calls.InstanceMigratable
                        ) -> migration_calls.MigratableAnswer:
    """Whether the instance runs here and this hypervisor can migrate it live; `method`
    "libvirt" (live migration) or "restart" (libvirt's test driver, which runs nothing:
    the master's define-and-start stand-in)."""
    domains.note_claim(node, call.name, call.claim)
    state = node.hv.state(call.name)
    running = state in domains.RUNNING_STATES
    if not node.hv.runs_guests:
        return migration_calls.MigratableAnswer(
            running=running, state=state, method="restart",
            reason="libvirt's test driver cannot migrate a domain (it runs none)")
    return migration_calls.MigratableAnswer(
        running=running, state=state, method="libvirt",
        reason="" if running else f"instance {call.name} is not running on {node.name} "
        f"({state or 'not defined'})")


def migration_info(node: Node, call: migration_calls.MigrationInfo
                   ) -> migration_calls.DomainAnswer:
    """The source's view of the running domain (Ganeti's migration_info)."""
    domains.note_claim(node, call.name, call.claim)
    return migration_calls.DomainAnswer(xml=node.hv.xml_of(call.name),
                                        state=node.hv.state(call.name), node=node.name)


def accept_instance(node: Node, call: migration_calls.AcceptInstance) -> None:
    """The target's checks before libvirt brings the guest here (Ganeti's
    accept_instance): this node may run it during the move (the guard), its disks are
    here, its bridges and files exist; no domain of it runs here already."""
    inst = call.instance
    if call.move is None:
        raise RpcFailure(f"accept_instance of {inst.name} names no move")
    domains.admit_run(node, call.claim, call.move, inst)
    if node.hv.state(inst.name) in domains.RUNNING_STATES:
        raise RpcFailure(f"instance {inst.name} already runs on {node.name}")
    domains.check_target(node, inst)


def migrate_instance(node: Node, call: migration_calls.MigrateInstance) -> None:
    """Start libvirt's migration of the running domain to the target node (returns at
    once; instance_get_migration_status follows it)."""
    name = call.instance.name
    if call.move is None or call.move.target != call.target:
        raise RpcFailure(f"migrate_instance of {name} names no move to {call.target}")
    domains.note_claim(node, name, call.claim)
    try:
        settings = migration.MigrationSettings.from_hvparams(call.instance.hvparams,
                                                             live=call.live)
    except migration.MigrationError as err:
        raise RpcFailure(str(err)) from None
    with contextlib.suppress(OSError):
        ordered.mark(node.settings.run_dir, name, "migrate", 3600)
    try:
        node.migrations.start(name, call.target, settings)
    except HerderError as err:
        with contextlib.suppress(OSError):
            ordered.clear(node.settings.run_dir, name)
        raise RpcFailure(str(err)) from None


def instance_get_migration_status(node: Node, call: migration_calls.InstanceGetMigrationStatus
                                  ) -> migration_calls.MigrationStatus:
    return node.migrations.status(call.name, call.wait or 0.0)


def finalize_migration_src(node: Node, call: migration_calls.FinalizeMigrationSrc
                           ) -> migration_calls.FinalizeAnswer:
    """After the migration: on success the domain left this node (its records go, the
    guard notes the move); on failure it is made to run here again (a migration still
    going is aborted, a guest paused by it resumed)."""
    name = call.name
    if not call.success:
        node.migrations.abort(name)
    node.migrations.finish(name)
    state = node.hv.state(name)
    if call.success:
        if state in domains.RUNNING_STATES:
            raise RpcFailure(f"instance {name} still runs on {node.name} after its migration")
        if call.move is not None:
            node.guard.moved_away(name, domains.claim_of(call.claim), call.move)
        if state is not None:
            node.hv.undefine(name)
        node.hv.forget_definition(name)
        node.forget(name)
        domains.routed_nics_gone(node, call.instance)
        with contextlib.suppress(OSError):
            ordered.mark(node.settings.run_dir, name, "migrate", ordered.GRACE)
        return migration_calls.FinalizeAnswer(state=None)

    def resume(conn: libvirt.virConnect) -> None:
        dom = conn.lookupByName(name)
        current, reason = dom.state()
        if current == libvirt.VIR_DOMAIN_PAUSED and reason in (
                libvirt.VIR_DOMAIN_PAUSED_MIGRATION, libvirt.VIR_DOMAIN_PAUSED_USER,
                libvirt.VIR_DOMAIN_PAUSED_POSTCOPY_FAILED):
            dom.resume()

    if state is not None:
        node.hv.call(resume)
    with contextlib.suppress(OSError):
        ordered.clear(node.settings.run_dir, name)
    return migration_calls.FinalizeAnswer(state=node.hv.state(name))


def _incoming_stats(node: Node, name: str) -> migration_calls.MigrationStats | None:
    """libvirt's statistics of the migration that brought `name` here, if it kept any."""
    stats = node.hv.completed_job_stats(name)
    if not stats.get("time_elapsed"):
        return None
    done = migration.MigrationResult.from_stats(stats, live=True)
    return migration_calls.MigrationStats(
        total_ms=done.total_ms, downtime_ms=done.downtime_ms, setup_ms=done.setup_ms,
        data_total=done.data_total, data_processed=done.data_processed,
        memory_iterations=done.memory_iterations)


def finalize_migration_dst(node: Node, call: migration_calls.FinalizeMigrationDst
                           ) -> migration_calls.FinalizeAnswer:
    """After the migration: on success the domain that arrived is recorded as this node's;
    on failure an incoming copy that never ran is removed (a running one is not: it is the
    instance, and the master's cleanup decides)."""
    inst = call.instance
    name = inst.name
    state = node.hv.state(name)
    if call.success:
        if state not in domains.RUNNING_STATES:
            raise RpcFailure(f"instance {name} does not run on {node.name} after its "
                             f"migration ({state or 'absent'})")
        node.hv.record_current(name)
        ordered.clear(node.settings.run_dir, name)
        node.record(name, "up", call.reason, call.version)
        # routed NICs only now that the guest is here (Ganeti's FinalizeMigrationDst)
        return migration_calls.FinalizeAnswer(
            state=state, warnings=domains.routed_nics_up(node, inst, strict=False),
            stats=_incoming_stats(node, name))
    if state == "running":
        raise RpcFailure(f"instance {name} runs on {node.name}; not removing it (clean up "
                         "the migration to settle where it runs)")
    if state is not None:
        with ordered.expect(node.settings.run_dir, name, "migrate", 60):
            node.hv.undefine(name)
    node.forget(name)
    return migration_calls.FinalizeAnswer(state=None)
