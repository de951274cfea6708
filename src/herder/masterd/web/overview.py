"""The cluster overview (`GET /2/herder/overview`, the console's first page), from the config,
masterd's live figures, the job queue and maintd's overview (pure: everything is passed in).

Alerts, each `{kind, subject, message}`:
- `unreachable`: an online node whose daemon gave no live figures (masterd's cache);
- `failed-repair`: a maintd incident whose repair failed;
- `degraded-mirror`: a DRBD instance whose secondary (or primary) node is offline, drained out
  of reach, or unreachable: its mirror cannot be in sync;
- `incident`: any other open maintd incident (a node's self-diagnose is not Ok);
- `daemon`: a herder daemon expected on a node is not running (or over its memory limit), as
  that node's mond's daemon collector says (masterd's latest sample of the node);
- `maintd`: maintd cannot be asked, or its last round failed;
- `node-recovery-off`: the cluster's switch (maintenance `nodeRecovery`) has maintd leave dead
  nodes alone (no fence, no recovery): an operator should know while it lasts.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, TypedDict

from herder.core import model, roles
from herder.masterd import livefields
from herder.masterd.livecache import Snapshot

FINISHED_JOB = frozenset({"success", "error", "canceled"})
OPEN_REPAIR = frozenset({"noted", "pending"})


class NodeRow(TypedDict):
    """A node on the overview: its role and state, the live figures (None: not known), its
    instance counts, maintd's view of it (diagnose, daemons, open or failed incidents)."""

    name: str
    uuid: str
    role: str
    state: str  # online | drained | offline
    mtotal: object
    mfree: object
    dtotal: object
    dfree: object
    ctotal: object
    live_error: str | None
    pinst_cnt: int
    sinst_cnt: int
    diagnose: object  # the diagnose report's status (maintd's reports)
    diagnose_error: object
    daemons_bad: dict[str, str] | None
    incidents: list[dict[str, Any]]


class InstanceRow(TypedDict):
    name: str
    status: str  # Ganeti's run status (`running`, `ERROR_down`, ...)
    pnode: str
    snodes: list[str]
    disk_template: str


class Overview(TypedDict):
    cluster: dict[str, str]
    nodes: list[NodeRow]
    instances: list[InstanceRow]
    instance_states: dict[str, int]
    jobs: list[dict[str, Any]]
    alerts: list[dict[str, str]]
    maintd: dict[str, object] | None


def node_row(config: model.ConfigData, node: model.Node, live: Snapshot,
             incidents: list[dict[str, Any]], reports: dict[str, dict[str, Any]],
             daemons_bad: dict[str, str] | None = None) -> NodeRow:
    """`daemons_bad`: the node's daemons whose collector is not OK (None: not known)."""
    figures = livefields.values(livefields.node_fields(config, node, live))
    report = reports.get(node.uuid) or {}
    diagnose = (report.get("data") or {}).get("status") if report else None
    state = "offline" if node.offline else "drained" if node.drained else "online"
    return {
        "name": node.name, "uuid": node.uuid,
        "role": roles.NAMES[roles.node_role(node, config.cluster.master_node)],
        "state": state,
        "mtotal": figures.get("mtotal"), "mfree": figures.get("mfree"),
        "dtotal": figures.get("dtotal"), "dfree": figures.get("dfree"),
        "ctotal": figures.get("ctotal"), "live_error": live.error(node.uuid),
        "pinst_cnt": sum(1 for i in config.instances.values() if i.primary_node == node.uuid),
        "sinst_cnt": sum(1 for i in config.instances.values()
                         if node.uuid in i.secondary_nodes),
        "diagnose": diagnose, "diagnose_error": report.get("error") if report else None,
        "daemons_bad": daemons_bad,
        "incidents": [i for i in incidents if i.get("node") == node.uuid
                      and i.get("repair-status") in OPEN_REPAIR | {"failed"}],
    }


def instance_row(config: model.ConfigData, inst: model.Instance,
                 live: Snapshot) -> InstanceRow:
    status = str(livefields.values(livefields.instance_fields(config, inst, live))["status"])
    return {"name": inst.name, "status": status, "pnode": config.node_name(inst.primary_node),
            "snodes": [config.node_name(n) for n in inst.secondary_nodes],
            "disk_template": inst.disk_template}


def alerts(config: model.ConfigData, nodes: list[NodeRow],
           incidents: list[dict[str, Any]], maintd_error: str | None) -> list[dict[str, str]]:
    found: list[dict[str, str]] = []
    unreachable = {n["uuid"] for n in nodes if n["state"] != "offline" and n["live_error"]}
    for row in nodes:
        if row["uuid"] in unreachable:
            found.append({"kind": "unreachable", "subject": row["name"],
                          "message": f"node {row['name']} does not answer: "
                                     f"{row['live_error']}"})
    for incident in incidents:
        status = incident.get("repair-status")
        subject = config.node_name(incident.get("node", ""))
        original = incident.get("original")
        if incident.get("action") == "node-failed" and isinstance(original, dict):
            # a dead node (maintd.nodefail): shown until the node is back, with its step
            found.append({"kind": "node-failed", "subject": subject,
                          "message": f"node {subject} failed ({status}): "
                                     f"{original.get('step')}: {original.get('detail')}"})
        elif status == "failed":
            found.append({"kind": "failed-repair", "subject": subject,
                          "message": f"repair of {subject} failed (incident "
                                     f"{incident.get('uuid')}, action {incident.get('action')})"})
        elif status in OPEN_REPAIR:
            found.append({"kind": "incident", "subject": subject,
                          "message": f"{subject}: maintd incident {status}, action "
                                     f"{incident.get('action')}"})
    for row in nodes:
        for daemon, message in sorted((row.get("daemons_bad") or {}).items()):
            found.append({"kind": "daemon", "subject": row["name"],
                          "message": f"{row['name']}: daemon {daemon}: {message}"})
    out_of_reach = unreachable | {n.uuid for n in config.nodes.values() if n.offline}
    for inst in sorted(config.instances.values(), key=lambda i: i.name):
        if inst.disk_template != "drbd":
            continue
        lost = [config.node_name(n) for n in inst.all_nodes if n in out_of_reach]
        if lost:
            found.append({"kind": "degraded-mirror", "subject": inst.name,
                          "message": f"{inst.name}: DRBD mirror degraded, "
                                     f"{', '.join(lost)} out of reach"})
    if maintd_error:
        found.append({"kind": "maintd", "subject": "maintd", "message": maintd_error})
    if not config.maintenance.node_recovery:
        found.append({"kind": "node-recovery-off", "subject": "maintd",
                      "message": "node recovery is off (herder cluster modify "
                                 "--maintenance-node-recovery yes): dead nodes are neither "
                                 "fenced nor their instances restarted"})
    return found


def build(config: model.ConfigData, live: Snapshot, jobs: list[dict[str, Any]],
          maintd: dict[str, Any] | None, maintd_error: str | None,
          daemons_bad: dict[str, dict[str, str]] | None = None) -> Overview:
    """The overview: `cluster`, `nodes`, `instances` (rows and a count per status), running
    `jobs`, `alerts`, `maintd` (its last tick and rounds; None when it cannot be asked).
    `daemons_bad`: node UUID -> its daemons that are not OK (a node left out: not known)."""
    incidents = list((maintd or {}).get("incidents") or
                     [model.to_builtins(i) for i in config.maintenance.incidents])
    reports = {r.get("node", ""): r for r in (maintd or {}).get("reports") or []}
    nodes = [node_row(config, n, live, incidents, reports, (daemons_bad or {}).get(n.uuid))
             for n in sorted(config.nodes.values(), key=lambda n: n.name)]
    instances = [instance_row(config, i, live)
                 for i in sorted(config.instances.values(), key=lambda i: i.name)]
    error = maintd_error or ((maintd or {}).get("error") or None)
    return {
        "cluster": {"name": config.cluster.name,
                    "master": config.node_name(config.cluster.master_node)},
        "nodes": nodes,
        "instances": instances,
        "instance_states": dict(sorted(Counter(i["status"] for i in instances).items())),
        "jobs": [j for j in jobs if j.get("status") not in FINISHED_JOB],
        "alerts": alerts(config, nodes, incidents, error),
        "maintd": None if maintd is None else {
            "rounds": maintd.get("rounds"), "ticks": maintd.get("ticks"),
            "last_tick": maintd.get("last_tick")},
    }
