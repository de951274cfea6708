"""Moving a running instance between nodes: Ganeti's live-migration RPCs in its order
(instance_migratable, migration_info, accept_instance, migrate_instance,
instance_get_migration_status, finalize_migration_dst/src) and herder's hand-over of a domain
definition (migrate_prepare, migrate_accept, migrate_finish: libvirt's test driver, failover of a
dead source).

The calls to the target carry the move (`core.vmclaim.Move`) beside the claim, which still names
the source as primary: the target's guard admits the guest only so."""

from __future__ import annotations

import msgspec

from herder.core import diskobjects, names
from herder.core.rpcdefs.base import AnswerT
from herder.core.rpcdefs.instance_calls import Named, WithPayload
from herder.core.rpcdefs.payload import InstancePayload
from herder.core.vmclaim import Move


class DomainAnswer(msgspec.Struct, kw_only=True, omit_defaults=True):
    xml: str
    state: str | None
    node: str | None = None


class MigratePrepare(Named[DomainAnswer], kw_only=True):
    """The source's domain definition and state, for the hand-over."""

    METHOD = "migrate_prepare"
    READ_ONLY = True


class MigrateAccept(WithPayload[None], kw_only=True):
    """Define the domain from the source's definition here (and start it)."""

    METHOD = "migrate_accept"
    SERIAL = True
    move: Move | None = None
    xml: str
    start: bool = True


class MigrateFinish(Named[None], kw_only=True):
    """The source's end of the hand-over: its definition goes (and, with `remove_disks`, the
    disks given)."""

    METHOD = "migrate_finish"
    SERIAL = True
    move: Move | None = None
    disks: list[diskobjects.Disk] = msgspec.field(default_factory=list)
    remove_disks: bool = False


class MigratableAnswer(msgspec.Struct, kw_only=True):
    running: bool
    state: str | None
    method: str  # "libvirt" (live migration) or "restart" (the test driver's stand-in)
    reason: str


class InstanceMigratable(Named[MigratableAnswer], kw_only=True):
    """Whether the instance runs on the source and its hypervisor can migrate it live."""

    METHOD = "instance_migratable"
    TIMEOUT = 60.0


class MigrationInfo(Named[DomainAnswer], kw_only=True):
    """The source's view of the running domain (Ganeti's migration_info)."""

    METHOD = "migration_info"


class MoveCall(WithPayload[AnswerT], kw_only=True):
    """A call of a running migration, with the whole instance."""

    move: Move | None = None


class AcceptInstance(MoveCall[None], kw_only=True):
    """The target's checks before libvirt brings the guest (Ganeti's accept_instance)."""

    METHOD = "accept_instance"
    SERIAL = True


class MigrateInstance(MoveCall[None], kw_only=True):
    """Start libvirt's migration to `target` (the answer comes at once)."""

    METHOD = "migrate_instance"
    SERIAL = True
    target: str
    live: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        names.hostname(self.target, "target node")


class MigrationStats(msgspec.Struct, kw_only=True):
    """libvirt's statistics of a completed migration (its job stats), in ms and bytes."""

    total_ms: int
    downtime_ms: int | None = None  # how long the guest did not run
    setup_ms: int | None = None
    data_total: int | None = None
    data_processed: int | None = None
    memory_iterations: int | None = None
    live: bool = True


class MigrationStatus(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Ganeti's MigrationStatus (status, transferred_ram, total_ram), why it failed, what the
    node changed about it (`note`) and, once completed, libvirt's statistics."""

    status: str  # active, completed, failed, cancelled
    transferred_ram: int = 0
    total_ram: int = 0
    error: str = ""
    note: str | None = None
    stats: MigrationStats | None = None


MAX_STATUS_WAIT = 30.0  # s: the longest a status call may wait for the migration's end


class InstanceGetMigrationStatus(Named[MigrationStatus], kw_only=True):
    """Ganeti's instance_get_migration_status; `wait` (herder's, compat B62): the node
    answers once the migration ended or after that many seconds, so the master learns the
    end at once instead of at its next poll. A node without it answers at once (the master
    then paces its polls itself)."""

    METHOD = "instance_get_migration_status"
    TIMEOUT = 60.0

    wait: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.wait is not None and not 0 <= self.wait <= MAX_STATUS_WAIT:
            raise ValueError(f"wait must be 0 to {MAX_STATUS_WAIT:g} seconds")

    def rpc_timeout(self) -> float:
        return self.TIMEOUT + (self.wait or 0.0)


class FinalizeAnswer(msgspec.Struct, kw_only=True, omit_defaults=True):
    state: str | None  # the domain's state here afterwards
    warnings: list[str] = msgspec.field(default_factory=list)
    # finalize_migration_dst after a success: libvirt's statistics of the incoming migration,
    # read on this node (`live` is the source's to say: left at its default here)
    stats: MigrationStats | None = None


class FinalizeMigrationSrc(Named[FinalizeAnswer], kw_only=True):
    """After the migration: on success the domain left (its records go); on failure it runs
    here again."""

    METHOD = "finalize_migration_src"
    SERIAL = True
    TIMEOUT = 120.0
    move: Move | None = None
    success: bool
    live: bool = True
    instance: InstancePayload | None = None  # its routed NICs' rules go when it left


class FinalizeMigrationDst(MoveCall[FinalizeAnswer], kw_only=True):
    """After the migration: on success the arrived domain is this node's; on failure an
    incoming copy that never ran is removed."""

    METHOD = "finalize_migration_dst"
    SERIAL = True
    TIMEOUT = 120.0
    success: bool
