"""Machine setup the tests share, done once by the controlling pytest process before any
xdist worker starts (two workers once raced to create the `libvirt-qemu` user: `useradd` exit
9). Each step is idempotent and also safe when run again concurrently (a machine-wide lock)."""

from __future__ import annotations

import os


def prepare() -> None:
    """The system accounts libvirtd's QEMU driver needs (simulated hosts, private libvirtds)."""
    if os.geteuid() != 0:
        return  # only root creates accounts; the tests that need them skip or fail themselves
    from herder.sim.libvirtd import ensure_system_accounts

    ensure_system_accounts()
