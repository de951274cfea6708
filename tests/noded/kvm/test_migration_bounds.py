"""The bound on libvirt calls of a migration (`kvm.migration.BoundedCalls`): a call that hangs
is given up after its deadline and not repeated while it still hangs; errors pass through.
(The same with real libvirtds and a killed or frozen peer: test_migration_live.py.)"""

from __future__ import annotations

import threading
import time

import pytest

from herder.noded.kvm import migration


def test_a_hanging_call_is_given_up_and_not_repeated() -> None:
    release = threading.Event()
    made: list[str] = []

    def hangs() -> str:
        made.append("hangs")
        release.wait(30)
        return "late"

    calls = migration.BoundedCalls("test")
    asked = time.monotonic()
    assert calls.run(hangs, 0.2) == (False, None)
    assert time.monotonic() - asked < 10
    # while the first still hangs, the next call is not even made
    assert calls.run(lambda: made.append("second") or "x", 5) == (False, None)
    assert made == ["hangs"]
    release.set()
    deadline = time.monotonic() + 30
    while calls.run(lambda: "fresh", 5) != (True, "fresh"):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_libvirt_errors_pass_through() -> None:
    libvirt = pytest.importorskip("libvirt")

    def fails() -> None:
        raise libvirt.libvirtError("no such domain")

    with pytest.raises(libvirt.libvirtError, match="no such domain"):
        migration.BoundedCalls("test").run(fails, 5)
