"""Only `herder.core.serve` runs servers: no other module of src/herder creates aiohttp runners
or sites, or writes pid files (it does, through `herder.core.pidfile`). A static scan of every
module's syntax tree; tests are exempt."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
SERVE = "herder/core/serve.py"
PIDFILE = "herder/core/pidfile.py"
AIOHTTP_SERVERS = {"AppRunner", "ServerRunner", "BaseRunner", "TCPSite", "SockSite",
                   "UnixSite", "NamedPipeSite", "BaseSite", "run_app"}
WRITERS = {"write_text", "write_bytes", "write", "writelines", "atomic_write"}


def _pid_like(node: ast.AST) -> bool:
    """Whether an expression holds this process's pid or a `*.pid` file name."""
    for sub in ast.walk(node):
        if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
                and sub.func.attr == "getpid"):
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) \
                and sub.value.rstrip().endswith(".pid"):
            return True
    return False


def _opens_for_writing(call: ast.Call) -> bool:
    mode = call.args[1] if len(call.args) > 1 else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) \
        and any(c in mode.value for c in "wax+")


def violations(source: str, module: str) -> list[str]:
    """What in one module's source breaks the rule (module: its path under src/)."""
    found: list[str] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        where = f"{module}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute) and node.attr == "_server" \
                and isinstance(node.value, ast.Name) and "site" in node.value.id:
            found.append(f"{where}: aiohttp's private site._server (use runner.addresses)")
        if module == SERVE:
            continue
        names: list[str] = []
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
        elif isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, ast.ImportFrom):
            names.extend(alias.name for alias in node.names)
            if node.module == "herder.core.pidfile" or (
                    node.module == "herder.core" and any(a.name == "pidfile"
                                                         for a in node.names)):
                found.append(f"{where}: imports herder.core.pidfile (core.serve writes "
                             "pid files)")
        elif isinstance(node, ast.Import) and any(a.name == "herder.core.pidfile"
                                                  for a in node.names):
            found.append(f"{where}: imports herder.core.pidfile (core.serve writes pid files)")
        found.extend(f"{where}: aiohttp server {name} outside core.serve"
                     for name in names if name in AIOHTTP_SERVERS)
        if module == PIDFILE or not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else \
            func.id if isinstance(func, ast.Name) else ""
        arguments = [*node.args, *(k.value for k in node.keywords)]
        if called in WRITERS and any(_pid_like(a) for a in arguments):
            found.append(f"{where}: writes a pid file (use core.serve)")
        if called == "open" and _opens_for_writing(node) and node.args \
                and _pid_like(node.args[0]):
            found.append(f"{where}: opens a pid file for writing (use core.serve)")
        if isinstance(func, ast.Attribute) and called in WRITERS \
                and _pid_like(func.value):
            found.append(f"{where}: writes a pid file (use core.serve)")
    return found


def test_only_core_serve_runs_servers_and_writes_pid_files() -> None:
    modules = sorted(SRC.rglob("herder/**/*.py"))
    assert len(modules) > 50 and any(p.as_posix().endswith(SERVE) for p in modules)
    found = [v for path in modules
             for v in violations(path.read_text(), path.relative_to(SRC).as_posix())]
    assert found == []


@pytest.mark.parametrize("source", [
    # what the daemons did before core.serve
    "from aiohttp import web\nrunner = web.AppRunner(app)\n",
    "from aiohttp.web import TCPSite\n",
    "web.run_app(app)\n",
    "site = web.UnixSite(runner, path)\n",
    "bound = site._server.sockets[0].getsockname()[1]\n",
    "atomic_write(path, f'{os.getpid()}\\n'.encode(), 0o644)\n",
    "tmp.write_text(f'{os.getpid()}\\n')\n",
    "(run_dir / 'noded.pid').write_text(str(pid))\n",
    "with open(run_dir / 'x.pid', 'w') as fh:\n    pass\n",
    "from herder.core.pidfile import pid_file\n",
    "from herder.core import pidfile\n",
])
def test_the_scan_finds_servers_and_pid_files(source: str) -> None:
    assert violations(source, "herder/masterd/daemon.py")


@pytest.mark.parametrize("source", [
    "pid = read_pid(run_dir / f'{daemon}.pid')\n",  # reading a pid file is fine
    "data = json.loads(path.read_text())\n",
    "atomic_write(state, json.dumps(state_dict).encode())\n",
    "self._server.shutdown()\n",  # a socketserver, not an aiohttp site
])
def test_the_scan_leaves_other_code_alone(source: str) -> None:
    assert violations(source, "herder/masterd/daemon.py") == []
