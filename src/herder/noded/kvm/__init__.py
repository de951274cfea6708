"""Real QEMU/KVM domains through libvirt's QEMU driver: domain XML from Ganeti's KVM hvparams
(`domain`), the KVM probe (`kvmprobe`), libvirtd's TLS-only configuration (`libvirtd_conf`) and
live migration between nodes' libvirtds (`migration`)."""
