"""A handler class served by the standard library's threaded HTTP server on 127.0.0.1, for
tests that need a small peer (a RAPI server, a maintd, a masterd answering oddly)."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def threaded_http(handler: type[BaseHTTPRequestHandler],
                  tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """Serve `handler` (with `tls`: over HTTPS) while the block runs; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
