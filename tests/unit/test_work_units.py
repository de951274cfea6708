"""The suite's xdist work units (tests/conftest.py): every test module that starts the Ganeti
vcluster is in the vcluster's one unit, so no worker waits on the vcluster's lock."""

from __future__ import annotations

import re

from tests.conftest import REPO, VCLUSTER_MODULES, work_unit

STARTS_THE_VCLUSTER = re.compile(r"with (vcluster\.)?running_vcluster\(\)")


def test_every_module_starting_the_vcluster_is_in_its_unit() -> None:
    starting = {path.relative_to(REPO).as_posix()
                for path in (REPO / "tests").rglob("test_*.py")
                if STARTS_THE_VCLUSTER.search(path.read_text())}
    assert "tests/ganeti/test_vcluster_maintd.py" in starting  # the search finds them
    assert starting == set(VCLUSTER_MODULES)


def test_other_modules_are_their_own_unit() -> None:
    assert work_unit("tests/ganeti/test_vcluster_maintd.py::test_x") == \
        work_unit("tests/system/test_rapi_shapes.py::test_y[a-b]") == "vcluster"
    assert work_unit("tests/unit/test_store.py::test_z") == "tests/unit/test_store.py"
