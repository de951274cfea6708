"""Consoles: Ganeti's console object (compared with what Ganeti 3.0's own hypervisor code
builds, when its tree is here), the `--show-cmd` text, the cluster's port pool, and the node's
pure helpers (the serial log's tail and rotation, where a domain's consoles are)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from herder.core import console, model, params
from herder.core.errors import OpPrereqError
from herder.masterd import portpool
from herder.noded import console as node_console
from tests.conftest import build_config

GROOT = Path(os.environ.get("GROOT", "/tmp/groot"))
GANETI_TREE = GROOT / "usr/share/ganeti/3.0"
DEBIAN_PYTHON = Path("/usr/bin/python3")
RUNNER = Path(__file__).with_name("ganeti_console.py")
NAME, NODE = "web1.example.com", "node1.example.com"
NDPARAMS = {"ssh_port": 2222, "libvirt_uri": "qemu:///system"}
# hvparams (over kvm's defaults) -> the console they give
CASES: list[dict[str, Any]] = [
    {"hvparams": {"serial_console": True}, "network_port": 11005},
    {"hvparams": {"serial_console": True, "vnc_bind_address": "0.0.0.0"}, "network_port": 11005},
    {"hvparams": {"serial_console": False, "vnc_bind_address": "0.0.0.0"},
     "network_port": 11005},
    {"hvparams": {"serial_console": False, "vnc_bind_address": "192.0.2.10"},
     "network_port": 5901},
    {"hvparams": {"serial_console": False, "vnc_bind_address": "192.0.2.10"},
     "network_port": 5900},  # not above 5900: no display, so no VNC console
    {"hvparams": {"serial_console": False, "spice_bind": "192.0.2.10"}, "network_port": 11007},
    {"hvparams": {"serial_console": False}, "network_port": 11005},
]


def _herders(cases: list[dict[str, Any]], hypervisor: str = "kvm") -> list[dict[str, Any]]:
    defaults = params.hv_family(hypervisor).defaults()
    return [console.instance_console(NAME, hypervisor, case["network_port"],
                                     {**defaults, **case["hvparams"]}, NODE, NDPARAMS)
            for case in cases]


def _ganetis(cases: list[dict[str, Any]], hypervisor: str = "kvm") -> list[dict[str, Any]]:
    if not (GANETI_TREE / "ganeti/hypervisor/hv_kvm/__init__.py").exists():
        pytest.skip("Ganeti 3.0's tree is absent (bash ../shared/peers/setup.sh)")
    if not DEBIAN_PYTHON.exists():
        pytest.skip("Debian's /usr/bin/python3 is absent")
    defaults = params.hv_family(hypervisor).defaults()
    request = [{"name": NAME, "network_port": case["network_port"], "hypervisor": hypervisor,
                "node": NODE, "ndparams": NDPARAMS,
                "hvparams": {**defaults, **case["hvparams"]}} for case in cases]
    with tempfile.TemporaryDirectory() as root:
        answer = subprocess.run(
            [str(DEBIAN_PYTHON), str(RUNNER)], input=json.dumps(request), text=True,
            capture_output=True, timeout=120, check=True,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(GANETI_TREE),
                 "GANETI_ROOTDIR": f"{root}/{NODE}", "GANETI_HOSTNAME": NODE})
    return list(json.loads(answer.stdout))


def test_console_objects_are_ganetis_field_for_field() -> None:
    ours, theirs = _herders(CASES), _ganetis(CASES)
    assert [c["kind"] for c in ours] == ["ssh", "ssh", "vnc", "vnc", "msg", "spice", "msg"]
    for case, mine, ganeti in zip(CASES, ours, theirs, strict=True):
        assert set(mine) == set(ganeti), case  # ToDict: only the fields that are set
        # the command differs by design (docs/compat.md V1): libvirt's console, not socat
        assert {k: v for k, v in mine.items() if k != "command"} == \
               {k: v for k, v in ganeti.items() if k != "command"}, case
        if mine["kind"] == "ssh":
            assert mine["command"] == ["/usr/bin/virsh", "-c", "qemu:///system", "console",
                                       "--force", NAME]
            assert NAME in ganeti["command"]


def test_the_fake_hypervisors_console_is_ganetis() -> None:
    cases = [{"hvparams": {}, "network_port": None}]
    assert _herders(cases, "fake") == _ganetis(cases, "fake") == [
        {"instance": NAME, "kind": "msg", "message": "Console not available for fake hypervisor"}]


def test_show_command_prints_what_gnt_instance_console_prints() -> None:
    ssh, _, vnc, _, message, spice, _ = _herders(CASES)
    assert console.show_command(vnc) == (
        f"Instance {NAME} has VNC listening on 0.0.0.0:11005 (display 5105), "
        "URL <vnc://0.0.0.0:11005/>")
    assert console.show_command(spice) == \
        f"Instance {NAME} has SPICE listening on 192.0.2.10:11007"
    assert console.show_command(message) == f"No serial shell for instance {NAME}"
    assert console.show_command(ssh) == (
        "ssh -oEscapeChar=none -oHashKnownHosts=no -oCheckHostIp=no -oConnectTimeout=10 "
        f"-oPort=2222 -oBatchMode=yes -oStrictHostKeyChecking=yes -t -t root@{NODE} "
        f"'/usr/bin/virsh -c qemu:///system console --force {NAME}'")
    with pytest.raises(ValueError, match="unknown console type"):
        console.show_command({"kind": "telnet"})


# --- the port pool --------------------------------------------------------------------------


def _with_instance(config: model.ConfigData, port: int | None, drbd_port: int | None = None
                   ) -> model.Instance:
    node, other = list(config.nodes)[:2]
    disks = []
    if drbd_port is not None:
        disks.append(model.Disk(uuid=model.new_uuid(), dev_type="drbd", size=128,
                                logical_id=model.DrbdId(nodes=[node, other], port=drbd_port,
                                                        minors=[0, 1], secret="s")))
    inst = model.Instance(uuid=model.new_uuid(), name=f"i{len(config.instances)}.example.com",
                          primary_node=node, os="none", hypervisor="kvm", disks=disks,
                          network_port=port)
    config.instances[inst.uuid] = inst
    return inst


def test_ports_are_allocated_above_the_highest_used_and_skip_taken_ones() -> None:
    config = build_config(drbd_instances=0)
    config.cluster.highest_used_port = 11000
    config.cluster.tcpudp_port_pool = []
    _with_instance(config, None, drbd_port=11002)  # e.g. an imported config
    assert portpool.allocate(config) == 11001
    assert config.cluster.highest_used_port == 11001
    assert portpool.allocate(config, taken={11003}) == 11004  # 11002: DRBD, 11003: this change
    assert config.cluster.highest_used_port == 11004


def test_the_pool_comes_first_and_a_removed_instances_port_returns_to_it() -> None:
    config = build_config(drbd_instances=0)
    config.cluster.highest_used_port = 11010
    config.cluster.tcpudp_port_pool = [12001, 12000]
    holder = _with_instance(config, 12000)  # in the pool but in use: skipped
    assert portpool.allocate(config) == 12001
    assert config.cluster.tcpudp_port_pool == [12000]
    assert config.cluster.highest_used_port == 11010  # a pool port does not move it
    assert portpool.allocate(config) == 11011  # 12000 is still taken
    del config.instances[holder.uuid]
    portpool.release(config, holder.network_port)
    portpool.release(config, None)  # an instance without a port
    assert config.cluster.tcpudp_port_pool == [12000]
    assert portpool.allocate(config) == 12000
    assert portpool.needs_port("kvm") and portpool.needs_port("xen-hvm")
    assert not portpool.needs_port("fake") and not portpool.needs_port("xen-pvm")


def test_an_exhausted_pool_is_a_clear_error_and_changes_nothing() -> None:
    config = build_config(drbd_instances=0)
    config.cluster.highest_used_port = portpool.LAST_PORT - 1
    config.cluster.tcpudp_port_pool = [13000]
    _with_instance(config, 13000)
    assert portpool.allocate(config) == portpool.LAST_PORT
    with pytest.raises(OpPrereqError, match="no free TCP/UDP port: .* past 14999") as err:
        portpool.allocate(config)
    assert err.value.ganeti_args[1] == "insufficient_resources"
    assert config.cluster.highest_used_port == portpool.LAST_PORT
    assert config.cluster.tcpudp_port_pool == [13000]


# --- the node's helpers ----------------------------------------------------------------------


def test_the_serial_logs_tail_reaches_into_the_rotated_part(tmp_path: Path) -> None:
    log = console.serial_log(tmp_path, NAME)
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(1, 301)))
    assert node_console.tail(tmp_path, NAME, 2) == "line 299\nline 300\n"
    assert node_console.rotate_serial_logs(tmp_path, max_bytes=1000) == [log.name]
    assert log.stat().st_size == 0
    assert log.with_name(log.name + ".1").read_bytes().endswith(b"line 300\n")
    with log.open("ab") as handle:  # QEMU goes on appending at the new end
        handle.write(b"line 301\n")
    assert node_console.tail(tmp_path, NAME, 3) == "line 299\nline 300\nline 301\n"
    assert node_console.rotate_serial_logs(tmp_path, max_bytes=1000) == []
    with pytest.raises(node_console.ConsoleUnavailable, match="no serial log"):
        node_console.tail(tmp_path, "other.example.com", 5)
    with pytest.raises(ValueError):
        console.serial_log(tmp_path, "../etc")


def test_where_a_running_domains_consoles_are() -> None:
    live = """<domain type='qemu'><devices>
      <serial type='pty'><source path='/dev/pts/7'/><log file='/x.log' append='on'/>
        <target port='0'/></serial>
      <console type='pty' tty='/dev/pts/7'><target type='serial' port='0'/></console>
      <graphics type='vnc' port='11005' autoport='no' listen='0.0.0.0'>
        <listen type='address' address='0.0.0.0'/></graphics>
    </devices></domain>"""
    assert node_console.serial_pty(live) == "/dev/pts/7"
    assert node_console.vnc_endpoint(live) == ("127.0.0.1", 11005)
    bound = live.replace("0.0.0.0", "192.0.2.10")
    assert node_console.vnc_endpoint(bound) == ("192.0.2.10", 11005)
    socket = """<domain><devices><graphics type='vnc'>
      <listen type='socket' socket='/run/herder/vnc/web1.vnc'/></graphics></devices></domain>"""
    assert node_console.vnc_endpoint(socket) == "/run/herder/vnc/web1.vnc"
    bare = "<domain><devices/></domain>"
    assert node_console.serial_pty(bare) is None and node_console.vnc_endpoint(bare) is None
