"""Open streams end when their authority goes (issue 35 item 7), on masterd's events stream.

Before: `GET /2/herder/events` kept sending the overview after its session's logout and after
its user was removed from the users file. Now every open stream looks again, each second,
whether the request that opened it would still be let in (the session alive, the user still
in the users file with the same password, and for the consoles the `write` option), and ends
with a last `ended` event saying why. The consoles' websockets (serial, VNC) are checked on a
simulated cluster with a real guest (tests/security/test_trust_sim.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from herder.core.rapi_users import UsersFile
from herder.core.store import ConfigCache, FileStore
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.rapi import app as rapi_app
from herder.masterd.rapi import base as rapi_base
from herder.masterd.web.context import WebContext
from herder.masterd.web.sessions import COOKIE, CSRF_HEADER
from tests.conftest import build_config

from .serving import Served, serving
from .test_route_table import READER, WRITER, users_file

ENDS_WITHIN = 10.0  # seconds: the streams look each second; a loaded machine is slow


@pytest.fixture
def masterd(tmp_path: Path) -> Iterator[tuple[Served, rapi_base.RapiContext, Path]]:
    directory = tmp_path / "masterd"
    directory.mkdir()
    store = FileStore(directory / "config.json")
    store.create(build_config(3))
    (directory / "queue").mkdir()
    queue = JobQueue(directory / "queue", lambda ctx, op: None)  # jobs stay queued
    users = users_file(directory)
    web = WebContext(maintd_url="http://127.0.0.1:9")  # refused at once: no maintd here
    ctx = rapi_base.RapiContext(config=ConfigCache(store.path), queue=queue, users=UsersFile(users),
                                store=store, web=web)
    with serving(rapi_app.make_app(ctx)) as served:
        yield served, ctx, users


def login(served: Served, who: tuple[str, str]) -> tuple[httpx.Client, str]:
    client = httpx.Client(base_url=served.plain, timeout=30)
    answer = client.post("/ui/login", data={"user": who[0], "password": who[1]})
    assert answer.status_code == 303, answer.text
    client.cookies.set(COOKIE, answer.cookies[COOKIE])
    return client, client.get("/ui/session").json()["csrf"]


def follow(stream: httpx.Response, cut: object) -> tuple[list[str], float]:
    """The events of an open stream: after the first, `cut()` takes its authority away; the
    events seen, and the seconds from the cut to the stream's end."""
    assert callable(cut)
    events: list[str] = []
    cut_at: float | None = None
    for line in stream.iter_lines():
        if line.startswith("event: "):
            events.append(line.removeprefix("event: "))
            if cut_at is None:
                cut()
                cut_at = time.monotonic()
        assert cut_at is None or time.monotonic() - cut_at < ENDS_WITHIN + 30, events
    assert cut_at is not None, "the stream ended before its first event"
    return events, time.monotonic() - cut_at


def test_the_overview_stream_ends_at_logout(
        masterd: tuple[Served, rapi_base.RapiContext, Path]) -> None:
    served, _, _ = masterd
    client, csrf = login(served, READER)
    with client.stream("GET", "/2/herder/events") as stream:
        assert stream.status_code == 200
        events, took = follow(stream, lambda: client.post(
            "/ui/logout", headers={CSRF_HEADER: csrf}))
    assert events[0] == "overview" and events[-1] == "ended", events
    assert took < ENDS_WITHIN


def test_a_job_stream_ends_when_its_user_is_removed(
        masterd: tuple[Served, rapi_base.RapiContext, Path]) -> None:
    served, ctx, users = masterd
    job = ctx.queue.submit([{"OP_ID": "OP_TEST_DELAY", "duration": 0}])  # stays queued
    text = users.read_text()

    def remove_reader() -> None:
        users.write_text("".join(line + "\n" for line in text.splitlines()
                                 if not line.startswith(READER[0] + " ")))

    with httpx.Client(base_url=served.plain, timeout=30) as client, \
            client.stream("GET", f"/2/herder/events?job={job}", auth=READER) as stream:
        assert stream.status_code == 200
        events, took = follow(stream, remove_reader)
    assert events[0] == "job" and events[-1] == "ended", events
    assert took < ENDS_WITHIN


def test_a_stream_ends_when_its_users_password_changes(
        masterd: tuple[Served, rapi_base.RapiContext, Path]) -> None:
    served, _, users = masterd
    text = users.read_text()
    with httpx.Client(base_url=served.plain, timeout=30) as client, \
            client.stream("GET", "/2/herder/events", auth=WRITER) as stream:
        events, took = follow(stream, lambda: users.write_text(
            text.replace(f"{WRITER[0]} {WRITER[1]} ", f"{WRITER[0]} n3w-pass ")))
    assert events[-1] == "ended" and took < ENDS_WITHIN, events
