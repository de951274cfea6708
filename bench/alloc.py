"""Allocator benchmark: herder vs Ganeti's hail/hbal/hspace on the same synthetic clusters.

    .venv/bin/python bench/alloc.py [--sizes 16,64,256,1024] [--groups 1,4] [--peer-timeout 60]

Clusters: N nodes (256 GB, 8 TiB, 32 CPUs) with about 8 DRBD/plain instances per node (4 GB,
50 GB), in one or several node groups. Every case runs as a separate process (``herder ...``
and the peer binary), each under a wall-time and memory watchdog; a tripped watchdog is
reported as timeout/oom. hbal and hspace are only run up to 64 nodes (they take minutes above).
Prints one table: times, herder/peer ratio, and both final scores where the peer finished.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERDER = str(REPO / ".venv" / "bin" / "herder")
GROOT = Path(os.environ.get("GROOT", "/tmp/groot"))
PEER_CAP_HTOOLS = 64

POLICY = {
    "minmax": [{"min": {"memory-size": 128, "cpu-count": 1, "disk-size": 1024, "disk-count": 1,
                        "nic-count": 1, "spindle-use": 1},
                "max": {"memory-size": 65536, "cpu-count": 16, "disk-size": 1048576,
                        "disk-count": 16, "nic-count": 8, "spindle-use": 12}}],
    "std": {"memory-size": 4096, "cpu-count": 1, "disk-size": 51200, "disk-count": 1,
            "nic-count": 1, "spindle-use": 1},
    "disk-templates": ["drbd", "plain", "diskless", "file", "sharedfile", "blockdev", "rbd",
                       "ext"],
    "vcpu-ratio": 4.0, "spindle-ratio": 32.0,
}


def make_cluster(n: int, groups: int, seed: int = 1, per_node: int = 8,
                 fill: float = 1.0) -> dict[str, Any]:
    """A consistent iallocator message body (no request); ``fill`` < 1 leaves nodes empty."""
    rnd = random.Random(seed)
    gnames = [f"uuid-g{g}" for g in range(groups)]
    msg: dict[str, Any] = {
        "version": 2, "cluster_name": "bench", "cluster_tags": [],
        "enabled_hypervisors": ["xen-pvm"], "ipolicy": POLICY,
        "nodegroups": {u: {"name": f"group{g}", "alloc_policy": "preferred", "networks": [],
                           "ipolicy": POLICY, "tags": []} for g, u in enumerate(gnames)},
        "nodes": {}, "instances": {},
    }
    names = [f"node-{k:04d}" for k in range(n)]
    for k, name in enumerate(names):
        msg["nodes"][name] = {
            "group": gnames[k * groups // n], "offline": False, "drained": False,
            "vm_capable": True, "ndparams": {"exclusive_storage": False, "spindle_count": 12},
            "total_memory": 262144, "reserved_memory": 1024, "free_memory": 261120,
            "total_disk": 8388608, "free_disk": 8388608, "total_cpus": 32, "reserved_cpus": 1,
            "free_spindles": 12, "total_spindles": 12, "tags": [],
        }
    by_group: dict[str, list[str]] = {}
    for name in names:
        by_group.setdefault(msg["nodes"][name]["group"], []).append(name)
    loaded = names[: max(2, int(n * fill))]
    loaded_set = set(loaded)
    members = {g: [x for x in lst if x in loaded_set] for g, lst in by_group.items()}
    count = 0
    for name in loaded:
        pool = members[msg["nodes"][name]["group"]]
        for _ in range(per_node):
            drbd = len(pool) > 1 and rnd.random() < 0.75
            peer = name
            while drbd and peer == name:
                peer = rnd.choice(pool)
            nodes = [name, peer] if drbd else [name]
            msg["nodes"][name]["free_memory"] -= 4096
            for x in nodes:
                msg["nodes"][x]["free_disk"] -= 51200
            msg["instances"][f"inst-{count:05d}"] = {
                "memory": 4096, "vcpus": 2, "disk_template": "drbd" if drbd else "plain",
                "disks": [{"size": 51200, "mode": "rw"}], "disk_space_total": 51200,
                "spindle_use": 1, "nics": [], "tags": [], "admin_state": "up",
                "nodes": nodes, "os": "debian",
            }
            count += 1
    return msg


def new_instance(name: str, template: str) -> dict[str, Any]:
    return {"name": name, "required_nodes": 2 if template == "drbd" else 1,
            "disk_template": template, "disks": [{"size": 51200, "mode": "rw"}],
            "disk_space_total": 51200, "memory": 4096, "vcpus": 2, "spindle_use": 1,
            "tags": [], "nics": [], "os": "debian", "hypervisor": "xen-pvm"}


def requests(msg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    drbd = sorted(k for k, v in msg["instances"].items() if v["disk_template"] == "drbd")
    victim = msg["instances"][drbd[0]]["nodes"][0]
    on_victim = [k for k, v in msg["instances"].items() if victim in v["nodes"]]
    reqs = {
        "alloc-plain": {"type": "allocate", **new_instance("new-plain", "plain")},
        "alloc-drbd": {"type": "allocate", **new_instance("new-drbd", "drbd")},
        "relocate": {"type": "relocate", "name": drbd[0], "required_nodes": 1,
                     "relocate_from": [msg["instances"][drbd[0]]["nodes"][1]]},
        "evac-all": {"type": "node-evacuate", "instances": on_victim, "evac_mode": "all"},
        "multi-100": {"type": "multi-allocate", "instances": [
            new_instance(f"multi-{k}", "drbd") for k in range(100)]},
    }
    return {k: {**msg, "request": v} for k, v in reqs.items()}


def watched(cmd: list[str], timeout: float, max_rss_mb: int) -> tuple[str, float, str]:
    """Run with a watchdog: (status, seconds, stdout); status ok|rc=N|timeout|oom."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
        status = ""
        while proc.poll() is None:
            el = time.monotonic() - start
            try:
                with open(f"/proc/{proc.pid}/status") as fh:
                    rss = next((int(line.split()[1]) // 1024 for line in fh
                                if line.startswith("VmRSS")), 0)
            except OSError:
                rss = 0
            if rss > max_rss_mb:
                status = "oom"
            elif el > timeout:
                status = "timeout"
            if status:
                proc.kill()
                proc.wait()
                break
            # fine-grained at first: short runs (tens of ms) are measured to the millisecond
            time.sleep(0.001 if time.monotonic() - start < 1.0 else 0.02)
        el = time.monotonic() - start
        out.seek(0)
        text = out.read().decode(errors="replace")
    if not status:
        status = "ok" if proc.returncode == 0 else f"rc={proc.returncode}"
    return status, el, text


def timed(cmd: list[str], timeout: float, max_rss_mb: int,
          repeats: int = 7) -> tuple[str, float, str]:
    """`watched`, repeated when a run takes under half a second (start-up noise is then a
    large part of it): the median of `repeats` runs, for herder and the peer alike."""
    status, first, out = watched(cmd, timeout, max_rss_mb)
    if status != "ok" or first >= 0.5:
        return status, first, out
    times = [first] + [watched(cmd, timeout, max_rss_mb)[1] for _ in range(repeats - 1)]
    return status, statistics.median(times), out


def alloc_score(text: str) -> str:
    try:
        info = json.loads(text)["info"]
    except (ValueError, KeyError):
        return "-"
    m = re.search(r"score: ([\d.]+)", info)
    if m:
        return m.group(1)
    m = re.search(r"(\d+) instances failed to (?:move|allocate) and (\d+) were", info)
    return f"{m.group(2)} ok/{m.group(1)} failed" if m else info[:30]


def bal_score(text: str) -> str:
    m = re.search(r"Cluster score improved from [\d.]+ to ([\d.]+)", text)
    if m:
        return m.group(1)
    m = re.search(r"Initial score: ([\d.]+)", text)
    return m.group(1) if m else "-"


def cap_score(text: str) -> str:
    m = re.search(r"HTS_ALLOC_INSTANCES=(\d+)", text)
    f = re.search(r"HTS_FIN_SCORE=([\d.]+)", text)
    return f"{m.group(1) if m else '?'} inst, {f.group(1) if f else '?'}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="16,32,64,128,256,512,1024")
    ap.add_argument("--groups", default="1,4")
    ap.add_argument("--cases", default="alloc-plain,alloc-drbd,relocate,evac-all,multi-100,"
                    "balance,capacity")
    ap.add_argument("--peer-timeout", type=float, default=60.0)
    ap.add_argument("--herder-timeout", type=float, default=300.0)
    ap.add_argument("--max-rss-mb", type=int, default=8000)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--balance-moves", type=int, default=5)
    ap.add_argument("--capacity-limit", type=int, default=50)
    ap.add_argument("--alloc-entry", choices=("herder", "module"), default="module",
                    help="iallocator requests via `herder alloc` or "
                         "`python -m herder.cli.iallocator` (what `herder alloc install` gives "
                         "Ganeti)")
    args = ap.parse_args()
    hail = GROOT / "bin" / "hail"
    hbal = GROOT / "bin" / "hbal"
    hspace = GROOT / "bin" / "hspace"
    peers = not args.no_peers and hail.exists()
    cases = args.cases.split(",")
    sys.path.insert(0, str(REPO / "src"))
    from herder.alloc.protocol import Options, build_cluster
    from herder.alloc.textdata import serialize

    rows: list[tuple[str, ...]] = []
    header = ("case", "nodes", "groups", "herder s", "peer s", "peer/herder", "herder score",
              "peer score")
    print(" | ".join(header), flush=True)
    work = Path(tempfile.mkdtemp(prefix="herder-bench-"))
    for n in (int(x) for x in args.sizes.split(",")):
        for g in (int(x) for x in args.groups.split(",")):
            if g > 1 and n < 4 * g:
                continue
            msg = make_cluster(n, g)
            jobs: list[tuple[str, list[str], list[str] | None, Any]] = []
            for name, req in requests(msg).items():
                if name not in cases:
                    continue
                path = work / f"{name}-{n}-{g}.json"
                path.write_text(json.dumps(req))
                entry = ([HERDER, "alloc"] if args.alloc_entry == "herder"
                         else [sys.executable, "-m", "herder.cli.iallocator"])
                jobs.append((name, [*entry, str(path)],
                             [str(hail), str(path)] if peers else None, alloc_score))
            if g == 1 and ("balance" in cases or "capacity" in cases):
                unbalanced = make_cluster(n, 1, fill=0.5)
                unbalanced["request"] = {"type": "allocate", **new_instance("x", "plain")}
                data = work / f"cluster-{n}.data"
                data.write_text(serialize(build_cluster(unbalanced, Options())))
                small = peers and n <= PEER_CAP_HTOOLS
                if "balance" in cases:
                    cmd = ["balance", "-t", str(data), "-l", str(args.balance_moves)]
                    jobs.append(("balance", [HERDER, *cmd],
                                 [str(hbal), *cmd[1:]] if small and hbal.exists() else None,
                                 bal_score))
                if "capacity" in cases:
                    cmd = ["capacity", "-t", str(data), "--machine-readable",
                           "--disk-template", "drbd", "-l", str(args.capacity_limit)]
                    jobs.append(("capacity", [HERDER, *cmd],
                                 [str(hspace), *cmd[1:]] if small and hspace.exists()
                                 else None, cap_score))
            for name, hcmd, pcmd, scorer in jobs:
                hs, ht, hout = timed(hcmd, args.herder_timeout, args.max_rss_mb)
                htime = f"{ht:.2f}" if hs == "ok" else hs
                ptime, ratio, pscore = "-", "-", "-"
                if pcmd is not None:
                    ps, pt, pout = timed(pcmd, args.peer_timeout, args.max_rss_mb)
                    ptime = f"{pt:.2f}" if ps == "ok" else f"{ps} (>{pt:.0f}s)"
                    if ps == "ok":
                        ratio = f"{pt / ht:.1f}x" if hs == "ok" and ht > 0 else "-"
                        pscore = scorer(pout)
                    elif hs == "ok":
                        ratio = f">{pt / ht:.0f}x"
                row = (name, str(n), str(g), htime, ptime, ratio,
                       scorer(hout) if hs == "ok" else "-", pscore)
                rows.append(row)
                print(" | ".join(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
