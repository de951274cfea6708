"""Helpers of exports and imports (`lu/backup`'s LUs, `lu/create`'s mode import): a disk
streamed from its node into an export being written on another node, a node's streaming
address, the progress line of the job log, the nodes holding an export, an export's
config.ini read from its node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from herder.core import diskobjects, exportconf, model, ports
from herder.core.errors import HerderError, OpPrereqError
from herder.core.noderpc import instance_payload

COPY_TIMEOUT = 6 * 3600.0  # seconds for one disk's stream
PARTIAL = ".new"  # an export being written (noded.exports.PARTIAL)


def progress_line(what: str, copied: int, seconds: float) -> str:
    """A disk's progress line in the job log: bytes, time, rate."""
    rate = copied / seconds / 2**20 if seconds > 0 else 0.0
    return f"{what}: {copied} bytes ({copied / 2**20:.1f} MiB) in {seconds:.1f} s, " \
           f"{rate:.1f} MiB/s"


def node_target(env: Any, node: model.Node) -> dict[str, Any]:
    """Where a node's noded takes streams (`POST /import/<token>`)."""
    return {"name": node.name, "address": node.primary_ip,
            "port": getattr(env.rpc, "port", ports.NODED)}


def stream_disk(env: Any, config: model.ConfigData, inst: model.Instance, index: int,
                source: model.Node, target: model.Node) -> int:
    """Disk `index` of `inst` from its device on `source`, through its OS's `export` script,
    into the export being written on `target`; the bytes the target confirmed (with the
    checksum of what was sent)."""
    disk = inst.disks[index]
    prepared = env.rpc.call(target, "export_prepare_dump", {
        "instance": inst.name, "dump": disk.uuid})
    sent = env.rpc.call(source, "blockdev_export", {
        "disk": diskobjects.disk_object(config, inst, disk, source.uuid),
        "instance": inst.name, "idx": index, "token": prepared["token"],
        "target": node_target(env, target),
        "os_instance": instance_payload(config, inst)}, timeout=COPY_TIMEOUT)
    return int(sent.get("bytes") or 0)


def find_exports(env: Any, config: model.ConfigData, name: str,
                 feedback: Callable[[str], None]) -> list[model.Node]:
    """The online nodes holding an export named `name`."""
    found = []
    for node in sorted(config.nodes.values(), key=lambda n: n.name):
        if node.offline:
            continue
        try:
            names = env.rpc.call(node, "export_list", {}, timeout=30)
        except HerderError as err:
            feedback(f"could not list the exports of {node.name}: {err}")
            continue
        if name in names:
            found.append(node)
    return found


def import_export_info(env: Any, node: model.Node, name: str) -> exportconf.ExportInfo:
    """The export `name` on `node`, read from its config.ini (Ganeti's ExportInfo)."""
    try:
        text = env.rpc.call(node, "export_info", {"name": name}, timeout=60)
        return exportconf.parse(str(text))
    except HerderError as err:
        raise OpPrereqError(f"cannot read export {name} on {node.name}: {err}",
                            "wrong_input") from None
