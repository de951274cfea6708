"""The Debian test bed's nspawn machine names (`herder.sim.debhost.machine_name`): unique on
the machine for hosts of two clusters in one network (`simulate --hosts debian --network`,
both with a node1) and of two simulations at once, and always a name nspawn accepts."""

from __future__ import annotations

import re
from pathlib import Path

from herder.sim import debhost

# systemd's hostname_is_valid() for a machine name: labels of [A-Za-z0-9-], dots between them,
# at most 64 characters in all
VALID = re.compile(r"^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*$")


def test_node1_of_two_clusters_in_one_network_get_two_names() -> None:
    # cluster A's node1 took slot 1, cluster B's node1 (joined with --network) slot 3
    a = debhost.machine_name("node1.a.sim.herder.test", 7, 1)
    b = debhost.machine_name("node1.b.sim.herder.test", 7, 3)
    assert a != b
    assert (a, b) == ("node1-s7-1", "node1-s7-3")


def test_the_same_node_name_in_two_simulations_gets_two_names() -> None:
    one = debhost.machine_name("node1.sim.herder.test", 3, 1)
    other = debhost.machine_name("node1.sim.herder.test", 4, 1)
    assert one != other


def test_a_long_first_label_is_cut_to_nspawns_limit_keeping_what_makes_it_unique() -> None:
    label = "n" * 80
    names = {debhost.machine_name(f"{label}.example.com", 254, slot) for slot in (1, 200)}
    assert len(names) == 2
    for name in names:
        assert len(name) == debhost.MACHINE_NAME_MAX
        assert VALID.match(name), name
        assert name.endswith(("-s254-1", "-s254-200"))


def test_boot_argv_names_the_machine_given_and_defaults_to_the_first_label() -> None:
    root, hosts = Path("/sim/nodes/node1/root"), Path("/sim/hosts")
    given = debhost.boot_argv(root, "node1.b.sim.herder.test", hosts, machine="node1-s7-3")
    default = debhost.boot_argv(root, "node1.b.sim.herder.test", hosts)
    assert "--machine=node1-s7-3" in given
    assert "--machine=node1" in default
    assert [a for a in given if a.startswith("--machine")] == ["--machine=node1-s7-3"]
