"""Shared fixtures: a realistic config factory, the ../shared directory, a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from herder.core import model
from tests import cephshare, machine_setup, skipgate

if TYPE_CHECKING:
    from xdist.scheduler.protocol import Scheduling

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def pytest_addoption(parser: pytest.Parser) -> None:
    skipgate.addoption(parser)


def pytest_configure(config: pytest.Config) -> None:
    skipgate.configure(config)
    if not hasattr(config, "workerinput"):  # once, before the xdist workers start
        machine_setup.prepare()


@pytest.fixture
def shared() -> Path:
    """../shared beside the repo; tests that need it skip cleanly without it."""
    if not SHARED.is_dir():
        pytest.skip("../shared is absent")
    return SHARED


def stored_files(config_path: Path) -> tuple[bytes, bytes | None]:
    """What a file store holds: the snapshot and its journal (a write appends to the journal
    and leaves the snapshot as it is, so "nothing written" compares both)."""
    journal = config_path.with_name(config_path.name + ".journal")
    return config_path.read_bytes(), journal.read_bytes() if journal.exists() else None


def build_config(nodes: int = 3, drbd_instances: int = 2,
                 plain_instances: int = 1) -> model.ConfigData:
    """A small but complete cluster: one group, `nodes` nodes, DRBD and plain instances."""
    stamp = 1_700_000_000.0
    group = model.NodeGroup(uuid=model.new_uuid(), name="default", ctime=stamp, mtime=stamp)
    node_list = [
        model.Node(
            uuid=model.new_uuid(), name=f"node{i}.example.com", primary_ip=f"192.0.2.{10 + i}",
            secondary_ip=f"198.51.100.{10 + i}", group=group.uuid, master_candidate=i < 3,
            ctime=stamp, mtime=stamp,
        )
        for i in range(1, nodes + 1)
    ]
    instances: list[model.Instance] = []
    for i in range(drbd_instances):
        pnode, snode = node_list[i % nodes], node_list[(i + 1) % nodes]
        data = model.Disk(uuid=model.new_uuid(), dev_type="plain", size=10240,
                          logical_id=model.PlainId(vg="xenvg", lv=f"d{i}.disk0_data"))
        meta = model.Disk(uuid=model.new_uuid(), dev_type="plain", size=128,
                          logical_id=model.PlainId(vg="xenvg", lv=f"d{i}.disk0_meta"))
        disk = model.Disk(
            uuid=model.new_uuid(), dev_type="drbd", size=10240, iv_name="disk/0",
            logical_id=model.DrbdId(nodes=[pnode.uuid, snode.uuid], port=11000 + i,
                                    minors=[i, i], secret=f"secret{i}"),
            children=[data, meta],
        )
        instances.append(model.Instance(
            uuid=model.new_uuid(), name=f"drbd{i}.example.com", primary_node=pnode.uuid,
            os="debootstrap+default", hypervisor="kvm", admin_state="up", disks=[disk],
            nics=[model.NIC(uuid=model.new_uuid(), mac=f"aa:00:00:00:00:{i:02x}",
                            ip=f"203.0.113.{i + 1}")],
            beparams={"maxmem": 1024, "minmem": 512, "vcpus": 2},
            ctime=stamp, mtime=stamp,
        ))
    for i in range(plain_instances):
        pnode = node_list[i % nodes]
        instances.append(model.Instance(
            uuid=model.new_uuid(), name=f"plain{i}.example.com", primary_node=pnode.uuid,
            os="debootstrap", hypervisor="kvm",
            disks=[model.Disk(uuid=model.new_uuid(), dev_type="plain", size=2048,
                              logical_id=model.PlainId(vg="xenvg", lv=f"p{i}.disk0"))],
            nics=[model.NIC(uuid=model.new_uuid(), mac=f"aa:00:00:01:00:{i:02x}")],
            ctime=stamp, mtime=stamp,
        ))
    cluster = model.Cluster(
        uuid=model.new_uuid(), name="cluster.example.com", master_node=node_list[0].uuid,
        master_ip="192.0.2.1", nicparams={"link": "br0"}, ctime=stamp, mtime=stamp,
    )
    return model.ConfigData(
        cluster=cluster, nodegroups={group.uuid: group},
        nodes={n.uuid: n for n in node_list}, instances={i.uuid: i for i in instances},
        ctime=stamp, mtime=stamp,
    )


@pytest.fixture
def config() -> model.ConfigData:
    return build_config()


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str, config: Path | None = None, env: dict[str, str] | None = None,
            stdin: str | None = None) -> CliResult:
    """Run the real `herder` command in a subprocess."""
    full_env = {**os.environ, **(env or {})}
    if config is not None:
        full_env["HERDER_CONFIG"] = str(config)
    proc = subprocess.run(
        [sys.executable, "-m", "herder.cli.main", *args], capture_output=True, text=True,
        env=full_env, input=stdin, timeout=60,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def herder(capsys, monkeypatch, tmp_path):
    """Run `herder ARGS...` in-process against a config under tmp_path; returns CliResult."""
    config_path = tmp_path / "cluster" / "config.json"
    monkeypatch.setenv("HERDER_CONFIG", str(config_path))
    monkeypatch.setenv("HERDER_OFFLINE", "1")  # no masterd in these tests: edit the file

    def run(*args: str) -> CliResult:
        from herder.cli.main import main

        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    run.config_path = config_path  # type: ignore[attr-defined]
    return run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest work units go to the workers first: the vcluster's (its six modules, 7 min
    and more of one worker) and the modules booting real guests, then the others marked
    `slow` (`--dist loadfile` with `--no-loadscope-reorder` hands out units in collection
    order). A long unit handed out last keeps one worker busy while the other has nothing left
    (the disk tests: 167 s of work on two workers took 122 s when their two simulated clusters
    came last)."""
    def rank(item: pytest.Item) -> tuple[int, int]:
        if work_unit(item.nodeid) == "vcluster":  # its modules in VCLUSTER_MODULES' order
            return 0, VCLUSTER_MODULES.index(item.nodeid.split("::", 1)[0])
        if item.get_closest_marker("guests"):  # the longest of them first
            module = item.nodeid.split("::", 1)[0]
            known = module in LONGEST_GUEST_MODULES
            return 1, LONGEST_GUEST_MODULES.index(module) if known else len(LONGEST_GUEST_MODULES)
        return (2 if item.get_closest_marker("slow") else 3), 0

    items.sort(key=rank)


# The modules booting real guests, longest first (their worker time in clean-clone runs: the
# upgrade module starts three clusters; the others one each). Handed out in collection order
# (alphabetical), the upgrade module came last among them and kept one worker busy at the end.
# One not listed goes after these.
LONGEST_GUEST_MODULES = (
    "tests/system/test_upgrade_sim.py",
    "tests/system/test_real_guests_sim.py",
    "tests/system/test_node_failure_sim.py",
    "tests/system/test_debian_hosts_sim.py",
    "tests/system/test_rbd_guests_sim.py",
    "tests/system/test_hotplug_sim.py",
    "tests/system/test_move_cluster_sim.py",
    "tests/web/test_console_streams.py",
    "tests/system/test_etcd_master_death_sim.py",
    "tests/chaos/test_chaos_sim.py",
    "tests/security/test_trust_sim.py",
)


# Test modules that each start the one Ganeti vcluster (tests/ganeti/vcluster.py: a machine-wide
# resource held under an exclusive lock) share one xdist work unit, so they run one after another
# on one worker. As separate files, two of them on the two workers at once left one worker
# waiting on the vcluster's lock for the other's whole module (90 s of the suite's run).
# In this order, they share one start (30-90 s under the suite's load; four starts were about
# 2 of the unit's 7 min in the clean-clone runs): each module but the last leaves the vcluster
# as it found it (`keep`: whatever it adds, it removes; running_vcluster checks it) and passes
# it on to the next one (`reuse`); the last one (maintd offlines and tags nodes) stops it. A
# module that fails to put it back stops it, and the next one starts a new one.
# tests/unit/test_work_units.py checks that every module starting the vcluster is listed.
VCLUSTER_MODULES = (
    "tests/system/test_rapi_client.py",  # reuse, keep (a tag, a node's role: put back)
    "tests/system/test_rapi_shapes.py",  # reuse, keep (a tag, a node's role: put back)
    "tests/ganeti/test_lists_vs_ganeti.py",  # reuse, keep (instances, tags, a network: removed)
    "tests/system/test_live_figures.py",  # reuse, keep (two instances: removed)
    "tests/ganeti/test_vcluster_iallocator.py",  # reuse, keep (instances, the default allocator)
    "tests/ganeti/test_vcluster_maintd.py",  # reuse (drains, offlines and tags nodes)
)


def work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: its file, the vcluster's unit, or the shared Ceph's
    (tests/cephshare.py: its modules on one worker, one Ceph started for them all)."""
    path = nodeid.split("::", 1)[0]
    if path in VCLUSTER_MODULES:
        return "vcluster"
    return "ceph" if path in cephshare.CEPH_MODULES else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Scheduling | None:
    """`--dist loadfile` (pyproject's addopts) with the vcluster's modules in one unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class UnitScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return UnitScheduling(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last test of the vcluster's unit (its module fixtures torn down): stop a
    vcluster a module left up for a next one, so that its lock is not held while this worker
    runs other modules (other processes on this machine may wait for it); the same for the
    shared Ceph after its unit's last test (its daemons' CPU and memory are no other
    module's)."""
    yield
    if nextitem is None or work_unit(nextitem.nodeid) != "vcluster":
        _release_kept_vcluster()
    if nextitem is None or work_unit(nextitem.nodeid) != "ceph":
        cephshare.release_kept()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Also when the run stopped early (-x, an interrupt): no vcluster or Ceph left up by this
    process."""
    _release_kept_vcluster()
    cephshare.release_kept()


def _release_kept_vcluster() -> None:
    kept = sys.modules.get("tests.ganeti.vcluster")  # imported only by its users
    if kept is not None:
        kept.release_kept()
