"""The master dies on the etcd backend; seconds until the next candidate serves RAPI (issue 36).

A real 3-member etcd on loopback with etcd's default timings (heartbeat 100 ms, election
timeout 1 s) and two real `herder masterd` processes on it (node1 and node2, as in
tests/ha/test_etcd_masterd.py). Each round: node1 is elected and serves, node2 waits as a
standby; then node1's masterd and the etcd raft leader are killed with SIGKILL at the same
moment (the master's host losing its power, the etcd member on it included: the worst case;
`--spare-etcd`: the master only) and
the round measures, from the kills, node2's election (its log line), its first RAPI answer
naming itself the master, and its first job done (a cluster tag). The killed member is started
again and node2 stopped cleanly (which hands the lease back) before the next round.

The TTL is the cluster's `master_lease_ttl` (docs/ha.md): `--ttl 3` (the default here) and
`--ttl 10` (the cluster's default) show the trade-off. The peer: Ganeti's vcluster needs the
operator's `gnt-cluster master-failover`, 10.7 s from the command (issue 36); herder's
takeover needs nobody.

    PYTHONPATH=src:. python bench/etcd_takeover.py [--rounds 5] [--ttl 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from herder.core import etcd
from herder.core.errors import HerderError
from herder.core.rapi import RapiClient
from herder.core.store import FileStore
from herder.core.store_etcd import EtcdStore
from rounds import spread
from tests.ha.test_etcd import ETCD, EtcdCluster
from tests.ha.test_etcd_masterd import Masterd
from tests.system.masterd_fixture import make_cluster

CLUSTER = "bench"
A, B = "node1.example.com", "node2.example.com"
GANETI_VCLUSTER = 10.7  # seconds, issue 36: the operator's master-failover to a serving master
ETCD_DEFAULTS = ["--heartbeat-interval", "100", "--election-timeout", "1000"]


def _first_answer(secrets: Path, url: str, master: str, began: float) -> float:
    deadline = time.monotonic() + 30
    with RapiClient.for_herder_cluster(secrets, url, timeout=2) as rapi:
        while time.monotonic() < deadline:
            try:
                if rapi.get_info().get("master") == master:
                    return time.monotonic() - began
            except HerderError:
                pass
            time.sleep(0.02)
    raise SystemExit(f"{master} did not answer within 30 s")


def _round(members: EtcdCluster, location: str, secrets: Path,
           kill_leader: bool) -> dict[str, float]:
    first = Masterd(location, secrets, A, "127.0.0.2", ttl=None)
    second: Masterd | None = None
    try:
        if not first.serving(60):
            raise SystemExit(f"node1 did not start: {''.join(first.log)}")
        second = Masterd(location, secrets, B, "127.0.0.3", ttl=None)  # once node1 is master
        if not second.wait_for("standby", 60):
            raise SystemExit(f"node2 did not start: {''.join(second.log)}")
        time.sleep(1.0)  # node2 campaigning, its lease granted
        leader = members.leader()
        first.proc.kill()
        if kill_leader:
            members.kill(leader)
        began = time.monotonic()
        elected = second.wait_for(rf"master lease: {B} is master", 60)
        serving = second.serving(30)
        if not elected or not serving:
            raise SystemExit(f"node2 did not take over: {''.join(second.log)}")
        rapi = _first_answer(secrets, serving[1], B, began)
        with RapiClient.for_herder_cluster(secrets, serving[1], timeout=10) as client:
            job = client.add_cluster_tags([f"takeover-{int(time.time() * 1000)}"])
            client.wait_for_job(job, timeout=30)
        job_done = time.monotonic() - began
        if kill_leader:
            members.start(leader, "existing")
        members.wait_healthy(range(3), timeout=60)
        return {"elected": elected[0] - began, "rapi": rapi, "job": job_done}
    finally:
        first.stop()
        if second is not None:
            second.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ttl", type=int, default=3, help="the cluster's master_lease_ttl")
    parser.add_argument("--spare-etcd", action="store_true",
                        help="kill the master only (its host runs no etcd member)")
    options = parser.parse_args()
    if not Path(ETCD).exists():
        raise SystemExit(f"etcd is not installed ({ETCD})")
    with tempfile.TemporaryDirectory(prefix="herder-bench-etcd-") as tmp:
        base = Path(tmp)
        (base / "etcd").mkdir()
        members = EtcdCluster(base / "etcd", extra_args=ETCD_DEFAULTS)
        members.start_all()
        try:
            secrets = make_cluster(base / "cluster").parent
            config = FileStore(secrets / "config.json").load()
            config.cluster.master_lease_ttl = options.ttl
            with etcd.EtcdClient(members.client_urls) as client:
                EtcdStore(client, CLUSTER).create(config)
            location = f"etcd://{members.hostports}/{CLUSTER}"
            rows = []
            for number in range(options.rounds):
                figures = _round(members, location, secrets, not options.spare_etcd)
                rows.append(figures)
                print(f"round {number + 1}: " + ", ".join(
                    f"{k} {v:.2f} s" for k, v in figures.items()), flush=True)
        finally:
            members.stop_all()
    killed = "the master" if options.spare_etcd else "the master and the etcd leader"
    print(f"\nmaster_lease_ttl {options.ttl} s; median of {options.rounds} (min-max), seconds "
          f"from killing {killed}:")
    for key in ("elected", "rapi", "job"):
        print(f"  {key:8} {spread([r[key] for r in rows], digits=2)}")
    rapi = statistics.median(r["rapi"] for r in rows)
    print(f"Ganeti's vcluster: {GANETI_VCLUSTER} s from the operator's master-failover; herder "
          f"{rapi:.2f} s by itself (ratio {rapi / GANETI_VCLUSTER:.2f})", file=sys.stdout)


if __name__ == "__main__":
    main()
