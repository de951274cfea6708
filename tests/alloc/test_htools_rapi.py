"""Ganeti's own htools read a herder cluster over its RAPI (issue 32 item 5).

`hbal`, `hspace`, `hcheck`, `hinfo` and `hroller` (Ganeti 3.0.2's binaries from the peers) run
with `-m https://MASTER:5080` against a simulated cluster (libvirt's test driver: fast, no real
guests), as Ganeti's htools do against Ganeti's RAPI: no credentials, no certificate check. That
needs the cluster's anonymous reads (`cluster modify --rapi-anonymous-reads yes`; off by
default, and then every program fails to load). Each program's answer equals its answer on the
same cluster's data as an htools text file (`-t`), written by Ganeti's `hscan` from the same
RAPI; the text file itself holds what the instances were created with. The cluster is
unbalanced on purpose (every instance on one node), so hbal has moves to propose.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import simaddresses
from tests.alloc.alloc_support import GROOT, SHARED
from tests.simhelpers import herder, running_sim

HTOOLS = ("hbal", "hspace", "hcheck", "hinfo", "hroller")
# each program's options beyond the input: hbal prints its commands, node and instance tables,
# hinfo every node and instance, hroller the moves its reboot groups need
OPTIONS: dict[str, tuple[str, ...]] = {
    "hbal": ("-C", "-p", "--print-instances"), "hspace": ("-v",), "hcheck": ("-v",),
    "hinfo": ("-p", "--print-instances"), "hroller": ("--print-moves",),
}
# name: (template, disk MiB, maxmem MiB, vcpus, tags)
INSTANCES: dict[str, tuple[str, int, int, int, tuple[str, ...]]] = {
    "db1": ("sharedfile", 2048, 512, 2, ("role:db",)),
    "web1": ("file", 1024, 256, 1, ("role:web",)),
    "web2": ("file", 1024, 256, 1, ("role:web",)),
    "web3": ("file", 512, 384, 1, ()),
}


def htool(name: str) -> Path:
    return GROOT / "bin" / name


def peers_absent() -> str | None:
    if not SHARED.is_dir():
        return "../shared is absent"
    missing = [name for name in (*HTOOLS, "hscan") if not htool(name).exists()]
    if missing:
        return (f"Ganeti 3.0.2 (/tmp/groot) is absent: no {', '.join(missing)} "
                "(bash ../shared/peers/setup.sh)")
    return None


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    reason = peers_absent()
    if reason:
        pytest.skip(reason)
    yield from running_sim(tmp_path_factory.mktemp("htools-sim"), 3,
                           first_ip=simaddresses.first_ip("htools_rapi"), mond=False,
                           maintd=False)


@pytest.fixture(scope="module")
def cluster(sim: Any) -> Any:
    """The cluster with every instance on its first node (hbal has work to propose), and
    htools' exclusion tags `role:` (the two web servers conflict there)."""
    assert "rapi anonymous reads: N" in herder(sim, "cluster", "info").stdout  # default
    first = sim.nodes[0].name
    for name, (template, disk, mem, vcpus, tags) in INSTANCES.items():
        herder(sim, "instance", "add", name, "--no-name-check", "-t", template, "-o",
               "debootstrap+default", "--disk", f"{disk}M", "-B", f"maxmem={mem},vcpus={vcpus}",
               "-n", first, timeout=300)
        if tags:
            herder(sim, "tags", "add", "instance", name, *tags)
    herder(sim, "tags", "add", "cluster", "htools:iextags:role")
    return sim


def run(program: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(htool(program)), *args], capture_output=True, text=True,
                          timeout=600, check=False, cwd="/")


def master(state: Any) -> str:
    return f"https://{state.published}:5080"


def test_htools_need_the_clusters_anonymous_reads(cluster: Any) -> None:
    """Off (the default, or turned off): htools send no credentials and get 401, so they
    cannot load; on, they can."""
    herder(cluster, "cluster", "modify", "--rapi-anonymous-reads", "no")
    for program in HTOOLS:
        refused = run(program, "-m", master(cluster))
        assert refused.returncode != 0, program
        assert "failed to load data" in refused.stderr and "/2/" in refused.stderr, program
    herder(cluster, "cluster", "modify", "--rapi-anonymous-reads", "yes")
    assert run("hinfo", "-m", master(cluster)).returncode == 0


@pytest.fixture(scope="module")
def text_file(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster's data as Ganeti's hscan writes it from herder's RAPI (anonymous reads
    on from here on)."""
    herder(cluster, "cluster", "modify", "--rapi-anonymous-reads", "yes")
    directory = tmp_path_factory.mktemp("hscan")
    scanned = run("hscan", "-d", str(directory), master(cluster))
    assert scanned.returncode == 0, scanned.stdout + scanned.stderr
    (path,) = directory.glob("*.data")
    return path


def sections(path: Path) -> list[list[list[str]]]:
    """The text file's sections (groups, nodes, instances, tags, policies), lines split."""
    found: list[list[list[str]]] = [[]]
    for line in path.read_text().split("\n"):
        if line:
            found[-1].append(line.split("|"))
        else:
            found.append([])
    return found


def test_the_text_file_holds_the_cluster_as_created(cluster: Any, text_file: Path) -> None:
    groups, nodes, instances = sections(text_file)[:3]
    assert [g[0] for g in groups] == ["default"]
    assert sorted(n[0] for n in nodes) == sorted(n.name for n in cluster.nodes)
    for node in nodes:  # live figures of libvirt's test driver: 3 GiB, 16 CPUs
        assert int(node[1]) > 0 and int(node[3]) <= int(node[1]) and int(node[6]) > 0, node
    first = cluster.nodes[0].name
    by_name = {i[0]: i for i in instances}
    assert sorted(by_name) == sorted(INSTANCES)
    for name, (template, disk, mem, vcpus, tags) in INSTANCES.items():
        line = by_name[name]
        assert (int(line[1]), int(line[2]), int(line[3])) == (mem, disk, vcpus), line
        assert (line[4], line[6], line[7], line[8]) == ("running", first, "", template), line
        assert sorted(filter(None, line[9].split(","))) == sorted(tags), line
    assert sections(text_file)[3] == [["htools:iextags:role"]]


@pytest.mark.parametrize("program", HTOOLS)
def test_rapi_and_text_file_give_the_same_answer(cluster: Any, text_file: Path,
                                                 program: str) -> None:
    over_rapi = run(program, "-m", master(cluster), *OPTIONS[program])
    from_file = run(program, "-t", str(text_file), *OPTIONS[program])
    # hcheck's exit code says whether the cluster needs work (the web servers conflict: 1)
    assert over_rapi.returncode == (1 if program == "hcheck" else 0), \
        over_rapi.stdout + over_rapi.stderr
    assert (over_rapi.stdout, over_rapi.stderr, over_rapi.returncode) == \
        (from_file.stdout, from_file.stderr, from_file.returncode)
    assert over_rapi.stdout.strip()


def test_hbal_over_rapi_balances_the_unbalanced_cluster(cluster: Any, text_file: Path) -> None:
    """Not an empty agreement: hbal sees all four instances on one node and moves some."""
    shown = run("hbal", "-m", master(cluster), "-C").stdout
    assert f"Loaded {len(cluster.nodes)} nodes, {len(INSTANCES)} instances" in shown
    assert "Solution length=0" not in shown
    assert "gnt-instance migrate" in shown or "gnt-instance move" in shown, shown
