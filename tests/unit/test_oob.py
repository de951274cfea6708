"""OP_OOB_COMMAND (Ganeti's LUOobCommand rules) with real out-of-band programs: scripts that
answer what a BMC program answers, fail, hang or print garbage (docs/ha.md, compat N3)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from herder.core.errors import OpPrereqError
from herder.core.store import FileStore
from herder.masterd import oob
from herder.masterd.livefields import RS_NODATA, RS_NORMAL, RS_UNAVAIL
from herder.masterd.offline import run_offline
from tests.conftest import build_config, stored_files

PROGRAM = """#!/bin/sh
# a BMC stand-in for the test: the power state of each node in a file beside the script
state="$(dirname "$0")/power-$2"
echo "$1 $2" >> "$(dirname "$0")/calls"
case "$1" in
  power-on) echo 1 > "$state" ;;
  power-off) echo 0 > "$state" ;;
  power-cycle) ;;
  power-status) if [ "$(cat "$state" 2>/dev/null || echo 1)" = 1 ]; then
      echo '{"powered": true}'; else echo '{"powered": false}'; fi ;;
  health) echo '[["PSU", "OK"], ["fan1", "WARNING"]]' ;;
esac
"""


def program(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(body)
    path.chmod(0o755)
    return path


@pytest.fixture
def cluster(tmp_path: Path) -> tuple[FileStore, Path]:
    """Three nodes; node2 and node3 have the BMC program, node1 (the master) too."""
    bmc = program(tmp_path, "bmc", PROGRAM)
    store = FileStore(tmp_path / "config.json")
    config = build_config(3)
    config.cluster.ndparams = {"oob_program": str(bmc)}
    store.create(config)
    return store, bmc


def oob_op(command: str, *names: str, **extra: object) -> dict[str, object]:
    return {"OP_ID": "OP_OOB_COMMAND", "command": command, "node_names": list(names), **extra}


def test_power_off_needs_an_offline_node_and_never_the_master(cluster) -> None:
    store, bmc = cluster
    before = stored_files(store.path)
    with pytest.raises(OpPrereqError, match="Cannot power off node node2.example.com because "
                                            "it is not marked offline"):
        run_offline(store, [oob_op("power-off", "node2")])
    for command in ("power-off", "power-cycle"):
        with pytest.raises(OpPrereqError, match=f"Operating on the master node "
                                                f"node1.example.com is not allowed for "
                                                f"{command}; run '{bmc} {command} "
                                                "node1.example.com'"):
            run_offline(store, [oob_op(command, "node1", ignore_status=True)])
    assert stored_files(store.path) == before  # nothing written, nothing run
    assert not (bmc.parent / "calls").exists()


def test_power_off_of_an_offline_node_records_it_and_status_confirms(cluster) -> None:
    store, bmc = cluster
    results = run_offline(store, [
        {"OP_ID": "OP_NODE_SET_PARAMS", "node_name": "node3", "offline": True,
         "auto_promote": True},
        oob_op("power-off", "node3"), oob_op("power-status", "node3", "node2")])
    assert results[1] == [[[RS_NORMAL, "node3.example.com"], [RS_NORMAL, None]]]
    assert results[2] == [[[RS_NORMAL, "node2.example.com"], [RS_NORMAL, {"powered": True}]],
                          [[RS_NORMAL, "node3.example.com"], [RS_NORMAL, {"powered": False}]]]
    assert store.load().find_node("node3").powered is False
    assert (bmc.parent / "calls").read_text().splitlines() == [
        "power-off node3.example.com", "power-status node2.example.com",
        "power-status node3.example.com"]
    # power-on: recorded again; without names, power-status asks every node
    run_offline(store, [oob_op("power-on", "node3", power_delay=0)])
    assert store.load().find_node("node3").powered is True
    everyone = run_offline(store, [oob_op("power-status")])[0]
    assert [entry[0][1] for entry in everyone] == [f"node{i}.example.com" for i in (1, 2, 3)]


def test_health_warns_and_a_node_without_a_program_is_unavailable(cluster) -> None:
    store, _ = cluster
    with store.update() as config:
        config.find_node("node2").ndparams = {"oob_program": ""}
    said: list[str] = []
    (result,) = run_offline(store, [oob_op("health", "node2", "node3")], feedback=said.append)
    assert result == [[[RS_NORMAL, "node2.example.com"], [RS_UNAVAIL, None]],
                      [[RS_NORMAL, "node3.example.com"],
                       [RS_NORMAL, [["PSU", "OK"], ["fan1", "WARNING"]]]]]
    assert said == ["WARNING: Item 'fan1' on node 'node3.example.com' has status 'WARNING'"]


@pytest.mark.parametrize(("name", "body", "command", "reason"), [
    ("failing", "#!/bin/sh\necho 'BMC 10.0.0.3: authentication failed' >&2\nexit 3\n",
     "power-status", "failed with reason 'exited with 3'; output: BMC 10.0.0.3: "
                     "authentication failed"),
    ("garbage", "#!/bin/sh\necho 'Chassis Power is on'\n", "power-status",
     "the out-of-band program's output"),
    ("unpowered", "#!/bin/sh\necho '{\"state\": \"off\"}'\n", "power-status",
     "power-status is expected to say 'powered': true or false"),
    ("talkative", "#!/bin/sh\necho '\"done\"'\n", "power-cycle",
     "power-cycle is expected to not return payload but got 'done'"),
    ("badhealth", "#!/bin/sh\necho '[[\"PSU\", \"MELTING\"]]'\n", "health",
     "health item 'PSU' has invalid status 'MELTING'"),
])
def test_a_failing_or_garbled_program_is_one_line_and_no_data(
        cluster, tmp_path: Path, name: str, body: str, command: str, reason: str) -> None:
    store, _ = cluster
    bad = program(tmp_path, name, body)
    with store.update() as config:
        config.find_node("node3").ndparams = {"oob_program": str(bad)}
    said: list[str] = []
    (result,) = run_offline(store, [oob_op(command, "node3", ignore_status=True)],
                            feedback=said.append)
    assert result == [[[RS_NORMAL, "node3.example.com"], [RS_NODATA, None]]]
    assert len(said) == 1 and "\n" not in said[0]
    assert said[0].startswith(f"WARNING: Out-of-band command {command} failed on node "
                              "'node3.example.com': ")
    assert reason in said[0]
    assert store.load().find_node("node3").powered is True  # nothing recorded


def test_a_hanging_program_is_killed_at_its_timeout(tmp_path: Path) -> None:
    hang = program(tmp_path, "hang", "#!/bin/sh\nsleep 30 &\nsleep 30\n")
    began = time.monotonic()
    with pytest.raises(oob.OobError, match=r"failed with reason 'timeout after 1 s'"):
        oob.run(str(hang), "power-status", "node3.example.com", timeout=1)
    assert time.monotonic() - began < 10  # its children went with it (process group)
    with pytest.raises(oob.OobError, match="cannot run"):
        oob.run(str(tmp_path / "missing"), "power-on", "node3.example.com", timeout=5)


def test_the_cli_prints_ganetis_table_and_fails_on_an_error(cluster, tmp_path: Path) -> None:
    store, _ = cluster
    env = {"HERDER_CONFIG": str(store.path), "PATH": "/usr/bin:/bin"}

    def herder(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "herder.cli.main", "--offline", *args],
                              capture_output=True, text=True, env=env, timeout=60)

    done = herder("node", "power", "off", "node3", "--force")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Node", "Status", "node3.example.com", "invoked"]
    node3 = store.load().find_node("node3")
    assert node3.offline and not node3.powered  # Ganeti's gnt-node power off: offline first
    done = herder("node", "power", "status", "node2", "node3", "--json")
    assert json.loads(done.stdout) == [
        [[0, "node2.example.com"], [0, {"powered": True}]],
        [[0, "node3.example.com"], [0, {"powered": False}]]]
    with store.update() as config:
        config.find_node("node2").ndparams = {"oob_program": ""}
    done = herder("node", "health", "node2")
    assert done.returncode == 1
    assert done.stdout.split()[2:] == ["node2.example.com", "(unavailable:", "no",
                                       "oob_program)"]
    done = herder("node", "power", "off", "node1", "--force")  # the offline mark refuses
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    done = herder("node", "power", "cycle", "node1", "--force")
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "Operating on the master node node1.example.com is not allowed" in done.stderr


def test_the_ipmi_program_speaks_ganetis_oob_protocol_from_ipmitools_answers(
        tmp_path: Path) -> None:
    from herder.cli import oob_ipmi

    assert oob_ipmi.answer("power-status", "Chassis Power is on\n") == '{"powered": true}'
    assert oob_ipmi.answer("power-status", "Chassis Power is off\n") == '{"powered": false}'
    assert oob_ipmi.answer("power-off", "Chassis Power Control: Down/Off\n") == ""
    health = json.loads(oob_ipmi.answer("health", "System Power         : on\n"
                                                  "Main Power Fault     : false\n"
                                                  "Cooling/Fan Fault    : true\n"))
    assert health == [["power-supply", "OK"], ["cooling", "CRITICAL"]]
    assert oob.check_payload("health", health) == health  # what masterd accepts
    with pytest.raises(Exception, match="unexpected answer of ipmitool"):
        oob_ipmi.answer("power-status", "Error: Unable to establish IPMI v2 / RMCP+ session")
    settings = tmp_path / "oob-ipmi.toml"
    settings.write_text('[defaults]\npassword_file = "/etc/herder/bmc-password"\n'
                        '[nodes."node1.example.com"]\nhost = "10.0.0.1"\nport = 6231\n')
    env = {"HERDER_OOB_IPMI": str(settings), "PATH": "/usr/bin:/bin"}

    def program(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "herder.cli.oob_ipmi", *args], env=env,
                              capture_output=True, text=True, timeout=60)

    done = program("power-status", "node2.example.com")
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert 'no [nodes."node2.example.com"] table' in done.stderr
    done = program("reboot", "node1.example.com")
    assert done.returncode == 1 and "unknown command 'reboot'" in done.stderr
    settings.write_text("[defaults]\nuser = 3\n")
    done = program("power-status", "node1.example.com")
    assert done.returncode == 1 and "defaults.user" in done.stderr
    bmc = oob_ipmi.bmc_of(oob_ipmi.Settings(
        defaults=oob_ipmi.Bmc(user="admin", password_file="/p"),
        nodes={"node1": oob_ipmi.Bmc(host="10.0.0.1", port=6231)}), "node1.example.com",
        settings)
    assert oob_ipmi.ipmitool_argv(bmc, "power-off")[:12] == [
        "ipmitool", "-I", "lanplus", "-H", "10.0.0.1", "-p", "6231", "-U", "admin", "-f", "/p",
        "-C"]
