"""harep-style instance repairs (reference notes §6.9): pure; the daemon adds these jobs to a
round after the incidents' jobs when enabled (`herder maintd --harep`).

Policy tags (the same as Ganeti's harep): `ganeti:watcher:autorepair:<type>` enables repairs
up to `<type>` (fix-storage < migrate < failover < reinstall; several tags on one object: the
least destructive wins); `ganeti:watcher:autorepair:suspend[:<epoch>]` suspends them (forever,
or until then). The instance's tags win over its node group's, which win over the cluster's.

State tags: `ganeti:watcher:autorepair:pending:<type>:<uuid>:<ts>:<jid+jid...>` while a repair
runs, `...:result:<type>:<uuid>:<ts>:<success|failure|enoperm>:<jids>` after.

Detection (instance on offline nodes; drained counts as offline, as in htools):
DRBD with both nodes offline -> reinstall; primary offline -> failover; secondary offline ->
fix-storage (a new secondary); plain with its primary offline -> reinstall.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

PREFIX = "ganeti:watcher:autorepair:"
TYPES = ("fix-storage", "migrate", "failover", "reinstall")
RANK = {t: i for i, t in enumerate(TYPES)}
PENDING = PREFIX + "pending:"
RESULT = PREFIX + "result:"
SUSPEND = PREFIX + "suspend"


@dataclass(frozen=True)
class Policy:
    kind: str  # enabled | suspended | disabled
    max_type: str | None = None
    until: float | None = None  # suspended until (None: forever)


DISABLED = Policy("disabled")


def policy_of(tags: Iterable[str], now: float | None = None) -> Policy:
    """The policy one object's tags give."""
    now = time.time() if now is None else now
    enabled: list[str] = []
    until: float | None = None
    forever = False
    for tag in tags:
        if not tag.startswith(PREFIX) or tag.startswith((PENDING, RESULT)):
            continue
        rest = tag[len(PREFIX):]
        if rest == "suspend":
            forever = True
        elif rest.startswith("suspend:"):
            try:
                stamp = float(rest[len("suspend:"):])
            except ValueError:
                continue
            if stamp > now:
                until = stamp if until is None else max(until, stamp)
        elif rest in RANK:
            enabled.append(rest)
    if forever:
        return Policy("suspended")
    if until is not None:
        return Policy("suspended", until=until)
    if enabled:
        return Policy("enabled", min(enabled, key=RANK.__getitem__))
    return DISABLED


def resolve(instance_tags: Iterable[str], group_tags: Iterable[str],
            cluster_tags: Iterable[str], now: float | None = None) -> Policy:
    """Instance, then node group, then cluster: the first with a policy decides."""
    for tags in (instance_tags, group_tags, cluster_tags):
        pol = policy_of(tags, now)
        if pol.kind != "disabled":
            return pol
    return DISABLED


def detect(template: str, pnode: str, snodes: tuple[str, ...],
           offline: Mapping[str, bool]) -> str | None:
    """The repair an instance needs, None if none (`offline`: node name -> offline/drained)."""
    p_off = offline.get(pnode, True)
    if template == "drbd" and snodes:
        s_off = offline.get(snodes[0], True)
        if p_off and s_off:
            return "reinstall"
        if p_off:
            return "failover"
        if s_off:
            return "fix-storage"
        return None
    if template == "plain" and p_off:
        return "reinstall"
    return None


def allowed(pol: Policy, repair: str) -> bool:
    return pol.kind == "enabled" and pol.max_type is not None and RANK[repair] <= RANK[
        pol.max_type]


def repair_ops(name: str, repair: str, new_secondary: str | None = None) -> list[dict[str, Any]]:
    if repair == "fix-storage":
        op: dict[str, Any] = {"OP_ID": "OP_INSTANCE_REPLACE_DISKS", "instance_name": name,
                              "mode": "replace_new_secondary"}
        if new_secondary:
            op["remote_node"] = new_secondary
        return [op]
    if repair == "failover":
        return [{"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": name,
                 "ignore_consistency": False, "shutdown_timeout": 120}]
    if repair == "migrate":
        return [{"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": name}]
    if repair == "reinstall":
        return [{"OP_ID": "OP_INSTANCE_REINSTALL", "instance_name": name}]
    raise ValueError(f"unknown repair type {repair!r}")


def pending_tag(repair: str, uuid: str, ts: int, jobs: Iterable[int]) -> str:
    return f"{PENDING}{repair}:{uuid}:{ts}:{'+'.join(str(j) for j in jobs)}"


def result_tag(repair: str, uuid: str, ts: int, outcome: str, jobs: Iterable[int]) -> str:
    return f"{RESULT}{repair}:{uuid}:{ts}:{outcome}:{'+'.join(str(j) for j in jobs)}"


@dataclass(frozen=True)
class StateTag:
    kind: str  # pending | result
    repair: str
    uuid: str
    ts: int
    outcome: str | None
    jobs: tuple[int, ...]
    tag: str


def parse_state_tag(tag: str) -> StateTag | None:
    for kind, prefix in (("pending", PENDING), ("result", RESULT)):
        if not tag.startswith(prefix):
            continue
        parts = tag[len(prefix):].split(":")
        try:
            if kind == "pending" and len(parts) == 4:
                repair, uuid, ts, jids = parts
                outcome = None
            elif kind == "result" and len(parts) == 5:
                repair, uuid, ts, outcome, jids = parts
            else:
                return None
            jobs = tuple(int(j) for j in jids.split("+") if j)
            if repair not in RANK:
                return None
            return StateTag(kind, repair, uuid, int(ts), outcome, jobs, tag)
        except ValueError:
            return None
    return None


def repair_state(tags: Iterable[str]) -> tuple[str, StateTag | None]:
    """`healthy`, `pending` or `failed` from an instance's state tags (harep's rules: the
    earliest failure wins; otherwise the latest tag decides; enoperm counts as healthy)."""
    states = sorted((s for s in (parse_state_tag(t) for t in tags) if s is not None),
                    key=lambda s: (s.ts, s.kind == "result"))
    if not states:
        return "healthy", None
    failures = [s for s in states if s.kind == "result" and s.outcome == "failure"]
    if failures:
        return "failed", failures[0]
    last = states[-1]
    return ("pending", last) if last.kind == "pending" else ("healthy", last)


# --- planning (used by the daemon when harep-style repairs are enabled) ----------------------

def plan_harep(nodes: Any, instances: Any, plan: Any, cluster_tags: Iterable[str],
               group_tags: Mapping[str, Iterable[str]], job_status: Mapping[int, str | None],
               event_jobs: Mapping[str, Iterable[int]] | None = None,
               affected: Iterable[str] = (), now: float | None = None,
               new_uuid: Any = None) -> list[Any]:
    """harep's jobs for this round, added after the incidents' jobs of `plan` (a
    `rounds.Plan`): only on nodes without an active incident (`affected`: their names), never
    an instance or node pair already used in the round. Returns `rounds.Job`s (event = the
    repair's uuid):
    * a pending repair whose jobs all ended: one job setting the result tag and deleting the
      pending tag;
    * a broken, healthy instance whose policy allows the repair: the repair job, whose first
      opcode tags the instance pending (the job's own id is not known yet, so the tag's job
      list is empty; its jobs are found by the repair uuid in their reason trail:
      `event_jobs`; none found counts as a failure);
    * a repair the policy does not allow: one enoperm result tag (once per repair type).
    `job_status`: job id -> status for the jobs named in pending tags."""
    import uuid as uuidlib

    from herder.maintd.rounds import Job, annotate

    now = time.time() if now is None else now
    new_uuid = new_uuid or (lambda: str(uuidlib.uuid4()))
    by_name = {n.name: n for n in nodes}
    offline = {n.name: n.offline or n.drained or not n.vm_capable for n in nodes}
    busy_nodes = {n for j in plan.jobs for n in j.nodes} | set(affected)
    used = {i for j in plan.jobs for i in j.instances}
    pairs = {j.nodes for j in plan.jobs if len(j.nodes) == 2}
    jobs: list[Any] = []
    for inst in sorted(instances, key=lambda i: i.name):
        involved = {inst.pnode, *inst.snodes}
        if inst.name in used or involved & busy_nodes:
            continue
        state, last = repair_state(inst.tags)
        ts = int(now)
        if state == "pending" and last is not None:
            ids = tuple(last.jobs or sorted((event_jobs or {}).get(last.uuid, ())))
            statuses = [job_status.get(j) for j in ids]
            if any(s in ("queued", "waiting", "running", "canceling") for s in statuses):
                continue
            ok = bool(statuses) and all(s == "success" for s in statuses)
            tag = result_tag(last.repair, last.uuid, ts, "success" if ok else "failure", ids)
            ops = [{"OP_ID": "OP_TAGS_SET", "kind": "instance", "name": inst.name, "tags": [tag]},
                   {"OP_ID": "OP_TAGS_DEL", "kind": "instance", "name": inst.name,
                    "tags": [last.tag]}]
            jobs.append(Job(last.uuid, "harep-result", [annotate(o, last.uuid) for o in ops],
                            instances=frozenset((inst.name,))))
            used.add(inst.name)
            continue
        if state != "healthy":
            continue
        repair = detect(inst.disk_template, inst.pnode, inst.snodes, offline)
        if repair is None:
            continue
        pnode = by_name.get(inst.pnode)
        pol = resolve(inst.tags, group_tags.get(pnode.group if pnode else "", ()),
                      cluster_tags, now)
        if pol.kind != "enabled":
            continue
        event = new_uuid()
        if not allowed(pol, repair):
            if last is not None and last.outcome == "enoperm" and last.repair == repair:
                continue
            tag = result_tag(repair, event, ts, "enoperm", [])
            op = {"OP_ID": "OP_TAGS_SET", "kind": "instance", "name": inst.name, "tags": [tag]}
            jobs.append(Job(event, "harep-enoperm", [annotate(op, event)],
                            instances=frozenset((inst.name,))))
            used.add(inst.name)
            continue
        target = None
        if repair == "fix-storage":
            cands = sorted(n.name for n in nodes if not offline[n.name] and n.name not in involved
                           and n.name not in busy_nodes
                           and frozenset((inst.pnode, n.name)) not in pairs)
            if not cands:
                continue
            target = cands[0]
        touched = frozenset((inst.pnode, target)) if target else frozenset(
            n for n in involved if not offline.get(n, True))
        if len(touched) == 2 and touched in pairs:
            continue
        pend = pending_tag(repair, event, ts, [])
        ops = [{"OP_ID": "OP_TAGS_SET", "kind": "instance", "name": inst.name, "tags": [pend]},
               *repair_ops(inst.name, repair, target)]
        jobs.append(Job(event, f"harep-{repair}", [annotate(o, event) for o in ops],
                        nodes=touched, instances=frozenset((inst.name,))))
        used.add(inst.name)
        if len(touched) == 2:
            pairs.add(touched)
    return jobs
