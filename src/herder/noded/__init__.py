"""noded: the node daemon — node RPCs over TLS, the hypervisor through libvirt, storage units,
OS definitions and the uid pool."""
