"""Networks, IP pools, hotplug and online resize on real guests (`herder cluster simulate
--guests qemu`, two nodes, one running guest for the module), driven as an operator does (the
CLI through the client profile). The `herder-guest` OS's heartbeat lists its block devices
(`blk=vda:SECTORS,...`) and network interfaces (`net=eth0=MAC,...`), so what the guest sees
is read from its serial console:

- a network with a pool, connected to the node group; two guests with `ip=pool` get distinct
  addresses (the second is never started), removing one frees its address;
- a disk and a NIC hotplugged into the running guest show in its heartbeat with the same boot
  id, and go again when unplugged; a NIC added without --hotplug waits for the next start;
- `grow-disk` on the running guest: its `/sys/block/vda/size` follows without a reboot;
- bad input: one clear line naming the value, nothing changed.

The nodes are Debian 12 hosts (`hosts="debian"`, issue 34: systemd, Debian's libvirt, herder
from the wheel; docs/compat.md N5a), as an operator's are.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests import simaddresses
from tests.simhelpers import herder, running_sim, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.guests]

NODE = "node1.sim.herder.test"
NAME, OTHER = "hp1", "hp2"
BOOT = 180.0  # a TCG guest boots in ~10 s idle; the machine is a loaded 2-core one
SEEN = 90.0  # a hotplugged device shows in the next heartbeats (one a second)
NET, SUBNET, GATEWAY = "pool1", "192.0.2.16/28", "192.0.2.17"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("libvirt")
    from herder.sim import debroot, guest

    reason = debroot.unsupported()
    if reason:
        pytest.skip(reason)
    try:
        guest.ensure_guest()
    except guest.GuestBuildError as err:
        pytest.skip(str(err))
    yield from running_sim(tmp_path_factory.mktemp("hotplug"), 2, guests="qemu",
                           hosts="debian", first_ip=simaddresses.first_ip("hotplug"))


def beats(sim: Any) -> list[Any]:
    from herder.sim import guest

    done = sim.host(NODE).run(["cat", f"/var/log/herder/instances/{NAME}.serial.log"],
                              timeout=30)
    return guest.parse_heartbeats(done.stdout) if done.returncode == 0 else []


def beat_where(sim: Any, what: str, check: Any, after: float = -1.0,
               timeout: float = SEEN) -> Any:
    """The first heartbeat past uptime `after` for which `check` holds."""
    return wait_for(lambda: next((b for b in beats(sim) if b.uptime > after and check(b)),
                                 None), timeout, what, interval=1.0)


def network_info(sim: Any) -> dict[str, Any]:
    (info,) = json.loads(herder(sim, "network", "info", NET, "--json").stdout)
    return dict(info)


def nics_of(sim: Any, name: str) -> list[dict[str, Any]]:
    (info,) = json.loads(herder(sim, "instance", "info", name, "--json").stdout)
    return list(info["nics"])


def test_a_network_hands_out_distinct_addresses_from_its_pool(sim: Any) -> None:
    herder(sim, "network", "add", NET, "--network", SUBNET, "--gateway", GATEWAY,
           "--add-reserved-ips", "192.0.2.18")
    herder(sim, "network", "connect", "-N", "mode=bridged,link=br0", NET)
    herder(sim, "instance", "add", NAME, "--no-name-check", "-t", "sharedfile", "-o",
           "herder-guest", "--disk", "64M", "-n", NODE, "--net",
           f"0:network={NET},ip=pool", timeout=300)
    herder(sim, "instance", "add", OTHER, "--no-name-check", "-t", "sharedfile", "--disk",
           "8M", "--no-install", "--no-start", "-n", NODE, "--net",
           f"0:network={NET},ip=pool", timeout=300)
    # network, gateway, broadcast and the operator's reservation are not handed out
    assert [nics_of(sim, n)[0]["ip"] for n in (NAME, OTHER)] == ["192.0.2.19", "192.0.2.20"]
    info = network_info(sim)
    assert info["map"] == "XXXXX..........X" and info["free_count"] == 10
    assert info["inst_list"] == [NAME, OTHER]
    assert info["group_list"] == [["default", "bridged", "br0", ""]]
    herder(sim, "instance", "remove", OTHER, timeout=300)
    info = network_info(sim)
    assert info["map"] == "XXXX...........X" and info["inst_list"] == [NAME]
    first = beat_where(sim, "the guest's first heartbeat", lambda b: True, timeout=BOOT)
    assert first.nics is not None and list(first.nics.values()) == [nics_of(sim, NAME)[0]["mac"]]


def test_an_exhausted_pool_and_a_taken_address_are_one_line_each(sim: Any) -> None:
    before = network_info(sim)
    taken = herder(sim, "instance", "modify", NAME, "--net",
                   f"add:network={NET},ip=192.0.2.19", check=False, timeout=120)
    assert taken.returncode != 0
    assert "192.0.2.19" in taken.stderr and len(taken.stderr.strip().splitlines()) == 1
    outside = herder(sim, "instance", "modify", NAME, "--net",
                     f"add:network={NET},ip=10.9.9.9", check=False, timeout=120)
    assert outside.returncode != 0 and "10.9.9.9" in outside.stderr
    connected = herder(sim, "network", "remove", NET, check=False)
    assert connected.returncode != 0 and "still connected" in connected.stderr
    assert network_info(sim) == before and len(nics_of(sim, NAME)) == 1


def test_a_hotplugged_disk_and_nic_show_in_the_running_guest(sim: Any) -> None:
    start = beat_where(sim, "a heartbeat", lambda b: True, timeout=BOOT)
    herder(sim, "instance", "modify", NAME, "--hotplug", "--disk", "add:size=32M",
           timeout=300)
    disk = beat_where(sim, "the new disk in the guest",
                      lambda b: (b.blocks or {}).get("vdb") == 32 * 2048, after=start.uptime)
    assert disk.boot_id == start.boot_id
    herder(sim, "instance", "modify", NAME, "--hotplug", "--net",
           f"add:network={NET},ip=pool", timeout=300)
    added = nics_of(sim, NAME)[1]
    assert added["ip"] == "192.0.2.20"
    nic = beat_where(sim, "the new NIC in the guest",
                     lambda b: added["mac"] in (b.nics or {}).values(), after=disk.uptime)
    assert nic.boot_id == start.boot_id and len(nic.nics) == 2
    # unplugged again: both go from the guest, the address back to the pool
    herder(sim, "instance", "modify", NAME, "--hotplug", "--net", "1:remove", timeout=300)
    herder(sim, "instance", "modify", NAME, "--hotplug", "--disk", "1:remove", timeout=300)
    gone = beat_where(sim, "the devices gone from the guest",
                      lambda b: added["mac"] not in (b.nics or {}).values()
                      and "vdb" not in (b.blocks or {}), after=nic.uptime)
    assert gone.boot_id == start.boot_id
    assert network_info(sim)["map"] == "XXXX...........X"


def test_grow_disk_resizes_the_running_guests_disk(sim: Any) -> None:
    before = beat_where(sim, "a heartbeat", lambda b: b.blocks is not None)
    assert before.blocks["vda"] == 64 * 2048
    herder(sim, "instance", "grow-disk", NAME, "0", "32M", timeout=300)
    grown = beat_where(sim, "the grown disk in the guest",
                       lambda b: (b.blocks or {}).get("vda") == 96 * 2048, after=before.uptime)
    assert grown.boot_id == before.boot_id


def test_without_hotplug_a_nic_waits_for_the_next_start(sim: Any) -> None:
    before = beat_where(sim, "a heartbeat", lambda b: b.nics is not None)
    herder(sim, "instance", "modify", NAME, "--net", f"add:network={NET},ip=pool,"
           "mac=generate", timeout=300)
    added = nics_of(sim, NAME)[1]
    later = beat_where(sim, "a later heartbeat", lambda b: True, after=before.uptime + 3)
    assert added["mac"] not in (later.nics or {}).values()
    herder(sim, "instance", "shutdown", NAME, timeout=300)
    herder(sim, "instance", "start", NAME, timeout=300)
    booted = beat_where(sim, "the new boot with the NIC",
                        lambda b: b.boot_id != before.boot_id
                        and added["mac"] in (b.nics or {}).values(), timeout=BOOT)
    assert len(booted.nics) == 2
