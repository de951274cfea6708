"""confd benchmark: herder confd vs Ganeti's ganeti-confd under the same UDP load.

    .venv/bin/python bench/confd.py [--requests 5000] [--windows 1,16] [--no-peer]

Both servers answer the same cluster: Ganeti's test cluster of ../shared/peers (its config.data,
imported into herder, and its hmac.key); without the peers, a synthetic one for herder only.
The load generator is one Python process on 127.0.0.1 sending pre-signed requests (distinct
rsalts) over one UDP socket with at most WINDOW in flight, a bounded number per run; it reports
answered queries per second and median/p99 latency, per query type, and herder/Ganeti ratios.
Each server runs as its own process; the generator shares the machine with it (2 cores here).
"""

from __future__ import annotations

import argparse
import os
import re
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from herder.core import confd, envelope, model  # noqa: E402

SHARED = REPO.parent / "shared"
PEERS = SHARED / "peers"
GROOT = Path(os.environ.get("GROOT", "/tmp/groot"))
GANETI_DATA = Path(os.environ.get("PEER_ROOT", "/tmp/gpeers/node1.example.com")) / \
    "var/lib/ganeti"

QUERIES: list[tuple[str, int, Any]] = [
    ("ping", confd.REQ_PING, None),
    ("cluster_master", confd.REQ_CLUSTER_MASTER, {"3": [0, 1, 2]}),
    ("node_drbd", confd.REQ_NODE_DRBD, "node1.example.com"),
    ("instance_disks", confd.REQ_INSTANCE_DISKS, "instance1.example.com"),
]


def load(port: int, key: bytes, rtype: int, query: Any, requests: int, window: int,
         timeout: float = 2.0) -> dict[str, float]:
    """Send `requests` queries with at most `window` outstanding; count verified answers."""
    packets = [confd.build_request(rtype, query, key) for _ in range(requests)]
    dest = ("127.0.0.1", port)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
    sent_at: dict[str, float] = {}
    latencies: list[float] = []
    errors = 0
    nxt = 0
    start = time.perf_counter()
    try:
        while nxt < min(window, requests):
            rsalt, pkt = packets[nxt]
            sent_at[rsalt] = time.perf_counter()
            sock.sendto(pkt, dest)
            nxt += 1
        while sent_at:
            ready, _, _ = select.select([sock], [], [], timeout)
            if not ready:
                break  # lost packets: stop this run
            data = sock.recv(65536)
            now = time.perf_counter()
            try:
                reply, rsalt = confd.parse_reply(data, key)
            except Exception:
                errors += 1
                continue
            began = sent_at.pop(rsalt, None)
            if began is None:
                continue
            latencies.append(now - began)
            if reply.status != confd.REPL_STATUS_OK:
                errors += 1
            if nxt < requests:
                rsalt, pkt = packets[nxt]
                sent_at[rsalt] = time.perf_counter()
                sock.sendto(pkt, dest)
                nxt += 1
    finally:
        sock.close()
    elapsed = time.perf_counter() - start
    latencies.sort()
    if not latencies:
        return {"qps": 0.0, "p50_ms": float("nan"), "p99_ms": float("nan"), "lost": requests,
                "errors": errors}
    return {
        "qps": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1e3,
        "lost": requests - len(latencies),
        "errors": errors,
    }


def cluster(tmp: Path) -> tuple[Path, bytes, bool]:
    """(herder config path, key, whether it is the peers' cluster)."""
    path = tmp / "config.json"
    if (GANETI_DATA / "config.data").exists():
        from herder.cli.ganeti_import import import_ganeti_file

        config, _ = import_ganeti_file(GANETI_DATA / "config.data")
        key = envelope.load_key(GANETI_DATA / "hmac.key")
        same = True
    else:
        from tests.conftest import build_config

        config = build_config()
        key = envelope.generate_key()
        same = False
    path.write_bytes(model.encode(config))
    (tmp / "hmac.key").write_bytes(key)
    return path, key, same


def config_queries(path: Path) -> list[tuple[str, int, Any]]:
    """The node and instance queries of a given cluster: on its first node and instance by
    name (each query's cost is the objects of that node, not the cluster's size)."""
    from herder.core.store import open_store

    config = open_store(str(path)).load()
    node = min(n.name for n in config.nodes.values())
    instance = min(i.name for i in config.instances.values())
    return [("node_drbd", confd.REQ_NODE_DRBD, node),
            ("node_instances", confd.REQ_NODE_INSTANCES, node),
            ("instance_disks", confd.REQ_INSTANCE_DISKS, instance)]


def start_herder(config: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "herder.cli.main", "--config", str(config), "confd", "--bind",
         "127.0.0.1", "--port", "0"], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    match = re.search(r"127\.0\.0\.1:(\d+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"herder confd did not start: {line}")
    return proc, int(match.group(1))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_all(port: int, key: bytes, requests: int, windows: list[int],
            queries: list[tuple[str, int, Any]]) -> dict[tuple[str, int], dict[str, float]]:
    load(port, key, confd.REQ_PING, None, 200, 4)  # warm up
    return {(name, w): load(port, key, rtype, query, requests, w)
            for name, rtype, query in queries for w in windows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000, help="queries per run")
    parser.add_argument("--windows", default="1,16", help="requests in flight, comma-separated")
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--config", type=Path,
                        help="a herder cluster's config file (its hmac.key beside it) to serve "
                             "instead, e.g. bench/scale.py's 50,000 instances; no peer")
    args = parser.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    with tempfile.TemporaryDirectory() as tmp_dir:
        if args.config is not None:
            config, key, same = args.config, envelope.load_key(args.config.parent / "hmac.key"), \
                False
            queries = [*QUERIES[:2], *config_queries(config)]
        else:
            config, key, same = cluster(Path(tmp_dir))
            queries = QUERIES if same else QUERIES[:2]
        proc, port = start_herder(config)
        try:
            ours = run_all(port, key, args.requests, windows, queries)
        finally:
            proc.terminate()
            proc.wait(10)
    peer: dict[tuple[str, int], dict[str, float]] | None = None
    if same and not args.no_peer and GROOT.is_dir():
        peer_port = free_port()
        env = {**os.environ, "CONFD_PORT": str(peer_port)}
        started = subprocess.run(["bash", str(PEERS / "confd.sh"), "start"], capture_output=True,
                                 text=True, env=env, timeout=60)
        if started.returncode == 0 and "already running" not in started.stdout:
            try:
                time.sleep(0.5)
                peer = run_all(peer_port, key, args.requests, windows, queries)
            finally:
                subprocess.run(["bash", str(PEERS / "confd.sh"), "stop"], capture_output=True,
                               env=env, timeout=60)
        else:
            print(f"peer: ganeti-confd not started ({started.stdout.strip()[-200:]})")

    what = args.config if args.config is not None else \
        "Ganeti test cluster (peers)" if same else "synthetic"
    print(f"{args.requests} requests per run, one UDP client process on 127.0.0.1; cluster: "
          f"{what}")
    header = f"{'query':16} {'win':>3} {'herder q/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'lost':>5}"
    if peer:
        header += f" {'ganeti q/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'lost':>5} {'ratio':>6}"
    print(header)
    for (name, w), r in ours.items():
        row = (f"{name:16} {w:>3} {r['qps']:>10.0f} {r['p50_ms']:>7.3f} {r['p99_ms']:>7.3f} "
               f"{r['lost']:>5.0f}")
        if peer:
            p = peer[(name, w)]
            ratio = r["qps"] / p["qps"] if p["qps"] else float("inf")
            row += (f" {p['qps']:>10.0f} {p['p50_ms']:>7.3f} {p['p99_ms']:>7.3f} "
                    f"{p['lost']:>5.0f} {ratio:>5.2f}x")
        print(row)
    if not peer:
        print("peer: ganeti-confd not available (bash ../shared/peers/setup.sh); no ratio")


if __name__ == "__main__":
    main()
