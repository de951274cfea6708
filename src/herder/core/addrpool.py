"""The IP address pool of a network, as Ganeti 3.0's `network.AddressPool`.

A network's pool is two bit arrays over every address of its IPv4 subnet, kept in the config
as Ganeti keeps them (strings of `0` and `1`, `Network.reservations` and
`Network.ext_reservations`): a bit set in `reservations` is an address an instance's NIC uses;
one set in `ext_reservations` is reserved outside the cluster (the network and broadcast
addresses, the gateway, the nodes' and the master's addresses, the operator's
`--add-reserved-ips`). An address is free when neither bit is set. Subnets from /16 to /30,
as Ganeti allows. The bit arrays are the `bitarray` library Ganeti uses.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from bitarray import bitarray

from herder.core.errors import HerderError

SMALLEST_PREFIX = 30  # Ganeti's IPV4_NETWORK_MIN_SIZE: a /30 has 4 addresses
LARGEST_PREFIX = 16  # Ganeti's IPV4_NETWORK_MAX_SIZE (for performance, Ganeti says)


class AddressPoolError(HerderError):
    """An address cannot be reserved, released or found; one line naming it."""


def subnet(network: str) -> ipaddress.IPv4Network:
    """The IPv4 subnet `network` names, within the sizes a pool takes; ValueError naming it."""
    try:
        net = ipaddress.IPv4Network(network)
    except ValueError as err:
        raise ValueError(f"network {network!r} is not an IPv4 subnet ({err})") from None
    if net.prefixlen < LARGEST_PREFIX:
        raise ValueError(f"network {network}: a big network with {net.num_addresses} host(s) "
                         f"is not supported, please specify at most a /{LARGEST_PREFIX} network")
    if net.prefixlen > SMALLEST_PREFIX:
        raise ValueError(f"network {network}: a network with only {net.num_addresses} host(s) "
                         f"is too small, please specify at least a /{SMALLEST_PREFIX} network")
    return net


def check_bits(network: ipaddress.IPv4Network, bits: str | None, what: str) -> None:
    """A stored bit string: one `0` or `1` for each address of `network`; ValueError else."""
    if bits is None:
        return
    if len(bits) != network.num_addresses or bits.strip("01"):
        raise ValueError(f"network {network}: {what} must be {network.num_addresses} "
                         "characters of 0 and 1")


@dataclass(frozen=True)
class PoolState:
    """What a pool keeps in the config: the two bit strings."""

    reservations: str
    ext_reservations: str


class AddressPool:
    """One network's pool (Ganeti's AddressPool over an objects.Network)."""

    def __init__(self, network: str, reservations: str | None = None,
                 ext_reservations: str | None = None) -> None:
        self.network = subnet(network)
        size = self.network.num_addresses
        check_bits(self.network, reservations, "reservations")
        check_bits(self.network, ext_reservations, "ext_reservations")
        self.reservations = bitarray(reservations) if reservations else bitarray(size)
        self.ext_reservations = bitarray(ext_reservations) if ext_reservations \
            else bitarray(size)
        if not reservations:
            self.reservations.setall(False)
        if not ext_reservations:
            self.ext_reservations.setall(False)

    @classmethod
    def initialized(cls, network: str, gateway: str | None) -> AddressPool:
        """A new network's pool (Ganeti's InitializeNetwork): its network and broadcast
        addresses and its gateway externally reserved."""
        pool = cls(network)
        for address in (pool.network[0], pool.network[-1]):
            pool.reserve(str(address), external=True)
        if gateway is not None:
            pool.reserve(gateway, external=True)
        return pool

    def state(self) -> PoolState:
        return PoolState(self.reservations.to01(), self.ext_reservations.to01())

    def contains(self, address: str | None) -> bool:
        if address is None:
            return False
        try:
            return ipaddress.ip_address(address) in self.network
        except ValueError:
            return False

    def _index(self, address: str) -> int:
        try:
            addr = ipaddress.ip_address(address)
        except ValueError:
            raise AddressPoolError(f"{address!r} is not an IP address") from None
        if addr not in self.network:
            raise AddressPoolError(f"{self.network} does not contain {addr}")
        return int(addr) - int(self.network.network_address)

    @property
    def all_reservations(self) -> bitarray:
        return self.reservations | self.ext_reservations

    def is_full(self) -> bool:
        return self.all_reservations.all()

    def reserved_count(self) -> int:
        return self.all_reservations.count(True)

    def free_count(self) -> int:
        return self.all_reservations.count(False)

    def map(self) -> str:
        """Ganeti's GetMap: `X` for a reserved address, `.` for a free one."""
        return self.all_reservations.to01().replace("1", "X").replace("0", ".")

    def is_reserved(self, address: str, external: bool = False) -> bool:
        bits = self.ext_reservations if external else self.reservations
        return bool(bits[self._index(address)])

    def reserve(self, address: str, external: bool = False) -> None:
        """Mark `address` used (by an instance, or externally); AddressPoolError when it
        already is (in that sense)."""
        if self.is_reserved(address, external):
            raise AddressPoolError(f"IP {address} is already externally reserved" if external
                                   else f"IP {address} is already used by an instance")
        (self.ext_reservations if external else self.reservations)[self._index(address)] = 1

    def release(self, address: str, external: bool = False) -> None:
        if not self.is_reserved(address, external):
            raise AddressPoolError(f"IP {address} is not externally reserved" if external
                                   else f"IP {address} is not used by an instance")
        (self.ext_reservations if external else self.reservations)[self._index(address)] = 0

    def generate_free(self) -> str:
        """The first free address (Ganeti's GenerateFree); AddressPoolError when full."""
        free = self.all_reservations.find(0)
        if free < 0:
            raise AddressPoolError(f"{self.network} is full")
        return str(self.network[free])

    def take_free(self) -> str:
        """The first free address, now reserved for an instance (Ganeti's GetFreeAddress)."""
        address = self.generate_free()
        self.reserve(address)
        return address

    def external_reservations(self) -> list[str]:
        return [str(self.network[index]) for index in self.ext_reservations.search(1)]

    def instance_reservations(self) -> list[str]:
        return [str(self.network[index]) for index in self.reservations.search(1)]
