"""The node as a whole: is it there, what runs on it, its live figures, its OS definitions, its
repair commands and power (Ganeti's node_info, instance_list, os_diagnose, node_powercycle;
herder's master epoch and failover vote)."""

from __future__ import annotations

import msgspec

from herder.core import livefigures, names
from herder.core.rpcdefs.base import Call, storage_dir, unit_name


class PingAnswer(msgspec.Struct, kw_only=True):
    node: str
    version: str
    time: float
    uptime: float
    hypervisor: bool  # libvirt answers
    vm_lock_kb: int  # noded's locked memory (mlockall)


class Ping(Call[PingAnswer], kw_only=True):
    METHOD = "ping"
    READ_ONLY = True


class EpochAnswer(msgspec.Struct, kw_only=True):
    node: str
    epoch: int


class MasterEpoch(Call[EpochAnswer], kw_only=True):
    """The highest master epoch the node has accepted."""

    METHOD = "master_epoch"
    READ_ONLY = True


class VoteAnswer(msgspec.Struct, kw_only=True):
    node: str
    master: str | None
    reachable: bool  # false: a vote that the master is gone
    detail: str
    epoch: int


class MasterVote(Call[VoteAnswer], kw_only=True):
    """For a master failover's vote: can the node reach the master's masterd (a TCP connect to
    `address`:`port`)?"""

    METHOD = "master_vote"
    READ_ONLY = True
    address: str
    port: int
    timeout: float = 2.0
    master: str | None = None

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536 or not 0 < self.timeout <= 60:
            raise ValueError("port or timeout out of range")


class ReachableAnswer(msgspec.Struct, kw_only=True):
    node: str  # the node that answers
    reachable: bool  # it reaches the asked node's noded
    detail: str
    asked_age: float | None  # seconds since the asked node asked it for its lease (None: never)


class NodeReachable(Call[ReachableAnswer], kw_only=True):
    """For maintd's decision that a node failed (masterd.leases): does this node reach `node`'s
    noded at `address`, and how long ago did that node ask it for its lease?"""

    METHOD = "node_reachable"
    READ_ONLY = True
    node: str
    address: str
    timeout: float = 2.0

    def __post_init__(self) -> None:
        names.hostname(self.node, "node")
        names.ip_address(self.address, "address")
        if not 0 < self.timeout <= 30:
            raise ValueError(f"timeout must be in (0, 30] seconds, got {self.timeout}")


class NodeInfo(Call[livefigures.NodeInfo], kw_only=True):
    """The node's live figures: the storage units asked for ([type, name] pairs, Ganeti's),
    with `instances` every live instance's run state."""

    METHOD = "node_info"
    READ_ONLY = True
    instances: bool = False
    storage_units: list[tuple[str, str]] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        for kind, name in self.storage_units:
            if kind == "file":
                storage_dir(name)
            elif kind == "lvm-vg":
                unit_name(name)
            else:
                raise ValueError(f"storage unit type {kind!r} is neither lvm-vg nor file")


class InstanceList(Call[dict[str, str]], kw_only=True):
    """Every domain defined on the node: name -> state."""

    METHOD = "instance_list"
    READ_ONLY = True
    TIMEOUT = 30.0


class OsList(Call[list[str]], kw_only=True):
    """The OS definitions of the node, with their variants (`name+variant`)."""

    METHOD = "os_list"
    READ_ONLY = True
    TIMEOUT = 30.0


class NodePowercycle(Call[str], kw_only=True):
    """Reboot at once (refused where it would reboot a machine that is not this node)."""

    METHOD = "node_powercycle"
    TIMEOUT = 30.0


class RepairAnswer(msgspec.Struct, kw_only=True):
    stdout: str
    exit_code: int


class RepairCommand(Call[RepairAnswer], kw_only=True):
    """A white-listed repair command, with the diagnose object on its stdin (live-repair)."""

    METHOD = "repair_command"
    TIMEOUT = 900.0
    command: str
    input: object = None

    def __post_init__(self) -> None:
        names.plain_name(self.command, "repair command")



# --- cluster verify's node checks (Ganeti's node_verify) ---------------------------------------


class PvEntry(msgspec.Struct, kw_only=True):
    """One physical volume of the cluster's VG (Ganeti's LvmPvInfo), sizes in MiB."""

    name: str
    vg_name: str
    size: float
    free: float


class OsEntry(msgspec.Struct, kw_only=True):
    """One OS directory of the node's search path (Ganeti's NV_OSLIST entry): valid or why not,
    its variants, parameters and API versions."""

    name: str
    path: str
    valid: bool
    diagnose: str
    variants: list[str]
    parameters: list[str]
    api_versions: list[int]


class CertificateValidity(msgspec.Struct, kw_only=True):
    """A certificate file of the node: its validity (POSIX times) or why it cannot be read."""

    path: str
    not_before: float | None = None
    not_after: float | None = None
    error: str | None = None


# the node's KVM probe, also part of the node's live figures
KvmVerdict = livefigures.KvmVerdict


class KvmProbe(Call[KvmVerdict], kw_only=True):
    """The node's KVM probe verdict (probed when it has none, or its negative one is old)."""

    METHOD = "kvm_probe"
    READ_ONLY = True
    TIMEOUT = 60.0


class LibvirtFacts(msgspec.Struct, kw_only=True):
    """What `cluster verify` judges of a node's libvirtd (qemu:///system nodes only; the node
    reports, the master judges: `core.nodeverify`)."""

    systemd: bool  # systemd socket-activates libvirtd (Debian's libvirt-daemon-system)
    configured: bool  # herder's libvirtd.conf is there (`herder node libvirt-tls` ran)
    tls_listen: list[str] = msgspec.field(default_factory=list)  # "ADDRESS:PORT" listening
    sockets: dict[str, int | None] = msgspec.field(default_factory=dict)  # path -> mode
    ca_digests: list[str] = msgspec.field(default_factory=list)  # libvirt's cacert.pem
    certificate: str | None = None  # libvirt's server certificate (PEM), None: none
    certificate_error: str | None = None  # why it (or cacert.pem) could not be read
    dn_list: list[str] | None = None  # libvirtd.conf's tls_allowed_dn_list (None: not set)
    qemu_user: str = "root"
    untraversable: dict[str, str] = msgspec.field(default_factory=dict)  # path -> why


class NodeVerifyAnswer(msgspec.Struct, kw_only=True):
    """What the node found; a field left None was not asked for (or does not apply)."""

    time: float  # the node's clock when it answered
    version: str
    vgs: dict[str, int] | None = None  # VG -> size in MiB (empty: `vgs` failed or none)
    pvs: list[PvEntry] | None = None  # None: `pvs` failed
    missing_bridges: list[str] | None = None
    missing_links: list[str] | None = None
    drbd_helper: tuple[bool, str] | None = None  # (read it, the helper or why not)
    drbd_version: str | None = None
    storage_paths: dict[str, str] = msgspec.field(default_factory=dict)  # path -> why unusable
    wrong_storage_paths: list[str] | None = None  # the allowed-paths file's forbidden entries
    oses: list[OsEntry] | None = None
    hypervisor: str | None = None  # why the node's hypervisor cannot run guests
    hvparams: list[tuple[str, str, str]] = msgspec.field(default_factory=list)  # source, hv, why
    kvm: KvmVerdict | None = None
    certificates: list[CertificateValidity] = msgspec.field(default_factory=list)
    libvirt: LibvirtFacts | None = None  # None: not asked, or the node's libvirt is not qemu's


class HvFileParams(msgspec.Struct, kw_only=True, array_like=True):
    """Hypervisor parameters naming files of the node (Ganeti's NV_HVPARAMS, the file checks):
    where they come from ("cluster", "os X", "instance Y"), the hypervisor, name -> path."""

    source: str
    hypervisor: str
    files: dict[str, str]


class NodeVerify(Call[NodeVerifyAnswer], kw_only=True):
    """Ganeti's node_verify, the checks of one node for `cluster verify`: the volume group and
    its PVs, bridges and links, DRBD's usermode helper and version, file storage paths, OS
    definitions, the hypervisor and the files its parameters name, the certificates, the time."""

    METHOD = "node_verify"
    READ_ONLY = True
    TIMEOUT = 60.0
    vg_name: str | None = None
    bridges: list[str] = msgspec.field(default_factory=list)
    links: list[str] = msgspec.field(default_factory=list)
    drbd: bool = False
    storage_paths: list[str] = msgspec.field(default_factory=list)
    accepted_storage_paths: bool = False  # the master: report the allowed-paths file's bad ones
    oses: bool = True
    hvparams: list[HvFileParams] = msgspec.field(default_factory=list)
    libvirt: bool = False  # libvirtd's TLS, sockets, trust; QEMU's access to the storage paths

    def __post_init__(self) -> None:
        if self.vg_name is not None:
            unit_name(self.vg_name)
        for name in (*self.bridges, *self.links):
            names.plain_name(name, "network interface")
        for path in self.storage_paths:
            storage_dir(path)
        for entry in self.hvparams:
            for key, path in entry.files.items():
                if not path.startswith("/") or "\0" in path:
                    raise ValueError(f"{entry.hypervisor} parameter {key}: {path!r} is not an "
                                     "absolute path")
