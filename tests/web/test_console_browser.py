"""The web console in a real headless browser (Debian's chromium driven by Playwright) against
ONE simulated cluster (namespaced hosts, masterd and maintd as on a real master): login, a
read-only user who cannot act, the overview's live figures, a migration followed without a
reload, bad input (a forged form, an ended session, an unknown instance, a failing job), a
broken node showing up as an incident and an alert, a console's error, the instance page's
snapshots, backup and restore. The consoles with real
guests: test_console_streams.py. The login, overview and instance pages also in Firefox
(Debian's firefox-esr over WebDriver BiDi, driven by Puppeteer: tests/web/firefox/). Every page
is photographed (`simhelpers.screenshots`: the README's, docs/screenshots/, with
HERDER_SCREENSHOTS=$PWD/docs/screenshots)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.core import client_profile
from tests import simaddresses
from tests.simhelpers import (
    config,
    herder,
    running_sim,
    screenshots,
    wait_for,
)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
sync_api = pytest.importorskip("playwright.sync_api")

pytestmark = pytest.mark.slow
SHOTS = screenshots()  # docs/screenshots/ with HERDER_SCREENSHOTS=$PWD/docs/screenshots
FIREFOX_CHECKS = Path(__file__).resolve().parent / "firefox"
FIREFOX = shutil.which("firefox-esr") or shutil.which("firefox")
READER = ("viewer", "r3ad-only-pass")
WAIT = 90_000  # ms: generous, a loaded 2-core machine runs the cluster and the browser
sync_api.expect.set_options(timeout=WAIT)


def first_ip() -> int:
    """This module's addresses (tests/simaddresses.py)."""
    return simaddresses.first_ip("console_browser")


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
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (scripts/sysdeps.sh)")
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
        # health: the self-diagnose and the daemon collectors of the node's mond
        sync_api.expect(row.locator("td.health")).to_contain_text("diagnose Ok")
        sync_api.expect(row.locator("td.health")).to_contain_text("daemons ok")
    sync_api.expect(page.locator("#instances tr[data-instance='web1']")).to_be_visible()
    sync_api.expect(page.locator("#instances p")).to_contain_text("running: 2")  # per state
    shot(page, "overview")
    # a narrow screen: the same page, stacked
    narrow = log_in(browser, sim, writer, viewport={"width": 390, "height": 800})
    sync_api.expect(narrow.locator("#nodes tbody tr")).to_have_count(len(sim.nodes))
    # rows stacked as cards; read in one script: a live update may redraw the table between
    # finding a row and reading its style (a detached row has no computed display)
    stacked = narrow.evaluate(
        "() => getComputedStyle(document.querySelector('#nodes tbody tr')).display")
    assert stacked == "block"
    assert narrow.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways
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
    """Without real guests (this module's cluster: libvirt's test driver, no serial pty) a
    console cannot open: the page says why, with noded's reason through the route."""
    page = log_in(browser, sim, writer)
    page.goto(f"{sim.masterd_url}/ui/#/instance/web1")
    page.click("#open-serial")
    sync_api.expect(page.locator("#console-error")).to_contain_text(
        re.compile(r"Console unavailable: 503: .*web1 has no serial console"))
    shot(page, "console-unavailable")


def test_a_slow_page_never_draws_over_the_next(sim: Any, browser: Any,
                                               writer: tuple[str, str]) -> None:
    """The overview still loading when an instance's page is asked for (a quick click) draws
    nowhere: the instance's page stays."""
    held: list[Any] = []
    context = browser.new_context(ignore_https_errors=True)
    page = context.new_page()
    page.set_default_timeout(WAIT)
    # hold the first page's overview until the instance's page is drawn
    page.route("**/2/herder/overview", lambda route: held.append(route) if not held
               else route.continue_())
    page.goto(f"{sim.masterd_url}/ui/login")
    page.fill("#user", writer[0])
    page.fill("#password", writer[1])
    page.click("button[type=submit]")
    wait_for(lambda: held or page.evaluate("false"), 60, "the overview's request")
    page.goto(f"{sim.masterd_url}/ui/#/instance/web1")
    sync_api.expect(page.locator("#instance-pnode")).to_be_visible()
    with page.expect_response("**/2/herder/overview"):
        held[0].continue_()
    page.wait_for_timeout(500)  # the held answer is drawn (nowhere) within this
    sync_api.expect(page.locator("#instance-pnode")).to_be_visible()
    assert page.locator("#nodes").count() == 0  # the overview did not replace it


def test_firefox_login_overview_and_instance_page(sim: Any, writer: tuple[str, str],
                                                  tmp_path: Path) -> None:
    """Debian's firefox-esr, headless, over WebDriver BiDi (Puppeteer: tests/web/firefox/;
    Playwright's own Firefox build cannot be downloaded here and its BiDi channel needs a
    command Firefox ESR lacks: docs/compat.md W7)."""
    node = shutil.which("node")
    missing = [what for what, there in (
        ("firefox-esr", FIREFOX), ("node", node),
        ("puppeteer-core (npm ci --prefix tests/web/firefox)",
         (FIREFOX_CHECKS / "node_modules" / "puppeteer-core").is_dir())) if not there]
    if missing:
        pytest.skip(f"Firefox cannot be driven here: no {', '.join(missing)}")
    assert node is not None and FIREFOX is not None
    done = subprocess.run(
        [node, str(FIREFOX_CHECKS / "check_pages.mjs"), sim.masterd_url, writer[0], writer[1],
         "web1", str(len(sim.nodes)), str(SHOTS)],
        capture_output=True, text=True, timeout=600, cwd=FIREFOX_CHECKS,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HERDER_FIREFOX": FIREFOX})
    if done.returncode == 2:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["version"].startswith("firefox/")
    assert seen["unauthenticated_url"].endswith("/ui/login")  # nothing without a login
    assert "wrong password" in seen["wrong_password"]
    assert writer[0] in seen["whoami"] and "may act" in seen["whoami"]
    assert sorted(row["name"] for row in seen["nodes"]) == sorted(n.name for n in sim.nodes)
    for row in seen["nodes"]:
        assert "iB / " in row["mem"] and row["cpu"].isdigit(), row  # live figures
    inst = config(sim).find_instance("web1")
    assert seen["instance"]["pnode"] == config(sim).node_name(inst.primary_node)
    assert seen["instance"]["status"] == "running" and seen["instance"]["disks"] == 1
    assert {"migrate", "shutdown", "remove"} <= set(seen["instance"]["actions"])
    # a narrow screen: rows stacked as cards, nothing wider than the screen
    assert [row["display"] for row in seen["narrow"]["nodes"]] == ["block"] * len(sim.nodes)
    assert seen["narrow"]["scroll_width"] <= 390


def act(page: Any, action: str, status: str = "success", confirm: bool = True) -> Any:
    """Click an action's button (and confirm it): the panel of its job, once it ended so."""
    panels = page.locator(".job-panel")
    before = panels.count()
    page.click(f"[data-action={action}]")
    if confirm:
        page.click("#confirm-ok")
    sync_api.expect(panels).to_have_count(before + 1)  # the newest comes first
    sync_api.expect(panels.first.locator(".job-status")).to_have_text(status)
    return panels.first


def act_in_dialog(page: Any, action: str, fields: dict[str, str]) -> Any:
    """An action whose confirmation asks for values: fill them, leave hotplug off (libvirt's
    test driver plugs nothing: the change waits for the next start), confirm."""
    panels = page.locator(".job-panel")
    before = panels.count()
    page.click(f"[data-action={action}]")
    for selector, value in fields.items():
        page.fill(selector, value)
    page.uncheck("#confirm-extra .hotplug")
    page.click("#confirm-ok")
    sync_api.expect(panels).to_have_count(before + 1)
    sync_api.expect(panels.first.locator(".job-status")).to_have_text("success")
    return panels.first


def test_node_actions_ask_first_and_run_as_jobs(sim: Any, browser: Any,
                                               writer: tuple[str, str]) -> None:
    node = sim.nodes[1].name
    page = log_in(browser, sim, writer)
    page.goto(f"{sim.masterd_url}/ui/#/node/{node}")
    sync_api.expect(page.locator("#storage")).to_be_visible()
    before = jobs(sim)
    for action in ("drain", "undrain", "evacuate", "migrate-all", "powercycle"):
        page.click(f"[data-action={action}]")
        sync_api.expect(page.locator("#confirm")).to_be_visible()  # asks first
        page.click("#confirm-cancel")
        sync_api.expect(page.locator("#confirm")).to_be_hidden()
    assert jobs(sim) == before and not config(sim).find_node(node).drained  # all declined
    act(page, "drain")
    assert config(sim).find_node(node).drained
    drained = page.locator("#view tr:has(th:text-is('Drained')) td")
    sync_api.expect(drained).to_have_text("yes")
    act(page, "undrain")
    assert not config(sim).find_node(node).drained
    sync_api.expect(drained).to_have_text("no")


def test_create_then_every_instance_action(sim: Any, browser: Any,
                                           writer: tuple[str, str]) -> None:
    """The create form (after the allocator's dry run), then each of the instance page's
    actions, each one ordinary RAPI job whose outcome the page shows without a reload."""
    page = log_in(browser, sim, writer)
    page.goto(f"{sim.masterd_url}/ui/#/create")
    page.fill("#c-name", "app2")
    page.select_option("#c-template", "sharedfile")
    page.click("#c-preview")
    sync_api.expect(page.locator("#c-choice")).to_contain_text("would place it on")
    page.click("#c-create")
    sync_api.expect(page.locator(".job-panel .job-status")).to_have_text("success")
    inst = config(sim).find_instance("app2")
    assert inst.admin_state == "up" and inst.disks[0].size == 1024
    page.goto(f"{sim.masterd_url}/ui/#/instance/app2")
    sync_api.expect(page.locator("#instance-status")).to_have_text("running")
    mark_no_reload(page)
    act(page, "shutdown")
    sync_api.expect(page.locator("#instance-status")).to_have_text("ADMIN_down")
    assert config(sim).find_instance("app2").admin_state == "down"
    act(page, "start", confirm=False)
    sync_api.expect(page.locator("#instance-status")).to_have_text("running")
    act(page, "reboot")
    panels = page.locator(".job-panel").count()
    page.click("[data-action=grow-disk]")  # its dialog has the disk and the amount
    page.fill("#grow-amount", "512")
    page.click("#confirm-ok")
    sync_api.expect(page.locator(".job-panel")).to_have_count(panels + 1)
    sync_api.expect(page.locator(".job-panel .job-status").first).to_have_text("success")
    assert config(sim).find_instance("app2").disks[0].size == 1536
    # a disk and a NIC added, then the NIC removed: each asked first, then one modify job
    act_in_dialog(page, "add-disk", {"#add-disk-size": "256"})
    assert [d.size for d in config(sim).find_instance("app2").disks] == [1536, 256]
    act_in_dialog(page, "add-nic", {"#add-nic-network": "", "#add-nic-ip": "none"})
    macs = [nic.mac for nic in config(sim).find_instance("app2").nics]
    assert len(macs) == 2 and config(sim).find_instance("app2").nics[1].ip is None
    sync_api.expect(page.locator("#nics tbody tr")).to_have_count(2)
    act_in_dialog(page, "remove-nic", {"#remove-nic-index": "1"})
    assert [nic.mac for nic in config(sim).find_instance("app2").nics] == macs[:1]
    pnode = config(sim).find_instance("app2").primary_node
    act(page, "failover")
    assert config(sim).find_instance("app2").primary_node != pnode
    # replacing the disks needs a mirror: the job fails and says why, nothing changes
    before = config(sim).find_instance("app2")
    panel = act(page, "replace-disks", "error")
    sync_api.expect(panel.locator(".job-result")).to_contain_text("Failed: ")
    after = config(sim).find_instance("app2")
    assert (after.primary_node, after.disks) == (before.primary_node, before.disks)
    assert still_not_reloaded(page)
    page.locator("#disk-status-ask").click()
    pnode_name = config(sim).node_name(config(sim).find_instance("app2").primary_node)
    status_row = page.locator(f"#disk-status tr[data-disk='0'][data-node='{pnode_name}']")
    sync_api.expect(status_row).to_contain_text("in sync")
    sync_api.expect(status_row).to_contain_text("ok")
    shot(page, "instance-disk-status")
    act(page, "remove")
    wait_for(lambda: "app2" not in {i.name for i in config(sim).instances.values()}, 60,
             "app2 removed")


def test_a_waiting_job_is_canceled_from_its_page(sim: Any, browser: Any,
                                                 writer: tuple[str, str]) -> None:
    node = sim.nodes[1].name
    delay = {"OP_ID": "OP_TEST_DELAY", "duration": 15, "on_master": False, "on_nodes": [node]}
    with sim.rapi() as api:
        holder = api.request("POST", "/2/herder/jobs", None, {"ops": [delay]})
        waiting = api.request("POST", "/2/herder/jobs", None, {"ops": [delay]})
    page = log_in(browser, sim, writer)
    page.goto(f"{sim.masterd_url}/ui/#/job/{waiting}")
    sync_api.expect(page.locator(".job-status")).to_have_text(re.compile("queued|waiting"))
    page.click(".job-cancel")
    page.click("#confirm-ok")
    sync_api.expect(page.locator(".job-status")).to_have_text("canceled")
    # the running one cannot be canceled any more: the page says so
    page.goto(f"{sim.masterd_url}/ui/#/job/{holder}")
    sync_api.expect(page.locator(".job-status")).to_have_text("running")
    page.click(".job-cancel")
    page.click("#confirm-ok")
    sync_api.expect(page.locator("#banner")).to_contain_text("can no longer be canceled")
    sync_api.expect(page.locator(".job-status")).to_have_text("success")
    shot(page, "job-cancel")


def ended(panel: Any, status: str) -> None:
    """The job of `panel` ended with `status` (its result or error in the message if not)."""
    sync_api.expect(panel.locator(".job-result")).to_have_text(re.compile(r"^(Result|Failed)"))
    assert panel.locator(".job-status").inner_text() == status, \
        panel.locator(".job-result").inner_text()


def test_backup_snapshot_and_restore_from_the_instance_page(sim: Any, browser: Any,
                                                            writer: tuple[str, str]) -> None:
    """The instance page's backups and snapshots (issue 30): a snapshot taken (its name asked
    for), listed from the config; the rollback asks first and a cancel submits nothing; an
    export to another node and its restore as a new instance; the snapshot removed. Each one
    ordinary job through its route, its outcome shown without a reload."""
    herder(sim, "instance", "add", "snap1", "--no-name-check", "-t", "ext", "-o",
           "debootstrap+default", "--disk", "size=64M,provider=sharedimg", "--no-start",
           "--no-install", "-n", sim.nodes[0].name, timeout=300)
    try:
        page = log_in(browser, sim, writer)
        page.goto(f"{sim.masterd_url}/ui/#/instance/snap1")
        sync_api.expect(page.locator("#backups h2")).to_contain_text("(0 snapshots)")
        sync_api.expect(page.locator("[data-action=snapshot-rollback]")).to_be_disabled()
        mark_no_reload(page)
        panels = page.locator(".job-panel")
        page.click("[data-action=snapshot-add]")
        page.fill("#snapshot-name", "before-upgrade")
        page.click("#confirm-ok")
        sync_api.expect(panels).to_have_count(1)
        sync_api.expect(panels.first.locator(".job-status")).to_have_text("success")
        listed_row = page.locator("#snapshots tr[data-snapshot='before-upgrade']")
        sync_api.expect(listed_row).to_be_visible()
        assert [s.name for s in config(sim).find_instance("snap1").snapshots] == ["before-upgrade"]

        # the rollback says what it loses and asks first; a cancel submits nothing
        submitted = jobs(sim)
        page.click("[data-action=snapshot-rollback]")
        sync_api.expect(page.locator("#confirm-text")).to_contain_text(
            "what was written since is lost")
        page.click("#confirm-cancel")
        assert jobs(sim) == submitted and panels.count() == 1
        panel = act(page, "snapshot-rollback")
        sync_api.expect(panel.locator(".job-log")).to_contain_text(
            "disk/0 rolled back to snapshot before-upgrade")

        # a backup to the second node, restored from there as a new instance
        target = sim.nodes[1].name
        page.click("[data-action=backup-export]")
        page.select_option("#export-node", target)
        page.click("#confirm-ok")
        sync_api.expect(panels).to_have_count(3)
        ended(panels.first, "success")
        listed = herder(sim, "backup", "list", "--node", target, "--no-headers").stdout
        assert "snap1" in listed.split(), listed
        page.click("[data-action=backup-import]")
        page.select_option("#import-node", target)
        page.fill("#import-name", "snap1-restored")
        page.select_option("#import-template", "sharedfile")  # onto other storage
        page.uncheck("#import-start")
        page.click("#confirm-ok")
        sync_api.expect(panels).to_have_count(4)
        ended(panels.first, "success")
        restored = config(sim).find_instance("snap1-restored")
        assert config(sim).node_name(restored.primary_node) == target
        assert (restored.disk_template, [d.size for d in restored.disks]) == ("sharedfile", [64])

        act(page, "snapshot-remove")
        sync_api.expect(page.locator("#backups h2")).to_contain_text("(0 snapshots)")
        assert config(sim).find_instance("snap1").snapshots == []
        assert still_not_reloaded(page)
        shot(page, "instance-backups")
    finally:
        for name in ("snap1-restored", "snap1"):
            herder(sim, "instance", "remove", name, check=False, timeout=300)
        herder(sim, "backup", "remove", "snap1", check=False, timeout=300)


# last: the broken node stays broken
def test_a_broken_node_shows_up_as_incident_and_alert(sim: Any, browser: Any,
                                                      writer: tuple[str, str]) -> None:
    from herder.sim import cluster

    page = log_in(browser, sim, writer)
    mark_no_reload(page)
    broken = sim.nodes[2].name
    with sim.rapi() as api:
        ticks = api.request("GET", "/2/herder/maintd")["ticks"]
    # what `simulate --break NODE live-repair` does, with a repair command that fails
    cluster.break_node(Path(sim.directory), broken, "live-repair", "no-such-repair")
    alert = page.locator("#alerts li", has_text=broken)
    # within maintd's next pass (the simulator's maintd passes every second: 30 s is a wide
    # margin on a loaded machine; the passes it took are printed)
    sync_api.expect(alert.first).to_be_visible(timeout=30_000)
    with sim.rapi() as api:
        print(f"the alert after {api.request('GET', '/2/herder/maintd')['ticks'] - ticks} "
              "maintd passes")
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
