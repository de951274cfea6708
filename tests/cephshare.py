"""One real Ceph (herder.sim.ceph: one monitor and one BlueStore OSD on 127.0.0.38, cephx,
the pool `herder`, the restricted user client.herder) for the test modules in CEPH_MODULES,
started by the first of them that asks and kept for the next (issue 30's test budget: each
module started its own, 7-17 s each under the suite's load).

The modules are one xdist work unit (tests/conftest.py `work_unit`), so they run one after
another on one worker and never meet a Ceph of the other on this address; the conftest stops
the kept Ceph after the unit's last test (`release_kept`), so no worker carries it through
other modules. What the modules write into the pool they name after themselves, and what they
assert about the pool is relative to what they made (`images()` before and after, names), so
one module's images are no other's concern."""

from __future__ import annotations

import os

import pytest

from herder.sim import ceph
from tests import simaddresses

ADDRESS = f"127.0.0.{simaddresses.first_ip('shared_ceph')}"
CEPH_MODULES = (
    "tests/noded/bdev/test_rbd_ceph.py",
    "tests/system/test_snapshots_rbd.py",
)

_kept: ceph.CephCluster | None = None


def shared(tmp_path_factory: pytest.TempPathFactory, *,
           skip_without: bool = True) -> ceph.CephCluster:
    """The kept Ceph, or a new one (when none is kept, or one of its daemons died: a module
    never gets a half-dead Ceph a previous one left). `skip_without`: skip when Ceph's
    packages or root are missing (else ceph.start's CephError fails the test, as one that
    cannot start what it tests); a Ceph that does not come up fails the test (CephError)."""
    global _kept
    missing = ceph.missing_packages()
    if missing and skip_without:
        pytest.skip(f"Ceph is not installed (apt-get install {' '.join(missing)})")
    if os.geteuid() != 0 and skip_without:
        pytest.skip("the Ceph daemons run as root here")
    if _kept is not None and any(proc.poll() is not None for proc in _kept.processes):
        release_kept()
    if _kept is None:
        _kept = ceph.start(tmp_path_factory.mktemp("ceph"), ADDRESS)
    return _kept


def release_kept() -> None:
    """Stop the kept Ceph (a throwaway cluster: no clean OSD shutdown to wait for, ~5 s)."""
    global _kept
    kept, _kept = _kept, None
    if kept is not None:
        kept.stop(grace=0.5)
