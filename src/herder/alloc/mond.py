"""Dynamic load from the monitoring daemons (hail/hbal ``--mond``, ``--mond-data``, ``--mond-xen``).

Ganeti's rules (``HTools/Backend/MonD.hs``, 3.0):

* One data collector is used: ``cpu-avg-load`` (node total), or ``xen-cpu-avg-load``
  (per instance) with ``--mond-xen``; none with ``--ignore-dynu``.
* Every node of the cluster (offline ones too) is asked for that collector's report, from the
  agent at ``http://<node name>:1815/1/report/default/<collector>`` or from the ``--mond-data``
  file (a JSON list of ``{"node": name, "reports": [report objects]}``; the first report of
  the collector's name counts). If any node has no usable report, the collector's data is
  ignored entirely (warning "Didn't receive an answer by all MonDs, ...").
* ``cpu-avg-load``: the node's cpu load becomes the report's ``cpu_total``; each instance whose
  primary is the node gets ``cpu_total / node vCPUs in use * instance vCPUs``.
* ``xen-cpu-avg-load``: the reports' ``data`` maps instance names to their cpu load; every
  instance must be listed (else ignored, "No CPU information available for [...]"); a node's
  cpu load becomes the sum over its primary instances.

Only the cpu component of the dynamic utilisation changes; it enters the score through
``cpu_load_cv``. Unlike Ganeti (curl without a time limit, one node after the other), the
agents are asked in parallel with a short timeout.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

from herder.alloc.model import Cluster
from herder.alloc.protocol import InputError
from herder.core import ports, untrusted

CPU_AVG_LOAD = "cpu-avg-load"
XEN_CPU_AVG_LOAD = "xen-cpu-avg-load"
API_VERSION = 1
# DCReport's fields in Ganeti's order; "category" may be missing (optional, null allowed).
_REPORT_KEYS = ("name", "version", "format_version", "timestamp", "category", "kind", "data")

Warn = Callable[[str], None]


@dataclass
class MondOptions:
    """What ``--mond``, ``--mond-data``, ``--mond-xen`` and ``--ignore-dynu`` ask for."""

    enabled: bool = False  # --mond=yes
    data: dict[str, list[dict[str, Any]]] | None = None  # parsed --mond-data (None: ask agents)
    xen: bool = False  # --mond-xen
    ignore_dynu: bool = False
    port: int = ports.MOND
    timeout: float = 2.0  # seconds per agent


def _keys_of(obj: dict[str, Any]) -> str:
    return "[" + ",".join(json.dumps(k) for k in obj) + "]"


def parse_mond_data(text: str) -> dict[str, list[dict[str, Any]]]:
    """Parse a MonD mock file; raises InputError with hbal's texts (without its prefix)."""
    try:
        top = untrusted.loads(text)
    except ValueError:
        raise InputError("Parsing MonD's answer: Invalid JSON: a JSON text a serialized "
                         "object or array at the top level.") from None
    if not isinstance(top, list):
        raise InputError("Parsing MonD's answer: Unable to read list")
    result: dict[str, list[dict[str, Any]]] = {}
    for entry in top:
        if not isinstance(entry, dict):
            raise InputError("Parsing MonD's answer: Unable to read JSObject")
        if "node" not in entry:
            raise InputError("Parsing node's name: key 'node' not found, object contains "
                             f"only {_keys_of(entry)}")
        node = entry["node"]
        if not isinstance(node, str):
            raise InputError("Parsing node's name: key 'node': expected a string")
        if "reports" not in entry:
            raise InputError("Parsing node's reports: key 'reports' not found, object "
                             f"contains only {_keys_of(entry)}")
        reports = entry["reports"]
        if not isinstance(reports, list):
            raise InputError("Parsing node's reports: key 'reports': Unable to read list")
        for rep in reports:
            if not isinstance(rep, dict):
                raise InputError("Parsing node's reports: key 'reports': Unable to read "
                                 "JSObject")
            for key in _REPORT_KEYS:
                if key != "category" and key not in rep:
                    raise InputError(f"Parsing node's reports: key 'reports': key '{key}' "
                                     f"not found, object contains only {_keys_of(rep)}")
        result[node] = reports  # a later entry for the same node wins (Map.fromList)
    return result


def _cpu_total(report: dict[str, Any] | None) -> float | None:
    """``cpu_total`` of a cpu-avg-load report (its data must be a whole CPUavgload)."""
    if report is None:
        return None
    data = report.get("data")
    if not isinstance(data, dict):
        return None
    number, cpus, total = data.get("cpu_number"), data.get("cpus"), data.get("cpu_total")
    if not isinstance(number, int) or isinstance(number, bool):
        return None
    if not isinstance(cpus, list) or not all(_is_num(c) for c in cpus):
        return None
    if not _is_num(total):
        return None
    return float(total)


def _is_num(x: Any) -> TypeGuard[int | float]:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _instance_map(report: dict[str, Any] | None) -> dict[str, float] | None:
    if report is None:
        return None
    data = report.get("data")
    if not isinstance(data, dict) or not all(_is_num(v) for v in data.values()):
        return None
    return {k: float(v) for k, v in data.items()}


def fetch_report(host: str, collector: str, port: int = ports.MOND,
                 timeout: float = 2.0) -> tuple[dict[str, Any] | None, bool]:
    """GET one report from a node's agent: (report or None, whether the agent answered)."""
    import http.client  # not httpx: the allocator's script entry starts fast on the stdlib

    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", f"/{API_VERSION}/report/default/{collector}")
        resp = conn.getresponse()
        body = resp.read()
    except (OSError, http.client.HTTPException):
        return None, False
    finally:
        conn.close()
    try:
        obj = untrusted.loads(body)
    except ValueError:
        return None, True
    if not isinstance(obj, dict) or any(k not in obj for k in _REPORT_KEYS if k != "category"):
        return None, True
    return obj, True


def _reports(cl: Cluster, collector: str, opts: MondOptions,
             warn: Warn) -> list[dict[str, Any] | None]:
    """Each node's report of ``collector`` (None where there is none), in node order."""
    if opts.data is not None:
        out: list[dict[str, Any] | None] = []
        for node in cl.nodes:
            reps = opts.data.get(node.name, [])
            out.append(next((r for r in reps if r.get("name") == collector), None))
        return out
    names = [n.name for n in cl.nodes]
    if not names:
        return []
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
        answers = list(pool.map(lambda h: fetch_report(h, collector, opts.port, opts.timeout),
                                names))
    for name, (_, answered) in zip(names, answers, strict=True):
        if not answered:
            warn(f"Failed to contact node's {name} MonD for DC {collector}")
    return [rep for rep, _ in answers]


def _use_node_totals(cl: Cluster, totals: list[float]) -> None:
    for node, total in zip(cl.nodes, totals, strict=True):
        node.load[0] = total
        for idx in node.plist:
            inst = cl.instances[idx]
            share = total / node.u_cpu * inst.vcpus if node.u_cpu else 0.0
            inst.util = (share, inst.util[1], inst.util[2], inst.util[3])


def _use_instance_cpu(cl: Cluster, maps: list[dict[str, float]], warn: Warn) -> bool:
    usage: dict[str, float] = {}
    for m in maps:  # Map.unions: the first node's value wins
        for k, v in m.items():
            usage.setdefault(k, v)
    missing = sorted({i.name for i in cl.instances} - usage.keys())
    if missing:
        warn("No CPU information available for [" + ",".join(json.dumps(x) for x in missing)
             + "]")
        return False
    for inst in cl.instances:
        u = inst.util
        inst.util = (usage[inst.name], u[1], u[2], u[3])
    for node in cl.nodes:
        node.load[0] = sum(cl.instances[i].util[0] for i in node.plist)
    return True


def apply_mond(cl: Cluster, opts: MondOptions, warn: Warn | None = None) -> bool:
    """Bring MonD's cpu load into ``cl`` (in place). False when some data had to be ignored."""
    if not opts.enabled or opts.ignore_dynu:
        return True
    say: Warn = warn or (lambda _msg: None)
    collector = XEN_CPU_AVG_LOAD if opts.xen else CPU_AVG_LOAD
    reports = _reports(cl, collector, opts, say)
    if opts.xen:
        maps = [_instance_map(r) for r in reports]
        got_maps = [m for m in maps if m is not None]
        if len(got_maps) == len(maps):
            return _use_instance_cpu(cl, got_maps, say)
    else:
        totals = [_cpu_total(r) for r in reports]
        got = [t for t in totals if t is not None]
        if len(got) == len(totals):
            _use_node_totals(cl, got)
            return True
    say(f"Didn't receive an answer by all MonDs, {collector}'s data will be ignored.")
    return False
