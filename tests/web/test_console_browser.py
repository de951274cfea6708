"""The web console in a real headless browser (Debian's chromium driven by Playwright) against
ONE simulated cluster (namespaced hosts, masterd and maintd as on a real master): login, a
read-only user who cannot act, the overview's live figures, a migration followed without a
reload, bad input (a forged form, an ended session, an unknown instance, a failing job), a
broken node showing up as an incident and an alert, a console's error. The consoles with real
guests: test_console_streams.py. Every page is photographed into docs/screenshots/ (linked
from the README)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.core import client_profile
from tests.simhelpers import config, herder, running_sim, wait_for, worker_offset

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
sync_api = pytest.importorskip("playwright.sync_api")
if CHROMIUM is None:
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)

pytestmark = pytest.mark.slow
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
READER = ("viewer", "r3ad-only-pass")
WAIT = 90_000  # ms: generous, a loaded 2-core machine runs the cluster and the browser
sync_api.expect.set_options(timeout=WAIT)


def first_ip() -> int:
    """127.0.0.60-79: away from the other simulated clusters' addresses (100-255)."""
    return 60 + worker_offset(5, 4)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    running = running_sim(tmp_path_factory.mktemp("web-sim"), 3, first_ip=first_ip())
    state = next(running)
    try:
        # an instance on shared storage to migrate, one on a node's own files whose
        # migration fails
        herder(state, "instance", "add", "web1", "--no-name-check", "-t", "sharedfile",
               "-o", "debootstrap+default", "--disk", "1G")
        herder(state, "instance", "add", "db1", "--no-name-check", "-t", "file",
               "-o", "debootstrap+default", "--disk", "1G")
        users = state.host(state.nodes[0].name).path("/var/lib/herder/rapi_users")
        with users.open("a") as out:
            out.write(f"{READER[0]} {READER[1]}\n")
        yield state
    finally:
        running.close()  # stops the cluster


@pytest.fixture(scope="module")
def writer(sim: Any) -> tuple[str, str]:
    profile = client_profile.load(sim.client_environment())
    assert profile.user is not None
    return profile.user, profile.password()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def log_in(browser: Any, sim: Any, who: tuple[str, str], **context: Any) -> Any:
    page = browser.new_context(ignore_https_errors=True, **context).new_page()
    page.set_default_timeout(WAIT)
    page.on("pageerror", lambda err: print(f"page error: {err}"))  # shown when a test fails
    page.goto(f"{sim.masterd_url}/ui/")
    assert page.url.endswith("/ui/login")  # nothing without a login
    page.fill("#user", who[0])
    page.fill("#password", who[1])
    page.click("button[type=submit]")
    page.wait_for_url(f"{sim.masterd_url}/ui/")
    sync_api.expect(page.locator("#whoami")).to_contain_text(who[0])
    return page


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def jobs(sim: Any) -> list[int]:
    with sim.rapi() as api:
        return api.get_jobs()


def mark_no_reload(page: Any) -> None:
    """A marker in the page's JavaScript state: gone if the page reloads."""
    page.evaluate("window.herderNoReload = true")


def still_not_reloaded(page: Any) -> bool:
    return bool(page.evaluate("window.herderNoReload === true"))


def test_login_and_overview_with_live_figures(sim: Any, browser: Any,
                                              writer: tuple[str, str]) -> None:
    login = browser.new_context(ignore_https_errors=True).new_page()
    login.goto(f"{sim.masterd_url}/ui/login")
    login.fill("#user", writer[0])
    login.fill("#password", "wrong")
    login.click("button[type=submit]")
    sync_api.expect(login.locator("#message")).to_contain_text("wrong password")
    shot(login, "login")
    page = log_in(browser, sim, writer)
    rows = page.locator("#nodes tbody tr")
    sync_api.expect(rows).to_have_count(len(sim.nodes))
    for node in sim.nodes:
        row = page.locator(f"#nodes tr[data-node='{node.name}']")
        sync_api.expect(row.locator("td.mem")).to_contain_text("iB /")  # live memory figures
        sync_api.expect(row.locator("td.cpu")).to_have_text(re.compile(r"^\d+$"))
    sync_api.expect(page.locator("#instances tr[data-instance='web1']")).to_be_visible()
    shot(page, "overview")
    # a narrow screen: the same page, stacked
    narrow = log_in(browser, sim, writer, viewport={"width": 390, "height": 800})
    sync_api.expect(narrow.locator("#nodes tbody tr")).to_have_count(len(sim.nodes))
    shot(narrow, "overview-narrow")


def test_read_only_user_sees_everything_and_cannot_act(sim: Any, browser: Any) -> None:
    page = log_in(browser, sim, READER)
    sync_api.expect(page.locator("#whoami")).to_contain_text("read-only")
    page.goto(f"{sim.masterd_url}/ui/#/instance/web1")
    sync_api.expect(page.locator("#instance-status")).to_be_visible()
    sync_api.expect(page.locator("[data-action=migrate]")).to_be_hidden()
    assert page.locator("#console").count() == 0  # read-only users never get a console
    before, pnode = jobs(sim), config(sim).find_instance("web1").primary_node
    # the server refuses, not only the page: the request the button would send, with the token
    answer = page.evaluate("""async () => {
        const me = await (await fetch('/ui/session')).json();
        const r = await fetch('/2/instances/web1/migrate', {method: 'PUT',
            headers: {'X-Herder-CSRF': me.csrf, 'Content-Type': 'application/json'}, body: '{}'});
        return [r.status, (await r.json()).explain];
    }""")
    assert answer[0] == 403 and READER[0] in answer[1]
    assert jobs(sim) == before and config(sim).find_instance("web1").primary_node == pnode


def test_migrate_from_the_instance_page_without_reload(sim: Any, browser: Any,
                                                      writer: tuple[str, str]) -> None:
    page = log_in(browser, sim, writer)
    page.goto(f"{sim.masterd_url}/ui/#/instance/web1")
    before = config(sim).find_instance("web1")
    source = config(sim).node_name(before.primary_node)
    sync_api.expect(page.locator("#instance-pnode")).to_have_text(source)
    shot(page, "instance")
    mark_no_reload(page)
    page.click("[data-action=migrate]")
    page.click("#confirm-ok")
    panel = page.locator(".job-panel").first
    sync_api.expect(panel.locator(".job-status")).to_have_text("success")
    sync_api.expect(panel.locator(".job-log li").first).to_be_visible()  # its log, as it came
    target = config(sim).node_name(config(sim).find_instance("web1").primary_node)
    assert target != source
    sync_api.expect(page.locator("#instance-pnode")).to_have_text(target)
    assert still_not_reloaded(page)
    shot(page, "instance-migrated")
    job_id = panel.get_attribute("data-job")
    page.goto(f"{sim.masterd_url}/ui/#/job/{job_id}")
    sync_api.expect(page.locator(".job-status")).to_have_text("success")
    shot(page, "job")
    page.goto(f"{sim.masterd_url}/ui/#/jobs")
    sync_api.expect(page.locator(f"tr[data-job='{job_id}']")).to_be_visible()
    shot(page, "jobs")
    page.goto(f"{sim.masterd_url}/ui/#/node/{target}")
    sync_api.expect(page.locator("#storage")).to_be_visible()
    # masterd's samples: node_info's figures and the node's mond's (CPU load, disk I/O)
    for chart in ("memory", "cpu", "io"):
        sync_api.expect(page.locator(f"#charts [data-chart={chart}] svg")).to_be_visible()
    shot(page, "node")


def test_a_failing_job_shows_its_error_and_changes_nothing(sim: Any, browser: Any,
                                                          writer: tuple[str, str]) -> None:
    page = log_in(browser, sim, writer)
    page.goto(f"{sim.masterd_url}/ui/#/instance/db1")
    before = config(sim).find_instance("db1")
    page.click("[data-action=migrate]")  # an instance on a node's own files cannot migrate
    page.click("#confirm-ok")
    panel = page.locator(".job-panel").first
    sync_api.expect(panel.locator(".job-status")).to_have_text("error")
    sync_api.expect(panel.locator(".job-result")).to_contain_text("Failed: ")
    after = config(sim).find_instance("db1")
    assert after.primary_node == before.primary_node and after.admin_state == "up"


def test_bad_input_gets_a_clear_message_and_changes_nothing(sim: Any, browser: Any,
                                                           writer: tuple[str, str]) -> None:
    page = log_in(browser, sim, writer)
    before, serial = jobs(sim), config(sim).serial_no
    # a forged form (no CSRF token): the browser sends the cookie, the server refuses
    page.set_content(f"""<form id=f method=post action="{sim.masterd_url}/2/herder/jobs"
        enctype="text/plain"><input name='{{"ops":[{{"OP_ID":"OP_TEST_DELAY","duration":0,
        "x":"' value='"}}]}}'></form>""")
    page.evaluate("document.getElementById('f').submit()")
    sync_api.expect(page.locator("body")).to_contain_text("CSRF")
    # a forged request of a page script without the token
    page.goto(f"{sim.masterd_url}/ui/#/")
    status = page.evaluate("""async () => (await fetch('/2/instances/web1/migrate',
        {method: 'PUT', body: '{}'})).status""")
    assert status == 403
    assert jobs(sim) == before and config(sim).serial_no == serial
    # an unknown instance
    page.goto(f"{sim.masterd_url}/ui/#/instance/no-such-instance")
    sync_api.expect(page.locator("#page-error")).to_contain_text("no-such-instance")
    # an ended session: the next request goes to the login page, which says why
    context = page.context
    cookies = [c for c in context.cookies() if c["name"] == "herder_session"]
    context.add_cookies([{**cookies[0], "value": "ended-session"}])
    page.goto(f"{sim.masterd_url}/ui/#/jobs")
    page.reload()
    sync_api.expect(page.locator("#message")).to_contain_text("session has ended")
    assert jobs(sim) == before


def test_create_form_shows_the_allocator_choice(sim: Any, browser: Any,
                                                writer: tuple[str, str]) -> None:
    page = log_in(browser, sim, writer)
    page.goto(f"{sim.masterd_url}/ui/#/create")
    page.fill("#c-name", "app1")
    page.select_option("#c-template", "file")
    before = set(config(sim).instances)
    page.click("#c-preview")
    sync_api.expect(page.locator("#c-choice")).to_contain_text("would place it on")
    assert set(config(sim).instances) == before  # a dry run changes nothing
    sync_api.expect(page.locator("#c-create")).to_be_enabled()
    shot(page, "create")


def test_the_console_shows_its_route_error_clearly(sim: Any, browser: Any,
                                                  writer: tuple[str, str]) -> None:
    """Without real guests (this module's cluster) a console cannot open: the page says why,
    with the route's own answer (404 while masterd has no console routes)."""
    page = log_in(browser, sim, writer)
    page.goto(f"{sim.masterd_url}/ui/#/instance/web1")
    page.click("#open-serial")
    sync_api.expect(page.locator("#console-error")).to_contain_text(
        re.compile(r"Console unavailable: \d{3}: \S"))
    shot(page, "console-unavailable")


def test_a_broken_node_shows_up_as_incident_and_alert(sim: Any, browser: Any,
                                                      writer: tuple[str, str]) -> None:
    from herder.sim import cluster

    page = log_in(browser, sim, writer)
    mark_no_reload(page)
    broken = sim.nodes[2].name
    cluster.break_node(Path(sim.directory), broken, "live-repair", "no-such-repair")
    alert = page.locator("#alerts li", has_text=broken)
    sync_api.expect(alert.first).to_be_visible()
    assert alert.first.get_attribute("data-kind") in ("incident", "failed-repair")
    sync_api.expect(page.locator(f"#nodes tr[data-node='{broken}'] td.health")).to_contain_text(
        "incident")
    assert still_not_reloaded(page)
    shot(page, "overview-alert")
    page.goto(f"{sim.masterd_url}/ui/#/maintenance")
    uuid = config(sim).find_node(broken).uuid
    sync_api.expect(page.locator("#incidents tbody tr", has_text=uuid).first).to_be_visible()
    shot(page, "maintenance")
    wait_for(lambda: any(i.node == uuid for i in config(sim).maintenance.incidents), 60,
             "the incident in the config")
