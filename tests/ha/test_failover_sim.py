"""Master failover on a simulated cluster of namespaced hosts (issue 10, Ganeti's
`gnt-cluster master-failover`): the master's host fails; `herder cluster master-failover` run on
another master candidate wins the vote, moves the master IP and starts masterd and maintd there
through the node daemons; masterd continues from that node's own copy of the config and the job
queue (redistributed), so every job, config change and maintd incident is intact, and the
operator's published address follows the master IP. The old master, booted again with its stale
copy, does not act as master (exit code 11), and the nodes refuse its epoch.

"The old master is gone" means: its masterd cannot be reached (a TCP connect to the cluster's
master IP, port 5080) from a majority of the online nodes, this one counted; a node that does
not answer (the powered-off master) does not vote.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from herder.core.store import FileStore
from tests import simaddresses
from tests.simhelpers import config, herder, on, running_sim, wait_for

pytestmark = pytest.mark.slow

FINAL = {"success", "error", "canceled"}


def first_ip() -> int:
    """This module's addresses (tests/simaddresses.py)."""
    return simaddresses.first_ip("ha_failover")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    yield from running_sim(tmp_path_factory.mktemp("ha-sim"), 3, first_ip=first_ip())


def jobs(state) -> dict[int, str]:
    with state.rapi() as api:
        return {int(j["id"]): j["status"] for j in api.request("GET", "/2/jobs", {"bulk": 1})}


def finished_in_copy(state, node: str) -> set[int]:
    """The finished jobs of the node's copy of the job queue."""
    found = set()
    for path in state.host(node).path("/var/lib/herder/queue").glob("job-*.json"):
        try:
            if json.loads(path.read_text()).get("end_timestamp") is not None:
                found.add(int(path.stem.split("-")[1]))
        except (OSError, ValueError):
            continue
    return found


EPOCH_PROBE = """
import json, sys
from herder.core import envelope
from herder.core.errors import HerderError
from herder.core.noderpc import HttpNodeRpc
from herder.core.store import FileStore
config = FileStore("/var/lib/herder/config.json").load()
node = config.find_node(sys.argv[2])
out = {}
for epoch in (0, 1):
    rpc = HttpNodeRpc(envelope.load_key("/var/lib/herder/hmac.key"),
                      "/var/lib/herder/server.pem", epoch=epoch, timeout=20)
    try:
        out[epoch] = rpc.send(node, sys.argv[1], {})
    except HerderError as err:
        out[epoch] = str(err)
    rpc.close()
print(json.dumps(out))
"""


def test_master_failover(sim) -> None:
    from herder.sim import cluster

    node1, node2, node3 = sim.nodes
    # Work through the first master: an instance, a tag, and a maintd incident (node3's
    # self-diagnose asks for a live repair whose command does not exist).
    herder(sim, "instance", "add", "web1", "--no-name-check",
           "-t", "file", "-o", "debootstrap+default",
           "--disk", "1G")
    herder(sim, "tags", "add", "cluster", "ha:tag-before")
    cluster.break_node(Path(sim.directory), node3.name, "live-repair", "no-such-repair")

    def incident() -> list[str]:
        cfg = config(sim)
        return [i.uuid for i in cfg.maintenance.incidents
                if i.node in (node3.name, cfg.find_node(node3.name).uuid)]

    incidents = wait_for(incident, 90, "a maintd incident for node3 in the config")
    before = config(sim)
    assert before.cluster.master_epoch == 0
    assert before.cluster.master_node == before.find_node(node1.name).uuid

    # With masterd alive, the vote refuses (run on node2, as an operator does).
    refused = on(sim, node2.name, "cluster", "master-failover", "--yes", check=False)
    assert refused.returncode != 0 and "no majority" in refused.stderr, refused.stderr
    assert config(sim).cluster.master_epoch == 0

    # A job archived on the first master (Ganeti keeps its archive on the candidates):
    # node2's copy files it in its own archive.
    archived = min(job_id for job_id, status in jobs(sim).items() if status == "success")
    herder(sim, "job", "archive", str(archived))
    queue_copy = sim.host(node2.name).path("/var/lib/herder/queue")
    wait_for((queue_copy / "archive" / "0" / f"job-{archived}.json").is_file, 30,
             "node2's copy of the archived job")
    assert not (queue_copy / f"job-{archived}.json").exists()

    # node2's copy has caught up (config and job queue), then node1's host fails.
    jobs_before = jobs(sim)
    before = config(sim)

    def caught_up() -> bool:
        # through the store: the copy is the master's snapshot and journal (docs/scale.md)
        serial = FileStore(sim.host(node2.name).path("/var/lib/herder/config.json")).serial_no()
        return (serial or -1) >= before.serial_no and finished_in_copy(sim, node2.name) >= {
            job_id for job_id, status in jobs_before.items() if status in FINAL}

    wait_for(caught_up, 30, "node2's copy of the config and the job queue")
    sim.host(node1.name).power_off(grace=0)
    state, output = cluster.failover(Path(sim.directory), node2.name)
    assert "Vote on whether the master" in output and "is the master now" in output, output
    assert output.count("master gone") == 2 and "no answer" in output, output
    assert f"WARNING: {node1.name}" in output and f"{node2.name}: master IP up" in output
    # the dead master is waited for once, in the vote (all nodes asked at once); the epoch and
    # the role move do not call it again
    assert f"WARNING: {node1.name}: unreachable in the vote" in output, output
    assert f"{node1.name}: not told (unreachable in the vote)" in output, output
    after = config(state)
    c = after.cluster
    assert c.master_node == after.find_node(node2.name).uuid
    assert c.master_epoch == 1 and c.master_ip == sim.master_ip  # the floating IP moved
    assert after.serial_no > before.serial_no

    # Every job is still there; finished ones kept their status; the archived one is read
    # from node2's archive (and listed with the archive only).
    jobs_after = jobs(state)
    for job_id, status in jobs_before.items():
        assert job_id in jobs_after
        if status in FINAL:
            assert jobs_after[job_id] == status, (job_id, status, jobs_after[job_id])
    with state.rapi() as api:
        assert archived not in jobs_after
        assert api.get_job_status(archived)["status"] == "success"
        assert archived in api.get_jobs(archived=True)
    # Config changes intact; maintd's incidents too.
    assert "web1" in {i.name for i in after.instances.values()}
    assert "ha:tag-before" in after.cluster.tags
    assert set(incidents) <= {i.uuid for i in after.maintenance.incidents}
    # New jobs run through the new master, at the same published address.
    herder(state, "instance", "add", "web2", "--no-name-check",
           "-t", "file", "-o", "debootstrap+minimal",
           "--disk", "1G", "-n", node3.name)
    with state.rapi() as api:
        assert api.get_info()["master"] == node2.name
    herder(state, "tags", "add", "cluster", "ha:tag-after")
    latest = config(state)
    assert {"web1", "web2"} <= {i.name for i in latest.instances.values()}
    assert max(jobs(state)) > max(jobs_before)
    # maintd on node2 starts once the candidates' confd agree on the new master (each copy
    # caught up); until then it exits and its supervisor starts it again
    answered = wait_for(lambda: (done := herder(state, "maintd", "status", "--json",
                                                check=False)).returncode == 0 and done,
                        90, "maintd on the new master")
    status = json.loads(answered.stdout)
    assert any(i["uuid"] in incidents for i in status)  # maintd on node2 carries them on

    # The old master boots again with its stale copy: its masterd and maintd do not act as
    # master (exit code 11), and the nodes refuse its epoch.
    old = sim.host(node1.name)
    old.power_on()

    def retired() -> bool:
        states = {d.name: d.state for d in old.supervisor("status", ["masterd", "maintd"])
                  .daemons}
        return set(states.values()) == {"not-my-role"}

    wait_for(retired, 60, "node1's masterd and maintd: not my role")
    log = old.path("/var/log/herder/masterd.log").read_text()
    assert "no longer the master" in log or "is not the master" in log
    probe = old.run([sys.executable, "-c", EPOCH_PROBE, "master_epoch", node3.name])
    assert probe.returncode == 0, probe.stderr
    answers = json.loads(probe.stdout)
    assert "stale master epoch 0 < 1" in answers["0"]
    assert answers["1"]["epoch"] == 1


def test_no_voting_moves_the_master_away_from_a_running_one(sim) -> None:
    """--no-voting while node2's masterd still runs: the failover stops it through its node
    daemon, and the new epoch would have stopped it anyway."""
    from herder.sim import cluster

    node2, node3 = sim.nodes[1], sim.nodes[2]
    state, output = cluster.failover(Path(sim.directory), node3.name, voting=False)
    assert "--no-voting" in output and f"{node2.name}: master daemons stopped" in output
    states = {d.name: d.state for d in sim.host(node2.name).supervisor(
        "status", ["masterd", "maintd"]).daemons}
    assert set(states.values()) <= {"stopped", "not-my-role"}
    assert config(state).cluster.master_epoch == 2
    herder(state, "instance", "add", "web3", "--no-name-check",
           "-t", "file", "-o", "debootstrap+default", "--disk", "1G")
    assert config(state).find_instance("web3").name == "web3"
