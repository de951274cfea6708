"""The suite's xdist work units (tests/conftest.py): every test module that starts the Ganeti
vcluster is in the vcluster's one unit, so no worker waits on the vcluster's lock."""

from __future__ import annotations

import itertools
import re

from tests.cephshare import CEPH_MODULES
from tests.conftest import (
    LONGEST_GUEST_MODULES,
    REPO,
    VCLUSTER_MODULES,
    pytest_collection_modifyitems,
    work_unit,
)

STARTS_THE_VCLUSTER = re.compile(r"with (vcluster\.)?running_vcluster\(")
TAKES_THE_SHARED_CEPH = re.compile(r"cephshare\.shared\(")


def test_every_module_starting_the_vcluster_is_in_its_unit() -> None:
    starting = {path.relative_to(REPO).as_posix()
                for path in (REPO / "tests").rglob("test_*.py")
                if STARTS_THE_VCLUSTER.search(path.read_text())}
    assert "tests/ganeti/test_vcluster_maintd.py" in starting  # the search finds them
    assert starting == set(VCLUSTER_MODULES)


def test_the_modules_sharing_the_ceph_are_one_unit() -> None:
    """Every module taking tests/cephshare.py's Ceph runs on the worker that keeps it (two
    workers would start two on its one address: the second refused)."""
    sharing = {path.relative_to(REPO).as_posix()
               for path in (REPO / "tests").rglob("test_*.py")
               if TAKES_THE_SHARED_CEPH.search(path.read_text())}
    assert "tests/system/test_snapshots_rbd.py" in sharing  # the search finds them
    assert sharing == set(CEPH_MODULES)
    assert {work_unit(f"{module}::test_x") for module in CEPH_MODULES} == {"ceph"}


def test_other_modules_are_their_own_unit() -> None:
    assert work_unit("tests/ganeti/test_vcluster_maintd.py::test_x") == \
        work_unit("tests/system/test_rapi_shapes.py::test_y[a-b]") == "vcluster"
    assert work_unit("tests/unit/test_store.py::test_z") == "tests/unit/test_store.py"


class CollectedItem:
    """What the ordering reads of a collected test: its node id and its markers."""

    def __init__(self, nodeid: str, *markers: str) -> None:
        self.nodeid, self.markers = nodeid, markers

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.markers else None


def test_the_longest_units_are_handed_out_first() -> None:
    items = [
        CollectedItem("tests/unit/test_store.py::test_a"),
        CollectedItem("tests/system/test_disk_data_sim.py::test_b", "slow"),
        CollectedItem("tests/system/test_hotplug_sim.py::test_c", "slow", "guests"),
        CollectedItem("tests/system/test_rapi_shapes.py::test_d"),
        CollectedItem("tests/unit/test_store.py::test_e"),
        CollectedItem("tests/ganeti/test_vcluster_maintd.py::test_f", "slow"),
        CollectedItem("tests/chaos/test_chaos_sim.py::test_g", "slow", "guests"),
        CollectedItem("tests/system/test_rapi_client.py::test_h"),
        CollectedItem("tests/system/test_upgrade_sim.py::test_i", "slow", "guests"),
        CollectedItem("tests/system/test_new_guests_sim.py::test_j", "slow", "guests"),
    ]
    pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    # the vcluster's unit (its modules in VCLUSTER_MODULES' order), then real guests (the
    # longest first, as LONGEST_GUEST_MODULES lists them; one not listed after them), then slow
    # ones, then the rest: each in its order
    assert [item.nodeid.rsplit("::", 1)[1] for item in items] == \
        ["test_h", "test_d", "test_f", "test_i", "test_c", "test_g", "test_j", "test_b",
         "test_a", "test_e"]


def test_the_longest_guest_modules_are_modules_that_exist() -> None:
    assert [m for m in LONGEST_GUEST_MODULES if not (REPO / m).is_file()] == []
    assert len(set(LONGEST_GUEST_MODULES)) == len(LONGEST_GUEST_MODULES)


def test_a_module_keeping_the_vcluster_hands_it_to_one_reusing_it() -> None:
    """A module that leaves the vcluster up (`keep=True`) saves a start only when the module
    after it in the unit takes it (`reuse=True`); the others start their own."""
    calls = {}
    for module in VCLUSTER_MODULES:
        found = re.search(r"running_vcluster\(([^)]*)\)", (REPO / module).read_text())
        assert found, module
        calls[module] = found.group(1)
    kept = [m for m in VCLUSTER_MODULES if "keep=True" in calls[m]]
    assert kept  # the search finds them
    for here, after in itertools.pairwise(VCLUSTER_MODULES):
        if here in kept:
            assert "reuse=True" in calls[after], (here, after)
    assert "keep=True" not in calls[VCLUSTER_MODULES[-1]]
    # one start for the whole unit: every module but the last passes the vcluster on
    assert kept == list(VCLUSTER_MODULES[:-1])
