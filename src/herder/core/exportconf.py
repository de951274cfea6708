"""An export's `config.ini`, as Ganeti 3.0 writes and reads it (backend.FinalizeExport,
cmdlib's `_ReadExportInfo`/`_ReadExportParams`): sections `export`, `instance`, `hypervisor`,
`backend`, `os`, `os_private`; one dump file per disk, named by `diskN_dump`. Pure: the text
from an instance, and a typed `ExportInfo` from a text (master and nodes share both)."""

from __future__ import annotations

import configparser
import io
import re

import msgspec

from herder.core import model, params
from herder.core.errors import HerderError

CONF_FILE = "config.ini"  # Ganeti's EXPORT_CONF_FILE
EXPORT_DIR = "/srv/herder/export"  # a node's exports (Ganeti's /srv/ganeti/export)
EXPORT_VERSION = 0  # Ganeti's EXPORT_VERSION
NIC_PARAMETERS = ("link", "mode", "vlan")  # Ganeti's NICS_PARAMETER_TYPES
_DUMP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")


class ExportConfError(HerderError):
    """A config.ini that is not an export's (one line for the operator)."""


class ExportDisk(msgspec.Struct, frozen=True, kw_only=True):
    ivname: str
    dump: str  # the file's name in the export directory
    size: int  # MiB
    name: str | None = None


class ExportNic(msgspec.Struct, frozen=True, kw_only=True):
    mac: str
    ip: str | None = None
    network: str | None = None
    name: str | None = None
    nicparams: dict[str, str] = msgspec.field(default_factory=dict)


class ExportInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What an export says about its instance; values as config.ini holds them (strings, the
    opcode's validation converts them)."""

    name: str
    os: str
    source: str
    timestamp: int
    disk_template: str
    hypervisor: str
    disks: tuple[ExportDisk, ...]
    nics: tuple[ExportNic, ...]
    tags: tuple[str, ...] = ()
    hvparams: dict[str, str] = msgspec.field(default_factory=dict)
    beparams: dict[str, str] = msgspec.field(default_factory=dict)
    osparams: dict[str, str] = msgspec.field(default_factory=dict)
    osparams_private: dict[str, str] = msgspec.field(default_factory=dict)


class _Parser(configparser.RawConfigParser):
    """Keys keep their case (Ganeti's SerializableConfigParser is a RawConfigParser too)."""

    def optionxform(self, optionstr: str) -> str:
        return optionstr


def _text(value: object) -> str:
    """Ganeti writes every value with `"%s" % value` (None as "None", True as "True")."""
    return f"{value}"


def build(config: model.ConfigData, inst: model.Instance, timestamp: int) -> str:
    """config.ini for `inst` exported now, its disks dumped as files named by their UUIDs
    (Ganeti names them by the snapshot disks' UUIDs)."""
    parser = _Parser()
    source = config.nodes.get(inst.primary_node)
    # Ganeti 3.0 writes the primary node's UUID as the source
    parser["export"] = {"version": str(EXPORT_VERSION), "timestamp": str(timestamp),
                        "source": inst.primary_node, "os": inst.os, "compression": "none"}
    be = config.filled_beparams(inst)
    section: dict[str, str] = {
        "name": inst.name, "maxmem": str(int(be["maxmem"])),
        "minmem": str(int(be["minmem"])),
        "memory": str(int(be["maxmem"])), "vcpus": str(int(be["vcpus"])),
        "disk_template": inst.disk_template, "hypervisor": inst.hypervisor,
        "tags": " ".join(inst.tags)}
    group = config.nodegroups.get(source.group) if source else None
    for index, nic in enumerate(inst.nics):
        filled = config.filled_nicparams(nic, group)
        section |= {f"nic{index}_mac": nic.mac, f"nic{index}_ip": _text(nic.ip),
                    f"nic{index}_network": _text(nic.network),
                    f"nic{index}_name": _text(nic.name)}
        section |= {f"nic{index}_{key}": _text(filled.get(key)) for key in NIC_PARAMETERS}
    section["nic_count"] = str(len(inst.nics))
    for index, disk in enumerate(inst.disks):
        section |= {f"disk{index}_ivname": disk.iv_name, f"disk{index}_dump": disk.uuid,
                    f"disk{index}_size": str(disk.size),
                    f"disk{index}_name": _text(disk.name)}
    section["disk_count"] = str(len(inst.disks))
    parser["instance"] = section
    parser["hypervisor"] = {k: _text(v) for k, v in config.filled_hvparams(inst).items()
                            if k not in params.HV_GLOBAL_PARAMS}
    parser["backend"] = {k: _text(v) for k, v in be.items()}
    parser["os"] = {k: _text(v) for k, v in inst.osparams.items()}
    parser["os_private"] = {}
    out = io.StringIO()
    parser.write(out)
    return out.getvalue()


def _optional(value: str | None) -> str | None:
    return None if value in (None, "", "None") else value


def _int(section: configparser.SectionProxy, key: str) -> int:
    try:
        return int(section[key])
    except KeyError:
        raise ExportConfError(f"config.ini: [instance] has no {key}") from None
    except ValueError:
        raise ExportConfError(f"config.ini: {key} is not a number: {section[key]!r}") from None


def _disks(ins: configparser.SectionProxy) -> tuple[ExportDisk, ...]:
    found = []
    for index in range(_int(ins, "disk_count")):
        dump = ins.get(f"disk{index}_dump", "")
        if not _DUMP_NAME.fullmatch(dump) or dump.startswith(".."):
            raise ExportConfError(f"config.ini: disk{index}_dump {dump!r} is not a file name")
        found.append(ExportDisk(ivname=ins.get(f"disk{index}_ivname", f"disk/{index}"),
                                dump=dump, size=_int(ins, f"disk{index}_size"),
                                name=_optional(ins.get(f"disk{index}_name"))))
    return tuple(found)


def _nics(ins: configparser.SectionProxy) -> tuple[ExportNic, ...]:
    found = []
    for index in range(_int(ins, "nic_count")):
        if f"nic{index}_mac" not in ins:
            raise ExportConfError(f"config.ini: [instance] has no nic{index}_mac")
        nicparams = {key: value for key in NIC_PARAMETERS
                     if (value := _optional(ins.get(f"nic{index}_{key}"))) is not None}
        found.append(ExportNic(mac=ins[f"nic{index}_mac"],
                               ip=_optional(ins.get(f"nic{index}_ip")),
                               network=_optional(ins.get(f"nic{index}_network")),
                               name=_optional(ins.get(f"nic{index}_name")),
                               nicparams=nicparams))
    return tuple(found)


def _section(parser: configparser.RawConfigParser, name: str) -> dict[str, str]:
    if not parser.has_section(name):
        return {}
    return {k: v for k, v in parser.items(name) if v != "None"}


def parse(text: str) -> ExportInfo:
    """An export's config.ini as `ExportInfo`; a text that is not one: ExportConfError."""
    parser = _Parser()
    try:
        parser.read_string(text)
    except configparser.Error as err:
        first = str(err).splitlines()[0]
        raise ExportConfError(f"config.ini cannot be read: {first}") from None
    if not parser.has_section("export") or not parser.has_section("instance"):
        raise ExportConfError("config.ini: the export has no [export] or [instance] section")
    exp, ins = parser["export"], parser["instance"]
    for key in ("os", "name", "disk_template"):
        section = exp if key == "os" else ins
        if not section.get(key):
            raise ExportConfError(f"config.ini: no {key} in [{section.name}]")
    try:
        timestamp = int(exp.get("timestamp", "0"))
    except ValueError:
        raise ExportConfError("config.ini: the timestamp is not a number") from None
    return ExportInfo(
        name=ins["name"], os=exp["os"], source=exp.get("source", ""), timestamp=timestamp,
        disk_template=ins["disk_template"], hypervisor=ins.get("hypervisor", ""),
        disks=_disks(ins), nics=_nics(ins), tags=tuple(ins.get("tags", "").split()),
        hvparams=_section(parser, "hypervisor"), beparams=_section(parser, "backend"),
        osparams=_section(parser, "os"), osparams_private=_section(parser, "os_private"))
