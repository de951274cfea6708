"""docs/rapi.md cannot drift: its table of Ganeti's routes lists exactly the routes and methods
of Ganeti 3.0's RAPI (`ganeti.rapi.connector.GetHandlers`, read by Debian's Python from the
peers' unpacked library; skips cleanly without them), says for each what herder's route table
(`herder.masterd.rapi.app.ADD_ROUTES`) does with it (`served`, or the 404 and the reason
herder answers), and every route herder adds is in its extensions table."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from herder.masterd.rapi import app as rapi_app
from herder.masterd.rapi import base as rapi_base

DOC = Path(__file__).resolve().parents[2] / "docs" / "rapi.md"
GANETI_LIB = Path("/tmp/groot/usr/share/ganeti/3.0")
DEBIAN_PYTHON = Path("/usr/bin/python3")
METHODS = ("GET", "PUT", "POST", "DELETE")
# The doc's placeholders (Ganeti's URI patterns, in GetHandlers' order) and a value for each
SAMPLES = {"N": "node1.example.com", "I": "inst1.example.com", "G": "group1", "NET": "net1",
           "ID": "1", "D": "0", "UUID": "00000000-0000-4000-8000-000000000000", "R": "node"}
# herder's own placeholders (its extensions table only; Ganeti's connector takes the ones above)
HERDER_SAMPLES = {"SNAP": "snap1", "SCHEDULE": "nightly"}
# Ganeti's routes with the doc's placeholders, and the methods each handler class serves (a
# method or a METHOD_OPCODE, from which baserlib's metaclass makes one); argv: both as JSON
GANETI_ROUTES = """
import json, sys
from ganeti.rapi import connector
patterns, methods = json.loads(sys.argv[1])
def translate(*parts):
    return "".join(p.content if isinstance(p, connector.UriPattern) else p for p in parts)
handlers = connector.GetHandlers(*patterns, translate=translate)
json.dump({path: [m for m in methods if hasattr(cls, m) or hasattr(cls, m + "_OPCODE")]
           for path, cls in handlers.items()}, sys.stdout)
"""
LONGEST_FIRST = "|".join(sorted([*SAMPLES, *HERDER_SAMPLES], key=len, reverse=True))
PLACEHOLDER = re.compile(rf"(?<=/)(?:{LONGEST_FIRST})(?=/|$)")
UI_PREFIX = "/ui"  # the web console's pages (docs/security.md), not RAPI


def cells(line: str) -> list[str]:
    """A markdown table row's cells (`\\|` inside a cell is no separator)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def section_rows(heading: str) -> dict[str, list[str]]:
    """route -> the other cells, for each row of the table under `heading` (one backticked
    route in the first cell)."""
    text = DOC.read_text()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    rows: dict[str, list[str]] = {}
    for line in text[start:end if end >= 0 else None].splitlines():
        if not line.startswith("| `"):
            continue
        first, *rest = cells(line)
        route = re.fullmatch(r"`([^`]+)`", first)
        assert route is not None, f"docs/rapi.md: one route per row, not {first!r}"
        assert route.group(1) not in rows, f"docs/rapi.md lists {route.group(1)} twice"
        rows[route.group(1)] = rest
    return rows


def ganeti_rows() -> dict[str, list[str]]:
    rows = section_rows("## Ganeti routes")
    assert len(rows) > 50, "the Ganeti routes table was not read"
    return rows


def extension_rows() -> dict[str, list[str]]:
    rows = section_rows("## herder extensions")
    assert rows, "the extensions table was not read"
    return rows


def concrete(route: str) -> str:
    return PLACEHOLDER.sub(lambda m: {**SAMPLES, **HERDER_SAMPLES}[m.group(0)], route)


def shape(route: str) -> str:
    """A route with its placeholders (the doc's or aiohttp's `{name}`) as `{}`."""
    return re.sub(r"\{[^}]*\}", "{}", PLACEHOLDER.sub("{}", route))


@pytest.fixture(scope="module")
def herder_app() -> web.Application:
    """herder's RAPI route table (no context: nothing is served, routes are only resolved)."""
    app = web.Application()
    for add_routes in rapi_app.ADD_ROUTES:
        add_routes(app.router)
    return app


def resolve(app: web.Application, method: str, path: str) -> tuple[int, str]:
    """(200, "METHOD canonical") of the route herder's router picks, else (404 or 405, "")."""
    async def run() -> tuple[int, str]:
        info = await app.router.resolve(make_mocked_request(method, path, app=app))
        if info.http_exception is not None:
            return info.http_exception.status, ""
        return 200, f"{info.route.method} {info.route.resource.canonical}"  # type: ignore[union-attr]

    return asyncio.run(run())


def ganeti_routes() -> dict[str, list[str]]:
    if not (GANETI_LIB / "ganeti" / "rapi" / "connector.py").is_file() \
            or not DEBIAN_PYTHON.exists():
        pytest.skip("Ganeti peers absent (/tmp/groot's ganeti.rapi.connector: "
                    "../shared/peers/setup.sh)")
    argv = json.dumps([list(SAMPLES), list(METHODS)])
    done = subprocess.run([str(DEBIAN_PYTHON), "-c", GANETI_ROUTES, argv], capture_output=True,
                          text=True, env={"PYTHONPATH": str(GANETI_LIB)}, check=True)
    routes: dict[str, list[str]] = json.loads(done.stdout)
    return routes


def test_the_table_lists_every_ganeti_route_with_its_methods() -> None:
    ganeti = ganeti_routes()
    assert len(ganeti) == 60  # Ganeti 3.0.2's connector
    rows = ganeti_rows()
    assert sorted(rows) == sorted(ganeti), (
        f"missing from docs/rapi.md: {sorted(set(ganeti) - set(rows))}; "
        f"not Ganeti's: {sorted(set(rows) - set(ganeti))}")
    for route, (methods, *_) in rows.items():
        assert methods.split(", ") == ganeti[route], f"{route}: Ganeti serves {ganeti[route]}"


def test_the_table_says_what_herder_does_with_each_route(herder_app: web.Application) -> None:
    for route, (methods, status, what) in ganeti_rows().items():
        path = concrete(route)
        answers = {method: resolve(herder_app, method, path)[0] for method in methods.split(", ")}
        if set(answers.values()) == {200}:
            assert status == "served", f"{route}: herder serves {sorted(answers)}, not {status}"
            continue
        assert status != "served", f"{route}: herder answers {answers}"
        assert status == str(max(answers.values())), f"{route}: herder answers {answers}"
        if status == "404":  # the reason herder gives is the one the doc quotes
            reason = rapi_base.not_served(path).removesuffix(f": {path}")
            assert f'"{reason}"' in what, f"{route}: herder says {reason!r}"


def test_every_route_herder_adds_is_in_the_extensions_table(
        herder_app: web.Application) -> None:
    """A route of herder's that no Ganeti route reaches is listed under the extensions, and
    every route listed there is herder's (served with the methods it lists)."""
    reached = {resolve(herder_app, method, concrete(route))[1]
               for route, (methods, *_) in ganeti_rows().items()
               for method in methods.split(", ")}
    extensions = {shape(route): rest for route, rest in extension_rows().items()}
    for route in herder_app.router.routes():
        canonical = route.resource.canonical if route.resource else "?"
        if route.method == "HEAD" or canonical.startswith(UI_PREFIX):
            continue
        if f"{route.method} {canonical}" in reached:
            continue
        assert shape(canonical) in extensions, f"{route.method} {canonical} is not in " \
                                               "docs/rapi.md's extensions table"
        assert route.method in extensions[shape(canonical)][0], \
            f"{canonical}: docs/rapi.md does not list {route.method}"
    for listed, (methods, *_) in extension_rows().items():
        for method in re.findall(r"\b(GET|PUT|POST|DELETE)\b", methods):
            assert resolve(herder_app, method, concrete(listed))[0] == 200, \
                f"docs/rapi.md lists {method} {listed}, which herder does not serve"
