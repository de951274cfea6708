"""Benchmark of mond: /1/report/all throughput and latency, and the agent's idle cost.

    .venv/bin/python bench/mond.py [--duration 10] [--idle 30] [--no-peer]

Starts `herder mond` on 127.0.0.1 (default intervals, no cluster config), loads
`/1/report/all` with wrk at 1, 8 and 32 concurrent keep-alive connections, then measures the
agent's CPU and RSS while idle. Where Ganeti's ganeti-mond peer is available
(../shared/peers/mond.sh), the same load runs against it and the ratio is printed. Needs `wrk`
(Debian package; ../shared/peers/setup.sh installs it). Targets (2-core machine): >= 20x the
peer's /1/report/all throughput, p99 < 5 ms at 32 clients, RSS < 60 MB, idle CPU < 1 %.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
PEERS = REPO.parent / "shared" / "peers"
PEER_PORT = 18150
CONNECTIONS = (1, 8, 32)


def parse_duration_ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def _found(pattern: str, text: str) -> str:
    """The first group of `pattern` in wrk's report (a line per match)."""
    match = re.search(pattern, text, re.M)
    if match is None:
        raise RuntimeError(f"wrk's report has no {pattern!r}")
    return match.group(1)


def wrk(url: str, connections: int, duration: int) -> dict[str, float]:
    threads = min(2, connections)
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s",
                          "--latency", url], capture_output=True, text=True, timeout=duration + 60,
                         check=True).stdout
    rps = float(_found(r"Requests/sec:\s+([\d.]+)", out))
    p50 = parse_duration_ms(_found(r"^\s+50%\s+(\S+)", out))
    p99 = parse_duration_ms(_found(r"^\s+99%\s+(\S+)", out))
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {"rps": rps, "p50_ms": p50, "p99_ms": p99,
            "non_2xx": float(errors.group(1)) if errors else 0.0}


def start_herder(tmp: Path) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "HERDER_CONFIG": str(tmp / "no-config.json")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "herder.cli.main", "mond", "--bind", "127.0.0.1", "--port", "0",
         "--run-dir", str(tmp), "--plugin-dir", str(tmp / "plugins")],
        stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    match = re.search(r"127\.0\.0\.1:(\d+)/", line)
    if not match:
        proc.kill()
        raise SystemExit(f"herder mond did not start: {line}")
    port = int(match.group(1))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # wait until every collector has a real report
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/1/report/all") as resp:
            body = resp.read()
        if b"not collected yet" not in body:
            break
        time.sleep(0.2)
    return proc, port


def idle_cost(pid: int, seconds: float) -> tuple[float, float]:
    """(CPU % of one core, RSS MB) of a process over an idle window."""
    proc = psutil.Process(pid)
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    used = (after.user - before.user) + (after.system - before.system)
    return 100.0 * used / seconds, proc.memory_info().rss / 1e6


def peer_available() -> bool:
    return (PEERS / "mond.sh").exists() and Path("/tmp/groot").is_dir() and os.geteuid() == 0


def run_peer(duration: int) -> dict[int, dict[str, float]] | None:
    started = subprocess.run(["bash", str(PEERS / "mond.sh"), "start"], capture_output=True,
                             text=True, timeout=120)
    if started.returncode != 0:
        print(f"peer: ganeti-mond did not start: {started.stdout[-300:]}")
        return None
    try:
        time.sleep(2)
        url = f"http://127.0.0.1:{PEER_PORT}/1/report/all"
        return {c: wrk(url, c, duration) for c in CONNECTIONS}
    finally:
        subprocess.run(["bash", str(PEERS / "mond.sh"), "stop"], capture_output=True,
                       timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--idle", type=float, default=30.0, help="idle measurement seconds")
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("bench/mond.py needs wrk (apt-get install wrk)")
    with tempfile.TemporaryDirectory() as tmp_dir:
        proc, port = start_herder(Path(tmp_dir))
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/1/report/all") as resp:
                reports = json.loads(resp.read())
            cpu, rss = idle_cost(proc.pid, args.idle)
            url = f"http://127.0.0.1:{port}/1/report/all"
            ours = {c: wrk(url, c, args.duration) for c in CONNECTIONS}
            rss_after = psutil.Process(proc.pid).memory_info().rss / 1e6
        finally:
            proc.terminate()
            proc.wait(10)
    peer = run_peer(args.duration) if peer_available() and not args.no_peer else None

    print(f"herder mond: {len(reports)} collectors in /1/report/all "
          f"({', '.join(r['name'] for r in reports)})")
    print(f"idle at default intervals over {args.idle:g}s: CPU {cpu:.2f}% of a core, "
          f"RSS {rss:.1f} MB (after load: {rss_after:.1f} MB)")
    header = f"{'clients':>7} {'herder req/s':>13} {'p50 ms':>7} {'p99 ms':>7}"
    if peer:
        header += f" {'ganeti req/s':>13} {'p50 ms':>7} {'p99 ms':>7} {'ratio':>7}"
    print(header)
    for c in CONNECTIONS:
        row = f"{c:>7} {ours[c]['rps']:>13.0f} {ours[c]['p50_ms']:>7.2f} {ours[c]['p99_ms']:>7.2f}"
        if peer:
            ratio = ours[c]["rps"] / peer[c]["rps"] if peer[c]["rps"] else float("inf")
            row += (f" {peer[c]['rps']:>13.0f} {peer[c]['p50_ms']:>7.2f} "
                    f"{peer[c]['p99_ms']:>7.2f} {ratio:>6.1f}x")
        print(row)
    if not peer:
        print("peer: ganeti-mond not available (bash ../shared/peers/setup.sh as root); "
              "no ratio")


if __name__ == "__main__":
    main()
