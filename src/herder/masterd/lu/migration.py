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
from typing import Any, NoReturn

from herder.core import model, vmclaim
from herder.core.errors import HerderError, OpExecError
from herder.core.noderpc import instance_payload
from herder.masterd.lu import disks, handover

Say = Callable[[str], None]
POLL_INTERVAL = 0.5
FEEDBACK_INTERVAL = 5.0
MIGRATION_TIMEOUT = 3600.0  # a migration that never converges is aborted after this


def _call_args(config: model.ConfigData, inst: model.Instance, target: model.Node | None,
               reason: list[Any]) -> dict[str, Any]:
    args: dict[str, Any] = {"name": inst.name, "reason": reason, "version": inst.serial_no,
                            vmclaim.CLAIM_KEY: vmclaim.claim_for(config, inst)}
    if target is not None:
        args[vmclaim.MOVE_KEY] = vmclaim.move_for(config, inst, target)
    return args


def set_primary(env: Any, inst: model.Instance, target: model.Node) -> None:
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


def where_it_runs(env: Any, inst: model.Instance, node: model.Node) -> handover.Copy:
    try:
        return handover.Copy.from_domains(env.rpc.call(node, "instance_list", {}, timeout=30),
                                          inst.name)
    except HerderError:
        return handover.UNKNOWN


def live_migrate(env: Any, config: model.ConfigData, inst: model.Instance, target: model.Node,
                 *, live: bool, reason: list[Any], say: Say) -> None:
    source = config.nodes[inst.primary_node]
    payload = instance_payload(config, inst)
    args = _call_args(config, inst, None, reason)
    move = _call_args(config, inst, target, reason)
    say(f"* migrating {inst.name} from {source.name} to {target.name} "
        f"({'live' if live else 'non-live: the guest is paused while its memory moves'})")
    info = env.rpc.call(source, "migration_info", args)
    disks.prepare_live_migration(env, config, inst, source, target)

    def abort(why: str, failure: HerderError | str) -> NoReturn:
        """Ganeti's _AbortMigration and _RevertDiskStatus; then where does it run?"""
        say(f"{why}, aborting")
        notes = []
        for node, method, extra in ((target, "finalize_migration_dst", {"instance": payload}),
                                    (source, "finalize_migration_src", {"live": live})):
            try:
                env.rpc.call(node, method, {**move, **extra, "success": False}, timeout=120)
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
        env.rpc.call(target, "accept_instance", {**move, "instance": payload, "info": info})
    except HerderError as err:
        abort("Pre-migration failed", err)
    try:
        env.rpc.call(source, "migrate_instance", {**move, "instance": payload,
                                                  "target": target.name, "live": live})
    except HerderError as err:
        abort("Migration failed", err)
    say("* starting memory transfer")
    started = last_feedback = time.monotonic()
    while True:
        try:
            status = env.rpc.call(source, "instance_get_migration_status", args, timeout=60)
        except HerderError as err:
            abort("Migration failed", err)
        state = status.get("status")
        if state in ("failed", "cancelled"):
            abort("Migration failed", status.get("error") or "hypervisor returned failure")
        if state != "active":
            break
        now = time.monotonic()
        if now - started > MIGRATION_TIMEOUT:
            abort("Migration did not converge", f"still running after {MIGRATION_TIMEOUT:g}s")
        if now - last_feedback >= FEEDBACK_INTERVAL and status.get("total_ram"):
            say(f"* memory transfer progress: "
                f"{100.0 * status['transferred_ram'] / status['total_ram']:.2f} %")
            last_feedback = now
        time.sleep(POLL_INTERVAL)
    stats = status.get("stats") or {}
    say("* memory transfer complete" + (
        f" ({stats.get('total_ms')} ms, downtime {stats.get('downtime_ms')} ms)"
        if stats else ""))
    problems = []
    for node, method, extra in ((source, "finalize_migration_src", {"live": live}),
                                (target, "finalize_migration_dst", {"instance": payload})):
        try:
            env.rpc.call(node, method, {**move, **extra, "success": True}, timeout=120)
        except HerderError as err:
            problems.append(f"{node.name}: {err}")
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


def failover(env: Any, config: model.ConfigData, inst: model.Instance, target: model.Node, *,
             reason: list[Any], say: Say, shutdown_timeout: int = 120,
             ignore_consistency: bool = False) -> None:
    """Ganeti's _ExecFailover: shut down on the source (a dead or ignored source: warn and go
    on), release the disks there, the config's primary = target, assemble the disks there and
    start it when it is marked up."""
    source = config.nodes[inst.primary_node]
    args = _call_args(config, inst, target, reason)
    say(f"* shutting down instance {inst.name} on source node {source.name}")
    try:
        env.rpc.call(source, "instance_shutdown", {**args, "timeout": shutdown_timeout},
                     timeout=shutdown_timeout + 60)
    except HerderError as err:
        if not (ignore_consistency or source.offline):
            raise OpExecError(f"Could not shutdown instance {inst.name} on node "
                              f"{source.name}: {err}") from None
        say(f"Could not shutdown instance {inst.name} on node {source.name}, proceeding "
            f"anyway; please make sure node {source.name} is down; error details: {err}")
    say("* deactivating the instance's disks on source node")
    disks.shutdown_disks(env, config, inst, nodes=[source], ignore_primary=True)
    set_primary(env, inst, target)
    # the source's stopped copy is no longer the instance: remove its definition (the disks
    # stay: a DRBD secondary needs them)
    fresh = env.store.load()
    moved = fresh.instances[inst.uuid]
    if not source.offline:
        try:
            env.rpc.call(source, "instance_stop_stray", _call_args(fresh, moved, None, reason))
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
        env.rpc.call(target, "instance_start", {**_call_args(fresh, moved, None, reason),
                                                "instance": instance_payload(fresh, moved)})
    except HerderError as err:
        disks.shutdown_disks(env, fresh, moved, nodes=[target])
        raise OpExecError(f"Could not start instance {inst.name} on node {target.name}: "
                          f"{err}") from None


def cleanup(env: Any, config: model.ConfigData, inst: model.Instance, target: model.Node, *,
            reason: list[Any], say: Say) -> None:
    """Ganeti's _ExecCleanup after a failed or interrupted migration."""
    source = config.nodes[inst.primary_node]
    payload = instance_payload(config, inst)
    move = _call_args(config, inst, target, reason)
    say("* checking where the instance actually runs")
    on_source = where_it_runs(env, inst, source)
    on_target = where_it_runs(env, inst, target)
    if not (on_source.known and on_target.known):
        silent = source if not on_source.known else target
        raise OpExecError(f"cannot ask {silent.name} where {inst.name} runs; cleanup needs "
                          "both nodes")
    if on_source.running and on_target.running:
        say("Trying to cleanup after failed migration")
        for node, method, extra in ((target, "finalize_migration_dst", {"instance": payload}),
                                    (source, "finalize_migration_src", {"live": True})):
            try:
                env.rpc.call(node, method, {**move, **extra, "success": False}, timeout=120)
            except HerderError as err:
                raise OpExecError(f"Instance migration cleanup failed: {err}") from None
        on_source = where_it_runs(env, inst, source)
        on_target = where_it_runs(env, inst, target)
        if on_source.running and on_target.running:
            raise OpExecError("Instance seems to be running on two nodes, or the hypervisor "
                              "is confused; you will have to ensure manually that it runs "
                              "only on one and restart this operation")
    if not (on_source.running or on_target.running):
        raise OpExecError("Instance does not seem to be running at all; in this case it's "
                          "safer to repair by running 'herder instance shutdown' to ensure "
                          "disk shutdown, and then restarting it")
    if on_target.running:
        say(f"* instance running on secondary node ({target.name}), updating config")
        try:  # the target records the domain as its own
            env.rpc.call(target, "finalize_migration_dst", {**move, "instance": payload,
                                                            "success": True})
        except HerderError as err:
            say(f"* {target.name} did not record the domain: {err}")
        set_primary(env, inst, target)
        disks.finish_live_migration(env, config, inst, source, target, migrated=True)
    else:
        say(f"* instance confirmed to be running on its primary node ({source.name})")
        disks.finish_live_migration(env, config, inst, source, target, migrated=False)
    say("* done")


def migrate_or_failover(env: Any, config: model.ConfigData, inst: model.Instance,
                        target: model.Node, *, live: bool, allow_failover: bool,
                        reason: list[Any], say: Say, ignore_source: bool = False) -> None:
    """Migrate when the instance runs and the hypervisor can; otherwise refuse, or with
    `allow_failover` fail over (explicitly). The test driver's nodes keep the stand-in."""
    from herder.masterd.lu.instance import move_instance

    source = config.nodes[inst.primary_node]
    args = _call_args(config, inst, None, reason)
    try:
        answer = env.rpc.call(source, "instance_migratable", args, timeout=60)
    except HerderError as err:
        if not (allow_failover or ignore_source):
            raise OpExecError(f"Can't migrate {inst.name}: {err}; use failover") from None
        say(f"{source.name} does not answer ({err}): failing {inst.name} over instead")
        failover(env, config, inst, target, reason=reason, say=say, ignore_consistency=True)
        return
    if not isinstance(answer, dict):
        raise OpExecError(f"Can't migrate {inst.name}: {source.name} gave no answer to "
                          "instance_migratable")
    if answer.get("method") == "restart":
        say(f"{inst.name}: {answer.get('reason')}; its stand-in hand-over (define and start "
            f"on {target.name}, then remove on {source.name}) moves it")
        move_instance(env, config, inst, target, live=live, reason=reason,
                      ignore_source=ignore_source, feedback=say)
        return
    if not answer.get("running"):
        why = answer.get("reason") or f"instance {inst.name} is not running"
        if not allow_failover:
            raise OpExecError(f"Can't migrate, please use failover: {why}")
        say(f"{why}: failing it over instead (allow_failover)")
        failover(env, config, inst, target, reason=reason, say=say)
        return
    live_migrate(env, config, inst, target, live=live, reason=reason, say=say)
