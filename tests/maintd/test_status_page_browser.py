"""The status page in a real headless browser (Debian's chromium driven by Playwright): it
shows incidents as soon as they are observed and updates without a reload."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from herder.maintd.daemon import Maintd
from herder.maintd.rounds import Instance
from herder.maintd.state import FileState

from .fakes import WRITER, FakeCluster, FakeSource, Server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
sync_api = pytest.importorskip("playwright.sync_api")
if CHROMIUM is None:
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)

EVAC = {"status": "evacuate", "command": "", "details": {"disk": "sdb"}}


def test_page_updates_without_reload(tmp_path: Path) -> None:
    cluster = FakeCluster(4, [Instance("a", "node2", ("node3",))])
    src = FakeSource()
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [src], interval=0.01)
    with Server(d, secrets=tmp_path) as server, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            # over HTTPS as a write user: the page's cancel button works (the plain port
            # serves reads only, its page has no button)
            page = browser.new_page(ignore_https_errors=True, http_credentials={
                "username": WRITER[0], "password": WRITER[1]})
            page.goto(f"https://127.0.0.1:{server.https_port}/status.html")
            page.wait_for_selector("#summary:has-text('round')")
            assert page.locator("#incidents tbody tr").count() == 0
            src.data["u2"] = EVAC
            server.call(d.tick())  # observed: drained in the first round
            row = page.locator("#incidents tbody tr")
            row.first.wait_for(timeout=5000)
            status = row.first.locator("td.status")
            sync_api.expect(status).to_have_text("pending", timeout=5000)
            sync_api.expect(row.first).to_contain_text("node2")
            sync_api.expect(row.first).to_contain_text("sdb")
            for _ in range(6):
                cluster.run_all()
                server.call(d.tick())
            sync_api.expect(status).to_have_text("completed", timeout=5000)
            jobs = row.first.locator("td").nth(4)
            sync_api.expect(jobs).to_have_text(", ".join(str(j) for j in
                                                         d.state.incidents[0].jobs))
            # a second incident, canceled with the page's button
            src.data["u3"] = {**EVAC, "details": {"disk": "sdc"}}
            server.call(d.tick())
            second = page.locator("#incidents tbody tr", has_text="sdc")
            second.wait_for(timeout=5000)
            second.locator("button").click()
            sync_api.expect(second.locator("td.status")).to_have_text("canceled",
                                                                       timeout=5000)
            assert d.state.incidents[1].repair_status == "canceled"
            sync_api.expect(page.locator("#reports tbody tr")).to_have_count(4)
            src.data["u4"] = {**EVAC, "details": {"disk": "sdd"}}
            server.call(d.tick())
            plain = browser.new_page()
            plain.goto(f"http://127.0.0.1:{server.port}/status.html")
            third = plain.locator("#incidents tbody tr", has_text="sdd")
            third.wait_for(timeout=5000)
            assert third.locator("button").count() == 0
            sync_api.expect(plain.locator("#cancelhow")).to_be_visible()
        finally:
            browser.close()
