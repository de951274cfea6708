"""instmon benchmark: event-to-notification latency and throughput against real libvirt.

    .venv/bin/python bench/instmon.py [--latency 200] [--storm 2000] [--domains 20]

A private libvirtd serves the test driver on its own socket; `herder instmon` runs as its own
process; a local HTTP receiver on 127.0.0.1 records arrival times. Latency: domains are
destroyed one at a time (from another connection), each from the moment `destroy()` returns to
the notification's arrival — with the default collapse hold (0.1 s: the time instmon waits for
the other events of the same failure) and with the hold off, to show the pipeline's own cost.
Throughput: a storm of start/destroy cycles as fast as libvirt takes them; events per second
seen by instmon and notifications per second delivered, RSS growth, spool peak. No peer:
masakari's monitor needs OpenStack (its numbers are not comparable here).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import libvirt  # noqa: E402
import psutil  # noqa: E402

from herder.sim.libvirtd import start_libvirtd  # noqa: E402
from tests.instmon.receiver import Receiver  # noqa: E402


def domain_xml(name: str) -> str:
    return (f"<domain type='test'><name>{name}</name><uuid>{uuidlib.uuid4()}</uuid>"
            "<memory unit='MiB'>64</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>")


def run_instmon(tmp: Path, uri: str, url: str, delay: float) -> subprocess.Popen[bytes]:
    config = tmp / f"instmon-{delay}.toml"
    config.write_text(f'hostname = "bench"\nlibvirt_uri = "{uri}"\n[notify]\nurl = "{url}"\n'
                      f"[collapse]\ndelay = {delay}\n")
    run_dir = tmp / f"run-{delay}"
    with open(tmp / f"instmon-{delay}.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "herder.cli.main", "instmon", "--config", str(config),
             "--run-dir", str(run_dir), "--spool-dir", str(tmp / f"spool-{delay}")],
            env={**os.environ, "HERDER_CONFIG": str(tmp / "none.json")},
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            state = json.loads((run_dir / "instmon.json").read_text())
            if state.get("pid") == proc.pid and state.get("connected"):
                time.sleep(0.2)
                return proc
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise SystemExit("instmon did not connect")


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(10)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def latency(uri: str, tmp: Path, n: int, doms: list[Any], delay: float) -> dict[str, float]:
    receiver = Receiver().start()
    proc = run_instmon(tmp, uri, receiver.url, delay)
    other = libvirt.open(uri)
    samples = []
    try:
        for i in range(n):
            dom = other.lookupByUUIDString(doms[i % len(doms)].UUIDString())
            dom.create()
            before = len(receiver.received)
            dom.destroy()
            t0 = time.time()
            deadline = time.monotonic() + 5
            while len(receiver.received) <= before and time.monotonic() < deadline:
                time.sleep(0.0005)
            if len(receiver.received) > before:
                samples.append((receiver.received[before][0] - t0) * 1000)
    finally:
        other.close()
        stop(proc)
        receiver.stop()
    return {"n": len(samples), "p50": statistics.median(samples), "p99": pct(samples, 99),
            "max": max(samples)}


def storm(uri: str, tmp: Path, events: int, doms: list[Any]) -> dict[str, float]:
    receiver = Receiver().start()
    proc = run_instmon(tmp, uri, receiver.url, 0.1)
    ps = psutil.Process(proc.pid)
    rss0 = ps.memory_info().rss
    peak = {"rss": rss0, "spool": 0}
    done = threading.Event()
    spool = tmp / "spool-0.1"

    def sample() -> None:
        while not done.is_set():
            peak["rss"] = max(peak["rss"], ps.memory_info().rss)
            peak["spool"] = max(peak["spool"], sum(1 for p in spool.glob("*.json")))
            time.sleep(0.02)

    threading.Thread(target=sample, daemon=True).start()
    other = libvirt.open(uri)
    cycles = events // 2 // len(doms)
    t0 = time.time()
    for _ in range(cycles):
        for d in doms:
            dom = other.lookupByUUIDString(d.UUIDString())
            dom.create()
            dom.destroy()
    produced = time.time() - t0
    want = cycles * len(doms)
    deadline = time.monotonic() + 120
    while len(receiver.received) < want and time.monotonic() < deadline:
        time.sleep(0.01)
    t_last = receiver.received[-1][0] if receiver.received else time.time()
    done.set()
    other.close()
    stop(proc)
    receiver.stop()
    total = t_last - t0
    return {"events": cycles * len(doms) * 2, "notifications": len(receiver.received),
            "expected": want, "produce_s": produced, "total_s": total,
            "events_per_s": cycles * len(doms) * 2 / total,
            "notes_per_s": len(receiver.received) / total,
            "rss_growth_mb": (peak["rss"] - rss0) / 2**20, "rss_mb": peak["rss"] / 2**20,
            "spool_peak": peak["spool"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency", type=int, default=200, help="destroys for the latency runs")
    ap.add_argument("--storm", type=int, default=2000, help="events in the storm")
    ap.add_argument("--domains", type=int, default=20)
    args = ap.parse_args()
    lvd = start_libvirtd()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-instmon-") as tmpname:
            tmp = Path(tmpname)
            conn = libvirt.open(lvd.uri)
            doms = [conn.defineXML(domain_xml(f"b{i}")) for i in range(args.domains)]
            print(f"instmon bench: libvirt test driver via {lvd.uri}")
            print("| collapse hold | notifications | p50 ms | p99 ms | max ms |")
            print("|---|---|---|---|---|")
            for delay in (0.1, 0.0):
                r = latency(lvd.uri, tmp, args.latency, doms, delay)
                print(f"| {delay:g} s | {r['n']} | {r['p50']:.1f} | {r['p99']:.1f} | "
                      f"{r['max']:.1f} |")
            s = storm(lvd.uri, tmp, args.storm, doms)
            print()
            print(f"storm: {s['events']} events (libvirt took {s['produce_s']:.2f} s to "
                  f"produce them), {s['notifications']}/{s['expected']} notifications "
                  f"delivered in {s['total_s']:.2f} s")
            print(f"  {s['events_per_s']:.0f} events/s, {s['notes_per_s']:.0f} "
                  f"notifications/s; RSS {s['rss_mb']:.1f} MiB (+{s['rss_growth_mb']:.1f}); "
                  f"spool peak {s['spool_peak']} entries")
            conn.close()
    finally:
        lvd.stop()


if __name__ == "__main__":
    main()
