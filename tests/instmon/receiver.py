"""A local notification receiver for the instmon tests: a real HTTP(S) server on 127.0.0.1 in
a background thread that records every POST body with its arrival time."""

from __future__ import annotations

import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class Receiver:
    def __init__(self, port: int = 0, cert: Path | None = None, status: int = 202) -> None:
        self.port = port
        self.cert = cert
        self.status = status
        self.received: list[tuple[float, dict[str, Any], dict[str, str]]] = []
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.cert else "http"
        return f"{scheme}://127.0.0.1:{self.port}/1/notifications"

    def start(self) -> Receiver:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real receiver would
            disable_nagle_algorithm = True  # headers and body go out as separate writes

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
                with outer.lock:
                    outer.received.append((time.time(), body, dict(self.headers)))
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        if self.cert is not None:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(str(self.cert))
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self.server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def notes(self) -> list[dict[str, Any]]:
        with self.lock:
            return [b["notification"] for _t, b, _h in self.received]

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            notes = self.notes()
            if len(notes) >= count:
                return notes
            time.sleep(0.02)
        return self.notes()
