"""End to end on a simulated cluster of namespaced hosts, with maintd as the master's supervisor
runs it: a node's self-diagnose says `evacuate`; maintd drains it, moves its instances round by
round, offlines and tags it; the incident completes; removing the tag and fixing the script
forgets it. kill -9 of maintd in the middle (its supervisor starts it again) loses nothing and
submits nothing twice; live repairs run white-listed commands on the node; a failing job fails
the incident."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from herder.sim import cluster
from tests import simaddresses
from tests.simhelpers import config, domains, herder, on, running_sim, wait_for

pytestmark = pytest.mark.slow

OK = {"status": "Ok", "command": "", "details": {}}


def first_ip() -> int:
    return simaddresses.first_ip("maintd_e2e")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    yield from running_sim(tmp_path_factory.mktemp("maintd-sim"), 3, first_ip=first_ip())


def get(sim, path: str) -> Any:
    try:
        return httpx.get(sim.maintd_url + path, timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return None


def diagnose(sim, node: str, data: dict[str, Any] | None = None, raw: str | None = None) -> None:
    """What the node's self-diagnose command prints from now on."""
    path = sim.host(node).path(f"{cluster.DIAGNOSE_DIR}/{cluster.BREAK_SCRIPT}")
    if raw is None:
        cluster.diagnose_script(path, data or OK)
    else:
        tmp = path.with_name(".raw")
        tmp.write_text(f"#!/bin/sh\necho '{raw}'\n")
        tmp.chmod(0o755)
        tmp.replace(path)


def wait_with_log(sim, master: str, predicate, what: str, timeout: float = 60) -> Any:
    """wait_for, with the tail of maintd's log and its reports in the error."""
    try:
        return wait_for(predicate, timeout, what)
    except AssertionError as err:
        log = sim.host(master).path("/var/log/herder/maintd.log")
        tail = log.read_text()[-3000:] if log.exists() else "(no maintd.log)"
        raise AssertionError(f"{err}\nreports: {get(sim, '/1/reports')}\n{tail}") from None


def master_of(sim) -> str:
    cfg = config(sim)
    return cfg.node_name(cfg.cluster.master_node)


def test_evacuate_heals_the_cluster(sim) -> None:
    master = master_of(sim)
    # on a node other than the master (a sharedfile instance has no secondary to pick)
    herder(sim, "instance", "add", "web1", "--no-name-check",
           "-t", "sharedfile", "-o", "debootstrap+default",
           "--disk", "1G", "-n", next(n.name for n in sim.nodes if n.name != master))
    cfg = config(sim)
    web = cfg.find_instance("web1")
    victim = next(cfg.node_name(u) for u in web.all_nodes if cfg.node_name(u) != master)
    victim_uuid = cfg.find_node(victim).uuid
    # not the master: exit code 11, at once (its ssconf says who the master is)
    other = next(n.name for n in sim.nodes if n.name != master)
    done = on(sim, other, "maintd", check=False, timeout=60)
    assert done.returncode == 11, done.stderr
    assert wait_for(lambda: get(sim, "/"), 30, "maintd up") == [1]
    diagnose(sim, victim, {"status": "evacuate", "command": "", "details": {"disk": "sdb"}})
    incs = wait_for(lambda: get(sim, "/1/status"), 60, "an incident")
    (inc,) = incs
    assert inc["node"] == victim_uuid and inc["action"] == "evacuate"

    def completed():
        s = get(sim, "/1/status")
        if s and s[0]["repair-status"] in ("completed", "failed"):
            return s[0]
        return None

    inc = wait_for(completed, 150, "completion")
    log = sim.host(master).path("/var/log/herder/maintd.log")
    assert inc["repair-status"] == "completed", (inc, log.read_text()[-3000:])
    cfg = config(sim)
    node = cfg.find_node(victim)
    assert node.offline and inc["tag"] in node.tags  # (offline replaces drained)
    assert inc["tag"] == f"maintd:repairready:{inc['uuid']}"

    # the state went through masterd into the config's maintenance section (saved at the end
    # of the tick that completed it: the page may show it a moment earlier)
    def saved_completed():
        incs = config(sim).maintenance.incidents
        return incs if incs and incs[0].repair_status == "completed" else None

    (saved,) = wait_for(saved_completed, 30, "the completed incident in the config")
    assert saved.uuid == inc["uuid"] and saved.repair_status == "completed"
    assert not any(victim_uuid in i.all_nodes for i in cfg.instances.values())
    assert not any(domains(sim, victim).values())
    web = cfg.find_instance("web1")
    assert domains(sim, cfg.node_name(web.primary_node)).get("web1")
    assert len(get(sim, "/1/status")[0]["jobs"]) >= 3
    # acknowledge: remove the tag and fix the script -> forgotten
    herder(sim, "tags", "remove", "node", victim, inc["tag"])
    diagnose(sim, victim)
    wait_for(lambda: get(sim, "/1/status") == [], 60, "the incident to be forgotten")
    assert httpx.get(sim.maintd_url + "/status.html", timeout=5).status_code == 200
    # the operator's CLI finds maintd from the cluster (no --url)
    assert herder(sim, "maintd", "status").returncode == 0


def test_kill_9_mid_evacuation_loses_nothing_and_submits_nothing_twice(sim) -> None:
    """Continues the cluster of the test above: the other non-master node fails now."""
    cfg = config(sim)
    master = master_of(sim)
    offline = [n.name for n in cfg.nodes.values() if n.offline]
    for name in offline:  # the first victim was repaired: back online
        herder(sim, "node", "modify", name, "--offline", "no")
    victim = next(n.name for n in sim.nodes if n.name != master and n.name not in offline)
    victim_uuid = cfg.find_node(victim).uuid
    herder(sim, "instance", "add", "db2", "--no-name-check",
           "-t", "sharedfile", "-o", "debootstrap+default",
           "--disk", "1G", "-n", victim)
    diagnose(sim, victim, {"status": "evacuate-failover", "command": "", "details": {"n": 2}})

    def first_job():
        s = get(sim, "/1/status")
        return s and any(i["node"] == victim_uuid and i["jobs"] for i in s) and s

    incs = wait_for(first_job, 60, "a first job")
    host = sim.host(master)
    maintd = host.supervisor("status", ["maintd"]).daemons[0]
    assert host.run(["kill", "-9", str(maintd.pid)]).returncode == 0  # mid-evacuation
    wait_for(lambda: host.supervisor("status", ["maintd"]).daemons[0].pid not in
             (None, maintd.pid), 30, "maintd started again by its supervisor")
    (inc,) = [i for i in incs if i["node"] == victim_uuid]

    def done():
        s = get(sim, "/1/status")
        mine = [i for i in s or [] if i["uuid"] == inc["uuid"]]
        return mine and mine[0]["repair-status"] in ("completed", "failed") and mine[0]

    final = wait_for(done, 120, "completion after the restart")
    log = host.path("/var/log/herder/maintd.log")
    assert final["repair-status"] == "completed", log.read_text()[-3000:]
    # no incident lost, none duplicated
    assert [i["uuid"] for i in get(sim, "/1/status") if i["node"] == victim_uuid] == [
        inc["uuid"]]
    # every job of the event in the queue is the incident's, and no step ran twice
    mine = {}
    with sim.rapi() as api:
        for job in api.get_jobs(bulk=True):
            events = {r[1] for op in job.get("ops") or [] for r in op.get("reason") or []}
            if inc["uuid"] in events:
                mine[int(job["id"])] = tuple(op["OP_ID"] for op in job["ops"])
    assert sorted(mine) == sorted(final["jobs"])
    steps = [ops for ops in mine.values() if ops[0] in ("OP_NODE_SET_PARAMS", "OP_TAGS_SET")]
    assert len(steps) == len(set(steps))
    assert any(ops == ("OP_INSTANCE_FAILOVER",) for ops in mine.values())
    assert not any("OP_INSTANCE_MIGRATE" in ops for ops in mine.values())
    cfg = config(sim)
    assert cfg.find_node(victim).offline
    assert not any(victim_uuid in i.all_nodes for i in cfg.instances.values())


def test_live_repair_and_a_broken_script(sim) -> None:
    """live-repair runs the white-listed command on the node with the diagnose object on stdin;
    a diagnose script printing garbage leads to no action and its error shows."""
    cfg = config(sim)
    master = master_of(sim)
    online = [n.name for n in cfg.nodes.values() if not n.offline and n.name != master]
    assert online, "an online non-master node"
    node = online[0]
    other = [n.name for n in cfg.nodes.values() if n.name not in (master, node)]
    repair = sim.host(node).path("/etc/ganeti/node-repair-commands/fix-nic")
    repair.parent.mkdir(parents=True, exist_ok=True)
    repair.write_text("#!/bin/sh\ncat > /tmp/repaired.json\n")  # the node's own /tmp
    repair.chmod(0o755)
    diag = {"status": "live-repair", "command": "fix-nic", "details": {"nic": "eth1"}}
    diagnose(sim, node, diag)
    for name in other:  # the other node's script prints garbage
        diagnose(sim, name, raw="this is not json")

    def done():
        mine = [i for i in get(sim, "/1/status") or [] if i["original"] == diag]
        return mine and mine[0]["repair-status"] in ("completed", "failed") and mine[0]

    inc = wait_with_log(sim, master, done, "the live repair")
    assert inc["repair-status"] == "completed", inc
    assert json.loads(sim.host(node).path("/tmp/repaired.json").read_text()) == diag
    assert inc["tag"] in config(sim).find_node(node).tags
    if other:
        reports = wait_for(lambda: [r for r in get(sim, "/1/reports") or []
                                    if r["name"] == other[0] and r["error"]], 30,
                           "the broken script's error")
        assert reports[0]["data"]["status"] == "Ok"
        assert not [i for i in get(sim, "/1/status") if i["node"] ==
                    config(sim).find_node(other[0]).uuid
                    and i["repair-status"] in ("noted", "pending")]


def test_failing_job_fails_the_incident_tags_the_node_and_stops(sim) -> None:
    """A job made to fail (the white-listed repair command exits 3): the incident is `failed`,
    the node gets `maintd:repairfailed:<event>`, and no further job is submitted for it."""
    cfg = config(sim)
    master = master_of(sim)
    node = next(n.name for n in cfg.nodes.values() if not n.offline and n.name != master)
    repair = sim.host(node).path("/etc/ganeti/node-repair-commands/fail-nic")
    repair.write_text("#!/bin/sh\necho 'no such nic' >&2\nexit 3\n")
    repair.chmod(0o755)
    diag = {"status": "live-repair", "command": "fail-nic", "details": {"nic": "eth9"}}
    diagnose(sim, node, diag)

    def done():
        mine = [i for i in get(sim, "/1/status") or [] if i["original"] == diag]
        return mine and mine[0]["repair-status"] in ("completed", "failed") and mine[0]

    inc = wait_with_log(sim, master, done, "the failing repair")
    assert inc["repair-status"] == "failed", inc
    assert inc["tag"] == f"maintd:repairfailed:{inc['uuid']}"
    # the incident fails at once; the job that tags the node follows
    wait_for(lambda: inc["tag"] in config(sim).find_node(node).tags, 30,
             "the repairfailed tag")

    def jobs_done():
        now = [i for i in get(sim, "/1/status") or [] if i["uuid"] == inc["uuid"]]
        jobs = now[0]["jobs"] if now else []
        info = json.loads(herder(sim, "job", "info", *map(str, jobs), "--json").stdout
                          ) if jobs else []
        return (info and all(j["status"] in ("success", "error", "canceled") for j in info)
                and (jobs, info))

    jobs, info = wait_for(jobs_done, 30, "the incident's jobs to finish")
    # the repair job failed; the job that tags the node succeeded
    assert [j["status"] for j in info] == ["error", "success"], info
    time.sleep(5)  # five poll intervals and rounds: still nothing more for it
    again = [i for i in get(sim, "/1/status") or [] if i["uuid"] == inc["uuid"]]
    assert again and again[0]["repair-status"] == "failed" and again[0]["jobs"] == jobs


def test_each_nodes_mond_finds_its_own_daemons(sim) -> None:
    """Every daemon writes `/run/herder/<daemon>.pid` on its own host; each node's mond daemon
    collectors find them there (the processes its supervisor runs, not another node's).
    Every host is still up: the nodes the evacuations above took offline stood down alive,
    their watchdogs disarmed, not reset."""
    keeper_log = Path(sim.directory, "keeper.log")
    resets = [line for line in keeper_log.read_text().splitlines()
              if "resetting the host" in line] if keeper_log.exists() else []
    assert not resets, resets
    master = master_of(sim)
    for node in sim.nodes:
        host = sim.host(node.name)
        pids = {d.name: d.pid for d in host.supervisor("status").daemons}
        wanted = ["noded", "confd", "mond"] + (["masterd", "maintd"]
                                               if node.name == master else [])

        def reported(host=host, node=node, wanted=wanted):
            done = herder(sim, "mond", "report", "all", "--verbose", "--node", node.name,
                          check=False)
            if done.returncode != 0:
                return None
            found = {r["name"]: r["data"] for r in json.loads(done.stdout)
                     if r["category"] == "daemon"}
            return found if all(found.get(d, {}).get("running") for d in wanted) else None

        found = wait_for(reported, 60, f"{node.name}'s daemon collectors")
        for daemon in wanted:
            assert found[daemon]["pid"] == pids[daemon], (node.name, daemon)
            assert int(host.path(f"/run/herder/{daemon}.pid").read_text()) == pids[daemon]
        if node.name != master:
            assert not found["maintd"]["running"] and not found["maintd"]["expected"]
    assert Path(sim.directory, "client", "client.toml").exists()
