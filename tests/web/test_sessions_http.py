"""The web console's login, sessions and CSRF checks against a real `herder masterd` over
HTTPS (no browser: the browser tests are in test_console_browser.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from herder.core.cluster_secrets import SecretPaths
from herder.masterd.web.sessions import COOKIE, CSRF_HEADER
from tests.system.masterd_fixture import RunningMaster, start_masterd

WRITER = ("webadmin", "adm1n-pass")
READER = ("webviewer", "v1ewer-pass")


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningMaster]:
    with start_masterd(tmp_path_factory.mktemp("web")) as running:
        users = SecretPaths.beside(running.config_path).rapi_users
        with users.open("a") as out:
            out.write(f"{WRITER[0]} {WRITER[1]} write\n{READER[0]} {READER[1]}\n")
        yield running


def browser(master: RunningMaster) -> httpx.Client:
    return httpx.Client(base_url=master.url, verify=False, follow_redirects=False, timeout=30)


def login(master: RunningMaster, who: tuple[str, str]) -> tuple[httpx.Client, str]:
    client = browser(master)
    answer = client.post("/ui/login", data={"user": who[0], "password": who[1]})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/"
    cookie = answer.headers["set-cookie"]
    for attribute in ("HttpOnly", "Secure", "SameSite=Strict", "Path=/", "Max-Age="):
        assert attribute.lower() in cookie.lower(), cookie
    # httpx does not send Secure cookies back over its own rules for IP hosts: set it by hand
    client.cookies.set(COOKIE, answer.cookies[COOKIE])
    session = client.get("/ui/session").json()
    assert session["user"] == who[0]
    return client, session["csrf"]


def jobs(master: RunningMaster) -> list[int]:
    return master.client.get_jobs()


def test_nothing_without_a_login(master: RunningMaster) -> None:
    client = browser(master)
    answer = client.get("/ui/")
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/login"
    assert client.get("/ui/session").status_code == 401
    for path in ("/2/herder/overview", "/2/nodes", "/2/herder/events"):
        assert client.get(path).status_code == 401, path
    page = client.get("/ui/login")
    assert page.status_code == 200 and 'name="password"' in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert client.get("/ui/static/app.js").status_code == 200
    for escape in ("/ui/static/../pages.py", "/ui/static/%2E%2E/pages.py",
                   "/ui/static/..%2Fpages.py"):
        assert client.get(escape).status_code in (401, 404), escape
    # Ganeti's RAPI stays as it is
    assert client.get("/version").status_code == 401
    assert master.client.get_version() == 2


def test_a_wrong_password_opens_no_session(master: RunningMaster) -> None:
    client = browser(master)
    answer = client.post("/ui/login", data={"user": WRITER[0], "password": "wrong"})
    assert answer.status_code == 401 and "wrong password" in answer.text
    assert COOKIE not in answer.cookies
    foreign = client.post("/ui/login", data={"user": WRITER[0], "password": WRITER[1]},
                          headers={"Origin": "https://evil.example.com"})
    assert foreign.status_code == 403 and COOKIE not in foreign.cookies


def test_a_session_reads_and_a_writer_acts_only_with_the_csrf_token(
        master: RunningMaster) -> None:
    client, csrf = login(master, WRITER)
    overview = client.get("/2/herder/overview").json()
    assert {n["name"] for n in overview["nodes"]} == set(master.client.get_nodes())
    before = jobs(master)
    node = overview["nodes"][0]["name"]
    forged = client.put(f"/2/nodes/{node}/role", json="drained")
    assert forged.status_code == 403 and "CSRF" in forged.json()["explain"]
    wrong = client.put(f"/2/nodes/{node}/role", json="drained", headers={CSRF_HEADER: "x" * 43})
    assert wrong.status_code == 403
    cross = client.get("/2/herder/overview", headers={"Origin": "https://evil.example.com"})
    assert cross.status_code == 403
    assert jobs(master) == before  # nothing was queued
    submitted = client.post("/2/herder/jobs", headers={CSRF_HEADER: csrf},
                            json={"ops": [{"OP_ID": "OP_TEST_DELAY", "duration": 0}]})
    assert submitted.status_code == 200 and submitted.json() in jobs(master)


def test_a_read_only_session_cannot_act(master: RunningMaster) -> None:
    client, csrf = login(master, READER)
    assert client.get("/ui/session").json()["write"] is False
    before = jobs(master)
    refused = client.post("/2/herder/jobs", headers={CSRF_HEADER: csrf},
                          json={"ops": [{"OP_ID": "OP_TEST_DELAY", "duration": 0}]})
    assert refused.status_code == 403 and READER[0] in refused.json()["explain"]
    assert jobs(master) == before


def test_logout_needs_the_token_and_ends_the_session(master: RunningMaster) -> None:
    client, csrf = login(master, WRITER)
    assert client.post("/ui/logout").status_code == 403
    assert client.get("/ui/session").status_code == 200
    answer = client.post("/ui/logout", data={"csrf": csrf})
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/login?why=out"
    ended = client.get("/2/herder/overview")
    assert ended.status_code == 401 and "session has ended" in ended.json()["explain"]
    assert client.get("/ui/").headers["location"] == "/ui/login?why=ended"


def test_a_session_of_a_removed_user_ends(master: RunningMaster, tmp_path: Path) -> None:
    client, _ = login(master, READER)
    users = SecretPaths.beside(master.config_path).rapi_users
    text = users.read_text()
    users.write_text("".join(line + "\n" for line in text.splitlines()
                             if not line.startswith(READER[0] + " ")) + "# removed\n")
    try:
        assert client.get("/2/herder/overview").status_code == 401
    finally:
        users.write_text(text)


def test_a_session_opens_write_routes_read_with_get_only_for_writers(
        master: RunningMaster) -> None:
    """The console's websockets are GETs on routes for writers (`/2/instances/NAME/console/*`):
    a session counts there as its user, a browser's foreign Origin does not. Shown on the one
    such route every masterd has, `GET /2/herder/config`."""
    writer, _ = login(master, WRITER)
    assert writer.get("/2/herder/config").status_code == 200
    foreign = writer.get("/2/herder/config", headers={"Origin": "https://evil.example.com"})
    assert foreign.status_code == 403
    own = writer.get("/2/herder/config", headers={"Origin": master.url})
    assert own.status_code == 200
    reader, _ = login(master, READER)
    assert reader.get("/2/herder/config").status_code == 403


def test_a_flood_of_logins_by_one_user_never_logs_another_out(master: RunningMaster) -> None:
    """1,005 logins of a read-only user (the issue's count: past the old global cap of 1,000)
    leave the admin's session alive; the reader's oldest session ends (per-user cap)."""
    admin, _ = login(master, WRITER)
    first, _ = login(master, READER)
    flood = browser(master)
    for _ in range(1005):
        answer = flood.post("/ui/login", data={"user": READER[0], "password": READER[1]})
        assert answer.status_code == 303
    assert admin.get("/ui/session").json()["user"] == WRITER[0]
    assert admin.get("/2/herder/overview").status_code == 200
    assert first.get("/ui/session").status_code == 401  # the reader's own oldest ended
