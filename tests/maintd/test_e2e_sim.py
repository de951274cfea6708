"""End to end on a simulated cluster: a node's self-diagnose says `evacuate`; maintd drains
it, moves its instances round by round, offlines and tags it; the incident completes; removing
the tag and fixing the script forgets it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from herder.core.store import FileStore
from tests.simhelpers import domains, herder, running_sim, wait_for, worker_offset

pytestmark = pytest.mark.slow

if not Path("/usr/sbin/libvirtd").exists():
    pytest.skip("libvirtd is not installed", allow_module_level=True)


def first_ip() -> int:
    return 160 + worker_offset(10, 4)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    # mond is started by the test once the diagnose collector is configured (a running
    # mond applies a new collector interval only after its current one ran out, 60 s)
    yield from running_sim(tmp_path_factory.mktemp("maintd-sim"), 3, mond=False,
                           first_ip=first_ip())


def start_monds(sim) -> None:
    from herder.sim import cluster

    config = Path(sim.config)
    for node in sim.nodes:
        node_dir = Path(sim.directory) / "nodes" / node.name
        log = node_dir / "mond.log"
        proc = cluster._spawn(config, log, "mond", "--bind", node.ip, "--port", "1815",
                              "--node", node.name, "--run-dir", str(node_dir / "run"),
                              "--libvirt-uri", node.libvirt_uri, "--plugin-dir",
                              str(node_dir / "plugins"), "--diagnose-dir",
                              str(node_dir / "diagnose"))
        node.pids["mond"] = proc.pid
        sim.save()  # so cluster.stop ends them
        cluster._wait_ready("mond", node.ip, 1815, proc, log)


def spawn_maintd(sim, master: str, master_ip: str, log) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("HERDER_OFFLINE", "HERDER_MASTERD")}
    env["HERDER_CONFIG"] = sim.config
    return subprocess.Popen([sys.executable, "-m", "herder.cli.main", "maintd", "--node", master,
                             "--bind", master_ip, "--round-delay", "0", "--poll-interval", "0.5",
                             "--run-dir", str(Path(sim.directory) / "nodes" / master / "run")],
                            env=env, stdout=log, stderr=subprocess.STDOUT)


def stop_daemon(proc: subprocess.Popen, log) -> None:
    """SIGTERM (a clean exit), SIGKILL after 10 s; then close its log."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def get(base: str, path: str):
    try:
        return httpx.get(base + path, timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return None




def test_evacuate_heals_the_cluster(sim) -> None:
    herder(sim, "instance", "add", "web1", "--no-name-check",
           "-t", "drbd", "-o", "debootstrap+default", "--disk", "1G")
    cfg = FileStore(sim.config).load()
    master = cfg.node_name(cfg.cluster.master_node)
    web = cfg.find_instance("web1")
    candidates = [cfg.node_name(u) for u in web.all_nodes if cfg.node_name(u) != master]
    victim = candidates[0]
    victim_uuid = cfg.find_node(victim).uuid
    state_file = Path(sim.directory) / "diag-state.json"
    state_file.write_text('{"status": "Ok", "command": "", "details": {}}')
    for node in sim.nodes:
        ddir = Path(sim.directory) / "nodes" / node.name / "diagnose"
        ddir.mkdir(parents=True, exist_ok=True)
        script = ddir / "diag"
        source = state_file if node.name == victim else None
        script.write_text(f"#!/bin/sh\ncat {source}\n" if source else
                          '#!/bin/sh\necho \'{"status": "Ok", "command": "", "details": {}}\'\n')
        script.chmod(0o755)
    herder(sim, "cluster", "modify", "--diagnose-data-collector-filename", "diag",
           "--data-collector", "diagnose:interval=1")
    start_monds(sim)
    master_ip = next(n.ip for n in sim.nodes if n.name == master)
    log = open(Path(sim.directory) / "maintd.log", "w")  # noqa: SIM115
    env = {k: v for k, v in os.environ.items() if k not in ("HERDER_OFFLINE", "HERDER_MASTERD")}
    env["HERDER_CONFIG"] = sim.config
    # not the master: exit code 11
    other = next(n.name for n in sim.nodes if n.name != master)
    done = subprocess.run([sys.executable, "-m", "herder.cli.main", "maintd", "--node", other],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 11, done.stderr
    proc = subprocess.Popen([sys.executable, "-m", "herder.cli.main", "maintd", "--node", master,
                             "--bind", master_ip, "--round-delay", "0", "--poll-interval", "0.5",
                             "--run-dir", str(Path(sim.directory) / "nodes" / master / "run")],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://{master_ip}:1816"
    try:
        def get(path: str):
            try:
                return httpx.get(base + path, timeout=5).json()
            except httpx.HTTPError:
                return None

        assert wait_for(lambda: get("/"), 30, "maintd up") == [1]
        state_file.write_text('{"status": "evacuate", "command": "", "details": {"disk": "sdb"}}')
        incs = wait_for(lambda: get("/1/status"), 30, "an incident")
        (inc,) = incs
        assert inc["node"] == victim_uuid and inc["action"] == "evacuate"

        def completed():
            s = get("/1/status")
            if s and s[0]["repair-status"] in ("completed", "failed"):
                return s[0]
            return None

        inc = wait_for(completed, 150, "completion")
        assert inc["repair-status"] == "completed", (inc, Path(log.name).read_text()[-3000:])
        cfg = FileStore(sim.config).load()
        node = cfg.find_node(victim)
        assert node.offline and inc["tag"] in node.tags  # (offline replaces drained)
        assert inc["tag"] == f"maintd:repairready:{inc['uuid']}"
        # the state went through masterd into the config's maintenance section (saved at the
        # end of the tick that completed it: the page may show it a moment earlier)
        def saved_completed():
            incs = FileStore(sim.config).load().maintenance.incidents
            return incs if incs and incs[0].repair_status == "completed" else None

        (saved,) = wait_for(saved_completed, 30, "the completed incident in the config")
        assert saved.uuid == inc["uuid"] and saved.repair_status == "completed"
        assert not any(victim_uuid in i.all_nodes for i in cfg.instances.values())
        victim_uri = next(n.libvirt_uri for n in sim.nodes if n.name == victim)
        assert not any(domains(victim_uri).values())
        web = cfg.find_instance("web1")
        pnode_uri = next(n.libvirt_uri for n in sim.nodes
                         if n.name == cfg.node_name(web.primary_node))
        assert domains(pnode_uri).get("web1")
        # every job carried the maintd reason with the event id
        jobs = [httpx.get(f"{base}/1/status").json()[0]["jobs"]][0]
        assert len(jobs) >= 3
        # acknowledge: remove the tag and fix the script -> forgotten
        herder(sim, "tags", "remove", "node", victim, inc["tag"])
        state_file.write_text('{"status": "Ok", "command": "", "details": {}}')
        wait_for(lambda: get("/1/status") == [], 60, "the incident to be forgotten")
        page = httpx.get(base + "/status.html", timeout=5)
        assert page.status_code == 200
    finally:
        stop_daemon(proc, log)


def test_kill_9_mid_evacuation_loses_nothing_and_submits_nothing_twice(sim) -> None:
    """Continues the cluster of the test above: the other non-master node fails now."""
    from herder.core.rapi import RapiClient

    cfg = FileStore(sim.config).load()
    master = cfg.node_name(cfg.cluster.master_node)
    offline = [n.name for n in cfg.nodes.values() if n.offline]
    for name in offline:  # the first victim was repaired: back online
        herder(sim, "node", "modify", name, "--offline", "no")
    victim = next(n.name for n in sim.nodes if n.name != master and n.name not in offline)
    victim_uuid = cfg.find_node(victim).uuid
    herder(sim, "instance", "add", "db2", "--no-name-check",
           "-t", "drbd", "-o", "debootstrap+default", "--disk", "1G", "-n", f"{victim}:{master}")
    master_ip = next(n.ip for n in sim.nodes if n.name == master)
    base = f"http://{master_ip}:1816"
    ddir = Path(sim.directory) / "nodes" / victim / "diagnose"
    (ddir / "diag").write_text(
        "#!/bin/sh\necho '{\"status\": \"evacuate-failover\", \"details\": {\"n\": 2}}'\n")
    (ddir / "diag").chmod(0o755)
    log = open(Path(sim.directory) / "maintd2.log", "w")  # noqa: SIM115
    proc = spawn_maintd(sim, master, master_ip, log)
    try:
        def first_job():
            s = get(base, "/1/status")
            return s and any(i["node"] == victim_uuid and i["jobs"] for i in s) and s
        incs = wait_for(first_job, 60, "a first job")
        proc.kill()  # kill -9 in the middle of the evacuation
        proc.wait(10)
        (inc,) = [i for i in incs if i["node"] == victim_uuid]
        proc = spawn_maintd(sim, master, master_ip, log)

        def done():
            s = get(base, "/1/status")
            mine = [i for i in s or [] if i["uuid"] == inc["uuid"]]
            return mine and mine[0]["repair-status"] in ("completed", "failed") and mine[0]
        final = wait_for(done, 120, "completion after the restart")
        assert final["repair-status"] == "completed", Path(log.name).read_text()[-3000:]
        # no incident lost, none duplicated
        assert [i["uuid"] for i in get(base, "/1/status") if i["node"] == victim_uuid] == [
            inc["uuid"]]
        # every job of the event in the queue is the incident's, and no step ran twice
        client = RapiClient.for_herder_cluster(Path(sim.config).parent, sim.masterd_url)
        mine = {}
        for job in client.get_jobs(bulk=True):
            events = {r[1] for op in job.get("ops") or [] for r in op.get("reason") or []}
            if inc["uuid"] in events:
                mine[int(job["id"])] = tuple(op["OP_ID"] for op in job["ops"])
        client.close()
        assert sorted(mine) == sorted(final["jobs"])
        steps = [ops for ops in mine.values()
                 if ops[0] in ("OP_NODE_SET_PARAMS", "OP_TAGS_SET")]
        assert len(steps) == len(set(steps))
        assert any(ops == ("OP_INSTANCE_FAILOVER",) for ops in mine.values())
        assert not any("OP_INSTANCE_MIGRATE" in ops for ops in mine.values())
        cfg = FileStore(sim.config).load()
        assert cfg.find_node(victim).offline
        assert not any(victim_uuid in i.all_nodes for i in cfg.instances.values())
    finally:
        stop_daemon(proc, log)


def test_live_repair_and_a_broken_script(sim) -> None:
    """live-repair runs the white-listed command on the node with the diagnose object on stdin;
    a diagnose script printing garbage leads to no action and its error shows."""
    cfg = FileStore(sim.config).load()
    master = cfg.node_name(cfg.cluster.master_node)
    online = [n.name for n in cfg.nodes.values() if not n.offline and n.name != master]
    assert online, "an online non-master node"
    node = online[0]
    other = [n.name for n in cfg.nodes.values() if n.name not in (master, node)]
    node_dir = Path(sim.directory) / "nodes" / node
    repair_dir = node_dir / "repair"
    repair_dir.mkdir(exist_ok=True)
    out = Path(sim.directory) / "repaired.json"
    (repair_dir / "fix-nic").write_text(f"#!/bin/sh\ncat > {out}\n")
    (repair_dir / "fix-nic").chmod(0o755)
    diag = {"status": "live-repair", "command": "fix-nic", "details": {"nic": "eth1"}}
    (node_dir / "diagnose" / "diag").write_text(f"#!/bin/sh\necho '{json.dumps(diag)}'\n")
    for name in other:  # the other node's script prints garbage
        script = Path(sim.directory) / "nodes" / name / "diagnose" / "diag"
        script.write_text("#!/bin/sh\necho 'this is not json'\n")
        script.chmod(0o755)
    master_ip = next(n.ip for n in sim.nodes if n.name == master)
    base = f"http://{master_ip}:1816"
    log = open(Path(sim.directory) / "maintd3.log", "w")  # noqa: SIM115
    proc = spawn_maintd(sim, master, master_ip, log)
    try:
        def done():
            s = get(base, "/1/status") or []
            mine = [i for i in s if i["original"] == diag]
            return mine and mine[0]["repair-status"] in ("completed", "failed") and mine[0]
        inc = wait_for(done, 60, "the live repair")
        assert inc["repair-status"] == "completed", Path(log.name).read_text()[-3000:]
        assert json.loads(out.read_text()) == diag
        assert inc["tag"] in FileStore(sim.config).load().find_node(node).tags
        if other:
            reports = wait_for(lambda: [r for r in get(base, "/1/reports") or []
                                        if r["name"] == other[0] and r["error"]], 30,
                               "the broken script's error")
            assert reports[0]["data"]["status"] == "Ok"
            assert not [i for i in get(base, "/1/status") if i["node"] ==
                        FileStore(sim.config).load().find_node(other[0]).uuid
                        and i["repair-status"] in ("noted", "pending")]
    finally:
        stop_daemon(proc, log)


def test_failing_job_fails_the_incident_tags_the_node_and_stops(sim) -> None:
    """A job made to fail (the white-listed repair command exits 3): the incident is `failed`,
    the node gets `maintd:repairfailed:<event>`, and no further job is submitted for it."""
    cfg = FileStore(sim.config).load()
    master = cfg.node_name(cfg.cluster.master_node)
    node = next(n.name for n in cfg.nodes.values() if not n.offline and n.name != master)
    node_dir = Path(sim.directory) / "nodes" / node
    repair_dir = node_dir / "repair"
    repair_dir.mkdir(exist_ok=True)
    (repair_dir / "fail-nic").write_text("#!/bin/sh\necho 'no such nic' >&2\nexit 3\n")
    (repair_dir / "fail-nic").chmod(0o755)
    diag = {"status": "live-repair", "command": "fail-nic", "details": {"nic": "eth9"}}
    (node_dir / "diagnose" / "diag").write_text(f"#!/bin/sh\necho '{json.dumps(diag)}'\n")
    master_ip = next(n.ip for n in sim.nodes if n.name == master)
    base = f"http://{master_ip}:1816"
    log = open(Path(sim.directory) / "maintd4.log", "w")  # noqa: SIM115
    proc = spawn_maintd(sim, master, master_ip, log)
    try:
        def done():
            mine = [i for i in get(base, "/1/status") or [] if i["original"] == diag]
            return mine and mine[0]["repair-status"] in ("completed", "failed") and mine[0]
        inc = wait_for(done, 60, "the failing repair")
        assert inc["repair-status"] == "failed", Path(log.name).read_text()[-3000:]
        assert inc["tag"] == f"maintd:repairfailed:{inc['uuid']}"
        # the incident fails at once; the job that tags the node follows
        wait_for(lambda: inc["tag"] in FileStore(sim.config).load().find_node(node).tags, 30,
                 "the repairfailed tag")
        def jobs_done():
            now = [i for i in get(base, "/1/status") or [] if i["uuid"] == inc["uuid"]]
            jobs = now[0]["jobs"] if now else []
            info = json.loads(herder(sim, "job", "info", *map(str, jobs), "--json").stdout
                              ) if jobs else []
            return (info and all(j["status"] in ("success", "error", "canceled") for j in info)
                    and (jobs, info))
        jobs, info = wait_for(jobs_done, 30, "the incident's jobs to finish")
        # the repair job failed; the job that tags the node succeeded
        assert [j["status"] for j in info] == ["error", "success"], info
        time.sleep(5)  # ten poll intervals, rounds without delay: still nothing more for it
        again = [i for i in get(base, "/1/status") or [] if i["uuid"] == inc["uuid"]]
        assert again and again[0]["repair-status"] == "failed" and again[0]["jobs"] == jobs
    finally:
        stop_daemon(proc, log)


def test_mond_finds_confd_and_maintd_by_their_pid_files(sim) -> None:
    """The simulated nodes' confd and maintd write `<run dir>/<daemon>.pid`, so each node's
    mond daemon collectors find them (and not another node's)."""
    from herder.mond.collectors.daemons import find_process

    cfg = FileStore(sim.config).load()
    master = cfg.node_name(cfg.cluster.master_node)
    for node in sim.nodes:
        if "confd" not in node.pids:
            continue
        run = Path(sim.directory) / "nodes" / node.name / "run"
        assert int((run / "confd.pid").read_text()) == node.pids["confd"]
        proc = find_process(run, "confd")
        assert proc is not None and proc.pid == node.pids["confd"]
    master_ip = next(n.ip for n in sim.nodes if n.name == master)
    run = Path(sim.directory) / "nodes" / master / "run"
    log = open(Path(sim.directory) / "maintd5.log", "w")  # noqa: SIM115
    proc = spawn_maintd(sim, master, master_ip, log)
    try:
        wait_for(lambda: get(f"http://{master_ip}:1816", "/") == [1], 30, "maintd up")
        found = wait_for(lambda: find_process(run, "maintd"), 10, "maintd's pid file")
        assert found.pid == proc.pid == int((run / "maintd.pid").read_text())
    finally:
        stop_daemon(proc, log)
    assert not (run / "maintd.pid").exists()  # removed on a clean exit
