"""The node's role in the cluster (Ganeti's names): the master's daemons and the master IP, a
master candidate's demotion, a node taken over by another cluster (cluster merge), the rotation
of the cluster's secrets (`herder cluster renew-crypto`)."""

from __future__ import annotations

from typing import Literal, Self

import msgspec

from herder.core import model
from herder.core.rpcdefs.base import Call, ip_address

DAEMON_UTIL_TIMEOUT = 150.0  # the node's daemon-util waits up to 120 s


class NodeStartMasterDaemons(Call[str], kw_only=True):
    """Start masterd and maintd (Ganeti: `daemon-util start-master`)."""

    METHOD = "node_start_master_daemons"
    TIMEOUT = DAEMON_UTIL_TIMEOUT


class NodeStopMaster(Call[str], kw_only=True):
    """Stop maintd and masterd (Ganeti: `daemon-util stop-master`)."""

    METHOD = "node_stop_master"
    TIMEOUT = DAEMON_UTIL_TIMEOUT


class MasterIp(Call[str], kw_only=True):
    """Ganeti's master_params (what the master leaves out comes from the node's ssconf); they
    become daemon-util's options, so each must be what it says."""

    ip: str | None = None
    netmask: int | None = None
    netdev: str | None = None
    ip_family: int | None = None

    def __post_init__(self) -> None:
        if self.ip:
            ip_address(self.ip)
        if self.netmask is not None and not 0 <= self.netmask <= 128:
            raise ValueError(f"netmask {self.netmask} out of range")
        if self.netdev and (len(self.netdev) > 15 or self.netdev.startswith("-")
                            or any(ch in self.netdev for ch in "/ \0\n")):
            raise ValueError(f"invalid network device {self.netdev!r}")
        if self.ip_family not in (None, 4, 6):
            raise ValueError(f"ip_family {self.ip_family} is neither 4 nor 6")

    @classmethod
    def of_cluster(cls, cluster: model.Cluster) -> Self:
        """The cluster's master network (Ganeti's master_params)."""
        return cls(ip=cluster.master_ip, netmask=cluster.master_netmask,
                   netdev=cluster.master_netdev, ip_family=cluster.primary_ip_family)

    def options(self) -> list[str]:
        """daemon-util's options for these parameters."""
        options: list[str] = []
        for value, option in ((self.ip, "--ip"), (self.netmask, "--netmask"),
                              (self.netdev, "--netdev"), (self.ip_family, "--family")):
            if value is not None and value != "":
                options += [option, str(value)]
        return options


class NodeActivateMasterIp(MasterIp, kw_only=True):
    METHOD = "node_activate_master_ip"


class NodeDeactivateMasterIp(MasterIp, kw_only=True):
    METHOD = "node_deactivate_master_ip"


class DemoteAnswer(msgspec.Struct, kw_only=True):
    removed: list[str]  # the config and job queue copies removed


class NodeDemoteFromMc(Call[DemoteAnswer], kw_only=True):
    """No longer a master candidate: the config and job queue copies go."""

    METHOD = "node_demote_from_mc"
    TIMEOUT = 30.0


class AdoptAnswer(msgspec.Struct, kw_only=True):
    secrets: list[str]
    restarting: list[str]


class NodeAdopt(Call[AdoptAnswer], kw_only=True):
    """The node now belongs to the cluster whose secrets (base64) come with the call."""

    METHOD = "node_adopt"
    hmac_key: str
    certificate: str
    node_certificate: str


class LibvirtTlsAnswer(msgspec.Struct, kw_only=True, omit_defaults=True):
    csr: str | None = None  # `request`: the new key's signing request (PEM)
    installed: bool = False  # `install`: the certificate is in place
    reload_problem: str | None = None  # `install`: why libvirtd did not take it at once


class LibvirtTls(Call[LibvirtTlsAnswer], kw_only=True):
    """The node's libvirt certificate (`masterd.libvirt_trust`): `request` a new key's signing
    request; `install` the master's `certificate` (PEM) for it."""

    METHOD = "libvirt_tls"
    stage: Literal["request", "install"]
    certificate: str | None = None

    def __post_init__(self) -> None:
        if self.stage == "install" and not self.certificate:
            raise ValueError("stage install needs the certificate")
        if self.certificate is not None and len(self.certificate) > 16 * 1024:
            raise ValueError("certificate: a PEM certificate is a few hundred bytes")


class RenewAnswer(msgspec.Struct, kw_only=True, omit_defaults=True):
    stage: str
    retired: list[str] = msgspec.field(default_factory=list)
    restarting: list[str] = msgspec.field(default_factory=list)


class RenewCrypto(Call[RenewAnswer], kw_only=True):
    """`install` carries the new secrets (base64); `retire` none."""

    METHOD = "renew_crypto"
    TIMEOUT = 60.0
    stage: Literal["install", "retire"]
    ca: str | None = None
    node_certificate: str | None = None
    hmac_key: str | None = None

    def __post_init__(self) -> None:
        if self.stage == "install" and not (self.ca and self.node_certificate and self.hmac_key):
            raise ValueError("stage install needs ca, node_certificate and hmac_key")
