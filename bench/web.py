"""Web console benchmark: the overview page at 200 nodes' worth of data, beside RAPI's latency.

    .venv/bin/python bench/web.py [--nodes 200] [--instances 400] [--rounds 20] [--updates 5]

One real masterd (`MasterDaemon`, its RAPI and web console over HTTPS on 127.0.0.1) runs in
this process with a config of NODES nodes and INSTANCES instances. 200 node daemons cannot run
on this machine, so its node RPC is a stand-in answering `node_info` at once with fixed
figures: what is measured is masterd's work with its cached figures and the browser's, not the
nodes'. Reported:

- RAPI: median and p90 latency of `GET /2/info`, `GET /2/nodes?bulk=1`, `GET /2/instances?bulk=1`
  (HTTP Basic, one client, keep-alive) and of the overview's twin `GET /2/herder/overview`
  (built anew for each request: they are spaced past the half second pages share one);
- the page, in Debian's chromium (Playwright, headless): time to first paint and to the
  overview drawn (every node's row present) from the navigation's start, median of ROUNDS loads;
- update latency: a node drained in the config (written as masterd's jobs write it) until the
  open overview shows it, through the events stream (no reload), median of UPDATES changes.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from herder.core import model  # noqa: E402
from herder.core.cluster_secrets import SecretPaths, self_signed_certificate  # noqa: E402
from herder.core.errors import RpcError  # noqa: E402
from herder.core.noderpc import RpcTransport  # noqa: E402
from herder.core.store import FileStore  # noqa: E402
from herder.masterd.daemon import MasterDaemon, MasterSettings  # noqa: E402

USER, PASSWORD = "bench", "bench-pass"


class CachedFigures(RpcTransport):
    """The node RPC of the benchmark's masterd: `node_info` answers at once, redistribution
    is taken (no node runs), anything else fails."""

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        if method == "write_ssconf":
            return sorted(args["values"])
        if method == "upload_file":
            return {"path": args["path"], "size": 0}
        if method == "write_config":
            return {"serial": args["serial"], "previous": None}
        if method != "node_info":
            raise RpcError(f"node {node.name}: {method}: no node daemon in the benchmark")
        return {"bootid": node.uuid, "memory_total": 65536, "memory_free": 32768,
                "memory_dom0": 2048, "cpu_total": 32, "cpu_dom0": 32, "cpu_nodes": 2,
                "cpu_sockets": 2, "instances": {},
                "storage": [{"type": "lvm-vg", "name": "xenvg", "storage_size": 1 << 21,
                             "storage_free": 1 << 20}]}


def make_cluster(directory: Path, nodes: int, instances: int) -> Path:
    from tests.conftest import build_config

    config = build_config(nodes, drbd_instances=instances // 2,
                          plain_instances=instances - instances // 2)
    path = directory / "config.json"
    FileStore(path).create(config)
    secrets = SecretPaths.beside(path)
    secrets.certificate.write_bytes(self_signed_certificate("bench.example.com"))
    secrets.hmac_key.write_bytes(b"0" * 40 + b"\n")
    secrets.rapi_users.write_text(f"{USER} {PASSWORD} write\n")
    return path


def start_masterd(config: Path, run_dir: Path) -> tuple[MasterDaemon, int, Any]:
    daemon = MasterDaemon(MasterSettings(config, bind="127.0.0.1", port=0, run_dir=run_dir),
                          rpc=CachedFigures())
    ready = threading.Event()
    port: list[int] = []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def serving(bound: int) -> None:
        port.append(bound)
        ready.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(daemon.serve(ready=serving, stop=stop))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not ready.wait(60):
        raise SystemExit("masterd did not start")

    def stopper() -> None:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)

    return daemon, port[0], stopper


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def rapi_latency(url: str, rounds: int) -> dict[str, tuple[float, float]]:
    out = {}
    with httpx.Client(base_url=url, verify=False, auth=(USER, PASSWORD), timeout=60) as client:
        for path in ("/2/info", "/2/nodes?bulk=1", "/2/instances?bulk=1", "/2/herder/overview"):
            client.get(path).raise_for_status()  # warm: the live figures are cached now
            times = []
            for _ in range(rounds):
                if path == "/2/herder/overview":
                    time.sleep(0.6)  # past the half second open pages share one overview
                began = time.perf_counter()
                client.get(path).raise_for_status()
                times.append((time.perf_counter() - began) * 1e3)
            out[path] = (statistics.median(times), percentile(times, 0.9))
    return out


PAINT = """() => {
  const paint = performance.getEntriesByName('first-contentful-paint')[0];
  return paint ? paint.startTime : null;
}"""


def browser_figures(url: str, config: Path, nodes: int, rounds: int,
                    updates: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("Debian's chromium is not installed (scripts/sysdeps.sh)")
    first_paint, drawn, update = [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        # bypass_csp: wait_for_function evaluates its predicate, which the page's CSP forbids
        page = browser.new_context(ignore_https_errors=True, bypass_csp=True).new_page()
        page.set_default_timeout(120_000)
        page.goto(f"{url}/ui/login")
        page.fill("#user", USER)
        page.fill("#password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{url}/ui/")
        page.goto(f"{url}/ui/#/")
        every_row = f"document.querySelectorAll('#nodes tbody tr').length === {nodes}"
        for _ in range(rounds):
            page.reload()  # a fresh load: the times count from its navigation's start
            page.wait_for_function(every_row, polling=10)
            drawn.append(page.evaluate("performance.now()"))
            paint = page.evaluate(PAINT)
            if paint is not None:
                first_paint.append(paint)
        store = FileStore(config)
        names = sorted(n.name for n in store.load().nodes.values()  # candidates stay undrained
                       if not n.master_candidate and not n.drained)
        for index in range(updates):
            name = names[index]
            with store.update() as current:
                current.find_node(name).drained = True
            began = time.perf_counter()
            page.wait_for_selector(f"#nodes tr[data-node='{name}'] td:nth-child(3):text('drained')")
            update.append((time.perf_counter() - began) * 1e3)
        browser.close()
    return {"first_paint_ms": statistics.median(first_paint) if first_paint else float("nan"),
            "overview_drawn_ms": statistics.median(drawn),
            "update_ms": statistics.median(update), "update_max_ms": max(update)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--instances", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--updates", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="herder-bench-web-") as tmp:
        config = make_cluster(Path(tmp), args.nodes, args.instances)
        _, port, stop = start_masterd(config, Path(tmp) / "run")
        url = f"https://127.0.0.1:{port}"
        try:
            print(f"masterd with {args.nodes} nodes and {args.instances} instances at {url}")
            for path, (median, p90) in rapi_latency(url, args.rounds).items():
                print(f"  RAPI GET {path:24} median {median:7.1f} ms   p90 {p90:7.1f} ms")
            page = browser_figures(url, config, args.nodes, args.rounds, args.updates)
            print(f"  page: first paint {page['first_paint_ms']:.0f} ms, overview drawn "
                  f"{page['overview_drawn_ms']:.0f} ms (median of {args.rounds} loads)")
            print(f"  update: config change -> shown {page['update_ms']:.0f} ms median, "
                  f"{page['update_max_ms']:.0f} ms max ({args.updates} changes, no reload)")
        finally:
            stop()


if __name__ == "__main__":
    main()
