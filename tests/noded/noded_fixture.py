"""Run a real noded (its RPC server on 127.0.0.1, any free port; libvirt's test driver) in a
background thread, over plain HTTP or with TLS and the cluster certificate."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from herder.core import model
from herder.noded.daemon import serve
from herder.noded.node import Node, NodeSettings

KEY = b"0123456789abcdef0123456789abcdef01234567\n"


@dataclass
class Running:
    url: str
    daemon: Node

    def post(self, method: str, body: bytes,
             verify: ssl.SSLContext | bool = False) -> httpx.Response:
        with httpx.Client(verify=verify) as http:
            return http.post(f"{self.url}/rpc/{method}", content=body, timeout=30)


def node(name: str, ip: str = "127.0.0.1") -> model.Node:
    return model.Node(uuid=model.new_uuid(), name=name, primary_ip=ip, group=model.new_uuid())


def client_context(ca: Path, shown: Path | None) -> ssl.SSLContext:
    """A client TLS context trusting `ca` (no host name check: the cluster certificate names
    the cluster), showing the key and certificate of `shown` (None: none)."""
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    if shown is not None:
        context.load_cert_chain(shown)
    return context


@contextmanager
def serving(daemon: Node, host: str = "127.0.0.1", port: int = 0,
            certificate: Path | None = None) -> Iterator[str]:
    """Serve `daemon` (noded's real server) in a background thread on `host`:`port`; yields
    its URL. For tests that need several node daemons on one machine (a node's name is its
    host's name, so `herder noded` itself runs one per host)."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    bound: list[int] = []
    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(serve(daemon, host, port, certificate,
                                          ready=lambda port: (bound.append(port), ready.set()),
                                          stop=stop))
        except BaseException as err:  # reported to the test below
            failure.append(err)
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(30), "noded did not start"
    if failure:
        raise failure[0]
    scheme = "https" if certificate is not None else "http"
    try:
        yield f"{scheme}://{host}:{bound[0]}"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()


@contextmanager
def running_noded(directory: Path, name: str = "node1.example.com", *, key: bytes = KEY,
                  certificate: Path | None = None) -> Iterator[Running]:
    daemon = Node(NodeSettings(
        node_name=name, state_dir=directory / "state", run_dir=directory / "run", hmac_key=key,
        libvirt_uri="test:///default",
        file_root=directory / "root", config_dir=directory / "cluster"))
    with serving(daemon, certificate=certificate) as url:
        yield Running(url, daemon)
