"""Password guessing is slowed down, never a lock-out (issue 35 item 5).

Before: `/ui/login`, HTTP Basic on masterd's RAPI and maintd's HTTPS cancel checked every
password at once, about 800 guesses a second. Now each (user, source address) pair is held
after its wrong passwords (`core.login_backoff`): a held pair is answered 429 with Retry-After
and its password is not even looked at; the hold grows with the failures of the pair, of the
user and of the source, up to `MAX_HOLD` seconds. The right password is never held back by
anyone else's guesses (another source, another user), and from the guessing source itself at
most `MAX_HOLD` seconds after its last wrong one. Every wrong password is logged, and how many
requests were held since.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from herder.core import login_backoff
from herder.core.login_backoff import MAX_HOLD, Backoff
from herder.core.rapi_users import UsersFile
from herder.maintd import server as maintd_server
from herder.maintd.daemon import Maintd
from herder.maintd.state import FileState
from herder.masterd.rapi import base as rapi_base
from herder.masterd.web.context import WebContext
from tests.maintd.fakes import FakeCluster, FakeSource
from tests.web.test_web_logic import Clock

from .serving import Served, serving
from .test_route_table import READER, WRITER, Daemon, certificate, users_file
from .test_route_table import masterd as route_masterd  # noqa: F401  (a fixture)

ATTACKER, ADMIN = "127.0.0.2", "127.0.0.3"  # two source addresses on this machine's loopback


# --- the rule, on a clock of its own ------------------------------------------------------------


def test_a_guessing_pair_is_held_longer_and_longer_up_to_the_bound() -> None:
    clock = Clock()
    backoff = Backoff(clock=clock)
    holds = []
    for _ in range(12):
        assert backoff.wait("admin", ATTACKER) == 0
        holds.append(backoff.failed("admin", ATTACKER))
        assert backoff.wait("admin", ATTACKER) == pytest.approx(holds[-1])
        clock.now += holds[-1]
    assert holds[:login_backoff.FREE] == [0.0] * login_backoff.FREE  # typos cost nothing
    assert holds == sorted(holds) and max(holds) == MAX_HOLD
    # hammering for ten minutes gets about one guess per MAX_HOLD through, not 800 a second
    checked = 0
    for _ in range(600 * 100):
        if backoff.wait("admin", ATTACKER) == 0:
            checked += 1
            backoff.failed("admin", ATTACKER)
        clock.now += 0.01
    assert checked <= 600 / MAX_HOLD + 1


def test_nobody_else_holds_the_right_password_back() -> None:
    clock = Clock()
    backoff = Backoff(clock=clock)
    for _ in range(50):  # one source guesses the admin's password, ...
        if backoff.wait("admin", ATTACKER) == 0:
            backoff.failed("admin", ATTACKER)
        clock.now += 0.05
    for attacker in range(200):  # ... and many more, each a few times
        for _ in range(5):
            source = f"10.0.{attacker // 250}.{attacker % 250}"
            if backoff.wait("admin", source) == 0:
                backoff.failed("admin", source)
    assert backoff.wait("admin", ATTACKER) > 0  # the guessers are held ...
    assert backoff.wait("admin", ADMIN) == 0  # ... the admin's own address is not
    assert backoff.wait("viewer", ATTACKER) == 0  # nor another user from the guessing address
    # once the admin typed a wrong password too, it waits for its own hold only
    for _ in range(login_backoff.FREE + 1):
        backoff.failed("admin", ADMIN)
    assert 0 < backoff.wait("admin", ADMIN) <= MAX_HOLD
    clock.now += MAX_HOLD
    assert backoff.wait("admin", ADMIN) == 0
    backoff.succeeded("admin", ADMIN)


def test_a_user_or_source_under_attack_holds_its_pairs_sooner() -> None:
    """A user guessed from many addresses (or an address guessing many users) gets no free
    failures for its other pairs: their first wrong password already holds them."""
    clock = Clock()
    backoff = Backoff(clock=clock)
    for source in range(login_backoff.FREE_USER):
        backoff.failed("admin", f"10.1.0.{source}")
    assert backoff.failed("admin", "10.1.1.1") > 0
    for user in range(login_backoff.FREE_SOURCE):
        backoff.failed(f"user{user}", "10.2.0.1")
    assert backoff.failed("someone", "10.2.0.1") > 0
    assert backoff.wait("someone", "10.2.0.2") == 0


def test_what_it_remembers_is_bounded_and_forgotten() -> None:
    clock = Clock()
    backoff = Backoff(clock=clock, most_kept=100)
    for n in range(1000):
        backoff.failed(f"user{n}", f"10.3.{n // 250}.{n % 250}")
    assert backoff.kept() <= 3 * 100
    for _ in range(10):
        backoff.failed("admin", ATTACKER)
    clock.now += login_backoff.FORGET + 1
    assert backoff.failed("admin", ATTACKER) == 0  # a fresh start


# --- the three doors ---------------------------------------------------------------------------


def client(source: str) -> httpx.Client:
    return httpx.Client(verify=False, timeout=30, follow_redirects=False,
                        transport=httpx.HTTPTransport(local_address=source, verify=False))


def hammer(send: object, count: int = 40) -> list[httpx.Response]:
    assert callable(send)
    return [send() for _ in range(count)]


def held_then_refused(answers: list[httpx.Response]) -> httpx.Response:
    """The answers of a burst of wrong passwords: the first few checked (401), then held
    (429 with Retry-After up to MAX_HOLD); the first 429."""
    codes = [a.status_code for a in answers]
    assert set(codes) <= {401, 429}, codes
    assert codes[:login_backoff.FREE] == [401] * login_backoff.FREE, codes
    assert 401 not in codes[codes.index(429):][:5], codes  # held: not even checked
    assert codes.count(401) <= login_backoff.FREE + 3, codes
    first = answers[codes.index(429)]
    assert 1 <= int(first.headers["Retry-After"]) <= MAX_HOLD
    return first


@pytest.fixture
def masterd(route_masterd: tuple[Daemon, rapi_base.RapiContext]  # noqa: F811  (the fixture)
            ) -> Iterator[tuple[Served, rapi_base.RapiContext]]:
    daemon, ctx = route_masterd
    ctx.web = WebContext()  # the login page
    with serving(daemon.app) as served:
        yield served, ctx


def test_rapi_basic_auth_holds_the_guesser_and_lets_the_admin_in(
        masterd: tuple[Served, rapi_base.RapiContext], caplog: pytest.LogCaptureFixture) -> None:
    served, _ = masterd
    url = served.plain + "/2/nodes"
    caplog.set_level(logging.INFO, logger="herder.login")
    with client(ATTACKER) as attacker, client(ADMIN) as admin:
        answers = hammer(lambda: attacker.get(url, auth=(WRITER[0], "guess")))
        first = held_then_refused(answers)
        assert first.json()["code"] == 429
        # the admin, elsewhere, is let in at once; another user from the guessing address too
        assert admin.get(url, auth=WRITER).status_code == 200
        assert attacker.get(url, auth=READER).status_code == 200
        # the right password from the guessing address: held, but at most MAX_HOLD seconds
        began = time.monotonic()
        while (answer := attacker.get(url, auth=WRITER)).status_code == 429:
            time.sleep(float(answer.headers["Retry-After"]))
        assert answer.status_code == 200 and time.monotonic() - began <= MAX_HOLD + 1
    logged = [r.getMessage() for r in caplog.records if r.name == "herder.login"]
    assert any(f"wrong password for user {WRITER[0]!r} from {ATTACKER}" in m for m in logged)
    assert any("held" in m for m in logged), logged


def test_the_web_login_holds_the_guesser_and_lets_the_admin_in(
        masterd: tuple[Served, rapi_base.RapiContext]) -> None:
    served, ctx = masterd
    url = served.plain + "/ui/login"
    with client(ATTACKER) as attacker, client(ADMIN) as admin:
        answers = hammer(lambda: attacker.post(url, data={"user": WRITER[0],
                                                          "password": "guess"}))
        first = held_then_refused(answers)
        assert "Too many wrong passwords" in first.text
        assert admin.post(url, data={"user": WRITER[0], "password": WRITER[1]}
                          ).status_code == 303
    assert ctx.web is not None and ctx.web.sessions.count(WRITER[0]) == 1


def test_maintd_cancel_holds_the_guesser_and_lets_the_admin_in(tmp_path: Path) -> None:
    cluster = FakeCluster(2, [])
    daemon = Maintd(cluster, FileState(tmp_path / "s.json"), [FakeSource()], interval=0.01,
                    watcher=False)
    settings = maintd_server.NotifySettings(lambda: None, users=UsersFile(users_file(tmp_path)))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(certificate(tmp_path))
    asyncio.run(daemon.tick())
    with serving(maintd_server.make_app(daemon, settings), tls) as served, \
            client(ATTACKER) as attacker, client(ADMIN) as admin:
        assert served.secure is not None
        url = served.secure + "/1/cancel/00000000-0000-4000-8000-000000000000"
        held_then_refused(hammer(lambda: attacker.post(url, auth=(WRITER[0], "guess"))))
        assert admin.post(url, auth=WRITER).status_code == 404  # let in: no such incident
