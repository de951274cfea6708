"""masterd's memory on the etcd backend, watched (issue 36 goal 6: it ran away at 50,000).

    .venv/bin/python bench/etcd_memwatch.py [--instances 50000] [--limit-mib 1500]
        [--seconds 30] [--lists 5] [--trace PATH] [--dir /tmp/etcdmem-watch]

A single-member local etcd at its defaults, `bench/scale.py`'s cluster (nodes = instances / 10,
nodes that run no daemon: their connections are refused) imported into it, then a real
`herder masterd` on it, its RSS read every 0.2 s by a watcher thread that kills it past
`--limit-mib` (the machine is shared: masterd once reached 20.9 GB here and the kernel's OOM
killer had to stop it). Printed (JSON): masterd's RSS when it serves, its RSS timeline every
second for `--seconds` with nothing asked, then after each of `--lists` CLI `instance list`s
through it; whether the watcher killed it. `--trace PATH`: masterd runs with
HERDER_TRACEMALLOC=PATH (`masterd.alloctrace`), its allocation sites and threads every second.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import scale  # noqa: E402
from scaleconfig import scaled_ganeti  # noqa: E402


def children() -> list[int]:
    """This process's child processes (masterd, the CLI, etcd), from every thread's list."""
    pids = []
    for task in Path("/proc/self/task").iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return pids


class Watcher(threading.Thread):
    """Kills any child process of this one (masterd from its start, before it serves) whose
    RSS passes `limit_mib`; keeps the highest RSS seen."""

    def __init__(self, limit_mib: float) -> None:
        super().__init__(daemon=True)
        self.limit = limit_mib
        self.highest = 0.0
        self.killed_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            for pid in children():
                try:
                    rss = scale.rss_mib(pid)
                except OSError:
                    continue
                self.highest = max(self.highest, rss)
                if rss > self.limit:
                    self.killed_at = rss
                    os.kill(pid, 9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=50000)
    parser.add_argument("--limit-mib", type=float, default=1500)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--lists", type=int, default=5)
    parser.add_argument("--trace")
    parser.add_argument("--dir", default="/tmp/etcdmem-watch")
    args = parser.parse_args()
    from herder.cli import ganeti_import
    from herder.core import cluster_secrets
    from herder.core.etcd import EtcdClient
    from herder.core.store_etcd import EtcdStore
    from tests.ha.test_etcd import EtcdCluster

    base = Path(args.dir)
    shutil.rmtree(base, ignore_errors=True)
    (base / "etcd").mkdir(parents=True)
    files = base / "file"
    files.mkdir()
    etcd = EtcdCluster(base / "etcd", size=1)
    etcd.start_all()
    watcher = Watcher(args.limit_mib)
    watcher.start()
    figures: dict[str, Any] = {"instances": args.instances}
    proc = None
    try:
        source = base / "ganeti.json"
        source.write_text(json.dumps(scaled_ganeti(args.instances)))
        cluster = f"watch{args.instances}"
        location = f"etcd://{etcd.hostports}/{cluster}"
        store = EtcdStore(EtcdClient([f"http://{h}" for h in etcd.hostports.split(",")]),
                          cluster, local_dir=files)
        config, _ = ganeti_import.import_ganeti_file(source)
        cluster_secrets.create_all(cluster_secrets.SecretPaths.beside(store.path),
                                   config.cluster.name, None)
        store.replace(config)
        del config
        if args.trace:
            os.environ["HERDER_TRACEMALLOC"] = args.trace
        proc, url = scale.spawn_masterd(location, base / "run", [
            "--local-dir", str(files), "--node", "node0.example.com"])
        figures["rss_serving_mib"] = round(scale.rss_mib(proc.pid), 1)
        cpu_serving = scale.cpu_seconds(proc.pid)
        timeline = []
        for _ in range(args.seconds):
            time.sleep(1)
            if proc.poll() is not None:
                break
            timeline.append(round(scale.rss_mib(proc.pid)))
        figures["rss_idle_timeline_mib"] = timeline
        if proc.poll() is None:
            figures["cpu_idle_s_per_s"] = round(
                (scale.cpu_seconds(proc.pid) - cpu_serving) / len(timeline), 3)
            profile = scale.client_profile_env(files, url)
            lists = []
            for _ in range(args.lists):
                wall, _out = scale.herder(location, "instance", "list", profile=profile)
                lists.append((round(wall, 2), round(scale.rss_mib(proc.pid))))
            figures["instance_lists_wall_s_rss_mib"] = lists
        figures["masterd_alive"] = proc.poll() is None
    except Exception as err:
        figures["error"] = f"{type(err).__name__}: {err}"[:500]
    finally:
        figures["rss_highest_mib"] = round(watcher.highest)
        figures["killed_at_mib"] = watcher.killed_at
        if proc is not None:
            proc.kill()
            proc.wait(20)
            figures["masterd_said"] = "".join(scale.MASTERD_SAID.get(proc.pid, ()))[-800:]
        etcd.stop_all()
        figures["load_average"] = [round(x, 1) for x in os.getloadavg()]
        print(json.dumps(figures), flush=True)
        shutil.rmtree(base / "etcd", ignore_errors=True)


if __name__ == "__main__":
    main()
