"""What `cluster verify` asks a node about itself (Ganeti's backend.VerifyNode): the volume
groups and PVs, the bridges and links, DRBD's usermode helper and version, the file storage
paths, the OS definitions, the files the hypervisor parameters name, the certificates and the
clock, its libvirtd (`noded.libvirtcheck`). The node only reports; the master judges
(`herder.core.nodeverify`)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from herder import __version__
from herder.core import node_certs
from herder.core.rpcdefs import node_calls
from herder.noded import osdef
from herder.noded.bdev import file as file_bdev
from herder.noded.bdev import plain
from herder.noded.bdev.base import BlockDevError, Host
from herder.noded.bdev.drbd import kernel_info

SYS_CLASS_NET = Path("/sys/class/net")
# Ganeti's _FILE_CHECK: a hypervisor parameter naming a file of the node
NOT_A_FILE = "not found or not a file"


def missing_bridges(names: Sequence[str], sys_net: Path = SYS_CLASS_NET) -> list[str]:
    """The bridges of `names` this node lacks (Ganeti's utils.BridgeExists: sysfs says it is
    a bridge)."""
    return [name for name in names if not (sys_net / name / "bridge").is_dir()]


def missing_links(names: Sequence[str], sys_net: Path = SYS_CLASS_NET) -> list[str]:
    """The network interfaces of `names` this node lacks (an Open vSwitch's NIC links)."""
    return [name for name in names if not (sys_net / name).exists()]


def drbd_helper(host: Host) -> tuple[bool, str]:
    """(True, the DRBD module's usermode helper) or (False, why it cannot be read): Ganeti's
    DRBD8.GetUsermodeHelper and its messages."""
    path = host.drbd_usermode_helper
    try:
        lines = host.read_text(path).splitlines()
    except FileNotFoundError as err:
        return False, (f"The file {path} cannot be opened, check if the module is loaded"
                       f" ({err})")
    except OSError as err:
        return False, f"Can't read DRBD helper file {path}: {err}"
    if not lines or not lines[0]:
        return False, f"Can't read any data from {path}"
    return True, lines[0]


def drbd_version(host: Host) -> str:
    """The DRBD kernel module's version as Ganeti's GetVersionString writes it, or why it
    cannot be read."""
    try:
        version = kernel_info(host).version
    except BlockDevError as err:
        return str(err)
    return (f"{version.major}.{version.minor}.{version.point} "
            f"(api:{version.api}/proto:{version.proto})")


def storage_path_problem(host: Host, path: str) -> str | None:
    """Why a file storage directory cannot be used (Ganeti's CheckFileStoragePath), or None."""
    try:
        file_bdev.check_path(host, path, exact_match_ok=True)
    except BlockDevError as err:
        return str(err)
    if not os.path.isdir(path):
        return f"Path '{path}' is not existing or not a directory."
    if not os.access(path, os.W_OK):
        return f"Path '{path}' is not writable"
    return None


def wrong_storage_paths(host: Host) -> list[str]:
    """The allowed-paths file's entries that are forbidden (Ganeti's
    ComputeWrongFileStoragePaths: a system directory or below one)."""
    forbidden = file_bdev.FORBIDDEN_PREFIXES
    return sorted(path for path in file_bdev.allowed_paths(host)
                  if os.path.normpath(path) in forbidden
                  or any(file_bdev.is_below_dir(prefix, path) for prefix in forbidden))


def os_entries(search_path: Sequence[Path]) -> list[node_calls.OsEntry]:
    """Every OS directory of the search path, valid or not (Ganeti's NV_OSLIST)."""
    entries = []
    for found in osdef.diagnose_oses(search_path):
        definition = found.os
        entries.append(node_calls.OsEntry(
            name=found.name, path=str(found.path), valid=definition is not None,
            diagnose=found.error or "",
            variants=list(definition.variants) if definition else [],
            parameters=[f"{n}: {d}" for n, d in definition.parameters] if definition else [],
            api_versions=list(definition.api_versions) if definition else []))
    return entries


def hvparam_failures(checks: Sequence[node_calls.HvFileParams]) -> list[tuple[str, str, str]]:
    """(source, hypervisor, Ganeti's message) for each parameter naming a file the node lacks
    (hv_base.ValidateParameters' file checks)."""
    failures = []
    for check in checks:
        for name, path in sorted(check.files.items()):
            if not os.path.isfile(path):
                failures.append((check.source, check.hypervisor,
                                 f"Parameter '{name}' fails validation: {NOT_A_FILE} (current "
                                 f"value: '{path}')"))
    return failures


def certificate_validity(paths: Sequence[Path]) -> list[node_calls.CertificateValidity]:
    """The validity of each certificate file that exists (or why it cannot be read)."""
    found = []
    for path in paths:
        try:
            pem = path.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as err:
            found.append(node_calls.CertificateValidity(path=str(path), error=str(err)))
            continue
        try:
            not_before, not_after = node_certs.validity(pem)
        except node_certs.CertificateError as err:
            found.append(node_calls.CertificateValidity(path=str(path), error=str(err)))
            continue
        found.append(node_calls.CertificateValidity(path=str(path), not_before=not_before,
                                                    not_after=not_after))
    return found


def lvm(host: Host, vg_name: str) -> tuple[dict[str, int], list[node_calls.PvEntry] | None]:
    """The node's volume groups (name -> MiB) and the PVs of `vg_name` (None: `pvs` failed)."""
    pvs = plain.pv_info(host, [vg_name], filter_allocatable=False)
    vgs = {name: int(size) for _, size, name in
           plain.vg_info(host, [], filter_readonly=False) or []}
    return vgs, None if pvs is None else [
        node_calls.PvEntry(name=pv.name, vg_name=pv.vg_name, size=pv.size, free=pv.free)
        for pv in pvs]


def verify(call: node_calls.NodeVerify, *, host: Host, os_path: Sequence[Path],
           certificates: Sequence[Path], hypervisor_problem: str | None,
           kvm: node_calls.KvmVerdict | None,
           libvirt: node_calls.LibvirtFacts | None = None) -> node_calls.NodeVerifyAnswer:
    """Everything `call` asks for; the time last, as Ganeti's (the master brackets it)."""
    answer = node_calls.NodeVerifyAnswer(time=0.0, version=__version__,
                                         hypervisor=hypervisor_problem, kvm=kvm,
                                         libvirt=libvirt)
    if call.vg_name is not None:
        answer.vgs, answer.pvs = lvm(host, call.vg_name)
    if call.bridges:
        answer.missing_bridges = missing_bridges(call.bridges)
    if call.links:
        answer.missing_links = missing_links(call.links)
    if call.drbd:
        answer.drbd_helper = drbd_helper(host)
        answer.drbd_version = drbd_version(host)
    for path in call.storage_paths:
        if (problem := storage_path_problem(host, path)) is not None:
            answer.storage_paths[path] = problem
    if call.accepted_storage_paths:
        answer.wrong_storage_paths = wrong_storage_paths(host)
    if call.oses:
        answer.oses = os_entries(os_path)
    answer.hvparams = hvparam_failures(call.hvparams)
    answer.certificates = certificate_validity(certificates)
    answer.time = time.time()
    return answer
