"""Plugins (design "Plugin system"): executables and plain JSON files in a plugin directory.

Each plugin yields one report object, or a list of them, in the agent's report format. An
executable is run with no arguments and a timeout; a `*.json` file is read. Every report is
checked; a plugin whose output is invalid, who fails, hangs, or claims a built-in collector's
name gets instead one status-4 report named `plugin:<file>` that names the problem.

Which files count: regular files, not hidden, not ending in `~`; `*.json` files are data,
other files must be executable.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from herder.mond import report
from herder.mond.collector import CollectorError, run_command
from herder.mond.report import Kind

_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "name": str, "version": str, "format_version": int, "category": (str, type(None)),
    "kind": int}


def discover(directory: Path) -> list[Path]:
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return []
    found = []
    for path in entries:
        if path.name.startswith(".") or path.name.endswith("~") or not path.is_file():
            continue
        if path.suffix == ".json" or os.access(path, os.X_OK):
            found.append(path)
    return found


def plugin_name(path: Path) -> str:
    return f"plugin:{path.name}"


def problem_report(path: Path, problem: str) -> dict[str, Any]:
    return report.build(name=plugin_name(path), category=None, kind=Kind.STATUS,
                        data=report.failure_data(Kind.STATUS, f"plugin {path.name}: {problem}"),
                        version="plugin")


def check_report(obj: Any, index: int) -> dict[str, Any]:
    """One report object, validated; CollectorError names what is wrong."""
    where = f"report {index}"
    if not isinstance(obj, dict):
        raise CollectorError(f"{where} is not a JSON object")
    for key, kinds in _REQUIRED.items():
        if key not in obj:
            raise CollectorError(f"{where} lacks {key!r}")
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise CollectorError(f"{where}: {key!r} has the wrong type")
    if "data" not in obj:
        raise CollectorError(f"{where} lacks 'data'")
    if not obj["name"]:
        raise CollectorError(f"{where}: empty name")
    category = obj["category"]
    if category is not None and category not in report.CATEGORIES:
        raise CollectorError(f"{where}: unknown category {category!r}")
    if obj["kind"] not in (0, 1):
        raise CollectorError(f"{where}: kind must be 0 or 1")
    if obj["kind"] == Kind.STATUS:
        st = obj["data"].get("status") if isinstance(obj["data"], dict) else None
        if not isinstance(st, dict) or st.get("code") not in (0, 1, 2, 4) \
                or not isinstance(st.get("message"), str):
            raise CollectorError(f"{where}: a status report needs data.status {{code, message}} "
                                 "with code 0, 1, 2 or 4")
    timestamp = obj.get("timestamp")
    if timestamp is None:
        obj = {**obj, "timestamp": report.now_ns()}
    elif isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise CollectorError(f"{where}: timestamp must be an integer (ns)")
    extra = set(obj) - {*_REQUIRED, "data", "timestamp"}
    if extra:
        raise CollectorError(f"{where}: unknown field(s) {', '.join(sorted(extra))}")
    return {key: obj[key] for key in ("name", "version", "format_version", "timestamp",
                                      "category", "kind", "data")}


def parse_output(text: str) -> list[dict[str, Any]]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise CollectorError(f"output is not JSON: {err.msg} at char {err.pos}") from None
    items = value if isinstance(value, list) else [value]
    if not items:
        raise CollectorError("output is an empty list")
    return [check_report(obj, i) for i, obj in enumerate(items)]


def run_plugin(path: Path, timeout: float, reserved: Iterable[str]) -> list[dict[str, Any]]:
    """A plugin's reports, or one problem report. Never raises."""
    try:
        if path.suffix == ".json":
            text = path.read_text()
        else:
            text = run_command([str(path)], timeout=timeout)
        reports = parse_output(text)
    except CollectorError as err:
        return [problem_report(path, str(err))]
    except OSError as err:
        return [problem_report(path, f"cannot read: {err.strerror}")]
    taken = set(reserved)
    seen: set[tuple[str | None, str]] = set()
    for rep in reports:
        if rep["name"] in taken:
            return [problem_report(path, f"report name {rep['name']!r} clashes with a "
                                         "built-in collector; refused")]
        key = (rep["category"], rep["name"])
        if key in seen:
            return [problem_report(path, f"report name {rep['name']!r} appears twice")]
        seen.add(key)
    return reports
