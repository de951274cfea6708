"""Exports on a node (Ganeti's `export_*` and `finalize_export`, gnt-backup): an export being
written (`export_prepare_dump`: one dump file made empty in `<instance>.new` and the token of
its stream, `export_finalize`: its config.ini, and the directory replaces the instance's
export), removing one (or a partial one), listing and reading them, and streaming a dump to a
node importing it (`export_send`). The disks' own streams are `disk_calls.BlockdevExport` and
`BlockdevImportPrepare` with the instance's OS (its `export` and `import` scripts)."""

from __future__ import annotations

import msgspec

from herder.core import names, paths
from herder.core.backupsched import keep_count
from herder.core.rpcdefs.base import AnswerT, Call, instance_name
from herder.core.rpcdefs.disk_calls import ExportTarget, Transferred, import_token

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
