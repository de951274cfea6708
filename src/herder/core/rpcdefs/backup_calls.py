"""Exports on a node (Ganeti's `export_*` and `finalize_export`, gnt-backup): an export being
written (`export_prepare_dump`: one dump file made empty in `<instance>.new` and the token of
its stream, `export_finalize`: its config.ini, and the directory replaces the instance's
export), removing one (or a partial one), listing and reading them, and streaming a dump to a
node importing it (`export_send`). The disks' own streams are `disk_calls.BlockdevExport` and
`BlockdevImportPrepare` with the instance's OS (its `export` and `import` scripts)."""

from __future__ import annotations

from typing import Literal

import msgspec

from herder.core import names, paths
from herder.core.backupsched import keep_count
from herder.core.rpcdefs.base import AnswerT, Call, instance_name, ip_address
from herder.core.rpcdefs.disk_calls import (
    ExportTarget,
    OneDisk,
    Transferred,
    disk_index,
    import_token,
)
from herder.core.rpcdefs.payload import InstancePayload

PARTIAL = ".new"  # the suffix of an export being written (Ganeti's)
STREAM_TIMEOUT = 6 * 3600.0  # seconds for one dump's stream (given by the caller)
CONFIG_INI_MAX = 1 << 20


def export_name(name: str, what: str = "export name") -> None:
    """An export's directory: an instance name, an older export kept beside it
    (`NAME@YYYYMMDD-HHMMSS`), or one being written (`NAME.new`)."""
    names.export_name(name.removesuffix(PARTIAL), what)
    paths.check_component(name, what)


def dump_name(name: str) -> None:
    """A dump file of an export (a disk's UUID in herder's exports, Ganeti's own names in
    its exports): one file name component, not hidden."""
    paths.check_component(name, "dump file")
    if name.startswith("."):
        raise ValueError(f"invalid dump file name {name!r}")


class PreparedDump(msgspec.Struct, kw_only=True):
    token: str  # for `POST /import/<token>` on the target
    path: str  # the dump file on the target


class ExportPrepareDump(Call[PreparedDump], kw_only=True):
    """Expect one dump of an export being written: the file, empty, in `<instance>.new`."""

    METHOD = "export_prepare_dump"
    SERIAL = True
    instance: str
    dump: str

    def __post_init__(self) -> None:
        instance_name(self.instance, "instance")
        dump_name(self.dump)


class ExportFinalize(Call[list[str]], kw_only=True):
    """The export's config.ini into `<instance>.new`, which then replaces the instance's
    export (Ganeti's FinalizeExport). With `keep` (herder's retention) the replaced export
    is kept as `NAME@YYYYMMDD-HHMMSS` and the oldest kept ones beyond `keep` exports of the
    instance are removed, only once the new one is in place; the names removed."""

    METHOD = "export_finalize"
    SERIAL = True
    TIMEOUT = 60.0
    instance: str
    config_ini: str
    keep: int | None = None

    def __post_init__(self) -> None:
        instance_name(self.instance, "instance")
        if len(self.config_ini) > CONFIG_INI_MAX:
            raise ValueError("config_ini larger than 1 MiB")
        keep_count(self.keep)


class OneExport(Call[AnswerT], kw_only=True):
    name: str  # the export (an instance's name or `NAME@YYYYMMDD-HHMMSS`; `NAME.new`: partial)

    def __post_init__(self) -> None:
        export_name(self.name)


class ExportRemove(OneExport[bool], kw_only=True):
    """Remove an export (or a partial one, `NAME.new`); whether there was one."""

    METHOD = "export_remove"
    SERIAL = True
    TIMEOUT = 60.0


class ExportList(Call[list[str]], kw_only=True):
    """The node's finished exports, by name."""

    METHOD = "export_list"
    READ_ONLY = True
    TIMEOUT = 30.0


class ExportInfo(OneExport[str], kw_only=True):
    """An export's config.ini, checked to be one."""

    METHOD = "export_info"
    READ_ONLY = True
    TIMEOUT = 60.0


class ExportSend(OneExport[Transferred], kw_only=True):
    """Stream one dump of an export to another node's prepared import (an import from the
    export); the bytes and checksum the target confirmed. The caller gives the stream's
    timeout (`STREAM_TIMEOUT`)."""

    METHOD = "export_send"
    READ_ONLY = True
    dump: str
    target: ExportTarget
    token: str

    def __post_init__(self) -> None:
        super().__post_init__()
        dump_name(self.dump)
        import_token(self.token)


# --- a move between clusters: this node listens for a disk from another cluster --------------

PEER_CA_MAX = 64 * 1024


def peer_ca_pem(pem: str) -> None:
    if not pem.lstrip().startswith("-----BEGIN CERTIFICATE-----") or len(pem) > PEER_CA_MAX:
        raise ValueError("peer_ca: a PEM certificate (at most 64 KiB) expected")


class RemoteImportListening(msgspec.Struct, kw_only=True):
    port: int  # of the listener on the address asked for
    token: str  # the stream's one-time token (Ganeti's `magic`)


class RemoteImportPrepare(OneDisk[RemoteImportListening], kw_only=True):
    """Expect disk `idx` of `instance` from a node of another cluster: its device assembled
    here, a listener on `address` (this node's) for one stream through the instance's OS
    `import` script, taking only a client certificate of `peer_ca` (the other cluster's CA)."""

    METHOD = "remote_import_prepare"
    TIMEOUT = 60.0
    instance: str
    os_instance: InstancePayload
    idx: int = 0
    address: str
    peer_ca: str
    connect_timeout: float = 600.0  # seconds the listener waits for the stream to begin

    def __post_init__(self) -> None:
        instance_name(self.instance, "instance")
        disk_index(self.idx)
        ip_address(self.address)
        peer_ca_pem(self.peer_ca)
        if not 0 < self.connect_timeout <= 2 * 86400:
            raise ValueError("connect_timeout: 0 to 172800 seconds")


class RemoteImportProgress(msgspec.Struct, kw_only=True):
    state: Literal["listening", "receiving", "done", "failed"]
    bytes: int | None = None  # written, once done
    checksum: str | None = None  # of what was written (`xxh3_128:<hex>`, noded.disk_transfer)
    error: str | None = None  # why it failed (one line)


class OneRemoteImport(Call[AnswerT], kw_only=True):
    token: str

    def __post_init__(self) -> None:
        import_token(self.token)


class RemoteImportStatus(OneRemoteImport[RemoteImportProgress], kw_only=True):
    """Where a remote import stands (an outcome once read is forgotten)."""

    METHOD = "remote_import_status"
    READ_ONLY = True
    TIMEOUT = 30.0


class RemoteImportAbort(OneRemoteImport[None], kw_only=True):
    """End a remote import's listener (and its stream, if one is under way)."""

    METHOD = "remote_import_abort"
    TIMEOUT = 90.0
