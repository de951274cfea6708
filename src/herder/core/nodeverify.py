"""`cluster verify`'s node checks, judged (pure logic): what the master asks each node
(`node_verify_request`, Ganeti's node_verify_param of LUClusterVerifyGroup) and what it makes of
the answers (`node_verify_findings`), with Ganeti's error codes and messages: ENODELVM (the VG,
its size, its PVs), ENODENET (bridges, links), ENODEDRBDHELPER (the usermode helper, the DRBD
version across the group), ENODEFILESTORAGEPATHUNUSABLE / ENODESHAREDFILESTORAGEPATHUNUSABLE /
ENODEFILESTORAGEPATHS (file storage), ENODEOS (OS definitions against a reference node), ENODEHV
(the hypervisor and the files its parameters name), ENODETIME (clock skew), ENODEVERSION and
ECLUSTERCERT (certificate expiry); herder's libvirtd checks (`libvirt_problems`, docs/compat.md
B69): ENODEHV (libvirtd's TLS port on the primary IP only, its unix sockets root's),
ECLUSTERCERT (libvirt's CAs and certificate the cluster's current ones) and
ENODEFILESTORAGEPATHUNUSABLE / ENODESHAREDFILESTORAGEPATHUNUSABLE (QEMU's user traverses the
storage directories to its disks)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from herder.core import libvirtd_conf, model, node_certs, params
from herder.core.rpcdefs.node_calls import (
    CertificateValidity,
    HvFileParams,
    LibvirtFacts,
    NodeVerify,
    NodeVerifyAnswer,
    OsEntry,
)
from herder.core.verify import Finding

MIN_VG_SIZE = 20480  # MiB, Ganeti's constants.MIN_VG_SIZE
NODE_MAX_CLOCK_SKEW = 150.0  # seconds, Ganeti's constants.NODE_MAX_CLOCK_SKEW
CERT_EXPIRATION_WARN = 30  # days, Ganeti's SSL_CERT_EXPIRATION_WARN
CERT_EXPIRATION_ERROR = 7  # days, Ganeti's SSL_CERT_EXPIRATION_ERROR
# the hypervisor parameters naming files of the node (Ganeti's *_FILE_CHECK parameters)
HV_FILE_PARAMS = {"kvm": ("kvm_path", "kernel_path", "initrd_path")}
# the codes these checks report (Ganeti's CV_E* names)
CODES = frozenset({"ENODELVM", "ENODENET", "ENODEDRBDHELPER", "ENODEFILESTORAGEPATHUNUSABLE",
                   "ENODESHAREDFILESTORAGEPATHUNUSABLE", "ENODEFILESTORAGEPATHS", "ENODEOS",
                   "ENODEHV", "ENODETIME", "ENODEVERSION", "ECLUSTERCERT", "ENODERPC"})


@dataclass(frozen=True)
class Window:
    """When the master sent the node_verify calls and when the last answer came (Ganeti's
    nvinfo_starttime and nvinfo_endtime), for the clock check."""

    start: float
    end: float


def _bridged_links(config: model.ConfigData, instances: Sequence[model.Instance]
                   ) -> tuple[list[str], list[str]]:
    """The bridges (bridged NICs) and links (Open vSwitch NICs) the cluster's default NIC and
    the group's instances' NICs need on every node (Ganeti's NV_BRIDGES)."""
    bridges: set[str] = set()
    links: set[str] = set()
    nics = [params.fill(params.NIC_FAMILY.defaults(), config.cluster.nicparams)]
    for inst in instances:
        group = config.instance_group(inst)
        nics += [config.filled_nicparams(nic, group) for nic in inst.nics]
    for nic in nics:
        if nic.get("mode") == "bridged" and nic.get("link"):
            bridges.add(str(nic["link"]))
        elif nic.get("mode") == "openvswitch" and nic.get("link"):
            links.add(str(nic["link"]))
    return sorted(bridges), sorted(links)


def _hv_files(config: model.ConfigData, instances: Sequence[model.Instance]
              ) -> list[HvFileParams]:
    """Ganeti's _GetAllHypervisorParameters, reduced to the parameters naming files: the
    cluster's per enabled hypervisor, each OS's override, each instance's own."""
    c = config.cluster
    layers: list[tuple[str, str, params.Params]] = []
    for hv in c.enabled_hypervisors:
        if hv in HV_FILE_PARAMS:
            layers.append(("cluster", hv, params.fill(params.hv_family(hv).defaults(),
                                                      c.hvparams.get(hv))))
    for os_name, per_hv in sorted(c.os_hvp.items()):
        for hv, overrides in per_hv.items():
            if overrides and hv in HV_FILE_PARAMS and hv in c.enabled_hypervisors:
                layers.append((f"os {os_name}", hv, params.fill(
                    params.hv_family(hv).defaults(), c.hvparams.get(hv), overrides)))
    for inst in instances:
        if inst.hvparams and inst.hypervisor in HV_FILE_PARAMS:
            layers.append((f"instance {inst.name}", inst.hypervisor,
                           config.filled_hvparams(inst)))
    return [HvFileParams(source=source, hypervisor=hv,
                         files={name: str(filled[name]) for name in HV_FILE_PARAMS[hv]
                                if filled.get(name)})
            for source, hv, filled in layers]


def node_verify_request(config: model.ConfigData, node: model.Node,
                        instances: Sequence[model.Instance]) -> NodeVerify:
    """What the master asks `node` (Ganeti's node_verify_param): the LVM checks when an LVM
    template is enabled, DRBD's when drbd is (and a helper is set), the file storage paths of
    the enabled file templates (the allowed-paths file's bad entries on the master only), the
    bridges and links and the hypervisor's files on VM-capable nodes."""
    c = config.cluster
    templates = set(c.enabled_disk_templates)
    bridges, links = _bridged_links(config, instances) if node.vm_capable else ([], [])
    storage_paths = [path for template, path in (("file", c.file_storage_dir),
                                                 ("sharedfile", c.shared_file_storage_dir))
                     if template in templates and path]
    lvm = bool(c.volume_group_name and params.DTS_LVM.intersection(templates))
    return NodeVerify(
        vg_name=c.volume_group_name if lvm and node.vm_capable else None,
        bridges=bridges, links=links,
        drbd=node.vm_capable and "drbd" in templates and bool(c.drbd_usermode_helper),
        storage_paths=storage_paths,
        accepted_storage_paths=node.uuid == c.master_node and bool(
            templates & {"file", "sharedfile"}),
        oses=node.vm_capable,
        hvparams=_hv_files(config, instances) if node.vm_capable else [],
        libvirt=node.vm_capable and "kvm" in c.enabled_hypervisors)


class _Judge:
    """The findings of one group's node answers, in the order Ganeti reports them."""

    def __init__(self, config: model.ConfigData, window: Window) -> None:
        self.config = config
        self.window = window
        self.findings: list[Finding] = []

    def error(self, code: str, node: str, message: str, *, warning: bool = False) -> None:
        self.findings.append(Finding("warning" if warning else "error", code, f"node {node}",
                                     message))

    def node(self, node: model.Node, asked: NodeVerify, answer: NodeVerifyAnswer,
             master_version: str) -> None:
        name = node.name
        if answer.version != master_version:
            self.error("ENODEVERSION", name, f"software version mismatch: master "
                       f"{master_version}, node {answer.version}", warning=True)
        self.time(name, answer.time)
        if node.vm_capable:
            self.hypervisor(name, answer)
        if asked.vg_name is not None:
            self.lvm(name, asked.vg_name, answer)
        if asked.bridges and answer.missing_bridges:
            self.error("ENODENET", name,
                       f"missing bridges: {', '.join(sorted(answer.missing_bridges))}")
        if asked.links and answer.missing_links:
            self.error("ENODENET", name,
                       f"missing links: {', '.join(sorted(answer.missing_links))}")
        if asked.drbd:
            self.drbd_helper(name, answer.drbd_helper)
        self.storage_paths(name, answer)
        if answer.wrong_storage_paths:
            self.error("ENODEFILESTORAGEPATHS", name, "Found forbidden file storage paths: "
                       f"{', '.join(answer.wrong_storage_paths)}")
        for cert in answer.certificates:
            self.certificate(name, cert)
        if asked.libvirt and answer.libvirt is not None:
            for code, message in libvirt_problems(self.config, node, answer.libvirt):
                self.error(code, name, message)

    def time(self, name: str, node_time: float) -> None:
        """Ganeti's _VerifyNodeTime."""
        if node_time < self.window.start - NODE_MAX_CLOCK_SKEW:
            diff = f"{abs(self.window.start - node_time):.1f}s"
        elif node_time > self.window.end + NODE_MAX_CLOCK_SKEW:
            diff = f"{abs(node_time - self.window.end):.1f}s"
        else:
            return
        self.error("ENODETIME", name,
                   f"Node time diverges by at least {diff} from master node time")

    def hypervisor(self, name: str, answer: NodeVerifyAnswer) -> None:
        for hv in self.config.cluster.enabled_hypervisors:
            if answer.hypervisor is not None:
                self.error("ENODEHV", name,
                           f"hypervisor {hv} verify failure: '{answer.hypervisor}'")
        for source, hv, why in answer.hvparams:
            self.error("ENODEHV", name,
                       f"hypervisor {hv} parameter verify failure (source {source}): {why}")
        if answer.kvm is not None and not answer.kvm.usable \
                and "kvm" in self.config.cluster.enabled_hypervisors:
            # herder's: the KVM probe's verdict (compat row: Ganeti has no probe)
            self.error("ENODEHV", name, f"hypervisor kvm: hardware virtualization is not "
                       f"used: {answer.kvm.reason}", warning=True)

    def lvm(self, name: str, vg_name: str, answer: NodeVerifyAnswer) -> None:
        """Ganeti's _UpdateVerifyNodeLVM (utils.CheckVolumeGroupSize, CheckNodePVs)."""
        if not answer.vgs:
            self.error("ENODELVM", name, "unable to check volume groups")
        else:
            size = answer.vgs.get(vg_name)
            if size is None:
                self.error("ENODELVM", name, f"volume group '{vg_name}' missing")
            elif size < MIN_VG_SIZE:
                self.error("ENODELVM", name, f"volume group '{vg_name}' too small "
                           f"({MIN_VG_SIZE} MiB required, {size} MiB found)")
        if answer.pvs is None:
            self.error("ENODELVM", name, "Can't get PV list from node")
            return
        for pv in answer.pvs:
            if ":" in pv.name:
                self.error("ENODELVM", name,
                           f"Invalid character ':' in PV '{pv.name}' of VG '{pv.vg_name}'")

    def drbd_helper(self, name: str, helper: tuple[bool, str] | None) -> None:
        """Ganeti's _VerifyNodeDrbdHelper."""
        wanted = self.config.cluster.drbd_usermode_helper
        if helper is None:
            self.error("ENODEDRBDHELPER", name, "no drbd usermode helper returned")
            return
        status, payload = helper
        if not status:
            self.error("ENODEDRBDHELPER", name,
                       f"drbd usermode helper check unsuccessful: {payload}")
        elif payload != wanted:
            self.error("ENODEDRBDHELPER", name, f"wrong drbd usermode helper: {payload}")

    def storage_paths(self, name: str, answer: NodeVerifyAnswer) -> None:
        """Ganeti's _VerifyFileStoragePaths and _VerifySharedFileStoragePaths."""
        c = self.config.cluster
        for template, path, code in (
                ("file", c.file_storage_dir, "ENODEFILESTORAGEPATHUNUSABLE"),
                ("sharedfile", c.shared_file_storage_dir, "ENODESHAREDFILESTORAGEPATHUNUSABLE")):
            why = answer.storage_paths.get(path)
            if why is not None and template in c.enabled_disk_templates:
                self.error(code, name,
                           f"The configured {template} storage path is unusable: {why}")

    def certificate(self, name: str, cert: CertificateValidity) -> None:
        """Ganeti's utils.VerifyCertificate (x509.VerifyX509Certificate's validity part)."""
        if cert.error is not None or cert.not_after is None or cert.not_before is None:
            self.error("ECLUSTERCERT", name,
                       f"Failed to load X509 certificate {cert.path}: {cert.error}")
            return
        now = time.time() + NODE_MAX_CLOCK_SKEW
        prefix = f"While verifying {cert.path}: "
        if cert.not_after < time.time():
            self.error("ECLUSTERCERT", name, f"{prefix}Certificate is expired (valid from "
                       f"{_format(cert.not_before)} to {_format(cert.not_after)})")
        elif cert.not_before > now:
            self.error("ECLUSTERCERT", name, f"{prefix}Certificate not yet valid (valid from "
                       f"{_format(cert.not_before)})", warning=True)
        else:
            days = int((cert.not_after - now) / (24 * 3600))
            message = f"{prefix}Certificate expires in about {days} days"
            if days <= CERT_EXPIRATION_ERROR:
                self.error("ECLUSTERCERT", name, message)
            elif days <= CERT_EXPIRATION_WARN:
                self.error("ECLUSTERCERT", name, message, warning=True)

    def drbd_versions(self, versions: Mapping[str, str]) -> None:
        """Ganeti's _VerifyGroupDRBDVersion: a warning per node when the group's differ."""
        if len(set(versions.values())) > 1:
            for name, version in sorted(versions.items()):
                self.error("ENODEDRBDHELPER", name, f"DRBD version mismatch: {version}",
                           warning=True)

    def oses(self, images: Sequence[tuple[str, list[OsEntry]]]) -> None:
        """Ganeti's _VerifyNodeOS against the first node that listed its OSes (the reference),
        and herder's: a VM-capable node without any valid OS definition can install nothing."""
        if not images:
            return
        ref_name, ref_list = images[0]
        reference = {entry.name: entry for entry in ref_list}
        for name, listed in images:
            here = {entry.name: entry for entry in listed}
            if not any(entry.valid for entry in listed):
                self.error("ENODEOS", name, "no valid OS definition found on the node")
            for os_name, entry in sorted(here.items()):
                self._one_os(name, entry, reference.get(os_name), ref_name)
            missing = sorted(set(reference) - set(here))
            if missing:
                self.error("ENODEOS", name, f"OSes present on reference node {ref_name} but "
                           f"missing on this node: {', '.join(missing)}")

    def _one_os(self, name: str, entry: OsEntry, base: OsEntry | None, ref_name: str) -> None:
        if not entry.valid:
            self.error("ENODEOS", name,
                       f"Invalid OS {entry.name} (located at {entry.path}): {entry.diagnose}")
        if base is None:
            self.error("ENODEOS", name,
                       f"Extra OS {entry.name} not present on reference node ({ref_name})")
            return
        if not base.valid:
            return
        for kind, mine, theirs in (
                ("API version", [str(v) for v in entry.api_versions],
                 [str(v) for v in base.api_versions]),
                ("variants list", entry.variants, base.variants),
                ("parameters", entry.parameters, base.parameters)):
            if set(mine) != set(theirs):
                self.error("ENODEOS", name, f"OS {kind} for {entry.name} differs from "
                           f"reference node {ref_name}: [{', '.join(sorted(mine))}] vs. "
                           f"[{', '.join(sorted(theirs))}]")


def _digests(pems: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for pem in pems:
        try:
            found.update(node_certs.bundle_digests(pem.encode()))
        except node_certs.CertificateError:
            continue
    return found


def libvirt_problems(config: model.ConfigData, node: model.Node,
                     facts: LibvirtFacts) -> list[tuple[str, str]]:
    """(code, message) for each way a node's libvirtd is not as herder sets it up (herder's
    checks; Ganeti configures no libvirt). Whether libvirt answers at all is ENODEHV's
    hypervisor check; these apply to a node whose libvirtd herder configured (`herder node
    libvirt-tls`), the unix sockets' modes and QEMU's access to the storage to every one."""
    found: list[tuple[str, str]] = []
    for path, mode in sorted(facts.sockets.items()):
        # connect(2) on a unix socket needs write permission: a group or other write bit lets
        # a local user who is not root drive libvirt (auth_unix_* is "none")
        if mode is not None and mode & 0o022:
            found.append(("ENODEHV", f"libvirt's unix socket {path} is usable by users other "
                                     f"than root (mode {mode:04o}; herder node libvirt-tls "
                                     "makes it root's alone)"))
    c = config.cluster
    for template, path, code in (
            ("file", c.file_storage_dir, "ENODEFILESTORAGEPATHUNUSABLE"),
            ("sharedfile", c.shared_file_storage_dir, "ENODESHAREDFILESTORAGEPATHUNUSABLE")):
        why = facts.untraversable.get(path)
        if why is not None and template in c.enabled_disk_templates:
            found.append((code, f"The configured {template} storage path is unusable: {why}"))
    if not facts.configured:
        found.append(("ENODEHV", "libvirtd is not configured for TLS by herder on this node "
                                 "(live migrations to it fail): run herder node libvirt-tls "
                                 "there"))
        return found
    wanted = libvirtd_conf.tls_listen(node.primary_ip)
    if not facts.tls_listen:
        found.append(("ENODEHV", f"libvirt's TLS port is not listening on {wanted} (live "
                                 "migrations to this node fail)"))
    elif facts.tls_listen != [wanted]:
        found.append(("ENODEHV", f"libvirt's TLS port listens on "
                                 f"{', '.join(facts.tls_listen)}, not on the node's primary IP "
                                 f"only ({wanted})"))
    found += _libvirt_trust(config, node, facts)
    return found


def _libvirt_trust(config: model.ConfigData, node: model.Node,
                   facts: LibvirtFacts) -> list[tuple[str, str]]:
    """libvirt's CA file and certificate against the cluster's current libvirt CAs (none on a
    cluster made before libvirt's own CA: nothing to compare)."""
    found: list[tuple[str, str]] = []
    if facts.certificate_error is not None:
        found.append(("ECLUSTERCERT", f"libvirt's TLS files cannot be read: "
                                      f"{facts.certificate_error}"))
    cas = config.cluster.libvirt_cas
    if cas:
        current = _digests(cas)
        trusted = set(facts.ca_digests)
        if trusted != current:
            stale, missing = len(trusted - current), len(current - trusted)
            found.append(("ECLUSTERCERT", f"libvirt does not trust the cluster's current "
                                          f"libvirt CA(s): {stale} other CA(s) trusted, "
                                          f"{missing} current one(s) missing"))
        if facts.certificate is None:
            if facts.certificate_error is None:
                found.append(("ECLUSTERCERT", "libvirt has no certificate on this node"))
        elif not any(node_certs.is_issued_by(facts.certificate.encode(), ca.encode())
                     for ca in cas):
            found.append(("ECLUSTERCERT", "libvirt's certificate is not issued by the "
                                          "cluster's current libvirt CA"))
    if facts.certificate is not None:
        try:
            named = node_certs.common_name(facts.certificate.encode())
        except node_certs.CertificateError as err:
            named = f"? ({err})"
        if named != node.name:
            found.append(("ECLUSTERCERT", f"libvirt's certificate is for {named}, not for "
                                          "this node"))
    if facts.dn_list is not None:
        # herder sets none (its CA signs only current nodes); one set by hand must not keep a
        # removed node or leave out a current one
        names = {dn.removeprefix("CN=") for dn in facts.dn_list}
        nodes = {n.name for n in config.nodes.values()}
        if names != nodes:
            found.append(("ECLUSTERCERT", "libvirtd's tls_allowed_dn_list is not the "
                                          "cluster's current nodes (extra: "
                                          f"{', '.join(sorted(names - nodes)) or '-'}; "
                                          f"missing: {', '.join(sorted(nodes - names)) or '-'})"))
    return found


def _format(stamp: float) -> str:
    """Ganeti's utils.FormatTime (in UTC here: the nodes' and the master's zones may differ)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp))


def node_verify_findings(config: model.ConfigData,
                         asked: Mapping[str, NodeVerify],
                         answers: Mapping[str, NodeVerifyAnswer | str],
                         window: Window, master_version: str) -> list[Finding]:
    """The findings of the node checks: `asked` and `answers` map a node UUID to its call and
    to its answer or why it could not be asked (reported elsewhere, as the domain list's)."""
    judge = _Judge(config, window)
    versions: dict[str, str] = {}
    images: list[tuple[str, list[OsEntry]]] = []
    ordered = sorted(answers.items(), key=lambda kv: config.node_name(kv[0]))
    for uuid, answer in ordered:
        node = config.nodes[uuid]
        if isinstance(answer, str):
            continue
        judge.node(node, asked[uuid], answer, master_version)
        if asked[uuid].drbd and answer.drbd_version:
            versions[node.name] = answer.drbd_version
        if answer.oses is not None:
            images.append((node.name, answer.oses))
    judge.drbd_versions(versions)
    judge.oses(images)
    return judge.findings
