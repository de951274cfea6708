"""Node join with a token, node certificates and revocation on a simulated cluster of
namespaced hosts (docs/real-nodes.md "Joining a node", "noded authenticates callers"): the
simulator itself joins nodes 2 and 3 with their tokens; here a node that is down, a wrong token
and a node that already belongs to a cluster fail in one line with the config unchanged, a
removed node's certificate is refused by every other node, and a reset node joins again."""

from __future__ import annotations

import sys

import pytest

from herder.core import node_certs
from herder.sim.host import SimHost
from tests import simaddresses
from tests.simhelpers import (
    config,
    herder,
    on,
    reset_node,
    running_sim,
    wait_for,
    where,
)

pytestmark = pytest.mark.slow

DATA = "/var/lib/herder"

# A node RPC from a node, as its own tools make one (its node certificate, the cluster key).
PING = """
import sys
from herder.core import envelope, model
from herder.core.errors import HerderError
from herder.core.noderpc import HttpNodeRpc
from herder.core.rpcdefs import node_calls
rpc = HttpNodeRpc(envelope.load_key("/var/lib/herder/hmac.key"),
                  __import__("pathlib").Path("/var/lib/herder/server.pem"), timeout=20,
                  connect_timeout=5)
target = model.Node(uuid="x", name=sys.argv[1], primary_ip=sys.argv[2], group="g")
try:
    print("answer", rpc.call(target, node_calls.Ping()).node)
except HerderError as err:
    print("refused", err)
"""


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    # 127.0.0.164-167 (xdist worker 0) or 168-171: never those of a sim another worker runs
    # at the same time (maintd: 160-163 on worker 0, 170-173 on worker 1)
    yield from running_sim(tmp_path_factory.mktemp("join"), 3,
                           first_ip=simaddresses.first_ip("node_join"))


def address(sim, name: str) -> str:
    return next(n.address for n in sim.nodes if n.name == name)


def ping_from(sim, source: str, target: str) -> str:
    host: SimHost = sim.host(source)
    done = host.run([sys.executable, "-c", PING, target, address(sim, target)], timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def node_names(sim) -> list[str]:
    return sorted(n.name for n in sim.nodes)


def test_every_node_has_a_certificate_of_its_own(sim) -> None:
    cfg = config(sim)
    digests = cfg.cluster.node_certs
    assert sorted(digests) == sorted(cfg.nodes) and len(set(digests.values())) == len(digests)
    for name in node_names(sim):
        host = sim.host(name)
        assert not host.path(f"{DATA}/join-token").exists()
        listed = host.path(f"{DATA}/ssconf_herder_node_certs").read_text()
        assert all(d in listed for d in digests.values()), name
    _first, second, third = node_names(sim)
    assert ping_from(sim, third, second) == f"answer {second}"


def test_failed_adds_say_why_in_one_line_and_change_nothing(sim) -> None:
    first = node_names(sim)[0]
    serial = config(sim).serial_no
    token = f"{'s' * 32}.{'0' * 64}"
    subnet = address(sim, first).rsplit(".", 1)[0]
    down = herder(sim, "node", "add", "node9.example.org", "--ip", f"{subnet}.99",
                  "--join-token", token, check=False)
    assert down.returncode != 0 and "cannot be reached" in down.stderr, down.stderr
    assert len(down.stderr.strip().splitlines()) == 1, down.stderr
    assert config(sim).serial_no == serial and "node9.example.org" not in {
        n.name for n in config(sim).nodes.values()}


def test_a_removed_node_is_refused_and_can_join_again_after_a_reset(sim) -> None:
    first, second, third = node_names(sim)
    assert ping_from(sim, third, second) == f"answer {second}"
    herder(sim, "node", "remove", third)
    cfg = config(sim)
    assert third not in {n.name for n in cfg.nodes.values()}
    # the removed node keeps its files, but every other node refuses its certificate
    for other in (first, second):
        assert "revoked or unknown" in ping_from(sim, third, other), other
    # it belongs to a cluster still: a token does not make the master take it
    serial = cfg.serial_no
    other_token = f"{'s' * 32}.{'1' * 64}"
    busy = herder(sim, "node", "add", third, "--ip", address(sim, third), "--join-token",
                  other_token, check=False)
    assert busy.returncode != 0 and "already belongs to a cluster" in busy.stderr, busy.stderr
    assert config(sim).serial_no == serial
    # the operator resets it (its secrets go); noded makes a new token
    host = sim.host(third)
    token = reset_node(sim, third)
    secret, pinned = token.rsplit(".", 1)
    wrong = herder(sim, "node", "add", third, "--ip", address(sim, third), "--join-token",
                   f"x{secret}.{pinned}", check=False)
    assert wrong.returncode != 0 and "wrong join token" in wrong.stderr, wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1
    assert config(sim).serial_no == serial
    herder(sim, "node", "add", third, "--ip", address(sim, third), "--join-token", token)
    cfg = config(sim)
    uuid = next(n.uuid for n in cfg.nodes.values() if n.name == third)
    assert uuid in cfg.cluster.node_certs
    assert not host.path(f"{DATA}/join-token").exists()
    assert ping_from(sim, second, third) == f"answer {third}"  # a candidate calls it
    # the pool of three is short without it: it joins as a master candidate again (Ganeti's
    # node add, compat 56), and the other nodes take its calls once they know its new
    # certificate (the join's redistribution; until then it is unknown to them)
    assert next(n for n in cfg.nodes.values() if n.name == third).master_candidate
    wait_for(lambda: ping_from(sim, third, second) == f"answer {second}", 30,
             "node2 knowing node3's certificate")


def test_renew_crypto_keeps_instances_running(sim) -> None:
    first, second, third = node_names(sim)
    herder(sim, "instance", "add", "kept1", "--no-name-check", "-t", "file", "-o",
           "debootstrap+default", "--disk", "1G", "-n", second)
    assert where(sim, "kept1") == [second]
    before = config(sim).cluster.node_certs
    old_ca = sim.host(first).path(f"{DATA}/server.pem").read_bytes()
    on(sim, first, "cluster", "renew-crypto", "--yes", timeout=300)
    new_ca = sim.host(first).path(f"{DATA}/server.pem").read_bytes()
    assert new_ca != old_ca
    for name in node_names(sim):
        pem = sim.host(name).path(f"{DATA}/node.pem").read_bytes()
        assert node_certs.is_issued_by(pem, new_ca), name
        assert not list(sim.host(name).path(DATA).glob("*.retiring")), name
    assert where(sim, "kept1") == [second]  # the instance never stopped
    # the operator's profile pins the new cluster certificate; masterd restarted with it
    from herder.sim import cluster

    cluster._write_profile(sim.host(first), sim)
    after = wait_for(lambda: _certs(sim), 90, "masterd with the new secrets")
    assert set(after) == set(before) and not set(after.values()) & set(before.values())
    assert ping_from(sim, second, third) == f"answer {third}"
    herder(sim, "instance", "remove", "kept1")


def _certs(sim) -> dict[str, str] | None:
    try:
        return dict(config(sim).cluster.node_certs)
    except Exception:  # masterd restarting, or still the old certificate
        return None
