"""Export and import of a disk between the two nodes of a simulated cluster (`herder cluster
simulate`: two namespaced hosts, the nodes' TLS with their certificates) beside the bare copy
of the same bytes between the same two nodes: one TLS connection with the node certificates
carrying the disk's bytes into a file (the limit of a TLS stream between them). Each figure
is the wall time of the command; the ratio is herder's over the bare copy's (the issue's
goal: at most 1.3).

    PYTHONPATH=src python bench/backup.py [--size-mib 1024] [--repeat 5] [--dir DIR]

Needs root (scripts/sysdeps.sh). Run it under the suite lock on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

from herder.sim import cluster
from simcommands import herder, on_node

NAME, RESTORED = "bench-backup", "bench-restored"
PKI = "/var/lib/herder"  # the node certificate (node.pem) and the cluster CA (server.pem)
PORT = 14411
EXPORTS = "/srv/herder/export"




def _disk_path(state: cluster.SimState, name: str) -> str:
    line = herder(state, "instance", "activate-disks", name).splitlines()[-1]
    return line.split(":", 2)[2]


# The bare copy: one TLS connection between the nodes with their certificates (client
# certificate required, as noded does), the device's bytes written to it and into a file on
# the other side: no HTTP, no checksum, no job. (openssl s_client/s_server cannot carry a
# binary stream to its end: s_client stops at end of input before the last records are out.)
RECEIVE = """
import socket, ssl, sys
context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=sys.argv[2] + "/server.pem")
context.load_cert_chain(sys.argv[2] + "/node.pem")
context.verify_mode = ssl.CERT_REQUIRED
with socket.create_server(("", int(sys.argv[1]))) as listener:
    print("listening", flush=True)
    conn, _ = listener.accept()
    with context.wrap_socket(conn, server_side=True) as tls, open(sys.argv[3], "wb") as out:
        while chunk := tls.recv(1 << 20):
            out.write(chunk)
"""
SEND = """
import socket, ssl, sys
context = ssl.create_default_context(cafile=sys.argv[3] + "/server.pem")
context.check_hostname = False
context.load_cert_chain(sys.argv[3] + "/node.pem")
with socket.create_connection((sys.argv[1], int(sys.argv[2]))) as conn, \\
        context.wrap_socket(conn) as tls, open(sys.argv[4], "rb") as device:
    while chunk := device.read(1 << 20):
        tls.sendall(chunk)
    try:
        tls.unwrap()  # close_notify: the receiver's end of stream
    except (ssl.SSLError, OSError):
        pass  # the receiver closed without its own close_notify
"""


def _bare(state: cluster.SimState, source: str, target: str, device: str, out: str,
          size: int) -> float:
    """Seconds for the bytes of `device` on `source` through TLS into `out` on `target`
    (checked to have received `size` bytes)."""
    server = state.host(target).popen(["python3", "-c", RECEIVE, str(PORT), PKI, out],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True)
    assert server.stdout is not None
    server.stdout.readline()  # listening
    started = time.monotonic()
    on_node(state, source, ["python3", "-c", SEND, target, str(PORT), PKI, device])
    server.wait(timeout=600)
    seconds = time.monotonic() - started
    received = int(on_node(state, target, ["stat", "-c", "%s", out]).strip())
    if received != size:
        raise SystemExit(f"the bare copy to {target} received {received} of {size} bytes")
    return seconds


def _timed(state: cluster.SimState, *args: str) -> float:
    started = time.monotonic()
    herder(state, *args)
    return time.monotonic() - started


def _summary(what: str, samples: list[float]) -> str:
    return (f"{what:<36} {statistics.median(samples):8.1f}  ({min(samples):.1f}-"
            f"{max(samples):.1f}, n={len(samples)})")


def _exports(state: cluster.SimState, node1: str, node2: str, device: str, size: int,
             repeat: int) -> tuple[list[float], list[float]]:
    """Each export (the next replaces the one before) beside a bare copy, in turns, so
    that both see the same load."""
    export, bare = [], []
    for _ in range(repeat):
        export.append(_timed(state, "backup", "export", "-n", node2, NAME))
        bare.append(_bare(state, node1, node2, device, f"{EXPORTS}/bare.dump", size))
        on_node(state, node2, ["rm", "-f", f"{EXPORTS}/bare.dump"])
    return export, bare


def _imports(state: cluster.SimState, node1: str, node2: str, size: int, repeat: int
             ) -> tuple[list[float], list[float]]:
    restore, bare = [], []
    dump = on_node(state, node2, ["sh", "-c", f"ls {EXPORTS}/{NAME}/*-* | head -1"]).strip()
    for _ in range(repeat):
        restore.append(_timed(state, "backup", "import", RESTORED, "--src-node", node2,
                              "--src-dir", NAME, "-n", node1, "--no-start", "--no-name-check"))
        herder(state, "instance", "remove", RESTORED)
        bare.append(_bare(state, node2, node1, dump, "/tmp/bare.dump", size))
        on_node(state, node1, ["rm", "-f", "/tmp/bare.dump"])
    return restore, bare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5, help="samples of each figure")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/herder-bench-backup"))
    parser.add_argument("--first-ip", type=int, default=234)
    options = parser.parse_args()
    state = cluster.start(options.dir, 2, mond=False, maintd=False, first_ip=options.first_ip,
                          progress=print)
    try:
        node1, node2 = (node.name for node in state.nodes)
        herder(state, "instance", "add", NAME, "--no-name-check", "-t", "file", "-o",
                "debootstrap+default", "--disk", f"{options.size_mib}M", "-n", node1,
                "--no-start")
        device = _disk_path(state, NAME)
        on_node(state, node1, ["dd", "if=/dev/urandom", f"of={device}", "bs=1M",
                            f"count={options.size_mib}", "conv=notrunc,fsync", "status=none"])
        size = options.size_mib << 20
        load_before = os.getloadavg()[0]
        export, bare_out = _exports(state, node1, node2, device, size, options.repeat)
        restore, bare_in = _imports(state, node1, node2, size, options.repeat)
        load_after = os.getloadavg()[0]
        print(f"\n{options.size_mib} MiB between two simulated nodes (wall seconds: median "
              f"(min-max); load average {load_before:.1f} before, {load_after:.1f} after)")
        print(_summary("export (herder backup export)", export))
        print(_summary("bare TLS copy, node1 -> node2", bare_out))
        print(_summary("import (herder backup import)", restore))
        print(_summary("bare TLS copy, node2 -> node1", bare_in))
        print(f"ratio export/bare {statistics.median(export) / statistics.median(bare_out):.2f}"
              f", import/bare {statistics.median(restore) / statistics.median(bare_in):.2f}"
              " (goal: at most 1.3)")
    finally:
        cluster.stop(options.dir)


if __name__ == "__main__":
    main()
