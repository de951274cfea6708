"""Asking an iallocator: build the iallocator v2 input message from the config, run a script
found in the search path (Ganeti's `hail` works) or herder's built-in allocator, read the answer.

design-2.1 "Default iallocator names": for each request type the cluster lists allocators to try
in order; `herder` names the built-in one (the same engine as `herder alloc`).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from herder.core import livefigures, model, paths, untrusted
from herder.core.errors import OpPrereqError
from herder.masterd.livecache import Snapshot

BUILTIN = "herder"
DEFAULT_SEARCH_PATH = (Path("/usr/lib/herder/iallocators"), Path("/usr/lib/ganeti/iallocators"),
                       Path("/usr/local/lib/ganeti/iallocators"))
RUN_TIMEOUT = 300.0


def _instance_entry(config: model.ConfigData, inst: model.Instance) -> dict[str, Any]:
    be = config.filled_beparams(inst)
    group = config.instance_group(inst)
    nics = []
    for nic in inst.nics:
        params = config.filled_nicparams(nic, group)
        nics.append({"ip": nic.ip, "mac": nic.mac, "mode": params["mode"],
                     "link": params["link"],
                     "bridge": params["link"] if params["mode"] == "bridged" else None,
                     "network": nic.network})
    return {
        "disks": [{"size": d.size, "mode": d.mode, "spindles": d.spindles or 1}
                  for d in inst.disks],
        "disk_space_total": disk_space_total(inst.disk_template, [d.size for d in inst.disks]),
        "disk_template": inst.disk_template, "hypervisor": inst.hypervisor,
        "tags": list(inst.tags), "nics": nics, "vcpus": be["vcpus"], "memory": be["maxmem"],
        "spindle_use": be["spindle_use"], "os": inst.os, "admin_state": inst.admin_state,
        "admin_state_source": inst.admin_state_source,
        "nodes": [config.node_name(n) for n in inst.all_nodes],
    }


def disk_space_total(template: str, sizes: Sequence[int]) -> int:
    """Disk space on each node: DRBD adds 128 MiB of metadata per disk (as Ganeti)."""
    if template == "drbd":
        return sum(sizes) + 128 * len(sizes)
    if template in ("plain", "file"):
        return sum(sizes)
    return 0


def request_template(config: model.ConfigData, request: Mapping[str, object]) -> str | None:
    """The disk template whose storage the node figures describe: the request's, else the
    relocated instance's, else the cluster's first (as Ganeti's iallocator input)."""
    template = request.get("disk_template")
    if isinstance(template, str):
        return template
    name = request.get("name")
    inst = config.find_instance_by_name(name) if isinstance(name, str) else None
    if inst is not None:
        return inst.disk_template
    templates = config.cluster.enabled_disk_templates
    return templates[0] if templates else None


def node_figures(config: model.ConfigData, node: model.Node, info: livefigures.NodeInfo,
                 template: str | None) -> dict[str, int]:
    """A node's dynamic iallocator data from its live figures, as Ganeti's masterd computes it:
    free memory less what its admin-up primaries may still take (maxmem − what each uses now,
    `core.livefigures.free_memory_for_allocation`), the storage unit of the request's disk
    template (0 when that template reports no space), the node OS's memory and CPUs as
    reserved."""
    runs = info.instances or {}
    primaries = config.primary_instances(node.uuid)
    free_memory = livefigures.free_memory_for_allocation(info.memory_free, [
        (config.filled_beparams(i)["maxmem"], i.admin_state == "up",
         runs[i.name].memory if i.name in runs else None) for i in primaries])
    unit = livefigures.unit_for_template(info.storage, template) if template else \
        livefigures.default_unit(info.storage)
    nd = config.filled_ndparams(node)
    pv = livefigures.spindles(info.storage) if nd["exclusive_storage"] else None
    return {
        "total_memory": info.memory_total, "reserved_memory": info.memory_dom0,
        "free_memory": free_memory,
        "total_disk": unit.storage_size if unit else 0,
        "free_disk": unit.storage_free if unit else 0,
        "total_cpus": info.cpu_total, "reserved_cpus": info.cpu_dom0,
        "total_spindles": pv.storage_size if pv else nd["spindle_count"],
        "free_spindles": pv.storage_free if pv else nd["spindle_count"],
    }


def build_message(config: model.ConfigData, request: Mapping[str, object],
                  live: Snapshot) -> dict[str, Any]:
    """The iallocator v2 input message. `live`: the node daemons' figures and run states
    (masterd.livecache); a node without is marked offline."""
    c = config.cluster
    template = request_template(config, request)
    groups = {
        g.uuid: {"name": g.name, "alloc_policy": g.alloc_policy,
                 "networks": sorted(g.networks), "tags": list(g.tags),
                 "ipolicy": model.to_builtins(config.filled_ipolicy(g))}
        for g in config.nodegroups.values()
    }
    nodes: dict[str, Any] = {}
    for node in config.nodes.values():
        info = live.info(node.uuid)
        primaries = config.primary_instances(node.uuid)
        nd = config.filled_ndparams(node)
        entry: dict[str, Any] = {
            "primary_ip": node.primary_ip, "secondary_ip": node.secondary_ip or node.primary_ip,
            "tags": list(node.tags), "master_candidate": node.master_candidate,
            "master_capable": node.master_capable, "vm_capable": node.vm_capable,
            "drained": node.drained, "offline": node.offline or info is None,
            "group": node.group,
            "ndparams": {"spindle_count": nd["spindle_count"],
                         "exclusive_storage": nd["exclusive_storage"],
                         "oob_program": nd["oob_program"] or None},
            "i_pri_memory": sum(config.filled_beparams(i)["maxmem"] for i in primaries),
            "i_pri_up_memory": sum(config.filled_beparams(i)["maxmem"] for i in primaries
                                   if i.admin_state == "up"),
        }
        if info is not None:
            entry.update(node_figures(config, node, info, template))
        nodes[node.name] = entry
    return {
        "version": 2, "cluster_name": c.name, "cluster_tags": list(c.tags),
        "enabled_hypervisors": list(c.enabled_hypervisors),
        "ipolicy": model.to_builtins(c.ipolicy), "nodegroups": groups, "nodes": nodes,
        "instances": {i.name: _instance_entry(config, i) for i in config.instances.values()},
        "request": dict(request),
    }


def find_script(name: str, search_path: Sequence[Path]) -> Path | None:
    for directory in search_path:
        try:
            candidate = paths.child(directory, name, what="iallocator name")
        except paths.UnsafeName:
            return None
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def run(name: str, message: Mapping[str, object],
        search_path: Sequence[Path] = DEFAULT_SEARCH_PATH) -> dict[str, Any]:
    """The allocator's answer {success, info, result}; OpPrereqError when it cannot be run or
    fails (exit code non-zero, unusable output), as Ganeti reports it."""
    if name == BUILTIN:
        from herder.alloc import InputError, answer_message  # the allocator is a library

        try:
            return json.loads(answer_message(dict(message)).to_json())
        except InputError as err:
            raise OpPrereqError(f"iallocator {name}: {err}") from None
    script = find_script(name, search_path)
    if script is None:
        raise OpPrereqError(f"iallocator {name!r} not found in "
                            f"{', '.join(str(p) for p in search_path)}", "unknown_entity")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(message, fh)
        path = fh.name
    try:
        proc = subprocess.run([str(script), path], capture_output=True, text=True,
                              timeout=RUN_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise OpPrereqError(f"iallocator {name} did not answer within {RUN_TIMEOUT:g}s") \
            from None
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise OpPrereqError(f"iallocator {name} failed (exit {proc.returncode}): "
                            f"{(proc.stderr or proc.stdout).strip()[-300:]}")
    try:
        reply = untrusted.loads(proc.stdout, what=f"iallocator {name}'s answer")
    except untrusted.BadDocument as err:
        raise OpPrereqError(f"{err}: {proc.stdout[:200]!r}") from None
    if not isinstance(reply, dict) or "success" not in reply:
        raise OpPrereqError(f"iallocator {name}: answer lacks 'success'")
    if "result" not in reply and "nodes" in reply:
        reply["result"] = reply["nodes"]
    return reply


def _replies(names: Sequence[str], message: Mapping[str, object], search_path: Sequence[Path],
             failures: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each allocator's reply to `message`, in order (design-2.1); one that cannot answer adds
    its reason to `failures`."""
    for name in names:
        try:
            yield name, run(name, message, search_path)
        except OpPrereqError as err:
            failures.append(str(err))


def allocate_nodes(config: model.ConfigData, names: Sequence[str], request: Mapping[str, Any],
                   live: Snapshot,
                   search_path: Sequence[Path] = DEFAULT_SEARCH_PATH) -> tuple[str, list[str]]:
    """Try each iallocator in order (design-2.1); the first successful answer wins.
    Returns (allocator name, node names)."""
    if not names:
        raise OpPrereqError("no nodes given and no iallocator: give nodes, --iallocator, or "
                            "set the cluster's default iallocators")
    failures: list[str] = []
    for name, reply in _replies(names, build_message(config, request, live), search_path,
                                failures):
        if reply.get("success"):
            result = reply.get("result") or []
            if len(result) != int(request.get("required_nodes", len(result))):
                failures.append(f"iallocator {name} returned {len(result)} node(s), "
                                f"{request.get('required_nodes')} were needed")
                continue
            return name, [str(n) for n in result]
        failures.append(f"iallocator {name}: {reply.get('info') or 'no placement'}")
    raise OpPrereqError("; ".join(failures), "insufficient_resources")


def job_answer(config: model.ConfigData, names: Sequence[str], request: Mapping[str, object],
               live: Snapshot, search_path: Sequence[Path] = DEFAULT_SEARCH_PATH
               ) -> tuple[str, list[Any]]:
    """The result of the first allocator that succeeds on a request answered with jobs or
    lists (node-evacuate, change-group: [moved, failed, jobs]; multi-allocate: [allocated,
    failed]), and that allocator's name; OpPrereqError with every failure otherwise."""
    if not names:
        raise OpPrereqError("no iallocator: give one, or set the cluster's default "
                            "iallocators")
    failures: list[str] = []
    for name, reply in _replies(names, build_message(config, request, live), search_path,
                                failures):
        result = reply.get("result")
        if reply.get("success") and isinstance(result, list):
            return name, result
        failures.append(f"iallocator {name}: {reply.get('info') or 'no answer'}")
    raise OpPrereqError("; ".join(failures), "insufficient_resources")
