"""A private libvirtd for tests: the simulator's own (`herder.sim.libvirtd`)."""

from herder.sim.libvirtd import (
    LIBVIRTD,
    LibvirtdUnavailable,
    PrivateLibvirtd,
    private_libvirtd,
    start_libvirtd,
)

__all__ = ["LIBVIRTD", "LibvirtdUnavailable", "PrivateLibvirtd", "private_libvirtd",
           "start_libvirtd"]
