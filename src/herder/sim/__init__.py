"""sim: a whole herder cluster on one machine — per-node loopback addresses, libvirtds serving
the test driver, and every daemon as its own process (`herder cluster simulate`)."""
