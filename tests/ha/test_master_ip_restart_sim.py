"""The master IP comes back whenever masterd starts as the master (issue 34, item 6), on the
file backend too: the master's masterd killed (-9) after its master IP went away (a crash and a
reboot lose it) is started again by the node's supervisor and brings the master IP up on the
master netdev itself (`masterd.master_ip.MasterIpHolder`), so the cluster answers at its address
again without an operator's `activate-master-ip`. A master candidate added after `cluster init`
is promoted (Ganeti's candidate_pool_size) and its confd answers from the config it received."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from herder.core.errors import HerderError
from tests import simaddresses
from tests.simhelpers import config, on, running_sim, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from running_sim(tmp_path_factory.mktemp("master-ip"), 2,
                           first_ip=simaddresses.first_ip("master_ip_restart"))


def master_ip_here(state: Any, node: str) -> bool:
    shown = state.host(node).run(["ip", "-o", "address", "show", "dev", "br0"], timeout=30)
    return f" {state.master_ip}/" in shown.stdout


def masterd_pid(state: Any, node: str) -> int | None:
    done = state.host(node).run(["cat", "/run/herder/masterd.pid"], timeout=30)
    try:
        return int(done.stdout.split()[0])
    except (ValueError, IndexError):
        return None


def test_a_restarted_master_brings_the_master_ip_up_again(sim: Any) -> None:
    master = sim.nodes[0].name
    assert master_ip_here(sim, master)
    host = sim.host(master)
    before = masterd_pid(sim, master)
    assert before is not None
    # a crash that lost the address (as a reboot does): the IP gone, masterd killed
    host.run(["ip", "address", "del", f"{sim.master_ip}/24", "dev", "br0"], check=True)
    assert not master_ip_here(sim, master)
    host.run(["kill", "-9", str(before)], check=True)
    wait_for(lambda: (pid := masterd_pid(sim, master)) is not None and pid != before, 120,
             "masterd started again by the supervisor")
    wait_for(lambda: master_ip_here(sim, master), 120, "the master IP up again on br0")
    # the cluster answers at its address (the published one follows the master IP)
    assert wait_for(lambda: answering(sim), 60, "masterd answering at the master IP")


def answering(state: Any) -> bool:
    try:
        return bool(config(state).cluster.master_node)
    except (HerderError, OSError):
        return False


def test_a_node_added_later_is_a_candidate_whose_confd_answers(sim: Any) -> None:
    added = sim.nodes[1]
    cfg = config(sim)
    assert cfg.find_node(added.name).master_candidate  # the pool of 10 wants it
    # its own confd, asked alone from the master, answers with the cluster's config
    done = on(sim, sim.nodes[0].name, "confd", "query", "config_query", "/cluster/cluster_name",
              "--peer", added.address)
    assert cfg.cluster.name in done.stdout, done.stdout
