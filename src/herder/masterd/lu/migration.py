"""Migration and failover of an instance, in Ganeti's order (cmdlib/instance_migration.py,
TLMigrateInstance), with the disks handled by `masterd.lu.disks` where Ganeti's cmdlib handles
them.

- **Live migration** (`live_migrate`): libvirt's own migration between the nodes' libvirtds
  (peer to peer over TLS, `herder.noded.migrations`); the RPCs are Ganeti's:
  `instance_migratable`, `migration_info` (source), `accept_instance` (target),
  `migrate_instance`, `instance_get_migration_status` until done (source),
  `finalize_migration_src` and `finalize_migration_dst` — on failure the same two with
  success false (Ganeti's _AbortMigration), then the disks reverted. The config names the
  target only once both finalised. `--non-live` is the same migration with the guest paused.
- **Failover** (`failover`): a clean shutdown on the source (forced when the node is dead),
  its disks released there, the config's primary changed, the disks assembled on the target
  and the instance started there from its config.
- **Cleanup** (`cleanup`, OP_INSTANCE_MIGRATE cleanup=True): where does the instance run?
  On both: the migration is aborted; on the target: the config follows it; on neither: refused.
- **The choice** (`migrate_or_failover`): a migration that cannot be live (the instance does
  not run, the hypervisor cannot migrate) is refused, or with `allow_failover` is an explicit
  failover (said in the job's feedback) — never a silent cold copy. libvirt's test driver runs
  no guest: its nodes keep the define-and-start stand-in (`instance.move_instance`), said so.

Every call carries the instance's claim (and the move, to the target): the target's guard
admits the guest only so. After a failure the nodes are asked where it runs; `handover.LIVE`
applies (a target that runs the guest after libvirt's migration means it completed)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn

from herder.core import diskobjects, livefigures, model
from herder.core.errors import HerderError, OpExecError
from herder.core.noderpc import call_many
from herder.core.rpcdefs import disk_calls, instance_calls, migration_calls, node_calls
from herder.core.rpcdefs.base import ReasonTrail
from herder.core.rpcdefs.payload import InstancePayload, instance_payload
from herder.masterd.lu import disks, handover
from herder.masterd.lu.base import MasterEnv
from herder.masterd.lu.moves import Order, move_instance, set_primary, where_it_runs

Say = Callable[[str], None]
POLL_INTERVAL = 0.5  # the least time between two status calls (a node that does not wait)
FEEDBACK_INTERVAL = 5.0
# s: each status call waits on the node up to this for the migration's end. As long as the
# progress feedback's interval: a status call that does not see the end asks libvirt for the
# job's statistics, a monitor command to the QEMU that is migrating (0.3-0.8 s to answer on
# a loaded machine, measured in noded's log); a move shorter than this asks none, as the bare
# `virsh migrate` does not
STATUS_WAIT = FEEDBACK_INTERVAL
MIGRATION_TIMEOUT = 3600.0  # a migration that never converges is aborted after this


def _finalize_src(order: Order, payload: InstancePayload, *, success: bool,
                  live: bool) -> migration_calls.FinalizeMigrationSrc:
    return migration_calls.FinalizeMigrationSrc(
        name=order.name, reason=order.reason, version=order.version, claim=order.claim,
        move=order.move, instance=payload, success=success, live=live)


def _finalize_dst(order: Order, payload: InstancePayload, *,
                  success: bool) -> migration_calls.FinalizeMigrationDst:
    return migration_calls.FinalizeMigrationDst(
        name=order.name, reason=order.reason, version=order.version, claim=order.claim,
        move=order.move, instance=payload, success=success)


def fit_target_memory(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                      source: model.Node, target: model.Node, *, allow_runtime_changes: bool,
                      reason: ReasonTrail, say: Say) -> bool:
    """Ganeti's memory check before a migration (CheckNodeFreeMemory for minmem in
    CheckPrereq, then _ExecMigration's ballooning): the target must have the instance's
    minmem free; when the guest has more than the target's free memory it is ballooned down
    to that (allow_runtime_changes), else refused. Whether it ballooned the guest."""
    be = config.filled_beparams(inst)
    src, dst = _node_infos(env, source, target)
    running = (src.instances or {}).get(inst.name)
    current = running.memory if running is not None else int(be["maxmem"])
    free = dst.memory_free
    if free < int(be["minmem"]):
        raise OpExecError(f"Not enough memory on node {target.name} for migrating instance "
                          f"{inst.name}: needed {be['minmem']} MiB, available {free} MiB")
    if current <= free:
        return False
    if not allow_runtime_changes:
        raise OpExecError(f"Memory ballooning not allowed and not enough free memory to fit "
                          f"instance {inst.name} on target node {target.name} (have {free}MB, "
                          f"need {current}MB)")
    say(f"* setting instance memory to {free}")
    order = Order(config, inst, None, reason)
    try:
        env.rpc.call(source, instance_calls.InstanceBalloonMemory(
            name=order.name, reason=reason, version=order.version, claim=order.claim,
            memory=free))
    except HerderError as err:
        raise OpExecError(f"Cannot modify instance runtime memory: {err}") from None
    return True


def _node_infos(env: MasterEnv, source: model.Node, target: model.Node
                ) -> tuple[livefigures.NodeInfo, livefigures.NodeInfo]:
    """The live figures of both nodes, asked at once (the source's with its instances)."""
    answers = call_many(env.rpc, [source, target], lambda node: node_calls.NodeInfo(
        instances=node is source), timeout=60)

    def figures(node: model.Node) -> livefigures.NodeInfo:
        answer = answers[node.uuid]
        if isinstance(answer, HerderError):
            raise OpExecError(f"Unable to retrieve node information: {answer}")
        return answer

    return figures(source), figures(target)


def live_migrate(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                 target: model.Node, *, live: bool, reason: ReasonTrail, say: Say,
                 allow_runtime_changes: bool = True) -> None:
    source = config.nodes[inst.primary_node]
    payload = instance_payload(config, inst)
    order = Order(config, inst, target, reason)
    say(f"* migrating {inst.name} from {source.name} to {target.name} "
        f"({'live' if live else 'non-live: the guest is paused while its memory moves'})")
    info = migration_calls.MigrationInfo(name=order.name, reason=reason, version=order.version,
                                         claim=order.claim)
    # migration_info (the source's domain, read) is asked while the memory check's node_info
    # pair is (read too): none of the three changes anything, so they need no order among
    # themselves, and one round trip before the move goes. Ganeti's order stays where it
    # matters: a memory refusal is said before migration_info's error, and a guest that was
    # ballooned is asked about again after it (Ganeti asks migration_info after the balloon);
    # the disks are assembled only after both (a refused migration leaves nothing to undo).
    with ThreadPoolExecutor(1, thread_name_prefix="migration-info") as pool:
        asked = pool.submit(env.rpc.call, source, info)
        ballooned = fit_target_memory(env, config, inst, source, target,
                                      allow_runtime_changes=allow_runtime_changes,
                                      reason=reason, say=say)
        asked.result()
    if ballooned:
        env.rpc.call(source, info)
    disks.prepare_live_migration(env, config, inst, source, target)

    def abort(why: str, failure: HerderError | str) -> NoReturn:
        """Ganeti's _AbortMigration and _RevertDiskStatus; then where does it run?"""
        say(f"{why}, aborting")
        notes = []
        for node, call in ((target, _finalize_dst(order, payload, success=False)),
                           (source, _finalize_src(order, payload, success=False, live=live))):
            try:
                env.rpc.call(node, call)
            except HerderError as err:
                notes.append(f"aborting on {node.name} failed: {err}")
        keeper = handover.keeper(where_it_runs(env, inst, source),
                                 where_it_runs(env, inst, target), handover.LIVE)
        if keeper == handover.TARGET:
            # libvirt completed the migration after all: the target runs the guest
            set_primary(env, inst, target)
            disks.finish_live_migration(env, config, inst, source, target, migrated=True)
            raise OpExecError(f"migration of {inst.name} reported a failure ({failure}) but "
                              f"the guest runs on {target.name}: the config follows it"
                              + "".join(f"; {note}" for note in notes))
        disks.finish_live_migration(env, config, inst, source, target, migrated=False)
        raise OpExecError(f"Could not migrate instance {inst.name}: {failure}; it stays on "
                          f"{source.name}" + "".join(f"; {note}" for note in notes))

    say(f"* preparing {target.name} to accept the instance")
    try:
        env.rpc.call(target, migration_calls.AcceptInstance(
            instance=payload, name=order.name, reason=reason, version=order.version,
            claim=order.claim, move=order.move))
    except HerderError as err:
        abort("Pre-migration failed", err)
    try:
        env.rpc.call(source, migration_calls.MigrateInstance(
            instance=payload, name=order.name, reason=reason, version=order.version,
            claim=order.claim, move=order.move, target=target.name, live=live))
    except HerderError as err:
        abort("Migration failed", err)
    status = _follow(env, source, order, say, abort)
    stats = status.stats
    problems = []
    for node, call in ((source, _finalize_src(order, payload, success=True, live=live)),
                       (target, _finalize_dst(order, payload, success=True))):
        try:
            answer = env.rpc.call(node, call)
        except HerderError as err:
            problems.append(f"{node.name}: {err}")
            continue
        _say_warnings(say, node, answer)
        if answer.stats is not None and (stats is None or stats.downtime_ms is None):
            stats = answer.stats  # the target's own figures of the incoming migration
    say("* memory transfer complete" + _figures(stats))
    if problems:
        keeper = handover.keeper(where_it_runs(env, inst, source),
                                 where_it_runs(env, inst, target), handover.LIVE)
        if keeper == handover.TARGET:
            set_primary(env, inst, target)
        where = target if keeper == handover.TARGET else source
        raise OpExecError(f"Could not finalize instance migration: {'; '.join(problems)}; "
                          f"{inst.name} runs on {where.name} (run the migration with cleanup "
                          "to settle it)")
    set_primary(env, inst, target)
    disks.finish_live_migration(env, config, inst, source, target, migrated=True)
    say("* done")


def _figures(stats: migration_calls.MigrationStats | None) -> str:
    """libvirt's figures of a completed migration for the job log (those it gave)."""
    if stats is None:
        return ""
    if stats.downtime_ms is None:
        return f" ({stats.total_ms} ms)"
    return f" ({stats.total_ms} ms, downtime {stats.downtime_ms} ms)"


def _follow(env: MasterEnv, source: model.Node, order: Order, say: Say,
            abort: Callable[[str, HerderError | str], NoReturn]
            ) -> migration_calls.MigrationStatus:
    """Ask the source about the memory transfer until it ends (Ganeti's
    instance_get_migration_status loop, each call waiting on the node for the end up to
    STATUS_WAIT): its last status, or `abort`."""
    started = last_feedback = time.monotonic()
    noted = False
    while True:
        asked = time.monotonic()
        try:
            status = env.rpc.call(source, migration_calls.InstanceGetMigrationStatus(
                name=order.name, reason=order.reason, version=order.version,
                claim=order.claim, wait=STATUS_WAIT))
        except HerderError as err:
            abort("Migration failed", err)
        if status.note and not noted:  # the node changed the migration (kvm.migration)
            say(f"* {status.note}")
            noted = True
        if status.status in ("failed", "cancelled"):
            abort("Migration failed", status.error or "hypervisor returned failure")
        if status.status != "active":
            return status
        now = time.monotonic()
        if now - started > MIGRATION_TIMEOUT:
            abort("Migration did not converge", f"still running after {MIGRATION_TIMEOUT:g}s")
        if now - last_feedback >= FEEDBACK_INTERVAL and status.total_ram:
            say(f"* memory transfer progress: "
                f"{100.0 * status.transferred_ram / status.total_ram:.2f} %")
            last_feedback = now
        # a node that answered at once (one that does not know `wait`) is not asked in a loop
        time.sleep(max(0.0, POLL_INTERVAL - (time.monotonic() - asked)))


def failover(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
             target: model.Node, *, reason: ReasonTrail, say: Say, shutdown_timeout: int = 120,
             ignore_consistency: bool = False) -> None:
    """Ganeti's _ExecFailover: shut down on the source (a dead or ignored source: warn and go
    on), release the disks there, the config's primary = target, assemble the disks there and
    start it when it is marked up."""
    source = config.nodes[inst.primary_node]
    order = Order(config, inst, target, reason)
    if inst.disks_active and inst.disk_template in disks.INT_MIRROR:
        say("* checking disk consistency between source and target")
        for index, disk in enumerate(inst.disks):
            if disks.check_disk_consistency(env, config, inst, disk, target, False):
                continue
            if source.offline:
                say(f"Node {source.name} is offline, ignoring degraded disk {index} on "
                    f"target node {target.name}")
            elif not ignore_consistency:
                raise OpExecError(f"Disk {index} is degraded on target node, aborting "
                                  "failover")
    say(f"* shutting down instance {inst.name} on source node {source.name}")
    try:  # not sent to an offline source (a dead node): no shutdown timeout waited out there
        disks.node_call(env, source, instance_calls.InstanceShutdown(
            name=order.name, reason=reason, version=order.version, claim=order.claim,
            timeout=shutdown_timeout, instance=instance_payload(config, inst)))
    except HerderError as err:
        if not (ignore_consistency or source.offline):
            raise OpExecError(f"Could not shutdown instance {inst.name} on node "
                              f"{source.name}: {err}") from None
        say(f"Could not shutdown instance {inst.name} on node {source.name}, proceeding "
            f"anyway; please make sure node {source.name} is down; error details: {err}")
    if inst.disk_template in disks.EXT_MIRROR:  # shared storage: closed on the source first
        try:
            disks.node_call(env, source, disk_calls.BlockdevClose(
                instance=inst.name, disks=diskobjects.disk_objects(config, inst, source.uuid)))
        except HerderError as err:
            if not (ignore_consistency or source.offline):
                raise OpExecError(f"Cannot close instance disks on node {source.name}: "
                                  f"{err}") from None
            say(f"Could not close instance disks on node {source.name}, proceeding anyway")
    say("* deactivating the instance's disks on source node")
    if not disks.shutdown_disks(env, config, inst, ignore_primary=True):
        raise OpExecError("Can't shut down the instance's disks")
    set_primary(env, inst, target)
    # the source's stopped copy is no longer the instance: remove its definition (the disks
    # stay: a DRBD secondary needs them)
    fresh = env.store.load()
    moved = fresh.instances[inst.uuid]
    after = Order(fresh, moved, None, reason)
    if not source.offline:
        try:
            env.rpc.call(source, instance_calls.InstanceStopStray(
                name=after.name, reason=reason, version=after.version, claim=after.claim))
        except HerderError as err:
            say(f"* the stopped copy on {source.name} stays defined ({err}); cluster verify "
                "reports it if it runs again")
    if moved.admin_state != "up":
        say(f"* instance {inst.name} is marked down: not starting it on {target.name}")
        return
    say(f"* activating the instance's disks on target node {target.name}")
    try:
        disks.assemble_disks(env, fresh, moved, ignore_secondaries=True)
    except HerderError as err:
        raise OpExecError(f"Can't activate the instance's disks on {target.name}: "
                          f"{err}") from None
    say(f"* starting the instance on the target node {target.name}")
    try:
        env.rpc.call(target, instance_calls.InstanceStart(
            instance=instance_payload(fresh, moved), name=after.name, reason=reason,
            version=after.version, claim=after.claim))
    except HerderError as err:
        disks.shutdown_disks(env, fresh, moved, nodes=[target])
        raise OpExecError(f"Could not start instance {inst.name} on node {target.name}: "
                          f"{err}") from None


def find_locations(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                   say: Say) -> list[model.Node]:
    """Ganeti's _FindInstanceLocations: the online nodes on which the instance runs, asked
    all at once; one that does not answer refuses the cleanup (a guess could leave two)."""
    say("* checking where the instance actually runs (if this hangs, the hypervisor might "
        "be in a bad state)")
    nodes = sorted((node for node in config.nodes.values() if not node.offline),
                   key=lambda node: node.name)
    listed = call_many(env.rpc, nodes, lambda node: node_calls.InstanceList(), workers=8)
    copies = {uuid: handover.UNKNOWN if isinstance(answer, HerderError)
              else handover.Copy.from_domains(answer, inst.name)
              for uuid, answer in listed.items()}
    silent = [node.name for node in nodes if not copies[node.uuid].known]
    if silent:
        raise OpExecError(f"Can't contact node {', '.join(silent)} to find where {inst.name} "
                          "runs; a cleanup needs every online node (mark a dead node offline)")
    return [node for node in nodes if copies[node.uuid].running]


def cleanup(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
            target: model.Node | None, *, reason: ReasonTrail, say: Say) -> None:
    """Ganeti's _ExecCleanup after a failed or interrupted migration: every online node is
    asked where the instance runs. On the source and the target: the migration is aborted;
    only on the target, or only on one node the config does not name: the config follows it;
    nowhere, or on several other nodes: refused. `target` None (shared storage without
    --target-node): the node found, if any."""
    source = config.nodes[inst.primary_node]
    payload = instance_payload(config, inst)
    running = find_locations(env, config, inst, say)
    on_source = any(node.uuid == source.uuid for node in running)
    on_target = target is not None and any(node.uuid == target.uuid for node in running)
    if on_source and on_target and target is not None:
        say("Trying to cleanup after failed migration")
        order = Order(config, inst, target, reason)
        for node, call in ((target, _finalize_dst(order, payload, success=False)),
                           (source, _finalize_src(order, payload, success=False, live=True))):
            try:
                env.rpc.call(node, call)
            except HerderError as err:
                raise OpExecError(f"Instance migration cleanup failed: {err}") from None
        running = find_locations(env, config, inst, say)
        on_source = any(node.uuid == source.uuid for node in running)
        on_target = any(node.uuid == target.uuid for node in running)
        if on_source and on_target:
            raise OpExecError("Instance seems to be running on two nodes, or the hypervisor "
                              "is confused; you will have to ensure manually that it runs "
                              "only on one and restart this operation")
    elsewhere = [node for node in running
                 if node.uuid != source.uuid and (target is None or node.uuid != target.uuid)]
    if elsewhere and (len(running) > 1 or (inst.disk_template in disks.INT_MIRROR)):
        raise OpExecError(f"Instance {inst.name} runs on {', '.join(n.name for n in running)}"
                          f", not only on {source.name}"
                          + (f" or {target.name}" if target is not None else "")
                          + "; you will have to ensure manually that it runs only on one and "
                          "restart this operation")
    if elsewhere:
        target = elsewhere[0]
        say(f"* instance running on unexpected node ({target.name}), updating as the new "
            "primary")
        on_target = True
    if not (on_source or on_target):
        raise OpExecError("Instance does not seem to be running at all; in this case it's "
                          "safer to repair by running 'herder instance shutdown' to ensure "
                          "disk shutdown, and then restarting it")
    if on_target and target is not None:
        say(f"* instance running on secondary node ({target.name}), updating config")
        order = Order(config, inst, target, reason)
        try:  # the target records the domain as its own (and configures routed NICs)
            _say_warnings(say, target, env.rpc.call(target, _finalize_dst(
                order, payload, success=True)))
        except HerderError as err:
            say(f"* {target.name} did not record the domain: {err}")
        try:  # the source forgets its records of it (and a stopped definition)
            env.rpc.call(source, _finalize_src(order, payload, success=True, live=True))
        except HerderError as err:
            say(f"* {source.name} kept its records of the instance: {err}")
        set_primary(env, inst, target)
        disks.finish_live_migration(env, config, inst, source, target, migrated=True)
    else:
        say(f"* instance confirmed to be running on its primary node ({source.name})")
        if target is not None:
            disks.finish_live_migration(env, config, inst, source, target, migrated=False)
    say("* done")


def _say_warnings(say: Say, node: model.Node, answer: migration_calls.FinalizeAnswer) -> None:
    """A node's warnings in a finalisation's answer (e.g. a routed NIC it could not set up)."""
    for warning in answer.warnings:
        say(f"* warning on {node.name}: {warning}")


def migrate_or_failover(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                        target: model.Node, *, live: bool, allow_failover: bool,
                        reason: ReasonTrail, say: Say, ignore_source: bool = False,
                        allow_runtime_changes: bool = True) -> None:
    """Migrate when the instance runs and the hypervisor can; otherwise refuse, or with
    `allow_failover` fail over (explicitly). The test driver's nodes keep the stand-in."""
    source = config.nodes[inst.primary_node]
    order = Order(config, inst, None, reason)
    try:
        answer = env.rpc.call(source, migration_calls.InstanceMigratable(
            name=order.name, reason=reason, version=order.version, claim=order.claim))
    except HerderError as err:
        if not (allow_failover or ignore_source):
            raise OpExecError(f"Can't migrate {inst.name}: {err}; use failover") from None
        say(f"{source.name} does not answer ({err}): failing {inst.name} over instead")
        failover(env, config, inst, target, reason=reason, say=say, ignore_consistency=True)
        return
    if answer.method == "restart":
        say(f"{inst.name}: {answer.reason}; its stand-in hand-over (define and start "
            f"on {target.name}, then remove on {source.name}) moves it")
        move_instance(env, config, inst, target, live=live, reason=reason,
                      ignore_source=ignore_source, feedback=say)
        return
    if not answer.running:
        why = answer.reason or f"instance {inst.name} is not running"
        if not allow_failover:
            raise OpExecError(f"Can't migrate, please use failover: {why}")
        say(f"{why}: failing it over instead (allow_failover)")
        failover(env, config, inst, target, reason=reason, say=say)
        return
    live_migrate(env, config, inst, target, live=live, reason=reason, say=say,
                 allow_runtime_changes=allow_runtime_changes)
