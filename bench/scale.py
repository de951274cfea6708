"""Scale benchmark: the control plane at 100 / 1,000 / 10,000 instances (nodes = instances / 10).

    .venv/bin/python bench/scale.py [--sizes 100,1000,10000] [--backends file,etcd]
                                    [--agents 1000] [--skip-maintd]

Each cluster is the Ganeti capture scaled up (`bench/scaleconfig.py`), imported with `herder
cluster import-ganeti` (file) or into a real single-member local etcd at its default limits.
A real `herder masterd` process serves it. Printed per size and backend (JSON): the import
time, CLI list times (`herder node list`, `herder instance list`: a process each, through the
running masterd, whose query resource gives the rows, and `_offline`, reading the store; with
masterd's answer to the lists' queries alone, on a kept connection and in-process, and `herder
instance list --help`), RAPI list times (/2/nodes, /2/instances, plain and bulk), the latency
of a one-object job (add a tag to an instance, submit to finished, median of 9 after 5), the
throughput of 100 (`--concurrent`) small jobs submitted at once, masterd's RSS after all that,
confd answers per second (in-process, a mix of node and instance queries), and the iallocator
input build time.
Then maintd's round against `--agents` agents (one process serving that many loopback
addresses, as bench/maintd.py does), with one dead agent among them.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from herder.core import model
    from herder.core.store_etcd import EtcdStore

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from scaleconfig import scaled_ganeti  # noqa: E402

PYTHON = sys.executable


def client_profile_env(secrets: Path, masterd: str) -> dict[str, str]:
    """An operator's client profile for masterd (`core.client_profile`'s variables): the
    cluster certificate and a write user of the cluster's users file. The etcd store's CLI
    would otherwise look for them in its default local directory, not the bench's."""
    from herder.core import rapi

    users = rapi.read_rapi_users(secrets / rapi.RAPI_USERS_FILE)
    user, stored, _options = next(u for u in users if "write" in u[2])
    password_file = secrets / "bench-rapi-password"
    password_file.write_text(stored.removeprefix("{cleartext}").removeprefix("{CLEARTEXT}"))
    password_file.chmod(0o600)
    return {"HERDER_MASTERD": masterd, "HERDER_RAPI_CA": str(secrets / rapi.CERT_FILE),
            "HERDER_RAPI_USER": user, "HERDER_RAPI_PASSWORD_FILE": str(password_file)}


def herder(location: str, *args: str, timeout: float = 600,
           profile: dict[str, str] | None = None) -> tuple[float, str]:
    """Run the CLI in its own process: on the store itself (offline), or through masterd with
    `profile` (`client_profile_env`: the lists take their rows from its query resource)."""
    env = {k: v for k, v in os.environ.items()
           if k != "HERDER_OFFLINE" and not k.startswith(("HERDER_MASTERD", "HERDER_RAPI_"))}
    env.update({"HERDER_CONFIG": location, **profile} if profile else
               {"HERDER_CONFIG": location, "HERDER_OFFLINE": "1"})
    started = time.perf_counter()
    done = subprocess.run([PYTHON, "-m", "herder.cli.main", *args], env=env, text=True,
                          capture_output=True, timeout=timeout)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"herder {' '.join(args)}: {done.stderr.strip()[-500:]}")
    return elapsed, done.stdout


def cli_run(location: str, args: tuple[str, ...], profile: dict[str, str],
            masterd: int) -> tuple[float, float, float]:
    """One CLI command through masterd: its wall time, the CLI process's CPU time (user and
    system, its children's rusage) and masterd's over the same time."""
    import resource

    def children() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    cli_before, masterd_before = children(), cpu_seconds(masterd)
    wall, _ = herder(location, *args, profile=profile)
    return wall, children() - cli_before, cpu_seconds(masterd) - masterd_before


def spawn_masterd(location: str, run_dir: Path,
                  extra: list[str]) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "HERDER_CONFIG": location}
    proc = subprocess.Popen([PYTHON, "-m", "herder.cli.main", "masterd", "--bind", "127.0.0.1",
                             "--port", "0", "--run-dir", str(run_dir), *extra],
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        match = re.search(r"serving RAPI on (\w+://127\.0\.0\.1:\d+)/", line)
        if match:
            # keep draining stderr so masterd never blocks on a full pipe; its last lines
            # are kept to say why, when it stops on its own (`said_last`)
            said: deque[str] = deque(maxlen=20)
            MASTERD_SAID[proc.pid] = said
            threading.Thread(target=said.extend, args=(proc.stderr,), daemon=True).start()
            return proc, match.group(1)
    proc.kill()
    raise RuntimeError("masterd did not start")


MASTERD_SAID: dict[int, deque[str]] = {}  # a masterd's last lines on stderr, by pid


def said_last(proc: subprocess.Popen[str]) -> str:
    """Why a masterd stopped on its own: its exit code and last lines on stderr."""
    time.sleep(0.5)  # its last lines drained
    lines = "".join(MASTERD_SAID.get(proc.pid, ())).strip()[-1500:]
    return f"masterd exited with {proc.returncode}: {lines}"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def best(runs: int, action: Any) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def spread(times: list[float]) -> dict[str, Any]:
    """A figure's runs as the docs show them: the median and the lowest and highest run."""
    return {"median": round(statistics.median(times), 3), "min": round(min(times), 3),
            "max": round(max(times), 3), "runs": len(times)}


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def steady_state(client: Any, reading: Any, pid: int, instances: list[str], jobs: int = 6,
                 spacing: float = 2.5) -> dict[str, Any]:
    """masterd at work as a cluster is used: a one-tag job every `spacing` seconds (each
    change's redistribution runs between them: masterd checks every 2 s) while the instance
    list's query is read every second by another client (the live cache keeps asking the
    nodes). The jobs' median latency, the query's, and masterd's CPU time per minute."""
    from herder.cli import instance

    stop = threading.Event()
    reads: list[float] = []

    def reader() -> None:
        fields = ",".join(instance.LIST.default_fields)
        while not stop.wait(1.0):
            started = time.perf_counter()
            reading.request("GET", "/2/query/instance", [("fields", fields)])
            reads.append(time.perf_counter() - started)

    latencies = []
    cpu_before, began = cpu_seconds(pid), time.perf_counter()
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for n in range(jobs):
            started = time.perf_counter()
            job = client.add_instance_tags(instances[(n * 7) % len(instances)], [f"steady{n}"])
            assert client.wait_for_job(job, timeout=600)["status"] == "success"
            latencies.append(time.perf_counter() - started)
            time.sleep(max(0.0, spacing - latencies[-1]))
    finally:
        stop.set()
        thread.join(60)
    minutes = (time.perf_counter() - began) / 60
    return {"steady_job_s": round(statistics.median(latencies), 3),
            "steady_query_instance_list_s": round(statistics.median(reads), 3) if reads else None,
            "steady_masterd_cpu_s_per_min": round((cpu_seconds(pid) - cpu_before) / minutes, 1)}


def measure_masterd(location: str, secrets: Path, run_dir: Path, instances: list[str],
                    extra: list[str], concurrent: int, figures: dict[str, Any]) -> None:
    """masterd's figures, into `figures` as they are measured (a failure keeps those)."""
    from herder.core.rapi import RapiClient, RapiError

    proc, url = spawn_masterd(location, run_dir, extra)
    figures["masterd_rss_start_mib"] = round(rss_mib(proc.pid), 1)
    try:
        client = RapiClient.for_herder_cluster(secrets, url, timeout=300)
        # the first reads right after the start: the bench's nodes run no node daemon (they
        # refuse connections), and no reader waits for nodes masterd has not heard from
        for what in ("rapi_nodes_bulk_first_s", "rapi_nodes_bulk_second_s"):
            started = time.perf_counter()
            client.get_nodes(bulk=True)
            figures[what] = round(time.perf_counter() - started, 3)
        time.sleep(25)  # its first round of node calls and redistribution
        before = cpu_seconds(proc.pid)
        time.sleep(10)  # nothing asked: its background
        figures["masterd_idle_cpu_s_per_s"] = round((cpu_seconds(proc.pid) - before) / 10, 3)
        for what, call in (("rapi_nodes_s", lambda: client.get_nodes()),
                           ("rapi_nodes_bulk_s", lambda: client.get_nodes(bulk=True)),
                           ("rapi_instances_s", lambda: client.get_instances()),
                           ("rapi_instances_bulk_s", lambda: client.get_instances(bulk=True))):
            call()  # warm: the first read decodes the config
            figures[what] = round(best(3, call), 3)
        # the CLI lists as an operator runs them: a process each, rows from masterd's query
        # resource (the fields the list prints); and that query's answer alone, on a kept
        # connection (masterd's part)
        from herder.cli import instance, node

        profile = client_profile_env(secrets, url)
        for what, args, resource, fields in (
                ("cli_node_list_s", ("node", "list"), "node", node.LIST.default_fields),
                ("cli_instance_list_s", ("instance", "list"), "instance",
                 instance.LIST.default_fields)):
            herder(location, *args, profile=profile)  # warm: masterd's first answer
            runs = [cli_run(location, args, profile, proc.pid) for _ in range(5)]
            figures[what] = spread([wall for wall, _, _ in runs])
            # the steady figures on a loaded machine: the CLI process's CPU, and masterd's
            # over the same time (its background included: with nothing asked, 25-35 s
            # after the start, `masterd_idle_cpu_s_per_s`)
            figures[what.replace("_s", "_cli_cpu_s", 1)] = spread([cpu for _, cpu, _ in runs])
            figures[what.replace("_s", "_masterd_cpu_s", 1)] = spread([cpu for _, _, cpu in runs])

            def ask(resource: str = resource, fields: tuple[str, ...] = fields) -> None:
                client.request("PUT", f"/2/query/{resource}", None,
                               {"fields": list(fields), "qfilter": None})

            figures[f"rapi_query_{resource}_list_s"] = round(best(3, ask), 3)
        figures["cli_help_s"] = round(min(herder(location, "instance", "list", "--help",
                                                 profile=profile)[0] for _ in range(3)), 3)
        # the bulk instance list above is the client's whole call (http.client and msgspec, as
        # `RapiClient` decodes); apart:
        # masterd's answer (request to its last byte) and the client's decoding of it
        answers: list[bytes] = []
        figures["rapi_instances_bulk_answer_s"] = round(best(3, lambda: answers.append(
            client.send("GET", "/2/instances", [("bulk", "1")]).content)), 3)
        figures["rapi_instances_bulk_decode_json_s"] = round(
            best(3, lambda: json.loads(answers[-1])), 3)
        figures["rapi_instances_bulk_decode_msgspec_s"] = round(
            best(3, lambda: msgspec.json.decode(answers[-1])), 3)
        answers.clear()

        def one_job(number: int) -> float:
            started = time.perf_counter()
            job = client.add_instance_tags(instances[number % len(instances)],
                                           [f"bench{number}"])
            status = client.wait_for_job(job, timeout=600)
            assert status["status"] == "success", status
            return time.perf_counter() - started

        for n in range(5):  # warm: masterd's first redistribution and live figures run now
            one_job(n)
        latencies = [one_job(n) for n in range(5, 14)]
        figures["one_object_job_s"] = spread(latencies)

        def submit_and_wait(number: int) -> None:
            with RapiClient.for_herder_cluster(secrets, url, timeout=600) as own:
                job = own.add_instance_tags(instances[number % len(instances)],
                                            [f"many{number}"])
                assert own.wait_for_job(job, timeout=600)["status"] == "success"

        started = time.perf_counter()
        try:
            with ThreadPoolExecutor(max_workers=concurrent) as pool:
                list(pool.map(submit_and_wait, range(1000, 1000 + concurrent)))
        except RapiError as err:  # a figure too (the steady state is still measured)
            figures[f"jobs_{concurrent}_concurrent_error"] = str(err)[:300]
        else:
            figures[f"jobs_{concurrent}_concurrent_per_s"] = round(
                concurrent / (time.perf_counter() - started), 1)
        figures["masterd_rss_mib"] = round(rss_mib(proc.pid), 1)
        with RapiClient.for_herder_cluster(secrets, url, timeout=300) as reading:
            figures.update(steady_state(client, reading, proc.pid, instances))
        client.close()
    except Exception:
        if proc.poll() is not None:
            figures["masterd_exit"] = said_last(proc)
        raise
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def measure_list_queries(config: Any) -> dict[str, Any]:
    """masterd's answer to the CLI lists' queries, in-process, encoded as masterd serves it
    (no live figures: the nodes here run no daemons); the instance list's first answer apart
    (its rows are kept encoded after it: `query.InstanceRows`)."""
    from herder.cli import instance, node
    from herder.masterd import query
    from herder.masterd.livecache import EMPTY

    figures: dict[str, Any] = {}
    figures["query_instance_list_first_s"] = round(best(1, lambda: query.encode_answer(
        config, "instance", list(instance.LIST.default_fields), EMPTY)), 3)
    for resource, fields in (("node", node.LIST.default_fields),
                             ("instance", instance.LIST.default_fields)):
        figures[f"query_{resource}_list_s"] = round(best(3, lambda r=resource, f=fields: (
            query.encode_answer(config, r, list(f), EMPTY))), 3)
    return figures


def measure_in_process(location: str) -> dict[str, Any]:
    from herder.confd import queries
    from herder.core import confd
    from herder.core.store import open_store
    from herder.masterd import iallocator
    from herder.masterd.livecache import EMPTY

    store = open_store(location)
    started = time.perf_counter()
    config = store.load()
    figures: dict[str, Any] = {"load_s": round(time.perf_counter() - started, 3)}
    nodes = sorted(n.name for n in config.nodes.values())
    names = sorted(i.name for i in config.instances.values())
    mix = [(confd.REQ_NODE_ROLE_BYNAME, nodes[0]), (confd.REQ_INSTANCE_DISKS, names[0]),
           (confd.REQ_NODE_INSTANCES, nodes[-1]), (confd.REQ_NODE_DRBD, nodes[1])]
    queries.answer(config, *mix[0])  # the index, built once per config
    figures.update(measure_list_queries(config))
    rates = []
    for _ in range(5):  # one-second windows
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < 1.0:
            for req_type, query in mix:
                queries.answer(config, req_type, query)
                count += 1
        rates.append(count / (time.perf_counter() - started))
    figures["confd_queries_per_s"] = {key: round(value) if key != "runs" else value
                                      for key, value in spread(rates).items()}
    request = {"type": "allocate", "name": "new.example.com", "disk_template": "plain",
               "memory": 128, "vcpus": 1, "disks": [{"size": 1024, "mode": "rw"}],
               "nics": [], "os": "debian-image", "tags": [], "spindle_use": 1,
               "hypervisor": "xen-pvm", "required_nodes": 1}
    figures["iallocator_input_s"] = round(best(3, lambda: iallocator.build_message(
        config, request, EMPTY)), 3)
    return figures


def run_size(instances_n: int, backend: str, base: Path, etcd_hosts: str | None,
             source: Path, concurrent: int, figures: dict[str, Any]) -> None:
    """One size on one store, into `figures` as they are measured (a failure keeps those)."""
    from herder.cli import ganeti_import

    work = base / f"{backend}-{instances_n}"
    files = work / "file"
    files.mkdir(parents=True)
    file_location = str(files / "config.json")
    figures.update({"instances": instances_n, "nodes": max(2, instances_n // 10),
                    "backend": backend})
    if backend == "file":
        elapsed, _ = herder(file_location, "cluster", "import-ganeti", str(source))
        figures["import_s"] = round(elapsed, 2)
        location, extra = file_location, []
    else:
        from herder.core import cluster_secrets
        from herder.core.etcd import EtcdClient
        from herder.core.store_etcd import EtcdStore

        assert etcd_hosts is not None
        cluster = f"bench{instances_n}"
        location = f"etcd://{etcd_hosts}/{cluster}"
        etcd_store = EtcdStore(EtcdClient([f"http://{h}" for h in etcd_hosts.split(",")]),
                               cluster, local_dir=files)
        config, _notes = ganeti_import.import_ganeti_file(source)
        cluster_secrets.create_all(cluster_secrets.SecretPaths.beside(etcd_store.path),
                                   config.cluster.name, None)
        started = time.perf_counter()
        try:
            etcd_store.replace(config)
        except Exception as err:  # the figure is the failure itself
            figures["import_error"] = str(err)[:300]
            return
        figures["import_s"] = round(time.perf_counter() - started, 2)
        figures.update(etcd_sizes(etcd_store, config, "import"))
        extra = ["--local-dir", str(files), "--node", "node0.example.com"]
    for what, args in (("cli_node_list_offline_s", ("node", "list")),
                       ("cli_instance_list_offline_s", ("instance", "list"))):
        figures[what] = round(min(herder(location, *args)[0] for _ in range(2)), 3)
    figures.update(measure_in_process(location))
    names = sorted(f"inst{n}.example.com" for n in range(instances_n))
    measure_masterd(location, files, work / "run", names, extra, concurrent, figures)
    if backend == "etcd":
        figures.update(etcd_sizes(etcd_store, etcd_store.load(), "jobs"))


def etcd_sizes(store: EtcdStore, config: model.ConfigData, after: str) -> dict[str, Any]:
    """Against etcd's default limits (a request of 1.5 MiB, a database of 2 GiB): the head's
    value, the largest object's, and etcd's database (its file, and what is in use: the
    history of every revision, which only a compaction frees)."""
    from herder.core import configdiff

    status = store.client.call("/v3/maintenance/status", {})
    figures: dict[str, Any] = {
        f"etcd_db_mib_after_{after}": round(int(status.get("dbSize", 0)) / 2**20, 1),
        f"etcd_db_in_use_mib_after_{after}": round(int(status.get("dbSizeInUse", 0)) / 2**20, 1),
        f"etcd_revision_after_{after}": int(status.get("header", {}).get("revision", 0))}
    if after == "import":
        head = store.client.get(store.key)
        figures["etcd_head_bytes"] = len(head.value) if head else None
        figures["etcd_largest_object_bytes"] = max(
            len(raw) for table in configdiff.Encoded.of(config).tables.values()
            for raw in table.values())
    return figures


AGENTS = r'''
import asyncio, gc, json, sys
from aiohttp import web
n, port, dead = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dead_ones = {i * n // dead + n // (2 * dead) for i in range(dead)} if dead else set()
def address(i):
    return f"127.{100 + i // 250}.{i % 250}.1"
def body(i):  # mond keeps its reports serialised too (mond.agent)
    status = {"name": "inst-status", "category": "instance", "kind": 1,
              "data": {"status": {"code": 0, "message": ""}, "instances": [
                  {"name": f"i{i}-{j}", "uuid": f"u{i}-{j}", "admin_state": "up",
                   "actual_state": "up", "status": {"code": 0, "message": ""}}
                  for j in range(10)]}}
    load = {"name": "cpu-avg-load", "category": None, "kind": 0,
            "data": {"cpu_number": 4, "cpus": [0.1] * 4, "cpu_total": 0.4}}
    return json.dumps([load, status]).encode()
index = {address(i): i for i in range(n)}
bodies = {i: body(i) for i in range(n)}
async def report(request):
    i = index[request.transport.get_extra_info("sockname")[0]]  # the agent asked
    if i in dead_ones:  # takes the connection, never answers (a hung mond)
        await asyncio.sleep(3600)
    return web.Response(body=bodies[i], content_type="application/json")
async def main():
    # one listener for every agent's address (all of 127.0.0.0/8; the agent asked is the
    # address a connection reached): one process stands in for n monds and should not be what
    # a round waits for, and n listeners on one port make the kernel scan them all per
    # connection (5,000 monds on as many hosts do not)
    app = web.Application()
    app.router.add_get("/1/report/all", report)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    gc.freeze()
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
'''


def maintd_round(agents: int, port: int = 18250, timeout: float = 5.0, dead: int = 10,
                 rounds: int = 6) -> dict[str, Any]:
    """maintd's poll of `agents` agents (one process serving them all on loopback addresses),
    `dead` of them hung: each round's wall time and the poller's CPU time (this process: the
    agents run in another), `rounds` rounds back to back."""
    from herder.maintd.agents import AgentPoller
    from herder.maintd.rounds import Node

    proc = subprocess.Popen([PYTHON, "-c", AGENTS, str(agents), str(port), str(dead)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        nodes = [Node(name=f"node{i}", uuid=f"u{i}", ip=f"127.{100 + i // 250}.{i % 250}.1")
                 for i in range(agents)]

        async def measure() -> list[tuple[float, float, int]]:
            poller = AgentPoller(port=port, timeout=timeout)
            out = []
            for _ in range(rounds):
                started, cpu = time.perf_counter(), time.process_time()
                answer = await poller.poll(nodes)
                errors = sum(1 for a in answer.agents.values() if a.error)
                out.append((time.perf_counter() - started, time.process_time() - cpu, errors))
            await poller.close()
            return out

        measured = asyncio.run(measure())
        later = measured[1:]  # the first round waits for each dead agent's timeout, once
        return {"agents": agents, "dead_agents": dead, "agent_timeout_s": timeout,
                "round_s": [round(t, 2) for t, _, _ in measured],
                "poller_cpu_s": [round(c, 2) for _, c, _ in measured],
                "unanswered": [e for _, _, e in measured],
                "round_s_median_after_first": round(statistics.median(t for t, _, _ in later), 3),
                "poller_cpu_s_median_after_first":
                    round(statistics.median(c for _, c, _ in later), 3),
                "load_average": [round(x, 1) for x in os.getloadavg()]}
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--backends", default="file,etcd")
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--dead-agents", type=int, default=10)
    parser.add_argument("--skip-maintd", action="store_true")
    parser.add_argument("--concurrent", type=int, default=100,
                        help="small jobs submitted at once for the throughput figure")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    backends = args.backends.split(",")
    results: list[dict[str, Any]] = []
    # the CLI's times as an installed herder has them: its modules compiled once (without
    # this, a checkout run with PYTHONDONTWRITEBYTECODE compiles them in every command)
    compileall.compile_dir(REPO / "src" / "herder", quiet=1)
    with tempfile.TemporaryDirectory(prefix="herder-scale-") as tmp:
        base = Path(tmp)
        etcd = None
        etcd_hosts = None
        if "etcd" in backends:
            from tests.ha.test_etcd import EtcdCluster

            (base / "etcd").mkdir()
            etcd = EtcdCluster(base / "etcd", size=1)  # etcd's defaults (1.5 MiB, 2 GiB db)
            etcd.start_all()
            etcd_hosts = etcd.hostports
        try:
            for size in sizes:
                source = base / f"ganeti-{size}.json"
                source.write_text(json.dumps(scaled_ganeti(size)))
                for backend in backends:
                    result: dict[str, Any] = {"instances": size, "backend": backend}
                    try:
                        run_size(size, backend, base, etcd_hosts, source, args.concurrent,
                                 result)
                    except Exception as err:  # one size's failure is a figure
                        traceback.print_exc()
                        result["error"] = f"{type(err).__name__}: {err}"[:500]
                    print(json.dumps(result), flush=True)
                    results.append(result)
        finally:
            if etcd is not None:
                etcd.stop_all()
            shutil.rmtree(base, ignore_errors=True)
    print(table(results), flush=True)
    if not args.skip_maintd:
        print(json.dumps({"maintd": maintd_round(args.agents, dead=args.dead_agents)}),
              flush=True)


def table(results: list[dict[str, Any]]) -> str:
    """The figures as docs/scale.md's table: one row per figure, one column per run."""
    columns = [f"{r['instances']:,} {r['backend']}" for r in results]
    names = list(dict.fromkeys(k for r in results for k in r
                               if k not in ("instances", "nodes", "backend")))
    lines = ["| figure | " + " | ".join(columns) + " |",
             "|---|" + "---|" * len(columns)]
    for name in names:
        cells = [str(r.get(name, "-")) for r in results]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
