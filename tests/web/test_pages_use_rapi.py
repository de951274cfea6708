"""The console holds no logic of its own (issue 20): every request its pages make, read from
the page script itself (`static/app.js`), is a route of masterd's RAPI; every page's read is
open to read-only users (its JSON twin), and every action the pages offer is a route that
submits an ordinary job (`masterd.rapi.base.submits`), but a job's cancel (Ganeti's own route,
no job)."""

from __future__ import annotations

import asyncio
import re

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from herder.core import access
from herder.core.rapi_users import UsersFile
from herder.core.store import ConfigCache, FileStore
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.rapi import app as rapi_app
from herder.masterd.rapi import base as rapi_base
from herder.masterd.web import pages
from tests.conftest import build_config

APP_JS = (pages.STATIC / "app.js").read_text()
# api(PATH) or api(PATH, { method: "X", ... }) with a literal path
API_CALL = re.compile(r'api\((`[^`]*`|"[^"]*")(?:,\s*\{([^}]*)\})?')
# the action buttons: { id: "...", label: ..., method: "X", path: PATH | path }
ACTION = re.compile(r'\{ id: "([\w-]+)", label: `[^`]*`, method: "(\w+)", path(?:: (?:\(\) => )?'
                    r'(`[^`]*`))?')
INSTANCE_PATH = "`/2/instances/${enc(name)}`"  # `path` in instanceActions


def concrete(literal: str) -> str:
    """A request path of a JavaScript string or template literal (every `${...}` a 0: a
    valid name, id and index alike)."""
    text = literal.strip("`\"").replace("${path}", INSTANCE_PATH.strip("`"))
    return re.sub(r"\$\{[^}]*\}", "0", text)


def requests_of_the_pages() -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    reads, actions = [], []
    for literal, options in API_CALL.findall(APP_JS):
        method = re.search(r'method: "(\w+)"', options or "")
        reads.append((method.group(1) if method else "GET", concrete(literal)))
    for action, method, literal in ACTION.findall(APP_JS):
        actions.append((action, method, concrete(literal or INSTANCE_PATH)))
    return reads, actions


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> web.Application:
    directory = tmp_path_factory.mktemp("pages")
    store = FileStore(directory / "config.json")
    store.create(build_config(2))
    (directory / "rapi_users").write_text("admin s3cret write\n")
    ctx = rapi_base.RapiContext(config=ConfigCache(store.path),
                                queue=JobQueue(directory / "queue", lambda ctx, op: None),
                                users=UsersFile(directory / "rapi_users"), store=store)
    return rapi_app.make_app(ctx)


def handler_of(app: web.Application, method: str, path: str) -> object:
    async def resolve() -> object:
        match = await app.router.resolve(make_mocked_request(method, path, app=app))
        assert match.http_exception is None, f"{method} {path}: no RAPI route"
        return match.handler

    return asyncio.run(resolve())


def test_the_page_script_is_read_as_expected() -> None:
    """The patterns above find what the pages do (a change of the script's shape fails here,
    not silently in the checks below)."""
    reads, actions = requests_of_the_pages()
    assert {"drain", "undrain", "evacuate", "migrate-all", "powercycle", "start", "shutdown",
            "reboot", "migrate", "failover", "replace-disks", "grow-disk", "add-disk", "add-nic",
            "remove-nic", "remove", "snapshot-add", "snapshot-rollback", "snapshot-remove",
            "backup-export", "backup-import"} == {action for action, _, _ in actions}
    assert ("GET", "/2/herder/overview") in reads and ("POST", "/2/instances") in reads
    assert ("DELETE", "/2/jobs/0") in reads and ("GET", "/2/instances/0/info") in reads


def test_every_page_reads_rapi_routes_open_to_readers(app: web.Application) -> None:
    reads, _ = requests_of_the_pages()
    for method, path in reads:
        if method != "GET":
            continue
        rule = rapi_base.ROUTES.rule(handler_of(app, method, path))
        expected = access.ANYONE if path == "/ui/session" else access.RAPI_READ
        assert rule == expected, f"GET {path}: {rule}"


def test_every_action_is_an_ordinary_job(app: web.Application) -> None:
    reads, actions = requests_of_the_pages()
    changes = [(f"{method} {path}", method, path) for method, path in reads if method != "GET"]
    changes += [(action, method, path) for action, method, path in actions]
    job_routes = {route for routes in rapi_base.opcode_routes(app).values() for route in routes}
    for what, method, path in changes:
        handler = handler_of(app, method, path)
        assert rapi_base.ROUTES.rule(handler) == access.RAPI_WRITE, what
        if (method, path) == ("DELETE", "/2/jobs/0"):
            continue  # a job's cancel: Ganeti's route, it submits nothing
        route = next(r for r in app.router.routes()
                     if r.handler is handler and r.method == method)
        assert route.resource is not None
        assert f"{method} {route.resource.canonical}" in job_routes, what
