"""node-os and the daemon collectors on this real machine; stand-alone equals the daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from herder.core import model
from herder.core.store import FileStore
from herder.mond.collector import CollectContext, MondSettings
from herder.mond.collectors import daemons
from herder.mond.collectors.node_os import NodeOsCollector, drbd_version
from herder.mond.context import make_context
from tests.mond.agent_fixture import running_mond


def test_node_os_reports_this_machine() -> None:
    data = NodeOsCollector(CollectContext()).collect()
    assert data["cpu_number"] == psutil.cpu_count()
    assert len(data["cpus"]) == data["cpu_number"]
    assert all(0.0 <= x <= 1.0 for x in data["cpus"])
    mem = data["memory"]
    assert mem["unit"] == "KiB"
    assert abs(mem["total"] - psutil.virtual_memory().total // 1024) < 1024
    assert 0 < mem["available"] <= mem["total"]
    root = next(fs for fs in data["filesystems"] if fs["mountpoint"] == "/") \
        if any(fs["mountpoint"] == "/" for fs in data["filesystems"]) else None
    if root is not None:
        assert root["total"] >= root["available"]
    lo = next(n for n in data["network_interfaces"] if n["name"] == "lo")
    assert "127.0.0.1" in lo["addresses"] and lo["bytes_recv"] >= 0
    versions = data["versions"]
    assert versions["linux"] == os.uname().release
    assert versions["herder"]
    assert versions["libvirt"] and versions["libvirt"].count(".") == 2


def test_drbd_version_from_proc_drbd(shared: Path) -> None:
    text = (shared / "conformance" / "ganeti" / "proc_drbd84.txt").read_text()
    assert drbd_version(text) == text.split()[1]
    assert drbd_version("nothing here") is None


def test_expected_daemons_follow_roles(config: model.ConfigData) -> None:
    master = config.nodes[config.cluster.master_node]
    assert daemons.expected_daemons(config, master) == {
        "mond", "noded", "instmon", "confd", "masterd", "maintd"}
    plain = config.find_node("node3")
    assert daemons.expected_daemons(config, plain) == {"mond", "noded", "instmon"}
    candidate = config.find_node("node2")
    assert "confd" in daemons.expected_daemons(config, candidate)
    assert daemons.expected_daemons(None, None) == {"mond"}


def test_command_line_recognition() -> None:
    assert daemons.is_daemon_process(
        ["/venv/bin/python", "/venv/bin/herder", "mond", "--port", "1"], "mond")
    assert daemons.is_daemon_process(["python", "-m", "herder.cli.main", "noded"], "noded")
    assert not daemons.is_daemon_process(["herder", "mond", "report", "all"], "mond")
    assert not daemons.is_daemon_process(["herder", "confd"], "mond")
    # Only the daemon of the same run directory (simulated nodes share a machine).
    assert daemons.is_daemon_process(["herder", "mond", "--run-dir", "/tmp/n1/run"], "mond",
                                     "/tmp/n1/run")
    assert not daemons.is_daemon_process(["herder", "mond", "--run-dir", "/tmp/n2/run"], "mond",
                                         "/tmp/n1/run")
    assert daemons.is_daemon_process(["herder", "mond"], "mond", "/run/herder")
    assert not daemons.is_daemon_process(["herder", "mond"], "mond", "/tmp/n1/run")


def daemon_ctx(tmp_path: Path, config: model.ConfigData | None, node: str) -> CollectContext:
    return CollectContext(node_name=node, settings=MondSettings(run_dir=tmp_path),
                          config_loader=lambda: config)


def test_daemon_running_is_measured(tmp_path: Path, config: model.ConfigData) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / "noded.pid").write_text(f"{proc.pid}\n")
        collector = daemons.COLLECTORS[daemons.DAEMONS.index("noded")](
            daemon_ctx(tmp_path, config, "node3.example.com"))
        data = collector.collect()
        assert data["running"] and data["pid"] == proc.pid and data["expected"]
        assert data["status"] == {"code": 0, "message": ""}
        assert data["memory_unit"] == "KiB" and data["memory"] > 0
        assert data["uptime"] >= 0 and data["cpu_percent"] is not None
        proc.kill()
        proc.wait()
        data = collector.collect()
        assert not data["running"]
        assert data["status"] == {"code": 4, "message": "noded is not running"}
    finally:
        proc.kill()


def test_daemon_not_expected_and_not_running_is_fine(tmp_path: Path,
                                                     config: model.ConfigData) -> None:
    collector = daemons.COLLECTORS[daemons.DAEMONS.index("masterd")](
        daemon_ctx(tmp_path, config, "node3.example.com"))
    data = collector.collect()
    assert data["expected"] is False and data["running"] is False
    assert data["status"]["code"] == 0


def test_mond_daemon_collector_sees_the_running_agent(tmp_path: Path) -> None:
    settings = MondSettings(run_dir=tmp_path, plugin_dir=tmp_path / "none")
    ctx = CollectContext(node_name="n", settings=settings)
    mond_cls = daemons.COLLECTORS[daemons.DAEMONS.index("mond")]
    with running_mond(ctx, {"mond": mond_cls}) as mond:
        mond.wait_for(lambda: "mond" in mond.agent.units and mond.agent.units["mond"].runs > 0)
        rep = mond.get("/1/report/daemon/mond?verbose=1")[1]
        assert rep["data"]["running"] and rep["data"]["pid"] == os.getpid()


def _cli_collect(*args: str, env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-m", "herder.cli.main", "collect", *args],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_standalone_equals_daemon_report(tmp_path: Path, config: model.ConfigData) -> None:
    """`herder collect` prints what the daemon serves for the same input (timestamps aside)."""
    path = tmp_path / "cluster" / "config.json"
    config.maintenance.diagnose_command = ""
    FileStore(path).create(config)
    (path.parent / "hmac.key").write_bytes(b"k" * 40 + b"\n")
    env = {"HERDER_CONFIG": str(path)}
    # a run directory of its own: a masterd of another test on this machine (default run
    # directory) would change between the two reports
    run_dir = tmp_path / "run"
    for name, args in (("diagnose", ()), ("masterd", ("--verbose",))):
        standalone = _cli_collect(name, "--node", "node3.example.com", "--run-dir",
                                  str(run_dir), *args, env=env)
        ctx = make_context(path, node_name="node3.example.com",
                           settings=MondSettings(run_dir=run_dir))
        from herder.mond import registry

        collectors = {name: registry.get(name)}
        with running_mond(ctx, collectors) as mond:
            mond.wait_for(lambda n=name: n in mond.agent.units
                          and mond.agent.units[n].runs > 0)
            category = registry.get(name).path_category()
            served = mond.get(f"/1/report/{category}/{name}?verbose=1")[1]
        for rep in (standalone, served):
            rep.pop("timestamp")
            if rep.get("signature"):
                rep["signature"] = "signed"
        assert standalone == served


def test_collect_cli_errors_are_clear() -> None:
    done = subprocess.run([sys.executable, "-m", "herder.cli.main", "collect", "nosuch"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no collector named 'nosuch'" in done.stderr
    done = subprocess.run([sys.executable, "-m", "herder.cli.main", "collect", "node-os",
                           "--input", "x=/tmp/y"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown input 'x'" in done.stderr
    listed = subprocess.run([sys.executable, "-m", "herder.cli.main", "collect", "--list"],
                            capture_output=True, text=True, timeout=60)
    assert "node-os" in listed.stdout and "diagnose" in listed.stdout


@pytest.mark.slow
def test_agent_process_end_to_end(tmp_path: Path) -> None:
    """The real `herder mond` process: starts, serves, stops on SIGTERM."""
    env = {**os.environ, "HERDER_CONFIG": str(tmp_path / "absent.json")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "herder.cli.main", "mond", "--bind", "127.0.0.1", "--port", "0",
         "--run-dir", str(tmp_path), "--plugin-dir", str(tmp_path / "plugins")],
        stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stderr.readline()
        assert "listening on http://127.0.0.1:" in line, line
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        import urllib.request

        deadline = time.monotonic() + 15
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/1/list/collectors") as r:
                names = [c[0] for c in json.loads(r.read())]
            if "node-os" in names or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert {"node-os", "diagnose", "mond"} <= set(names)
        proc.terminate()
        assert proc.wait(10) == 0
    finally:
        proc.kill()
