"""An instance's domain on this node: define, start, shutdown, reboot, balloon, remove, the
stray copy of another node's instance, the serial log's tail, and the OS scripts (install,
rename)."""

from __future__ import annotations

import contextlib
import logging

from herder.core import console as console_names
from herder.core import ordered, paths
from herder.core.rpcdefs import instance_calls
from herder.core.rpcdefs.payload import InstancePayload
from herder.noded import console, domains, osdef
from herder.noded.hypervisor import HypervisorError
from herder.noded.node import Node, RpcFailure

log = logging.getLogger("herder.noded")


def instance_define(node: Node, call: instance_calls.InstanceDefine) -> None:
    inst = call.instance
    domains.admit_run(node, call.claim, call.move, inst)
    if node.hv.state(inst.name) not in domains.RUNNING_STATES:
        domains.define(node, inst)
    node.record(inst.name, "down", call.reason, call.version)


def instance_start(node: Node, call: instance_calls.InstanceStart) -> None:
    inst = call.instance
    domains.admit_run(node, call.claim, call.move, inst)
    starting = node.hv.state(inst.name) not in domains.RUNNING_STATES
    if starting:
        domains.define(node, inst)  # from the config, at every start
    node.hv.start(inst.name)
    if starting:
        domains.routed_nics_up(node, inst)
    ordered.clear(node.settings.run_dir, inst.name)
    node.record(inst.name, "up", call.reason, call.version)


def instance_shutdown(node: Node, call: instance_calls.InstanceShutdown) -> None:
    domains.note_claim(node, call.name, call.claim)
    with ordered.expect(node.settings.run_dir, call.name, "shutdown", call.timeout):
        node.hv.shutdown(call.name, call.timeout)
    domains.routed_nics_gone(node, call.instance)
    node.record(call.name, "down", call.reason, call.version)


def instance_reboot(node: Node, call: instance_calls.InstanceReboot) -> None:
    hard = call.type != "soft"
    # a reboot starts the domain again: only on its primary
    node.guard.admit_run(call.name, domains.claim_of(call.claim), None)
    with ordered.expect(node.settings.run_dir, call.name, "reboot", 120):
        node.hv.reboot(call.name, hard=hard)
    if hard and call.instance is not None:  # a new QEMU, new taps
        domains.routed_nics_up(node, call.instance)
    node.record(call.name, "up", call.reason, call.version)


def instance_balloon_memory(node: Node, call: instance_calls.InstanceBalloonMemory) -> None:
    """Ganeti's instance_balloon_memory: the running guest's memory, through its balloon
    (a migration to a node with less free memory, allow_runtime_changes)."""
    domains.note_claim(node, call.name, call.claim)
    try:
        node.hv.balloon(call.name, call.memory)
    except HypervisorError as err:
        raise RpcFailure(f"cannot set the memory of {call.name} to {call.memory} MiB: "
                         f"{err}") from None


def instance_remove(node: Node, call: instance_calls.InstanceRemove) -> None:
    # a stream from another cluster into its disks ends first (a remote import the master
    # died in: the recovery removes the half-made instance while the source still sends)
    if node.remote_imports.abort_instance(call.name):
        log.warning("ended the remote imports into %s, which is being removed", call.name)
    with ordered.expect(node.settings.run_dir, call.name, "remove", 60):
        node.hv.undefine(call.name)
    node.disks.remove_all(call.disks)
    node.forget(call.name)
    node.guard.forget(call.name)
    log_file = console_names.serial_log(node.serial_log_dir, call.name)
    for stale in (log_file, log_file.with_name(log_file.name + ".1")):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()  # the serial log goes with the instance (a new one is another VM)


def instance_stop_stray(node: Node, call: instance_calls.InstanceStopStray
                        ) -> instance_calls.StopStrayAnswer:
    """Destroy and undefine this node's copy of an instance whose primary is another node
    (the claim says which): a copy left by a failed or interrupted move. Refused when the
    claim names this node as the primary. The disks stay (a DRBD secondary needs them)."""
    node.guard.not_mine(call.name, domains.claim_of(call.claim))
    before = node.hv.state(call.name)
    with ordered.expect(node.settings.run_dir, call.name, "stray", 60):
        node.hv.undefine(call.name)
    node.forget(call.name)
    log.warning("stopped the stray copy of %s (it was %s)", call.name, before or "absent")
    return instance_calls.StopStrayAnswer(node=node.name, name=call.name, was=before)


def instance_console_log(node: Node, call: instance_calls.InstanceConsoleLog) -> str:
    """The tail of the instance's serial log (`noded.console`)."""
    return console.tail(node.serial_log_dir, call.instance, call.lines)


def instance_os_add(node: Node, call: instance_calls.InstanceOsAdd
                    ) -> instance_calls.OsScriptAnswer:
    """Install the instance's OS: the OS definition's `create` script (OS API 10/15/20),
    with the documented environment; an unknown variant is refused unless forced."""
    return _os_script(node, call.instance, "create", "add-", force_variant=call.force_variant)


def instance_run_rename(node: Node, call: instance_calls.InstanceRunRename
                        ) -> instance_calls.OsScriptAnswer:
    """The OS definition's `rename` script after an instance rename (Ganeti's
    instance_run_rename: OLD_INSTANCE_NAME in its environment)."""
    return _os_script(node, call.instance, "rename", "rename-", old_name=call.old_name)


def _os_script(node: Node, inst: InstancePayload, script: osdef.OsScript, log_prefix: str, *,
               force_variant: bool = True, old_name: str | None = None
               ) -> instance_calls.OsScriptAnswer:
    try:
        definition = osdef.find_os(osdef.split_os_name(inst.os)[0],
                                   list(node.settings.os_path))
        osdef.check_variant(definition, inst.os, force=force_variant)
        # only `create` writes the disks: an rbd image is staged and imported for it alone
        with node.disks.os_disk_paths(inst, install=script == "create") as os_disks:
            env = osdef.os_environment(definition,
                                       osdef.OsInstanceData.from_payload(inst, os_disks))
            env.update(osdef.script_variables(script, old_name=old_name))
            log_dir = node.settings.state_dir / "os-logs"
            log_dir.mkdir(parents=True, exist_ok=True)
            result = osdef.run_os_script(definition, script, env, node.settings.os_timeout,
                                         paths.child(log_dir, inst.name, prefix=log_prefix,
                                                     suffix=".log", what="instance name"))
    except osdef.OsError as err:
        raise RpcFailure(f"OS {inst.os!r} for {inst.name}: {err}") from None
    return instance_calls.OsScriptAnswer(os=inst.os, log=str(getattr(result, "log_file", "")))
