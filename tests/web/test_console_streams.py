"""The VM's console in the browser (Debian's chromium driven by Playwright) with a real guest
(QEMU) in a simulated cluster: the serial console shows the guest's heartbeat, the VNC console
(noVNC, shipped in the package) connects, both over RAPI's console websockets with the web
console's session (docs/compat.md W6); a read-only user gets no console, neither on the page
nor from the server; a plain request of a stream (the page's first question) opens nothing.

They skip while masterd has no console routes (its RAPI answers 404 for them, asked in-process
before any cluster starts) or the simulator runs no real guests (`guests="qemu"`).

The nodes are Debian 12 hosts (`hosts="debian"`, issue 34: systemd, Debian's libvirt, herder
from the wheel; docs/compat.md N5a): noded's log is its unit's journal."""

from __future__ import annotations

import inspect
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from herder.core import client_profile
from herder.core.rapi_users import UsersFile
from herder.core.store import ConfigCache, FileStore
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.rapi import app as rapi_app
from herder.masterd.rapi import base as rapi_base
from tests import simaddresses
from tests.conftest import build_config
from tests.security.serving import serving
from tests.simhelpers import herder, running_sim, screenshots

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
sync_api = pytest.importorskip("playwright.sync_api")
if CHROMIUM is None:
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.guests]  # real guests: among the longest
SHOTS = screenshots()  # docs/screenshots/ with HERDER_SCREENSHOTS=$PWD/docs/screenshots
WAIT = 120_000  # ms: a real guest boots under TCG on a loaded machine
sync_api.expect.set_options(timeout=WAIT)
HEARTBEAT = "herder-guest boot_id="  # the guest's line on its serial console (sim.guest)
READER = ("viewer", "r3ad-only-pass")


def console_route_status(tmp_path: Path, kind: str) -> int:
    """What masterd's RAPI answers a writer's plain GET of a console route (in-process)."""
    store = FileStore(tmp_path / "config.json")
    config = build_config(2)
    store.create(config)
    users = tmp_path / "rapi_users"
    users.write_text("admin s3cret write\n")
    ctx = rapi_base.RapiContext(config=ConfigCache(store.path),
                                queue=JobQueue(tmp_path / "queue", lambda ctx, op: None),
                                users=UsersFile(users), store=store)
    name = sorted(i.name for i in config.instances.values())[0]
    with serving(rapi_app.make_app(ctx)) as served, httpx.Client(timeout=30) as client:
        return client.get(f"{served.plain}/2/instances/{name}/console/{kind}",
                          auth=("admin", "s3cret")).status_code


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    routes = tmp_path_factory.mktemp("console-routes")
    if console_route_status(routes, "serial") == 404:
        pytest.skip("masterd has no console routes yet (the console branch adds them)")
    from herder.sim import cluster

    if "guests" not in inspect.signature(cluster.start).parameters:
        pytest.skip("the simulator runs no real guests yet (the vms branch adds guests=qemu)")
    from herder.sim import debroot

    reason = debroot.unsupported()
    if reason:
        pytest.skip(reason)
    running = running_sim(tmp_path_factory.mktemp("web-console-sim"), 2,
                          first_ip=simaddresses.first_ip("console_streams"), guests="qemu",
                          hosts="debian")
    state = next(running)
    try:
        # VNC on the node's loopback (noded reaches it there; nothing else can)
        herder(state, "instance", "add", "guest1", "--no-name-check", "-t", "sharedfile",
               "-o", "herder-guest", "--disk", "1G", "-H", "vnc_bind_address=127.0.0.1",
               timeout=600)
        users = state.host(state.nodes[0].name).path("/var/lib/herder/rapi_users")
        with users.open("a") as out:
            out.write(f"{READER[0]} {READER[1]}\n")
        yield state
    finally:
        running.close()


def writer(sim: Any) -> tuple[str, str]:
    profile = client_profile.load(sim.client_environment())
    assert profile.user is not None
    return profile.user, profile.password()


def log_in(sim: Any, browser: Any, who: tuple[str, str] | None = None) -> Any:
    who = who or writer(sim)
    page = browser.new_context(ignore_https_errors=True).new_page()
    page.set_default_timeout(WAIT)
    page.on("pageerror", lambda err: print(f"page error: {err}"))  # shown when a test fails
    page.goto(f"{sim.masterd_url}/ui/login")
    page.fill("#user", who[0])
    page.fill("#password", who[1])
    page.click("button[type=submit]")
    page.wait_for_url(f"{sim.masterd_url}/ui/")
    page.goto(f"{sim.masterd_url}/ui/#/instance/guest1")
    sync_api.expect(page.locator("#instance-status")).to_have_text("running")
    return page


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def test_serial_console_shows_the_heartbeat(sim: Any, browser: Any) -> None:
    page = log_in(sim, browser)
    page.click("#open-serial")
    sync_api.expect(page.locator("#serial-status")).to_have_text("connected")
    sync_api.expect(page.locator("#serial-screen")).to_contain_text(HEARTBEAT)
    page.locator("#console").screenshot(path=str(SHOTS / "console-serial.png"))


def test_vnc_console_connects(sim: Any, browser: Any) -> None:
    page = log_in(sim, browser)
    page.click("#open-vnc")
    sync_api.expect(page.locator("#vnc-status")).to_have_attribute("data-state", "connected")
    canvas = page.locator("#vnc-screen canvas")
    sync_api.expect(canvas).to_be_visible()
    # sized by the VNC server's framebuffer (RFB's ServerInit: the guest's text console)
    assert int(canvas.get_attribute("width") or 0) > 0
    assert int(canvas.get_attribute("height") or 0) > 0
    page.locator("#console").screenshot(path=str(SHOTS / "console-vnc.png"))


def test_a_plain_request_of_a_stream_opens_nothing(sim: Any) -> None:
    """What the page asks before opening a console: the console object's checks (the instance
    runs), then 426 (a websocket route), without opening a stream on the node."""
    before = len(noded_console_lines(sim))
    user, password = writer(sim)
    with httpx.Client(verify=False, timeout=60) as client:
        for kind in ("serial", "vnc"):
            answer = client.get(f"{sim.masterd_url}/2/instances/guest1/console/{kind}",
                                auth=(user, password))
            assert answer.status_code == 426, answer.text
            assert "websocket" in answer.json()["explain"]
        answer = client.get(f"{sim.masterd_url}/2/instances/no-such-vm/console/serial",
                            auth=(user, password))
        assert answer.status_code == 404
    assert len(noded_console_lines(sim)) == before


def noded_console_lines(sim: Any) -> list[str]:
    """noded's log lines about console streams on the guest's node (its unit's journal,
    flushed first: a line logged just before is counted)."""
    done = sim.host(sim.nodes[0].name).run(
        ["sh", "-c", "journalctl --sync && journalctl -q --no-pager -o cat -u herder-noded"],
        timeout=60)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if "console " in line]


def test_read_only_user_gets_no_console(sim: Any, browser: Any) -> None:
    page = log_in(sim, browser, READER)
    assert page.locator("#console").count() == 0  # not on the page
    # nor from the server: the plain request and the websocket with the reader's session
    answer = page.evaluate("""async () => {
        const r = await fetch('/2/instances/guest1/console/serial');
        const opened = await new Promise((resolve) => {
            const ws = new WebSocket(`wss://${location.host}/2/instances/guest1/console/serial`);
            ws.onopen = () => { ws.close(); resolve(true); };
            ws.onclose = () => resolve(false);
        });
        return [r.status, (await r.json()).explain, opened];
    }""")
    assert answer[0] == 403 and READER[0] in answer[1]
    assert answer[2] is False
