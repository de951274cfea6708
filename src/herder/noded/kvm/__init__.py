"""Real QEMU/KVM domains through libvirt's QEMU driver: domain XML from Ganeti's KVM hvparams
(`domain`), the KVM probe (`kvmprobe`) and live migration between nodes' libvirtds
(`migration`, over the TLS-only libvirtds of `herder.core.libvirtd_conf`)."""
