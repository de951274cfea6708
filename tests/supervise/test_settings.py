"""/etc/herder/node.toml: strict typed decoding, one-line errors, the daemons it yields."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from herder.core.errors import HerderError
from herder.sim import hostfiles
from herder.supervise import settings
from herder.supervise.supervisor import restart_delay

PATH = Path("/etc/herder/node.toml")


def test_a_full_file() -> None:
    parsed = settings.parse("""
[supervise]
socket = "/run/x.sock"
restart_delay = 0.5
restart_delay_max = 8
stop_timeout = 3

[daemons.noded]
enabled = true
args = ["--debug"]
environment = { LANG = "C.UTF-8" }

[daemons.site-agent]
enabled = true
command = ["/usr/local/sbin/agent", "-f"]
output = "/var/log/agent.log"
""", PATH)
    assert parsed.supervise.socket == "/run/x.sock"
    specs = {s.name: s for s in settings.daemon_specs(parsed)}
    assert list(specs) == [*settings.KNOWN_DAEMONS, "site-agent"]
    assert specs["noded"].argv == (sys.executable, "-m", "herder.cli.main", "noded", "--debug")
    assert specs["noded"].environment == (("LANG", "C.UTF-8"),)
    assert specs["noded"].output == Path("/var/log/herder/noded.log")
    assert specs["noded"].enabled and not specs["masterd"].enabled
    assert specs["libvirtd"].argv == ("/usr/sbin/libvirtd",)
    assert specs["site-agent"].argv == ("/usr/local/sbin/agent", "-f")
    assert specs["site-agent"].output == Path("/var/log/agent.log")


@pytest.mark.parametrize(("text", "message"), [
    ("nodes = 1", "unknown key 'nodes'"),
    ("[supervise]\nsockets = 'x'", "unknown key 'sockets' in [supervise] (known: socket,"),
    ("[daemons.noded]\nenable = true", "unknown key 'enable' in [daemons.noded]"),
    ("[daemons.noded]\nenabled = 'yes'", "daemons.noded.enabled: expected `bool`"),
    ("[supervise]\nrestart_delay = 0", "supervise.restart_delay: expected `float` > 0"),
    ("[supervise]\nlog_dir = 'relative'", "supervise.log_dir"),
    ("[supervise]\nrestart_delay = 9\nrestart_delay_max = 2", "is above restart_delay_max"),
    ("[daemons.agent]\nenabled = true", "not one of herder's daemons"),
    ("[daemons.Agent]\ncommand = ['x']", "'Agent' is not a daemon name"),
    ("[daemons.agent]\ncommand = []", "daemons.agent.command: expected `array (list)` of length"),
    ("daemons = 3", "daemons: expected `table`, got `int`"),
    ("[daemons]\nnoded = 3", "daemons.noded: expected `table`, got `int`"),
    ("[supervise", "not valid TOML"),
])
def test_bad_files_are_refused_in_one_line(text: str, message: str) -> None:
    with pytest.raises(HerderError) as err:
        settings.parse(text, PATH)
    assert message in str(err.value) and str(PATH) in str(err.value)
    assert "\n" not in str(err.value)


def test_a_missing_file_enables_nothing(tmp_path: Path) -> None:
    parsed = settings.load(tmp_path / "absent.toml")
    assert not any(s.enabled for s in settings.daemon_specs(parsed))
    assert settings.control_socket(tmp_path / "absent.toml") == settings.DEFAULT_SOCKET
    (tmp_path / "node.toml").write_text('[supervise]\nsocket = "/run/x/s.sock"\n')
    assert settings.control_socket(tmp_path / "node.toml") == Path("/run/x/s.sock")


def test_the_simulators_files_are_valid() -> None:
    text = hostfiles.node_toml(["noded", "agent"], args={"noded": ['--x="y"']},
                               commands={"agent": ["sh", "-c", "exit 11"]}, stop_timeout=2.5)
    specs = {s.name: s for s in settings.daemon_specs(settings.parse(text, PATH))}
    assert specs["noded"].enabled and specs["noded"].argv[-1] == '--x="y"'
    assert specs["agent"].argv == ("sh", "-c", "exit 11")
    # a daemon's environment (the simulated nodes' noded runs rbd as client.herder)
    text = hostfiles.node_toml(["noded"], environment={"noded": {"CEPH_ARGS": "--id herder"}})
    specs = {s.name: s for s in settings.daemon_specs(settings.parse(text, PATH))}
    assert ("CEPH_ARGS", "--id herder") in specs["noded"].environment


def test_restart_delay_doubles_up_to_the_maximum() -> None:
    assert [restart_delay(n, 1.0, 10.0) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
