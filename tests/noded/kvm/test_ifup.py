"""Routed NICs configured as Ganeti's kvm-ifup does (`herder.noded.kvm.ifup`), for real: in a
network namespace of its own, on a real tap device, with `ip` and /proc/sys/net. (The same
with a tap libvirt made for a running guest, around start, migration and shutdown:
tests/system/test_real_guests_sim.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from herder.noded.kvm import domain, ifup
from herder.noded.kvm.domain import InstanceSpec, NicSpec

UUID = "5f0e4a1c-2b3d-4e5f-8a9b-0c1d2e3f4a5b"


def _spec(*nics: NicSpec) -> InstanceSpec:
    return InstanceSpec("web1.example.com", UUID, 128, 1, {}, nics=nics, tags=("a", "b"))


ROUTED = _spec(NicSpec("aa:00:00:00:00:01", "bridged", "br0"),
               NicSpec("aa:00:00:00:00:02", "routed", "100", ip="192.0.2.7", name="front",
                       uuid="nic-uuid-2"))


def test_ganeti_route_commands() -> None:
    env = ifup.hook_environment(ROUTED, 1)
    tap = domain.tap_name(UUID, 1)
    assert ifup.route_commands(env) == [
        ["ip", "link", "set", tap, "up"],
        ["ip", "rule", "add", "dev", tap, "table", "100"],
        ["ip", "route", "replace", "192.0.2.7", "table", "100", "proto", "static", "dev", tap]]
    no_table = {**env, "LINK": ""}
    assert ifup.route_commands(no_table)[1] == ["ip", "route", "replace", "192.0.2.7", "proto",
                                                "static", "dev", tap]
    with pytest.raises(ifup.IfupError, match="no IP address"):
        ifup.route_commands({**env, "IP": ""})


@pytest.fixture()
def netns() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    name = f"hifup-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace: {made.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


def _in(ns: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True,
                          timeout=60)


def _configure_in(ns: str, spec: InstanceSpec, hook: Path) -> subprocess.CompletedProcess[str]:
    """`ifup.configure` run by a process inside the namespace (its /proc/sys/net is the
    namespace's), as noded runs it inside a node."""
    code = ("import json, sys\nfrom pathlib import Path\n"
            "from herder.noded.kvm import domain, ifup\n"
            "data = json.loads(sys.argv[1])\n"
            "nics = tuple(domain.NicSpec(**nic) for nic in data['nics'])\n"
            "spec = domain.InstanceSpec(data['name'], data['uuid'], 0, 0, {}, nics=nics,"
            " tags=tuple(data['tags']))\n"
            "try:\n    print(json.dumps(ifup.configure(spec, hook=Path(data['hook']))))\n"
            "except ifup.IfupError as err:\n    print(err); sys.exit(3)\n")
    data = {"name": spec.name, "uuid": spec.uuid, "tags": list(spec.tags), "hook": str(hook),
            "nics": [nic.__dict__ for nic in spec.nics]}
    return _in(ns, sys.executable, "-c", code, json.dumps(data))


def test_routed_nic_gets_ganetis_route_rule_and_proxy_arp(netns: str, tmp_path: Path) -> None:
    tap = domain.tap_name(UUID, 1)
    assert _in(netns, "ip", "tuntap", "add", "dev", tap, "mode", "tap").returncode == 0
    # a stale rule of an earlier run of the tap goes (Ganeti's `while ip rule del dev`)
    assert _in(netns, "ip", "rule", "add", "dev", tap, "table", "77").returncode == 0
    done = _configure_in(netns, ROUTED, tmp_path / "no-hook")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == ["routes"]
    assert "UP" in _in(netns, "ip", "link", "show", tap).stdout
    route = _in(netns, "ip", "route", "show", "table", "100").stdout
    assert f"192.0.2.7 dev {tap} proto static" in route
    rules = _in(netns, "ip", "rule", "show").stdout
    assert f"iif {tap} lookup 100" in rules and "lookup 77" not in rules
    for switch in ("ipv4/conf/{}/proxy_arp", "ipv4/conf/{}/forwarding"):
        value = _in(netns, "cat", f"/proc/sys/net/{switch.format(tap)}").stdout.strip()
        assert value == "1", switch
    # QEMU's end removes the tap, and with it the route; unconfigure drops the rule
    assert _in(netns, "ip", "link", "delete", tap).returncode == 0
    assert "192.0.2.7" not in _in(netns, "ip", "route", "show", "table", "100").stdout
    code = ("from herder.noded.kvm import domain, ifup\n"
            f"ifup.unconfigure(domain.InstanceSpec('x', {UUID!r}, 0, 0, {{}}, nics=("
            "domain.NicSpec('aa:00:00:00:00:01'), domain.NicSpec('aa:00:00:00:00:02', "
            "'routed', '100', ip='192.0.2.7'))))\n")
    assert _in(netns, sys.executable, "-c", code).returncode == 0
    assert f"iif {tap}" not in _in(netns, "ip", "rule", "show").stdout


def test_the_operators_hook_replaces_the_default_with_ganetis_environment(
        netns: str, tmp_path: Path) -> None:
    tap = domain.tap_name(UUID, 1)
    assert _in(netns, "ip", "tuntap", "add", "dev", tap, "mode", "tap").returncode == 0
    seen = tmp_path / "env.json"
    hook = tmp_path / "kvm-vif-bridge"
    hook.write_text(f"#!{sys.executable}\nimport json, os\n"
                    f"open({str(seen)!r}, 'w').write(json.dumps(dict(os.environ)))\n")
    hook.chmod(0o755)
    done = _configure_in(netns, ROUTED, hook)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == ["hook"]
    env = json.loads(seen.read_text())
    assert {key: env.get(key) for key in ("INSTANCE", "MAC", "MODE", "INTERFACE",
                                          "INTERFACE_INDEX", "INTERFACE_UUID", "INTERFACE_NAME",
                                          "IP", "LINK", "TAGS")} == {
        "INSTANCE": "web1.example.com", "MAC": "aa:00:00:00:00:02", "MODE": "routed",
        "INTERFACE": tap, "INTERFACE_INDEX": "1", "INTERFACE_UUID": "nic-uuid-2",
        "INTERFACE_NAME": "front", "IP": "192.0.2.7", "LINK": "100", "TAGS": "a b"}
    assert "/sbin" in env["PATH"]
    # the hook did everything: herder added no route of its own
    assert "192.0.2.7" not in _in(netns, "ip", "route", "show", "table", "100").stdout
    hook.write_text("#!/bin/sh\necho 'no such table' >&2\nexit 2\n")
    failed = _configure_in(netns, ROUTED, hook)
    assert failed.returncode == 3
    assert f"Failed to configure interface {tap}" in failed.stdout
    assert "exited with 2" in failed.stdout and "no such table" in failed.stdout


def test_a_missing_tap_is_one_clear_line(netns: str, tmp_path: Path) -> None:
    done = _configure_in(netns, ROUTED, tmp_path / "no-hook")
    assert done.returncode == 3
    line = done.stdout.strip()
    assert line.startswith(f"Failed to configure interface {domain.tap_name(UUID, 1)}: ip link")
    assert "\n" not in line


def test_the_masters_payload_gives_the_hook_ganetis_nic_and_network_variables() -> None:
    """From the config through the RPC payload to the hook's environment: the NIC's UUID and
    name, the instance's tags, the network's HooksDict (hv_base.ConfigureNIC)."""
    from herder.core import model
    from herder.core.rpcdefs.payload import InstancePayload, instance_payload
    from herder.noded import instance_spec
    from tests.conftest import build_config

    config = build_config()
    net = model.Network(uuid=model.new_uuid(), name="front", network="192.0.2.0/24",
                        gateway="192.0.2.1", mac_prefix="aa:00:02", tags=["dmz"])
    config.networks[net.uuid] = net
    inst = config.find_instance("drbd0.example.com")
    inst.tags = ["web", "prod"]
    inst.nics = [model.NIC(uuid="nic-uuid-0", name="eth-front", mac="aa:00:02:00:00:01",
                           ip="192.0.2.7", network=net.uuid,
                           nicparams={"mode": "routed", "link": "100"})]
    # the payload over the wire: noded's door accepts it
    wire = msgspec.to_builtins(instance_payload(config, inst))
    payload = msgspec.convert(wire, InstancePayload)
    env = ifup.hook_environment(instance_spec.network_spec(payload), 0)
    assert {key: env.get(key) for key in (
        "INSTANCE", "INTERFACE_UUID", "INTERFACE_NAME", "MODE", "LINK", "IP", "TAGS",
        "NETWORK_NAME", "NETWORK_UUID", "NETWORK_SUBNET", "NETWORK_GATEWAY",
        "NETWORK_MAC_PREFIX", "NETWORK_TAGS")} == {
        "INSTANCE": "drbd0.example.com", "INTERFACE_UUID": "nic-uuid-0",
        "INTERFACE_NAME": "eth-front", "MODE": "routed", "LINK": "100", "IP": "192.0.2.7",
        "TAGS": "web prod", "NETWORK_NAME": "front", "NETWORK_UUID": net.uuid,
        "NETWORK_SUBNET": "192.0.2.0/24", "NETWORK_GATEWAY": "192.0.2.1",
        "NETWORK_MAC_PREFIX": "aa:00:02", "NETWORK_TAGS": "dmz"}
    bad = {**wire, "nics": [{**wire["nics"][0], "network_env": {"PATH": "/tmp"}}]}
    with pytest.raises(msgspec.ValidationError, match="bad network variable"):
        msgspec.convert(bad, InstancePayload)
