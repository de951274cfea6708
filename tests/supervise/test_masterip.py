"""The master IP's steps (Ganeti's master-ip-setup) and daemon-util's systemd commands, with
the commands captured; tests/sim/test_hosts.py runs them for real on namespaced hosts."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from herder.core.errors import HerderError
from herder.supervise import daemon_util, masterip
from herder.supervise.masterip import MasterNetwork


class Recorder:
    """Runs nothing: answers `ip -j address show` with the given addresses, arping with
    `arping_code`, and records every command."""

    def __init__(self, addresses: dict[str, list[tuple[str, int]]], arping_code: int = 0,
                 fail: str = "") -> None:
        self.addresses = addresses
        self.arping_code = arping_code
        self.fail = fail
        self.commands: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.commands.append(argv)
        if argv[:3] == ["ip", "-j", "address"]:
            links: dict[str, list[dict[str, object]]] = {}
            for address, places in self.addresses.items():
                for dev, prefix in places:
                    links.setdefault(dev, []).append({"local": address, "prefixlen": prefix})
            out = json.dumps([{"ifname": d, "addr_info": a} for d, a in links.items()])
            return subprocess.CompletedProcess(argv, 0, out, "")
        if argv[0].endswith("arping"):
            return subprocess.CompletedProcess(argv, self.arping_code, "", "")
        if self.fail and self.fail in argv:
            return subprocess.CompletedProcess(argv, 2, "", "RTNETLINK answers: boom")
        return subprocess.CompletedProcess(argv, 0, "", "")


NET = MasterNetwork("198.18.1.2", 24, "br0", 4)


def test_activate_adds_the_address_with_ganetis_label() -> None:
    run = Recorder({"198.18.1.11": [("br0", 24)]})
    assert "activated on br0" in masterip.activate(NET, run, arping="/usr/bin/arping")
    assert run.commands[1] == ["/usr/bin/arping", "-D", "-q", "-c", "1", "-w", "1", "-I",
                               "br0", "198.18.1.2"]
    assert run.commands[2] == ["ip", "address", "add", "198.18.1.2/24", "dev", "br0", "label",
                               "br0:0"]


def test_activate_does_nothing_when_the_address_is_here() -> None:
    run = Recorder({"198.18.1.2": [("br0", 24)]})
    assert masterip.activate(NET, run, arping="/usr/bin/arping") == masterip.ALREADY_UP
    assert len(run.commands) == 1


def test_activate_refuses_an_address_another_machine_answers_for() -> None:
    run = Recorder({}, arping_code=1)
    with pytest.raises(HerderError, match="configured on another machine"):
        masterip.activate(NET, run, arping="/usr/bin/arping")
    assert not [c for c in run.commands if c[:3] == ["ip", "address", "add"]]


def test_activate_without_arping_and_failing() -> None:
    run = Recorder({}, fail="add")
    with pytest.raises(HerderError, match="cannot activate .* RTNETLINK answers: boom"):
        masterip.activate(NET, run, arping=None)
    assert [c[0] for c in run.commands] == ["ip", "ip"]


def test_ipv6_has_no_label() -> None:
    run = Recorder({})
    masterip.activate(MasterNetwork("2001:db8::2", 64, "br0", 6), run, arping=None)
    assert run.commands[-1] == ["ip", "address", "add", "2001:db8::2/64", "dev", "br0"]


def test_deactivate() -> None:
    run = Recorder({"198.18.1.2": [("br0", 24)]})
    assert "deactivated" in masterip.deactivate(NET, run)
    assert run.commands[-1] == ["ip", "address", "del", "198.18.1.2/24", "dev", "br0"]
    assert masterip.deactivate(NET, Recorder({})) == masterip.NOT_HERE
    with pytest.raises(HerderError, match="configured on eth1, not br0/24"):
        masterip.deactivate(NET, Recorder({"198.18.1.2": [("eth1", 24)]}))


@pytest.mark.parametrize(("args", "message"), [
    (("198.18.1.300", 24, "br0", 4), "not an IP address"),
    (("2001:db8::1", 64, "br0", 4), "not an IPv4 address"),
    (("198.18.1.2", 33, "br0", 4), "out of range"),
    (("198.18.1.2", 24, "a/b", 4), "not a network device name"),
])
def test_bad_master_networks(args: tuple[str, int, str, int], message: str) -> None:
    with pytest.raises(HerderError, match=message):
        MasterNetwork(*args)


def test_from_ssconf(tmp_path: Path) -> None:
    assert masterip.from_ssconf([tmp_path]) is None
    for name, value in (("master_ip", "198.18.1.2"), ("master_netmask", "24"),
                        ("master_netdev", "br0"), ("primary_ip_family", "4")):
        (tmp_path / f"ssconf_{name}").write_text(value + "\n")
    assert masterip.from_ssconf([tmp_path / "absent", tmp_path]) == NET


def test_systemd_backend_commands() -> None:
    run = Recorder({})
    systemd = daemon_util.Systemd(run)
    daemon_util.start_master(systemd)
    daemon_util.stop_master(systemd)
    systemd.start(daemon_util.check_names(["herder-noded.service", "mond"]))
    assert run.commands == [
        ["systemctl", "start", "herder-masterd.service", "herder-maintd.service"],
        ["systemctl", "stop", "herder-maintd.service", "herder-masterd.service"],
        ["systemctl", "start", "herder-noded.service", "herder-mond.service"],
    ]


def test_without_systemd_the_supervisor_is_used(tmp_path: Path) -> None:
    if daemon_util.SYSTEMD_RUNTIME.is_dir():
        pytest.skip("this machine runs systemd")
    chosen = daemon_util.backend(tmp_path / "s.sock")
    assert isinstance(chosen, daemon_util.Supervisor) and chosen.socket == tmp_path / "s.sock"
