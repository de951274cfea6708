"""mond's local config file (`herder mond --config FILE`): keys, CLI overrides, refusals, and the
diagnose command it names running end to end."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from herder.core import model
from herder.core.errors import HerderError
from herder.mond import localconf
from herder.mond.collector import CollectContext, MondSettings, RepairSettings
from herder.mond.collectors import diagnose
from herder.mond.context import make_context
from tests.mond.agent_fixture import running_mond

KEY = b"0123456789abcdef0123456789abcdef01234567\n"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="white-list checks need root")
DIAGNOSIS = {"status": "live-repair", "command": "fix-disk", "details": {"disk": "sdb"}}

FULL = """
node = "node7.example.com"
bind = "127.0.0.1"
port = 1999
diagnose_command = "check-node"
diagnose_dir = "/srv/diag"
diagnose_interval = 42
hmac_key = "/var/lib/ganeti/hmac.key"
confd = ["192.0.2.1", "192.0.2.2:1815", "[2001:db8::1]:1814"]
confd_key = "/etc/confd.key"
confd_cache_seconds = 2.5
libvirt_uri = "test:///default"
run_dir = "/srv/run"

[repair]
enabled = true
commands_dir = "/srv/repair"
timeout = 120
max_skew = 30.5
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_every_key(tmp_path: Path) -> None:
    config = localconf.load(write(tmp_path / "mond.toml", FULL))
    assert config == localconf.LocalConfig(
        node="node7.example.com", bind="127.0.0.1", port=1999, diagnose_command="check-node",
        diagnose_dir="/srv/diag", diagnose_interval=42.0, hmac_key="/var/lib/ganeti/hmac.key",
        confd=["192.0.2.1", "192.0.2.2:1815", "[2001:db8::1]:1814"], confd_key="/etc/confd.key",
        confd_cache_seconds=2.5, libvirt_uri="test:///default", run_dir="/srv/run",
        repair=localconf.RepairConfig(enabled=True, commands_dir="/srv/repair", timeout=120.0,
                                      max_skew=30.5))
    base = MondSettings(plugin_dir=Path("/srv/plugins"), collector_timeout=7.0)
    got = localconf.resolve(config, base, {}, default_port=1815)
    assert (got.node, got.bind, got.port) == ("node7.example.com", "127.0.0.1", 1999)
    s = got.settings
    assert s.diagnose_command == "check-node" and s.diagnose_dir == Path("/srv/diag")
    assert s.default_intervals == {"diagnose": 42.0}
    assert s.hmac_key_file == Path("/var/lib/ganeti/hmac.key")
    assert s.confd_peers == ["192.0.2.1", "192.0.2.2:1815", "[2001:db8::1]:1814"]
    assert s.confd_key_file == Path("/etc/confd.key") and s.confd_cache_seconds == 2.5
    assert s.libvirt_uri == "test:///default" and s.run_dir == Path("/srv/run")
    assert s.repair == RepairSettings(enabled=True, commands_dir=Path("/srv/repair"),
                                      timeout=120.0, max_skew=30.5)
    # what the file does not set stays as given
    assert s.plugin_dir == Path("/srv/plugins") and s.collector_timeout == 7.0


def test_the_default_file_is_read_when_it_exists_and_a_given_one_wins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the systemd unit runs `herder mond` without flags: /etc/herder/mond.toml must count
    default = tmp_path / "mond.toml"
    monkeypatch.setattr(localconf, "DEFAULT_PATH", default)
    assert localconf.chosen(None) is None  # no file: the flags' defaults alone
    default.write_text('node = "node9.example.com"\n')
    assert localconf.chosen(None) == default
    assert localconf.load(localconf.chosen(None)).node == "node9.example.com"
    given = tmp_path / "other.toml"
    assert localconf.chosen(given) == given


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    got = localconf.resolve(localconf.load(write(tmp_path / "mond.toml", "")), MondSettings(), {},
                            default_port=1815)
    assert (got.node, got.bind, got.port) == (None, "0.0.0.0", 1815)
    assert got.settings == MondSettings()
    assert got.settings.repair.enabled is False
    assert got.settings.repair.commands_dir == Path("/etc/ganeti/node-repair-commands")
    assert (got.settings.repair.timeout, got.settings.repair.max_skew) == (300.0, 300.0)


def test_flags_override_the_file(tmp_path: Path) -> None:
    config = localconf.load(write(tmp_path / "mond.toml", FULL))
    flags = {"node": "cli.example.com", "bind": "::1", "port": 0,
             "diagnose_dir": Path("/cli/diag"), "run_dir": Path("/cli/run"),
             "libvirt_uri": "qemu:///system", "confd": ["198.51.100.1"],
             "confd_key": Path("/cli/confd.key"), "hmac_key": Path("/cli/hmac.key")}
    got = localconf.resolve(config, MondSettings(), flags, default_port=1815)
    assert (got.node, got.bind, got.port) == ("cli.example.com", "::1", 0)
    s = got.settings
    assert (s.diagnose_dir, s.run_dir, s.libvirt_uri, s.confd_peers, s.confd_key_file,
            s.hmac_key_file) == (Path("/cli/diag"), Path("/cli/run"), "qemu:///system",
                                 ["198.51.100.1"], Path("/cli/confd.key"), Path("/cli/hmac.key"))
    # keys no flag gives stay the file's
    assert s.diagnose_command == "check-node" and s.repair.enabled
    # only the flags given override: one flag leaves the other keys to the file
    got = localconf.resolve(config, MondSettings(), {"port": 2000}, default_port=1815)
    assert (got.node, got.bind, got.port) == ("node7.example.com", "127.0.0.1", 2000)


@pytest.mark.parametrize(("text", "message"), [
    ("nodes = 'x'", "unknown key 'nodes' (known: node, bind, port,"),
    ("[repair]\nenable = true", "unknown key 'enable' in [repair] (known: enabled,"),
    ("[extra]\na = 1", "unknown key 'extra'"),
    ("port = '1815'", "port: expected `int`, got `str`"),
    ("port = 1815.5", "port: expected `int`, got `float`"),
    ("port = 70000", "port: expected `int` <= 65535"),
    ("diagnose_interval = 0", "diagnose_interval: expected `float` > 0.0"),
    ("diagnose_interval = 'often'", "diagnose_interval: expected `float`, got `str`"),
    ("confd = '192.0.2.1'", "confd: expected `array (list)`, got `str`"),
    ("confd = ['192.0.2.1', 7]", "confd[1]: expected `str`, got `int`"),
    ("confd = ['host:99999']", "confd: 'host:99999' is not HOST[:PORT]"),
    ("repair = true", "repair: expected `table`, got `bool`"),
    ("[repair]\nenabled = 'yes'", "repair.enabled: expected `bool`, got `str`"),
    ("[repair]\ntimeout = -1", "repair.timeout: expected `float` > 0.0"),
    ("diagnose_command = 'bin/check'", "diagnose_command: 'bin/check' must be a file name"),
    ("node = ''", "node: expected `str` of length >= 1"),
    ("port = ", "not valid TOML"),
])
def test_refused(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "mond.toml", text)
    with pytest.raises(HerderError) as err:
        localconf.load(path)
    assert str(err.value).startswith(f"mond config {path}: ")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_diagnose_interval_is_the_default(tmp_path: Path, config: model.ConfigData) -> None:
    settings = localconf.resolve(localconf.parse("diagnose_interval = 42", tmp_path),
                                 MondSettings(), {},
                                 default_port=1815).settings
    ctx = CollectContext(settings=settings)
    assert ctx.collector_settings("diagnose", 60.0).interval == 42.0
    assert ctx.collector_settings("lv", 5.0).interval == 5.0  # only diagnose
    # the cluster config's data_collectors entry still wins
    config.cluster.data_collectors["diagnose"] = model.CollectorSettings(interval=10.0)
    ctx = CollectContext(settings=settings, config_loader=lambda: config)
    assert ctx.collector_settings("diagnose", 60.0).interval == 10.0


def test_hmac_key_file_is_the_signing_key(tmp_path: Path) -> None:
    (tmp_path / "ganeti").mkdir()
    key_file = write(tmp_path / "ganeti" / "hmac.key", KEY.decode())
    settings = localconf.resolve(localconf.parse(f"hmac_key = '{key_file}'", tmp_path),
                                 MondSettings(), {},
                                 default_port=1815).settings
    ctx = make_context(tmp_path / "no-cluster" / "config.json", settings=settings)
    assert ctx.hmac_key() == KEY
    assert ctx._confd_key() == KEY  # confd's key defaults to it
    # without it: the key beside the cluster config, as before
    assert make_context(tmp_path / "config.json").hmac_key() is None
    write(tmp_path / "hmac.key", "other\n")
    assert make_context(tmp_path / "config.json").hmac_key() == b"other\n"


def diagnose_script(directory: Path) -> None:
    directory.mkdir()
    path = directory / "check-node"
    path.write_text(f"#!/bin/sh\necho '{json.dumps(DIAGNOSIS)}'\n")
    path.chmod(0o755)


@needs_root
def test_diagnose_command_from_the_file_runs(tmp_path: Path, config: model.ConfigData) -> None:
    diag = tmp_path / "diag"
    diagnose_script(diag)
    key_file = write(tmp_path / "hmac.key", KEY.decode())
    local = localconf.parse(f"diagnose_command = 'check-node'\ndiagnose_dir = '{diag}'\n"
                            f"hmac_key = '{key_file}'\nrun_dir = '{tmp_path / 'run'}'", tmp_path)
    settings = localconf.resolve(local, MondSettings(plugin_dir=tmp_path / "plugins"), {},
                                 default_port=1815).settings
    ctx = make_context(tmp_path / "no-cluster" / "config.json", node_name="n1",
                       settings=settings)
    with running_mond(ctx, {"diagnose": diagnose.DiagnoseCollector}) as m:
        m.wait_for(lambda: "diagnose" in m.agent.units and m.agent.units["diagnose"].runs > 0)
        code, rep, _ = m.get("/1/report/node/diagnose")
    assert code == 200 and rep["data"] == DIAGNOSIS
    assert diagnose.verify_signature(KEY, rep)
    # a node with the cluster config: the config's diagnose command wins
    config.maintenance.diagnose_command = ""
    ctx = CollectContext(settings=settings, config_loader=lambda: config)
    assert diagnose.DiagnoseCollector(ctx).command_name() == ""


# --- the real command line ------------------------------------------------------------------


def herder_mond(*args: str, tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "HERDER_CONFIG": str(tmp_path / "no-cluster" / "config.json")}
    return subprocess.Popen([sys.executable, "-m", "herder.cli.main", "mond", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _listening_line(proc: subprocess.Popen[str]) -> str:
    """The started mond's "listening on" line from its stderr (within 30 s)."""
    assert proc.stderr is not None
    line = ""
    deadline = time.monotonic() + 30
    while "listening on" not in line:
        assert time.monotonic() < deadline, "mond did not start"
        ready, _, _ = select.select([proc.stderr], [], [], 1)
        if ready:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "mond exited"
    return line


@pytest.mark.parametrize(("text", "message"), [
    ("colour = 'blue'\n", "unknown key 'colour'"),
    ("port = 'high'\n", "port: expected `int`, got `str`"),
])
def test_cli_refuses_a_bad_file_before_starting(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "mond.toml", text + f"run_dir = '{tmp_path / 'run'}'\n")
    proc = herder_mond("--config", str(path), "--port", "0", tmp_path=tmp_path)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert err.strip().count("\n") == 0 and message in err and str(path) in err
    assert "listening" not in err and not (tmp_path / "run").exists()  # nothing started


def test_cli_missing_file(tmp_path: Path) -> None:
    proc = herder_mond("--config", str(tmp_path / "absent.toml"), tmp_path=tmp_path)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "cannot read mond config" in err


@needs_root
def test_cli_end_to_end(tmp_path: Path) -> None:
    """`herder mond --config FILE`: the file's settings, flags over them, and the diagnose
    command it names served at /1/report/node/diagnose."""
    diag = tmp_path / "diag"
    diagnose_script(diag)
    key_file = write(tmp_path / "hmac.key", KEY.decode())
    (tmp_path / "plugins").mkdir()
    path = write(tmp_path / "mond.toml", f"""
node = "file-node.example.com"
bind = "127.0.0.1"
port = 1
diagnose_command = "check-node"
diagnose_dir = "{diag}"
diagnose_interval = 0.5
hmac_key = "{key_file}"
run_dir = "{tmp_path / 'run'}"
libvirt_uri = "test:///default"
[repair]
enabled = true
commands_dir = "{tmp_path / 'repair'}"
""")
    proc = herder_mond("--config", str(path), "--port", "0", "--node", "cli-node.example.com",
                       "--plugin-dir", str(tmp_path / "plugins"), tmp_path=tmp_path)
    try:
        line = _listening_line(proc)
        assert "node cli-node.example.com" in line  # --node over the file
        assert "http://127.0.0.1:" in line  # bind from the file
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        assert port not in (0, 1)  # --port 0 over the file's port
        assert f"local config {path}" in line and "repair enabled" in line
        assert json.loads((tmp_path / "run" / "mond.pid").read_text()) == proc.pid
        rep: dict = {}
        deadline = time.monotonic() + 30
        while rep.get("data") != DIAGNOSIS:
            assert time.monotonic() < deadline, f"diagnose report never came: {rep}"
            time.sleep(0.1)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/1/report/node/diagnose",
                                        timeout=5) as resp:
                rep = json.loads(resp.read())
        assert diagnose.verify_signature(KEY, rep)  # signed with the file's hmac_key
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_cli_on_the_etcd_backend_reads_the_local_directory(tmp_path: Path) -> None:
    """A host's /etc/herder/environment gives every unit the etcd location (docs/install.md):
    mond reads the node's own files (config copy, ssconf, HMAC key) in /var/lib/herder, as
    noded does, not beside the location (`etcds:/HOST:PORT/`), and never etcd itself."""
    path = write(tmp_path / "mond.toml", f"run_dir = '{tmp_path / 'run'}'\n")
    env = {**os.environ, "HERDER_CONFIG": "etcds://192.0.2.1:2379/prod"}
    proc = subprocess.Popen([sys.executable, "-m", "herder.cli.main", "mond", "--config",
                             str(path), "--bind", "127.0.0.1", "--port", "0", "--node",
                             "etcd-node.example.com", "--plugin-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = _listening_line(proc)
        assert "(config /var/lib/herder/config.json" in line, line
        assert "etcds:" not in line
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0
