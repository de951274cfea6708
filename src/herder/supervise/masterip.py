"""Bringing the master IP up and down on this host, as Ganeti's master-IP setup does.

Ganeti's `ActivateMasterIp`/`DeactivateMasterIp` run its `master-ip-setup start|stop` with
MASTER_IP, MASTER_NETMASK, MASTER_NETDEV and CLUSTER_IP_VERSION from the cluster config
(`master_ip`, `master_netmask`, `master_netdev`, `primary_ip_family`). `start`: nothing to do
when the address is already this host's; an error when another machine answers for it; else
`ip address add IP/NETMASK dev NETDEV label NETDEV:0` and a gratuitous ARP (`arping -U`, IPv6:
`ndisc6`) so neighbours update their caches. `stop`: nothing to do when the address is not on
this host; an error when it is on another device than NETDEV; else `ip address del`.

Ganeti asks with `fping` whether another machine has the address; here that is ARP's duplicate
address detection (`arping -D`, iputils), done when arping is installed. The gratuitous ARP is
sent in the background (three packets a second apart) so a failover does not wait for it.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herder.core import ssconf
from herder.core.errors import HerderError

# Where a node's ssconf files are (noded writes them there: /var/lib/herder/ssconf_*).
SSCONF_DIRS = (ssconf.DEFAULT_DIR,)
ALREADY_UP = "Master IP address already configured on this machine. Doing nothing."
NOT_HERE = "Master IP address not configured on this machine. Doing nothing."

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class MasterNetwork:
    ip: str
    netmask: int
    netdev: str
    family: int  # 4 or 6

    def __post_init__(self) -> None:
        try:
            address = ipaddress.ip_address(self.ip)
        except ValueError:
            raise HerderError(f"master IP {self.ip!r} is not an IP address") from None
        if address.version != self.family:
            raise HerderError(f"master IP {self.ip} is not an IPv{self.family} address")
        if not 0 <= self.netmask <= (32 if self.family == 4 else 128):
            raise HerderError(f"master netmask {self.netmask} is out of range for "
                              f"IPv{self.family}")
        if not self.netdev or "/" in self.netdev or len(self.netdev) > 15:
            raise HerderError(f"master netdev {self.netdev!r} is not a network device name")

    @property
    def cidr(self) -> str:
        return f"{self.ip}/{self.netmask}"


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise HerderError(f"{argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise HerderError(f"{' '.join(argv)} did not finish within 30s") from None


def _ssconf_value(name: str, dirs: Sequence[Path]) -> str | None:
    for directory in dirs:
        try:
            return (directory / f"ssconf_{name}").read_text().strip()
        except OSError:
            continue
    return None


def from_ssconf(dirs: Sequence[Path] = SSCONF_DIRS) -> MasterNetwork | None:
    """The master network from this node's ssconf files; None when they are not there."""
    values = {name: _ssconf_value(name, dirs) for name in
              ("master_ip", "master_netmask", "master_netdev", "primary_ip_family")}
    if values["master_ip"] is None or values["master_netdev"] is None:
        return None
    try:
        netmask = int(values["master_netmask"] or "32")
        family = int(values["primary_ip_family"] or "4")
    except ValueError:
        raise HerderError("ssconf: master_netmask and primary_ip_family must be "
                          "numbers") from None
    return MasterNetwork(values["master_ip"], netmask, values["master_netdev"], family)


def from_config(path: Path) -> MasterNetwork:
    from herder.core.store import FileStore

    cluster = FileStore(path).load().cluster
    return MasterNetwork(cluster.master_ip, cluster.master_netmask, cluster.master_netdev,
                         cluster.primary_ip_family)


def local_addresses(ip_json: list[dict[str, Any]]) -> dict[str, list[tuple[str, int]]]:
    """`ip -j address show` -> address -> [(device, prefix length)]."""
    found: dict[str, list[tuple[str, int]]] = {}
    for link in ip_json:
        for info in link.get("addr_info", []):
            if "local" in info:
                found.setdefault(info["local"], []).append(
                    (link["ifname"], int(info.get("prefixlen", 0))))
    return found


def _addresses(run: Runner) -> dict[str, list[tuple[str, int]]]:
    done = run(["ip", "-j", "address", "show"])
    if done.returncode != 0:
        raise HerderError(f"ip address show failed: {done.stderr.strip()}")
    try:
        return local_addresses(json.loads(done.stdout or "[]"))
    except (ValueError, KeyError, TypeError):
        raise HerderError("ip -j address show gave no JSON this herder understands") from None


def find_arping() -> str | None:
    """arping's path when it is iputils' (whose -D and -U this uses), else None."""
    path = shutil.which("arping")
    if path is None:
        return None
    done = subprocess.run([path, "-V"], capture_output=True, text=True, timeout=10)
    return path if "iputils" in done.stdout + done.stderr else None


def _taken_elsewhere(net: MasterNetwork, run: Runner, arping: str | None) -> bool:
    """Whether another machine answers for the address (ARP duplicate address detection)."""
    if net.family != 4 or arping is None:
        return False
    done = run([arping, "-D", "-q", "-c", "1", "-w", "1", "-I", net.netdev, net.ip])
    return done.returncode == 1


def _announce(net: MasterNetwork, arping: str | None) -> None:
    """Gratuitous ARP (IPv6: unsolicited neighbour advertisement), in the background."""
    if net.family == 4:
        if arping is None:
            return
        argv = [arping, "-q", "-U", "-c", "3", "-I", net.netdev, "-s", net.ip, net.ip]
    else:
        ndisc6 = shutil.which("ndisc6")
        if ndisc6 is None:
            return
        argv = [ndisc6, "-q", "-r", "3", net.ip, net.netdev]
    subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)


def activate(net: MasterNetwork, run: Runner = run_command, arping: str | None = None) -> str:
    """Bring the master IP up on its device; returns what was done (one line). `arping`:
    iputils' arping (`find_arping()`), for the duplicate check and the announcement."""
    if net.ip in _addresses(run):
        return ALREADY_UP
    if _taken_elsewhere(net, run, arping):
        raise HerderError(f"master IP address {net.ip} is configured on another machine")
    argv = ["ip", "address", "add", net.cidr, "dev", net.netdev]
    if net.family == 4:
        argv += ["label", f"{net.netdev}:0"]
    done = run(argv)
    if done.returncode != 0:
        raise HerderError(f"cannot activate the master IP address {net.cidr} on "
                          f"{net.netdev}: {done.stderr.strip()}")
    _announce(net, arping)
    return f"Master IP address {net.cidr} activated on {net.netdev}."


def deactivate(net: MasterNetwork, run: Runner = run_command) -> str:
    """Take the master IP down from its device; returns what was done (one line)."""
    where = _addresses(run).get(net.ip, [])
    if (net.netdev, net.netmask) not in where:
        if where:
            raise HerderError(f"master IP address {net.ip} is configured on "
                              f"{', '.join(dev for dev, _ in where)}, not {net.netdev}/"
                              f"{net.netmask}: not taking it down")
        return NOT_HERE
    done = run(["ip", "address", "del", net.cidr, "dev", net.netdev])
    if done.returncode != 0:
        raise HerderError(f"cannot deactivate the master IP address {net.cidr} on "
                          f"{net.netdev}: {done.stderr.strip()}")
    return f"Master IP address {net.cidr} deactivated on {net.netdev}."
