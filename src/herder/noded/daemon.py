"""Starting noded: lock its memory, log even when the disk is broken, serve over TLS."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import socket
import ssl
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from herder.core import serve as serve_helper
from herder.noded import console, exports
from herder.noded.announce import announce
from herder.noded.fence import keep_lease
from herder.noded.node import Node, NodeSettings, keep_hypervisor
from herder.noded.server import ROUTES, make_app

# noded's caller is the master (one address: up to 100 pooled RPC connections, consoles and
# disk imports besides) and the disk copies of other nodes; an import streams its body
# itself (POST /import/<token>, a disk's bytes: no body deadline, its own size)
LIMITS = serve_helper.Limits(per_source=256, streamed=("/import/",))
log = logging.getLogger("herder.noded")
MCL_CURRENT, MCL_FUTURE = 1, 2


def lock_memory() -> bool:
    """mlockall(MCL_CURRENT|MCL_FUTURE) (design-2.1 "Node daemon availability"): noded stays in
    RAM, so a node with a failing system disk can still be power-cycled."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.mlockall(MCL_CURRENT | MCL_FUTURE) != 0:
        log.warning("mlockall failed: %s", os.strerror(ctypes.get_errno()))
        return False
    return True


class FallbackFileHandler(logging.Handler):
    """Log to a file; when it cannot be written, to the console (design-2.1)."""

    def __init__(self, path: Path, console: str = "/dev/console") -> None:
        super().__init__()
        self.path = path
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record) + "\n"
        try:
            with open(self.path, "a") as fh:
                fh.write(line)
            return
        except OSError:
            pass
        for target in (self.console, "/dev/stderr"):
            try:
                with open(target, "a") as fh:
                    fh.write(line)
                return
            except OSError:
                continue


def setup_logging(log_file: Path | None, debug: bool) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        handlers.append(FallbackFileHandler(log_file))
    fmt = logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s")
    for handler in handlers:
        handler.setFormatter(fmt)
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO, handlers=handlers,
                        force=True)


async def serve(node: Node, host: str, port: int, certificate: Path | None, *,
                ready: Callable[[int], None] | None = None,
                stop: asyncio.Event | None = None,
                client_cas: Sequence[Path] | None = None,
                tls: ssl.SSLContext | None = None) -> None:
    """Serve the node RPCs until `stop` is set: with `tls` (noded's own, `noded.trust`: its
    node certificate, callers of the cluster), else TLS with `certificate` requiring callers
    issued by one of `client_cas` (default: `certificate` itself), else (None) plain HTTP."""
    for partial in exports.remove_partial(exports.export_root(node)):
        log.warning("partial export %s: its stream ended with the daemon that received it",
                    partial)
    if tls is None and certificate is not None:
        tls = serve_helper.server_tls(certificate, client_cas=list(
            client_cas if client_cas is not None else [certificate]))
    await serve_helper.serve(
        "noded", node.settings.run_dir,
        endpoints=[serve_helper.Http(make_app(node), [serve_helper.Listener(host, port, tls)],
                                     routes=ROUTES, limits=LIMITS)],
        tasks=[lambda stop: keep_hypervisor(node, stop),
               lambda stop: console.keep_serial_logs(node.serial_log_dir, stop),
               # the master asks this node again at once (core.reachability)
               lambda stop: announce(node.trust, node.name, stop),
               lambda stop: keep_lease(node, stop)],
        on_stop=[node.hv.close],
        ready=None if ready is None else lambda bound: ready(bound[0].port), stop=stop)


@dataclass(frozen=True)
class NodedOptions:
    """`herder noded`'s options."""

    config_path: Path  # the cluster config: the secrets beside it, this node's parameters
    bind: str
    port: int
    state_dir: Path
    run_dir: Path
    repair_dir: Path
    os_path: tuple[Path, ...]
    mlock: bool = True


def run(options: NodedOptions, say: Callable[[str], None]) -> None:
    """Lock the memory, build the daemon, serve until SIGTERM/SIGINT; `say` prints the line
    that tells it serves."""
    name = socket.getfqdn()
    locked = lock_memory() if options.mlock else False
    node = Node(NodeSettings(node_name=name, state_dir=options.state_dir,
                             run_dir=options.run_dir, repair_dir=options.repair_dir,
                             os_path=options.os_path, config_dir=options.config_path.parent))
    # A node without the cluster's secrets waits to be joined (`herder node add --join-token`)
    token = node.trust.prepare_join(name)
    tls = node.trust.server_context()

    def ready(bound: int) -> None:
        state = (f"not joined: join token in {node.trust.join_token} "
                 "(herder node join-token)") if token is not None else "joined"
        say(f"herder noded: node {name}, serving RPC on https://{options.bind}:{bound}/ "
            f"({state}; libvirt {node.hv.uri}, memory "
            f"{'locked' if locked else 'not locked'})")

    serve_helper.run(lambda stop: serve(node, options.bind, options.port, None, tls=tls,
                                        ready=ready, stop=stop))
