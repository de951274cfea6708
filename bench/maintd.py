"""maintd benchmark: one maintd loop against N simulated agents.

    .venv/bin/python bench/maintd.py [--nodes 120] [--interval 0.2] [--changes 5]

The agents are one separate lightweight process serving per node (each on its own loopback
address 127.0.1.X, as mond would) `/1/report/all`: a signed diagnose report, whose data can be
switched over a control route, an inst-status report (4 instances) and a cpu-avg-load report.
maintd runs in this process with an in-memory cluster (N nodes, 4 DRBD instances per node)
standing in for masterd. Prints the time from a diagnose change on the agent to the drain job
being submitted, and maintd's CPU and wall time per tick (one poll of all agents plus the
planning).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.maintd.fakes

KEY = b"bench-key-0123456789abcdef0123456"
PORT = 18150

AGENTS = r'''
import asyncio, json, sys, time
from aiohttp import web
from herder.core import envelope
KEY = bytes.fromhex(sys.argv[3])
n, port = int(sys.argv[1]), int(sys.argv[2])
data = {i: {"status": "Ok", "command": "", "details": {}} for i in range(1, n + 1)}
def instances(i):
    return [{"name": f"i{i}-{j}", "uuid": f"u{i}-{j}", "admin_state": "up", "actual_state": "up",
             "status": {"code": 0, "message": ""}} for j in range(4)]
async def report(request):
    assert request.query.get("verbose") == "1"
    i = request.app["i"]
    ts = time.time_ns()
    d = data[i]
    diagnose = {"name": "diagnose", "category": "node", "kind": 1, "timestamp": ts, "data": d,
                "signature": {"timestamp": ts,
                              "hmac": envelope.compute_hmac(KEY, str(ts), envelope.dumps(d))}}
    status = {"name": "inst-status", "category": "instance", "kind": 1, "timestamp": ts,
              "data": {"status": {"code": 0, "message": ""}, "instances": instances(i)}}
    load = {"name": "cpu-avg-load", "category": None, "kind": 0, "timestamp": ts,
            "data": {"cpu_number": 4, "cpus": [0.1] * 4, "cpu_total": 0.4}}
    return web.json_response([load, diagnose, status])
async def control(request):
    body = await request.json()
    data[int(body["node"])] = body["data"]
    return web.json_response(True)
async def main():
    for i in range(1, n + 1):
        app = web.Application()
        app["i"] = i
        app.router.add_get("/1/report/all", report)
        app.router.add_post("/control", control)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, f"127.0.1.{i}", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
'''


async def bench(nodes: int, interval: float, changes: int) -> None:
    import httpx

    from herder.maintd.agents import AgentPoller
    from herder.maintd.daemon import Maintd
    from herder.maintd.rounds import Instance
    from herder.maintd.sources import DiagnoseSource
    from herder.maintd.state import FileState
    from tests.maintd.fakes import FakeCluster

    proc = subprocess.Popen([sys.executable, "-c", AGENTS, str(nodes), str(PORT), KEY.hex()],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        insts = [Instance(f"i{k}-{j}", f"node{k}", (f"node{k % nodes + 1}",))
                 for k in range(2, nodes + 1) for j in range(4)]
        cluster = FakeCluster(nodes, insts)
        for k in range(1, nodes + 1):
            cluster.node(f"node{k}", ip=f"127.0.1.{k}")
        source = DiagnoseSource(lambda: KEY)
        with tempfile.TemporaryDirectory() as tmp:
            d = Maintd(cluster, FileState(Path(tmp) / "state.json"), [source],
                       agents=AgentPoller(port=PORT, timeout=5), interval=interval)
            ticks: list[tuple[float, float]] = []

            async def tick() -> None:
                w0, c0 = time.perf_counter(), time.process_time()
                await d.tick()
                ticks.append((time.perf_counter() - w0, time.process_time() - c0))

            await tick()
            latencies = []
            async with httpx.AsyncClient() as client:
                for c in range(changes):
                    victim = 2 + c
                    before = len(cluster.submitted)
                    await client.post(f"http://127.0.1.{victim}:{PORT}/control", json={
                        "node": victim, "data": {"status": "evacuate", "command": "",
                                                 "details": {"bench": c}}})
                    t0 = time.perf_counter()
                    while len(cluster.submitted) == before:
                        await tick()
                        cluster.run_all()
                        await asyncio.sleep(interval)
                    latencies.append(time.perf_counter() - t0)
            wall = [w for w, _ in ticks]
            cpu = [c for _, c in ticks]
            print(json.dumps({
                "agents": nodes, "poll_interval_s": interval,
                "change_to_job_s": {"median": round(statistics.median(latencies), 3),
                                    "max": round(max(latencies), 3)},
                "tick_wall_s": {"median": round(statistics.median(wall), 4),
                                "max": round(max(wall), 4)},
                "tick_cpu_s": {"median": round(statistics.median(cpu), 4),
                               "max": round(max(cpu), 4)},
                "ticks": len(ticks), "jobs": len(cluster.submitted),
                "refused_reports": source.rejected}, indent=1))
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=120)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--changes", type=int, default=5)
    args = parser.parse_args()
    if not 2 <= args.nodes <= 250:
        parser.error("--nodes must be 2..250")
    asyncio.run(bench(args.nodes, args.interval, args.changes))


if __name__ == "__main__":
    main()
