"""maintd on a real Ganeti 3.0.2 cluster (../shared/peers/vcluster): time from a node's
diagnose change to the node evacuated, and maintd's RAPI calls per round.

    .venv/bin/python bench/ganeti.py [--runs 2] [--instances 2]

As root, with ../shared beside the repository and Debian's Ganeti unpacked by scripts/peers.sh.
The vcluster is started from scratch (and stopped at the end); herder mond runs beside Ganeti's
on every node (port 1825, diagnose every second), maintd runs in Ganeti mode on node1 (poll
0.5 s, no round delay). Per run: `--instances` diskless instances on node2, node2's diagnose
switched to `evacuate`, then timed until node2 is offline and tagged repairready; then the
node is brought back (tag removed, script fixed, `gnt-node modify --offline no`). RAPI calls
per tick: maintd's count of requests divided by its ticks, idle and during the evacuation.
No peer: Ganeti 3.0 has no maintenance daemon (harep repairs instances, not nodes).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from tests.ganeti import vcluster  # noqa: E402


def overview(base: str) -> dict[str, Any]:
    return httpx.get(f"{base}/1/overview", timeout=5).json()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--instances", type=int, default=2)
    args = ap.parse_args()
    n1, n2, _n3 = vcluster.NODES
    base = f"http://{vcluster.IPS[n1]}:1816"
    import pytest

    try:
        ctx = vcluster.running_vcluster()
        vcl = ctx.__enter__()
    except pytest.skip.Exception as err:
        raise SystemExit(f"bench/ganeti.py: {err}") from None
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ganeti-") as tmpname:
            work = Path(tmpname)
            monds = vcluster.start_monds(vcl, work)
            maintd = vcluster.spawn(work / "maintd.log", *vcluster.maintd_args(vcl, work))
            try:
                deadline = time.monotonic() + 60
                while "listening on" not in (work / "maintd.log").read_text():
                    if maintd.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit((work / "maintd.log").read_text()[-2000:])
                    time.sleep(0.1)
                time.sleep(3)
                o0 = overview(base)
                t0 = time.monotonic()
                time.sleep(10)
                o1 = overview(base)
                idle = (o1["cluster_calls"] - o0["cluster_calls"]) / max(1, o1["ticks"] -
                                                                          o0["ticks"])
                print(f"maintd in Ganeti mode, vcluster (Ganeti 3.0.2, 3 nodes), "
                      f"{args.instances} diskless instance(s) on {n2}")
                print(f"idle: {idle:.1f} RAPI calls per tick "
                      f"({(o1['ticks'] - o0['ticks']) / (time.monotonic() - t0):.1f} ticks/s)")
                print("| run | diagnose -> drained | -> instances moved | -> offline+tagged "
                      "| RAPI calls per tick | maintd rounds |")
                print("|---|---|---|---|---|---|")
                for run in range(args.runs):
                    names = [f"b{run}x{i}.vcluster.test" for i in range(args.instances)]
                    for name in names:
                        vcl.vc(n1, "gnt-instance", "add", "-o", "noop+default", "-t", "diskless",
                               "--no-ip-check", "--no-name-check", "-B", "memory=128", "-n", n2,
                               name)
                    before = overview(base)
                    t0 = time.monotonic()
                    vcluster.write_diagnose(work / n2 / "diagnose", "evacuate")
                    marks: dict[str, float] = {}
                    from herder.core.rapi import RapiClient

                    with RapiClient(vcl.url, vcl.user, vcl.password, verify=str(vcl.rapi_cert),
                                    check_hostname=False) as client:
                        while time.monotonic() - t0 < 300:
                            node = client.get_node(n2)
                            if node.get("drained") or node.get("offline"):
                                marks.setdefault("drained", time.monotonic() - t0)
                            if not node.get("pinst_list"):
                                marks.setdefault("moved", time.monotonic() - t0)
                            if node.get("offline") and any(
                                    t.startswith("maintd:repairready:") for t in node["tags"]):
                                marks["done"] = time.monotonic() - t0
                                tag = next(t for t in node["tags"]
                                           if t.startswith("maintd:repairready:"))
                                break
                            time.sleep(0.1)
                    after = overview(base)
                    per_tick = (after["cluster_calls"] - before["cluster_calls"]) / max(
                        1, after["ticks"] - before["ticks"])
                    print(f"| {run + 1} | {marks.get('drained', float('nan')):.1f} s | "
                          f"{marks.get('moved', float('nan')):.1f} s | "
                          f"{marks.get('done', float('nan')):.1f} s | {per_tick:.1f} | "
                          f"{after['rounds'] - before['rounds']} |")
                    if "done" not in marks:
                        raise SystemExit("the node was not evacuated within 300 s")
                    vcl.vc(n1, "gnt-node", "remove-tags", n2, tag)
                    vcluster.write_diagnose(work / n2 / "diagnose", "Ok")
                    time.sleep(3)
                    # back to a regular node (the RAPI role route: `gnt-node modify
                    # --offline no` exits 1 without a word on the vcluster)
                    with RapiClient(vcl.url, vcl.user, vcl.password, verify=str(vcl.rapi_cert),
                                    check_hostname=False) as client:
                        client.wait_for_job(client.set_node_role(n2, "regular", force=True))
                    time.sleep(2)
            finally:
                vcluster.stop([maintd])
                vcluster.stop(monds)
    finally:
        ctx.__exit__(None, None, None)


if __name__ == "__main__":
    main()
