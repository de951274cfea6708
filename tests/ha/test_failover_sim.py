"""Master failover on a simulated cluster (issue 10): kill -9 the master's masterd, fail over to
another master candidate after a vote of the nodes, and find every job, config change and maintd
incident intact; the old master, started again, does not act as master (exit code 11), and the
nodes refuse its epoch.

"The old master is gone" means: its masterd cannot be reached (a TCP connect to the cluster's
master IP, port 5080) from a majority of the online nodes, this one counted. Here node1's noded
still runs and itself reports that its masterd is gone (its consent).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from herder.core import envelope
from herder.core.noderpc import HttpNodeRpc, StaleEpochError
from herder.core.rapi import RapiClient
from herder.core.store import FileStore
from tests.simhelpers import herder, running_sim, wait_for, worker_offset

pytestmark = pytest.mark.slow

if not Path("/usr/sbin/libvirtd").exists():
    pytest.skip("libvirtd is not installed", allow_module_level=True)

FINAL = {"success", "error", "canceled"}


def first_ip() -> int:
    """127.0.0.240-250: away from the 100-229 of the other simulated-cluster tests."""
    return 240 + worker_offset(4, 3)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    yield from running_sim(tmp_path_factory.mktemp("ha-sim"), 3, first_ip=first_ip())


def config(state):
    return FileStore(state.config).load()


def jobs(state) -> dict[int, str]:
    with RapiClient.for_herder_cluster(Path(state.config).parent, state.masterd_url) as api:
        return {int(j["id"]): j["status"] for j in api.request("GET", "/2/jobs", {"bulk": 1})}


def reap(pid: int, timeout: float = 30.0) -> int | None:
    """The exit code of our child `pid` once it ended (None: still running at the deadline)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.1)
    return None


def rpc(state, epoch: int | None) -> HttpNodeRpc:
    directory = Path(state.config).parent
    return HttpNodeRpc(envelope.load_key(directory / "hmac.key"), directory / "server.pem",
                       epoch=epoch, timeout=20)


def test_master_failover(sim) -> None:
    from herder.sim import cluster

    node1, node2, node3 = sim.nodes
    directory = Path(sim.directory)
    # Work through the first master: an instance, a tag, and a maintd incident (node3's
    # self-diagnose asks for a live repair whose command does not exist).
    herder(sim, "instance", "add", "web1", "--no-name-check",
           "-t", "plain", "-o", "debootstrap+default", "--disk", "1G")
    with RapiClient.for_herder_cluster(Path(sim.config).parent, sim.masterd_url) as api:
        api.wait_for_job(api.add_cluster_tags(["ha:tag-before"]))
    cluster.break_node(directory, node3.name, "live-repair", "no-such-repair")
    incidents = wait_for(lambda: [i.uuid for i in config(sim).maintenance.incidents
                                  if i.node in (node3.name, config(sim).find_node(
                                      node3.name).uuid)],
                         timeout=90, what="a maintd incident for node3 in the config")
    before = config(sim)
    assert before.cluster.master_epoch == 0
    assert before.cluster.master_node == before.find_node(node1.name).uuid
    jobs_before = jobs(sim)
    assert jobs_before

    # With masterd alive, the vote refuses.
    refused = herder(sim, "cluster", "master-failover", "--node", node2.name, "--yes",
                     check=False)
    assert refused.returncode != 0 and "no majority" in refused.stderr, refused.stderr
    assert config(sim).cluster.master_epoch == 0

    # kill -9 the master's masterd (its noded stays up), fail over on node2 with the vote.
    masterd_pid = node1.pids["masterd"]
    os.kill(masterd_pid, signal.SIGKILL)
    assert reap(masterd_pid) == -signal.SIGKILL
    before = config(sim)  # maintd may have changed its state until now
    state, output = cluster.failover(directory, node2.name)
    assert "Vote on whether the master" in output and "is the master now" in output, output
    assert output.count("master gone") == 3, output
    after = config(state)
    c = after.cluster
    assert c.master_node == after.find_node(node2.name).uuid
    assert c.master_epoch == 1 and c.master_ip == node2.ip
    assert after.serial_no > before.serial_no
    assert state.masterd_url == f"https://{node2.ip}:5080"

    # Every job is still there; finished ones kept their status (running ones were marked
    # failed by the new masterd's queue recovery).
    jobs_after = jobs(state)
    for job_id, status in jobs_before.items():
        assert job_id in jobs_after
        if status in FINAL:
            assert jobs_after[job_id] == status, (job_id, status, jobs_after[job_id])
    # Config changes intact and in serial order; maintd's incidents too.
    assert "web1" in {i.name for i in after.instances.values()}
    assert "ha:tag-before" in after.cluster.tags
    assert set(incidents) <= {i.uuid for i in after.maintenance.incidents}
    # New jobs run through the new master (the CLI finds it by the moved master IP).
    herder(state, "instance", "add", "web2", "--no-name-check",
           "-t", "plain", "-o", "debootstrap+minimal", "--disk", "1G")
    with RapiClient.for_herder_cluster(Path(state.config).parent, state.masterd_url) as api:
        assert api.get_info()["master"] == node2.name
        result = api.wait_for_job(api.add_cluster_tags(["ha:tag-after"]))
        assert result["status"] == "success"
    latest = config(state)
    assert {"web1", "web2"} <= {i.name for i in latest.instances.values()}
    assert latest.serial_no > after.serial_no
    assert max(jobs(state)) > max(jobs_before)

    # The old master, started again, does not act as master.
    proc = cluster.spawn_masterd(directory, Path(state.config), node1)
    assert proc.wait(60) == 11
    log = (directory / "nodes" / node1.name / "masterd.log").read_text()
    assert "is not the master" in log
    done = herder(state, "maintd", "--node", node1.name, "--port", "0", "--notify-port", "0",
                  "--run-dir", str(directory / "nodes" / node1.name / "run"), check=False,
                  timeout=60)
    assert done.returncode == 11, done.stderr

    # The nodes refuse an RPC signed with the old epoch, and take the new one.
    old, new = rpc(state, 0), rpc(state, 1)
    try:
        node3_cfg = latest.find_node(node3.name)
        with pytest.raises(StaleEpochError, match="stale master epoch 0 < 1"):
            old.call(node3_cfg, "ping")
        assert new.call(node3_cfg, "master_epoch")["epoch"] == 1
    finally:
        old.close()
        new.close()


def test_no_voting_deposes_a_running_master(sim) -> None:
    """--no-voting while node2's masterd still runs: the config's new epoch makes it exit 11."""
    from herder.sim import cluster

    directory = Path(sim.directory)
    state = cluster.SimState.load(directory)
    assert state is not None
    node2, node3 = state.nodes[1], state.nodes[2]
    pid = node2.pids["masterd"]
    state, output = cluster.failover(directory, node3.name, voting=False)
    assert "--no-voting" in output
    # failover() may have reaped it already (it checks whether it runs): the log line tells
    with contextlib.suppress(ChildProcessError):
        assert reap(pid) == 11
    log = directory / "nodes" / node2.name / "masterd.log"
    # the CLI's last line before exit code 11
    wait_for(lambda: "herder masterd: no longer the master" in log.read_text(), timeout=30,
             what="the deposed masterd's last words")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert config(state).cluster.master_epoch == 2
    herder(state, "instance", "add", "web3", "--no-name-check",
           "-t", "plain", "-o", "debootstrap+default", "--disk", "1G")
    assert config(state).find_instance("web3").name == "web3"
