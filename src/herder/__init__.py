"""herder: watches, heals and places virtual machines across a cluster of hypervisor nodes."""

__version__ = "0.1.0"
