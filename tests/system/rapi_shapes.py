"""Shape comparison of RAPI answers: does herder's masterd answer like Ganeti does?

- `shape(value)` describes a JSON value structurally: scalars by type name (`"str"`, `"int"`,
  `"float"`, `"bool"`, `"null"`), a list as `["list", <merged item shape>]` (`"?"` items when
  empty), a dict as a dict of key -> shape. Differing shapes merge: None makes a shape
  `["nullable", s]`, a dict key missing from some items of a list becomes `["optional", s]`, int
  and float merge to `"number"`, anything else to `["union", [s, ...]]`.
- `compare_shapes(ours, theirs)` lists what in `ours` (herder) fails to match `theirs` (Ganeti):
  missing keys and type mismatches. Keys only in ours are allowed; pass `extras=[]` to collect
  them. None on either side is tolerated (a field that happened to be null), ints match floats,
  an empty list matches any list.
- `run_sequence(client, node)` runs the issue's RAPI sequence and returns every answer keyed by
  step name (raw wire answers through `client.request`, so list answers keep their
  `{"id", "uri"}` items).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from herder.core.rapi import JOB_STATUS_FINAL, RapiClient, RapiError

Shape = Any  # str | list (tagged) | dict[str, Shape]

PROBE_TAG = "herder-shape-probe"
SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "ganeti_rapi_sequence.json"

_NUMBERS = frozenset({"int", "float", "number"})


# ---- shapes ----


def shape(value: Any) -> Shape:
    """The structural description of a decoded JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list | tuple):
        item: Shape = "?"
        for element in value:
            item = merge(item, shape(element))
        return ["list", item]
    if isinstance(value, dict):
        return {str(k): shape(v) for k, v in value.items()}
    return type(value).__name__


def _tag(s: Shape) -> str | None:
    return s[0] if isinstance(s, list) and s and isinstance(s[0], str) else None


def _members(s: Shape) -> list[Shape]:
    return list(s[1]) if _tag(s) == "union" else [s]


def merge(a: Shape, b: Shape) -> Shape:
    """One shape covering both `a` and `b`."""
    if a == "?":
        return b
    if b == "?" or a == b:
        return a
    if a == "null":
        return b if _tag(b) == "nullable" else ["nullable", b]
    if b == "null":
        return merge(b, a)
    if _tag(a) == "nullable" or _tag(b) == "nullable":
        inner_a = a[1] if _tag(a) == "nullable" else a
        inner_b = b[1] if _tag(b) == "nullable" else b
        return ["nullable", merge(inner_a, inner_b)]
    if _tag(a) == "optional" or _tag(b) == "optional":
        inner_a = a[1] if _tag(a) == "optional" else a
        inner_b = b[1] if _tag(b) == "optional" else b
        return ["optional", merge(inner_a, inner_b)]
    if isinstance(a, str) and isinstance(b, str) and a in _NUMBERS and b in _NUMBERS:
        return "number"
    if _tag(a) == "list" and _tag(b) == "list":
        return ["list", merge(a[1], b[1])]
    if isinstance(a, dict) and isinstance(b, dict):
        merged: dict[str, Shape] = {}
        for key in {**a, **b}:
            if key in a and key in b:
                merged[key] = merge(a[key], b[key])
            else:
                only = a.get(key, b.get(key))
                merged[key] = only if _tag(only) == "optional" else ["optional", only]
        return merged
    members: list[Shape] = []
    for candidate in [*_members(a), *_members(b)]:
        for i, existing in enumerate(members):
            if _kind(existing) == _kind(candidate):
                members[i] = merge(existing, candidate)
                break
        else:
            members.append(candidate)
    return members[0] if len(members) == 1 else ["union", members]


def _kind(s: Shape) -> str:
    if isinstance(s, dict):
        return "dict"
    if isinstance(s, str):
        return "number" if s in _NUMBERS else s
    return str(_tag(s))


def describe(s: Shape) -> str:
    """A short human-readable form of a shape (for messages)."""
    if isinstance(s, dict):
        return "dict"
    if isinstance(s, str):
        return s
    tag = _tag(s)
    if tag == "union":
        return " | ".join(describe(m) for m in s[1])
    if tag in ("nullable", "optional"):
        return f"{describe(s[1])}{'?' if tag == 'nullable' else ' (optional)'}"
    return f"list[{describe(s[1])}]"


def _strip(s: Shape) -> tuple[Shape, bool]:
    """The shape without nullable/optional wrappers, and whether it may be null."""
    nullable = False
    while _tag(s) in ("nullable", "optional"):
        nullable = nullable or _tag(s) == "nullable"
        s = s[1]
    return s, nullable


def _ignored(path: str, key: str, ignore_keys: Iterable[str]) -> bool:
    return any(
        pattern == key or fnmatch.fnmatchcase(path, pattern) for pattern in ignore_keys
    )


def compare_shapes(
    ours: Shape,
    theirs: Shape,
    ignore_keys: Iterable[str] = (),
    *,
    extras: list[str] | None = None,
    path: str = "",
) -> list[str]:
    """Differences of `ours` from `theirs` (both shapes, or raw values: see `as_shape`).

    `ignore_keys` holds bare key names (ignored at any depth) or glob patterns over paths like
    `info.hvparams` or `nodes_bulk[].dtotal`. Keys present only in ours go to `extras`.
    """
    ignore = tuple(ignore_keys)
    problems: list[str] = []
    _compare(ours, theirs, ignore, problems, extras, path or "$")
    return problems


def _compare(
    ours: Shape,
    theirs: Shape,
    ignore: tuple[str, ...],
    problems: list[str],
    extras: list[str] | None,
    path: str,
) -> None:
    ours, _ = _strip(ours)
    theirs, _ = _strip(theirs)
    if "?" in (ours, theirs) or "null" in (ours, theirs) or ours == theirs:
        return
    if _kind(ours) == "number" and _kind(theirs) == "number":
        return
    if _tag(theirs) == "union" or _tag(ours) == "union":
        their_members = _members(theirs)
        for member in _members(ours):
            match = next((t for t in their_members if _kind(t) == _kind(member)), None)
            if match is None:
                problems.append(f"{path}: {describe(member)} where Ganeti has {describe(theirs)}")
            else:
                _compare(member, match, ignore, problems, extras, path)
        return
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key, their_shape in theirs.items():
            sub = _join(path, key)
            if _ignored(sub.removeprefix("$."), key, ignore):
                continue
            if key not in ours:
                if _tag(their_shape) != "optional":
                    problems.append(f"{sub}: missing (Ganeti: {describe(their_shape)})")
                continue
            _compare(ours[key], their_shape, ignore, problems, extras, sub)
        if extras is not None:
            extras.extend(
                _join(path, key)
                for key in ours
                if key not in theirs and not _ignored(_join(path, key), key, ignore)
            )
        return
    if _tag(ours) == "list" and _tag(theirs) == "list":
        _compare(ours[1], theirs[1], ignore, problems, extras, path + "[]")
        return
    problems.append(f"{path}: {describe(ours)} where Ganeti has {describe(theirs)}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def compare_answers(
    ours: dict[str, Any],
    theirs: dict[str, Any],
    ignore_keys: Iterable[str] = (),
    *,
    extras: list[str] | None = None,
) -> list[str]:
    """Compare two `run_sequence` results step by step (raw answers, shapes computed here)."""
    problems: list[str] = []
    ignore = tuple(ignore_keys)
    for step, their_answer in theirs.items():
        if _ignored(step, step, ignore):
            continue
        if step not in ours:
            problems.append(f"{step}: step missing")
            continue
        problems.extend(
            compare_shapes(shape(ours[step]), shape(their_answer), ignore, extras=extras,
                           path=step)
        )
    return problems


# ---- the sequence ----


def _wait(client: RapiClient, job_id: int, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Follow a job with raw wait-for-change calls; every non-null answer, in order."""
    import time

    answers: list[dict[str, Any]] = []
    prev_info: list[Any] | None = None
    prev_serial: int | None = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        change = client.wait_for_job_change(job_id, ["status", "opstatus"], prev_info, prev_serial)
        if change is None:
            continue
        answers.append(change)
        for entry in change.get("log_entries") or []:
            prev_serial = max(int(entry[0]), prev_serial or 0)
        prev_info = change.get("job_info") or prev_info
        if prev_info and prev_info[0] in JOB_STATUS_FINAL:
            return answers
    raise RapiError(f"job {job_id} did not finish within {timeout:g} s")


def _error_status(client: RapiClient, method: str, path: str) -> dict[str, Any]:
    try:
        client.request(method, path)
    except RapiError as exc:
        return {"status": exc.status}
    return {"status": 200}


def run_sequence(client: RapiClient, node: str) -> dict[str, Any]:
    """The issue's sequence: lists, a cluster tag round trip, a node drain/undrain, job status.

    `node` must not be the master (it gets drained). The cluster is left as found: the probe tag
    is removed and the node's original role restored even when a step fails.
    """
    out: dict[str, Any] = {}
    out["version"] = client.request("GET", "/version")
    out["features"] = client.request("GET", "/2/features")
    out["info"] = client.request("GET", "/2/info")
    out["nodes"] = client.request("GET", "/2/nodes")
    out["nodes_bulk"] = client.request("GET", "/2/nodes", {"bulk": 1})
    out["node"] = client.request("GET", f"/2/nodes/{node}")
    out["groups"] = client.request("GET", "/2/groups")
    out["groups_bulk"] = client.request("GET", "/2/groups", {"bulk": 1})
    out["instances"] = client.request("GET", "/2/instances")
    out["instances_bulk"] = client.request("GET", "/2/instances", {"bulk": 1})
    out["jobs"] = client.request("GET", "/2/jobs")
    out["error_unknown_node"] = _error_status(client, "GET", "/2/nodes/no-such-node.invalid")

    original_role = client.get_node_role(node)
    out["node_role"] = original_role
    tag_added = False
    try:
        out["tags_before"] = client.request("GET", "/2/tags")
        job = client.request("PUT", "/2/tags", [("tag", PROBE_TAG)])
        tag_added = True
        out["tag_add_job"] = job
        out["tag_add_wait"] = _wait(client, int(job))
        out["tag_add_status"] = client.request("GET", f"/2/jobs/{job}")
        out["tags_with_probe"] = client.request("GET", "/2/tags")
        out["cancel_finished_job"] = client.request("DELETE", f"/2/jobs/{job}")

        job = client.request("DELETE", "/2/tags", [("tag", PROBE_TAG)])
        out["tag_delete_job"] = job
        out["tag_delete_wait"] = _wait(client, int(job))
        out["tag_delete_status"] = client.request("GET", f"/2/jobs/{job}")
        tag_added = False
        out["tags_after"] = client.request("GET", "/2/tags")

        job = client.request("PUT", f"/2/nodes/{node}/role", None, "drained")
        out["drain_job"] = job
        out["drain_wait"] = _wait(client, int(job))
        out["drain_status"] = client.request("GET", f"/2/jobs/{job}")
        out["node_role_drained"] = client.request("GET", f"/2/nodes/{node}/role")
        out["node_drained"] = client.request("GET", f"/2/nodes/{node}")

        job = client.request("PUT", f"/2/nodes/{node}/role", None, "regular")
        out["undrain_job"] = job
        out["undrain_wait"] = _wait(client, int(job))
        out["undrain_status"] = client.request("GET", f"/2/jobs/{job}")
        out["node_role_undrained"] = client.request("GET", f"/2/nodes/{node}/role")
        out["jobs_after"] = client.request("GET", "/2/jobs")
    finally:
        if tag_added:
            client.wait_for_job(client.delete_cluster_tags([PROBE_TAG]), timeout=120)
        if client.get_node_role(node) != original_role and original_role != "master":
            client.wait_for_job(client.set_node_role(node, original_role), timeout=120)
    return out


# ---- live figures and run states ----

LIVE_SNAPSHOT = SNAPSHOT.parent / "ganeti_live_figures.json"
NODE_QUERY = ("name,mtotal,mnode,mfree,dtotal,dfree,ctotal,cnos,cnodes,csockets,spfree,sptotal,"
              "bootid,pinst_cnt,nosuchfield")
INSTANCE_QUERY = "name,status,oper_state,oper_ram,oper_vcpus,admin_state,nosuchfield"
# Ganeti's instance status values (constants.INSTST_ALL)
STATUSES = frozenset({"running", "ADMIN_down", "ADMIN_offline", "ERROR_down", "ERROR_up",
                      "ERROR_nodedown", "ERROR_nodeoffline", "ERROR_wrongnode", "USER_down"})
NODE_FIGURES = ("mtotal", "mnode", "mfree", "dtotal", "dfree", "ctotal", "cnos", "cnodes",
                "csockets")


def run_live_sequence(client: RapiClient, node: str, instance: str) -> dict[str, Any]:
    """The answers that carry live figures and run states: bulk and single nodes and
    instances, Ganeti's query resource for both, and its field definitions."""
    return {
        "nodes_bulk": client.request("GET", "/2/nodes", {"bulk": 1}),
        "node": client.request("GET", f"/2/nodes/{node}"),
        "instances_bulk": client.request("GET", "/2/instances", {"bulk": 1}),
        "instance": client.request("GET", f"/2/instances/{instance}"),
        "query_node": client.request("GET", "/2/query/node", {"fields": NODE_QUERY}),
        "query_instance": client.request("GET", "/2/query/instance",
                                         {"fields": INSTANCE_QUERY}),
        "query_node_fields": client.request("GET", "/2/query/node/fields",
                                            {"fields": "name,mfree,bogus"}),
        "query_instance_fields": client.request(
            "GET", "/2/query/instance/fields",
            {"fields": "name,status,oper_state,oper_ram,oper_vcpus,admin_state,bogus"}),
    }


def live_problems(answers: dict[str, Any]) -> list[str]:
    """What in a live sequence's answers breaks Ganeti's units and rules: figures are whole
    MiB or counts (ints, free within total), statuses are Ganeti's, a running instance has its
    memory, a stopped one none."""
    problems: list[str] = []
    for node in [*answers["nodes_bulk"], answers["node"]]:
        name = node.get("name")
        present = [k for k in NODE_FIGURES if node.get(k) is not None]
        if present and len(present) != len(NODE_FIGURES):
            problems.append(f"node {name}: only some figures: {present}")
        for key in present:
            if not isinstance(node[key], int) or isinstance(node[key], bool) or node[key] < 0:
                problems.append(f"node {name}: {key} = {node[key]!r} is no count of MiB/CPUs")
        if present and not (node["mfree"] <= node["mtotal"] and node["dfree"] <= node["dtotal"]
                            and node["cnos"] <= node["ctotal"]):
            problems.append(f"node {name}: free above total")
    for inst in [*answers["instances_bulk"], answers["instance"]]:
        name, status = inst.get("name"), inst.get("status")
        if status not in STATUSES:
            problems.append(f"instance {name}: status {status!r} is none of Ganeti's")
        running = status in ("running", "ERROR_up", "ERROR_wrongnode")
        if running and not (inst.get("oper_state") is True
                            and isinstance(inst.get("oper_ram"), int)
                            and isinstance(inst.get("oper_vcpus"), int)):
            problems.append(f"instance {name}: {status} without its memory and vCPUs")
        if status in ("ADMIN_down", "ADMIN_offline", "ERROR_down") and (
                inst.get("oper_state") is not False or inst.get("oper_ram") is not None):
            problems.append(f"instance {name}: {status} yet running or with memory")
    for step, fields in (("query_node", NODE_QUERY), ("query_instance", INSTANCE_QUERY)):
        answer = answers[step]
        if [f["name"] for f in answer["fields"]] != fields.split(","):
            problems.append(f"{step}: fields {[f['name'] for f in answer['fields']]}")
        for row in answer["data"]:
            if not all(isinstance(c, list) and len(c) == 2 and c[0] in range(5) for c in row):
                problems.append(f"{step}: row {row} is not [status, value] pairs")
            if row[-1] != [1, None]:  # nosuchfield: unknown
                problems.append(f"{step}: an unknown field gives {row[-1]}")
    return problems


def field_kinds(answer: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """name -> (title, kind) of a `/2/query/.../fields` or query answer."""
    return {f["name"]: (f["title"], f["kind"]) for f in answer["fields"]}


def load_live_snapshot(path: Path = LIVE_SNAPSHOT) -> dict[str, Any]:
    """Ganeti's live answers (tests/data/ganeti_live_figures.json, written by
    tests/system/capture_live_figures.py: its `how` says how the cluster was set up for each
    step)."""
    return dict(json.loads(path.read_text())["steps"])


# ---- the snapshot ----

_SECRET_WORDS = ("password", "secret", "passwd", "hmac")


def scrub(value: Any, keep_items: int = 5) -> Any:
    """A copy safe to commit: secret-looking string fields blanked (type kept), long lists cut
    to their first `keep_items` items (shapes merge over items, so few suffice)."""
    if isinstance(value, dict):
        return {
            k: (
                "<scrubbed>"
                if isinstance(v, str) and v and any(w in k.lower() for w in _SECRET_WORDS)
                and not v.startswith("/")
                else scrub(v, keep_items)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [scrub(v, keep_items) for v in value[:keep_items]]
    return value


def save_snapshot(answers: dict[str, Any], source: str, node: str, path: Path = SNAPSHOT) -> None:
    document = {"source": source, "node": node, "steps": scrub(answers)}
    path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")


def load_snapshot(path: Path = SNAPSHOT) -> dict[str, Any]:
    """The snapshot's steps (the raw Ganeti answers, scrubbed)."""
    return dict(json.loads(path.read_text())["steps"])
