"""The node's side of `cluster verify` (noded's `node_verify` handler, herder.noded.nodecheck) on
real things: a volume group on a loop device (LVM metadata), a bridge in a network namespace of
its own, OS directories, an allowed-paths file, certificates; the master's judgement of the
answer (herder.core.nodeverify) gives Ganeti's messages."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding

from herder.core import nodeverify
from herder.core.rpcdefs import node_calls
from herder.noded import rpc as noded_rpc
from herder.noded.bdev.base import Host
from herder.noded.node import Node, NodeSettings
from tests.conftest import build_config
from tests.noded.bdev.test_lvm_real import LoopVg, loop_vg  # noqa: F401 (the fixture)

DEBOOTSTRAP_OS = {"ganeti_api_version": "20\n", "variants.list": "default\nminimal\n",
                  "parameters.list": "dhcp whether to use DHCP\n"}


def os_dir(root: Path, name: str, files: dict[str, str]) -> Path:
    """An OS definition directory (Ganeti's layout: the five scripts and the lists)."""
    path = root / name
    path.mkdir(parents=True)
    for script in ("create", "import", "export", "rename", "verify"):
        (path / script).write_text("#!/bin/sh\nexit 0\n")
        (path / script).chmod(0o755)
    for file_name, text in files.items():
        (path / file_name).write_text(text)
    return path


def certificate(path: Path, *, days: int) -> None:
    """A self-signed certificate valid from a day ago for `days` more days (negative: expired)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "node")])
    now = datetime.datetime.now(datetime.UTC)
    start = now - datetime.timedelta(days=1) if days > 0 else now - datetime.timedelta(days=90)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1).not_valid_before(start)
            .not_valid_after(now + datetime.timedelta(days=days))
            .sign(key, hashes.SHA256()))
    path.write_bytes(cert.public_bytes(Encoding.PEM))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    daemon = Node(NodeSettings(node_name="node1.example.com", state_dir=tmp_path / "state",
                               run_dir=tmp_path / "run", hmac_key=b"k" * 40,
                               libvirt_uri="test:///default", file_root=tmp_path / "root",
                               os_path=(tmp_path / "os",)))
    yield daemon
    daemon.hv.close()


def ask(daemon: Node, call: node_calls.NodeVerify) -> node_calls.NodeVerifyAnswer:
    """The call as it crosses the wire: encoded, decoded at noded's door, answered, decoded."""
    raw = noded_rpc.dispatch(daemon, call.METHOD, call.arguments())
    return call.answer(msgspec.to_builtins(raw))


def judge(answers: dict[str, node_calls.NodeVerifyAnswer], asked: node_calls.NodeVerify,
          **cluster: object) -> list[tuple[str, str, str, str]]:
    config = build_config(nodes=len(answers), drbd_instances=0, plain_instances=0)
    for key, value in cluster.items():
        setattr(config.cluster, key, value)
    nodes = sorted(config.nodes.values(), key=lambda n: n.name)
    by_uuid = {n.uuid: answers[n.name.split(".")[0]] for n in nodes}
    window = nodeverify.Window(start=time.time() - 60, end=time.time())  # the calls' span
    found = nodeverify.node_verify_findings(config, dict.fromkeys(by_uuid, asked), by_uuid,
                                            window, answers[nodes[0].name.split(".")[0]].version)
    return [(f.severity, f.code, f.object, f.message) for f in found]


def test_a_node_that_can_run_nothing_is_reported(node: Node, tmp_path: Path) -> None:
    """No DRBD module, no OS, no allowed-paths file, no bridge, no kernel: each is an error with
    Ganeti's message; nothing on the node changed."""
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    asked = node_calls.NodeVerify(
        bridges=["hverifybr0"], drbd=True, storage_paths=[str(tmp_path / "files")],
        accepted_storage_paths=True,
        hvparams=[node_calls.HvFileParams(source="cluster", hypervisor="kvm",
                                          files={"kernel_path": "/boot/vmlinuz-3-kvmU"})])
    answer = ask(node, asked)
    assert answer.missing_bridges == ["hverifybr0"]
    assert answer.drbd_helper is not None and not answer.drbd_helper[0]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    found = judge({"node1": answer}, asked, enabled_disk_templates=["drbd", "file"],
                  file_storage_dir=str(tmp_path / "files"))
    errors = {(code, message) for severity, code, _, message in found if severity == "error"}
    assert ("ENODENET", "missing bridges: hverifybr0") in errors
    assert ("ENODEDRBDHELPER", "drbd usermode helper check unsuccessful: The file "
            "/sys/module/drbd/parameters/usermode_helper cannot be opened, check if the module "
            "is loaded ([Errno 2] No such file or directory: "
            "'/sys/module/drbd/parameters/usermode_helper')") in errors
    assert ("ENODEOS", "no valid OS definition found on the node") in errors
    assert ("ENODEHV", "hypervisor kvm parameter verify failure (source cluster): Parameter "
            "'kernel_path' fails validation: not found or not a file (current value: "
            "'/boot/vmlinuz-3-kvmU')") in errors
    unusable = [m for code, m in errors if code == "ENODEFILESTORAGEPATHUNUSABLE"]
    assert unusable == ["The configured file storage path is unusable: No paths are valid or "
                        f"path file '{tmp_path}/root/etc/ganeti/file-storage-paths' was not "
                        "accessible."]


def test_storage_paths_and_the_allowed_paths_file(node: Node, tmp_path: Path) -> None:
    allowed = tmp_path / "root/etc/ganeti/file-storage-paths"
    allowed.parent.mkdir(parents=True)
    good = tmp_path / "files"
    allowed.write_text(f"{good}\n/usr/lib/bad\n")
    asked = node_calls.NodeVerify(storage_paths=[str(good)], accepted_storage_paths=True,
                                  oses=False)
    missing = ask(node, asked)
    assert missing.storage_paths == {
        str(good): f"Path '{good}' is not existing or not a directory."}
    assert missing.wrong_storage_paths == ["/usr/lib/bad"]
    good.mkdir()
    assert ask(node, asked).storage_paths == {}
    found = judge({"node1": missing}, asked, enabled_disk_templates=["file"],
                  file_storage_dir=str(good))
    assert ("error", "ENODEFILESTORAGEPATHS", "node node1.example.com",
            "Found forbidden file storage paths: /usr/lib/bad") in found


def test_oses_are_compared_with_the_reference_node(node: Node, tmp_path: Path) -> None:
    """Ganeti's _VerifyNodeOS: an invalid definition, one the reference lacks, one that differs
    in its variants, one missing here."""
    os_root = tmp_path / "os"
    os_dir(os_root, "debootstrap", DEBOOTSTRAP_OS)
    os_dir(os_root, "image", {"ganeti_api_version": "20\n"})
    reference = ask(node, node_calls.NodeVerify())
    shutil.rmtree(os_root / "image")
    (os_root / "debootstrap/variants.list").write_text("default\n")
    os_dir(os_root, "broken", {})
    other = ask(node, node_calls.NodeVerify())
    found = judge({"node1": reference, "node2": other}, node_calls.NodeVerify())
    messages = [(code, obj, m) for _, code, obj, m in found if code == "ENODEOS"]
    here = "node node2.example.com"
    here, at = "node node2.example.com", f"{os_root}/broken"
    assert messages == [
        ("ENODEOS", here, f"Invalid OS broken (located at {at}): OS broken: API version file "
         f"{at}/ganeti_api_version is missing"),
        ("ENODEOS", here, "Extra OS broken not present on reference node (node1.example.com)"),
        ("ENODEOS", here, "OS variants list for debootstrap differs from reference node "
         "node1.example.com: [default] vs. [default, minimal]"),
        ("ENODEOS", here, "OSes present on reference node node1.example.com but missing on "
         "this node: image"),
    ]


def test_certificates_expiry_and_clock_skew(node: Node, tmp_path: Path) -> None:
    data = tmp_path / "root/var/lib/herder"
    data.mkdir(parents=True)
    certificate(data / "server.pem", days=5)
    certificate(data / "node.pem", days=-1)
    answer = ask(node, node_calls.NodeVerify(oses=False))
    assert [c.path.rsplit("/", 1)[1] for c in answer.certificates] == ["server.pem", "node.pem"]
    answer.time -= 3600  # as a node whose clock is an hour behind
    found = judge({"node1": answer}, node_calls.NodeVerify(oses=False))
    skew = [m for severity, code, _, m in found if (severity, code) == ("error", "ENODETIME")]
    assert len(skew) == 1 and skew[0].startswith("Node time diverges by at least 3") \
        and skew[0].endswith("s from master node time"), found
    certs = [(severity, m) for severity, code, _, m in found if code == "ECLUSTERCERT"]
    assert certs[0] == ("error", f"While verifying {data}/server.pem: Certificate expires in "
                        "about 4 days")
    assert certs[1][0] == "error" and certs[1][1].startswith(
        f"While verifying {data}/node.pem: Certificate is expired (valid from ")
    assert len(certs) == 2


def test_volume_group_and_pvs_from_lvm(node: Node, loop_vg: LoopVg) -> None:  # noqa: F811
    """A real VG on a loop device (256 MiB): below Ganeti's 20 GiB minimum; a VG the node
    lacks is missing."""
    node.disks.host = loop_vg.host(metadata_only=True)
    answer = ask(node, node_calls.NodeVerify(vg_name=loop_vg.vg, oses=False))
    assert answer.vgs is not None and set(answer.vgs) == {loop_vg.vg}
    assert answer.pvs is not None and [pv.vg_name for pv in answer.pvs] == [loop_vg.vg]
    size = answer.vgs[loop_vg.vg]
    found = judge({"node1": answer}, node_calls.NodeVerify(vg_name=loop_vg.vg, oses=False),
                  volume_group_name=loop_vg.vg)
    assert ("error", "ENODELVM", "node node1.example.com", f"volume group '{loop_vg.vg}' too "
            f"small (20480 MiB required, {size} MiB found)") in found
    absent = ask(node, node_calls.NodeVerify(vg_name="xenvg", oses=False))
    found = judge({"node1": absent}, node_calls.NodeVerify(vg_name="xenvg", oses=False))
    assert ("error", "ENODELVM", "node node1.example.com",
            "volume group 'xenvg' missing") in found


def test_bridges_and_links_in_a_network_namespace(tmp_path: Path) -> None:
    """The kernel's view: a bridge made in a network namespace of its own is found, a plain
    interface is a link but no bridge, a name that is nothing is missing."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        pytest.fail("needs root, unshare and ip (scripts/sysdeps.sh)")
    probe = textwrap.dedent("""
        import json
        from herder.noded import nodecheck
        names = ["hvbr0", "lo", "hvnothing0"]
        print(json.dumps([nodecheck.missing_bridges(names), nodecheck.missing_links(names)]))
    """)
    script = ("mount -t sysfs sysfs /sys && ip link add hvbr0 type bridge && "
              f"{sys.executable} -c '{probe}'")
    done = subprocess.run(["unshare", "--net", "--mount", "sh", "-c", script],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '[["lo", "hvnothing0"], ["hvnothing0"]]'


def test_the_drbd_helper_and_version_from_the_module_files(node: Node, tmp_path: Path) -> None:
    """The module's files as a DRBD 8.4 kernel writes them (Ganeti's usermode helper check:
    the wrong helper is named; differing versions across the group are warnings)."""
    helper = tmp_path / "usermode_helper"
    helper.write_text("/sbin/drbdadm\n")
    proc = tmp_path / "drbd"
    proc.write_text("version: 8.4.11 (api:1/proto:86-101)\nsrcversion: 0\n")
    node.disks.host = Host(drbd_usermode_helper=helper, proc_drbd=proc)
    one = ask(node, node_calls.NodeVerify(drbd=True, oses=False))
    assert one.drbd_helper == (True, "/sbin/drbdadm")
    assert one.drbd_version == "8.4.11 (api:1/proto:86)"
    proc.write_text("version: 8.3.16 (api:88/proto:86-97)\n")
    two = ask(node, node_calls.NodeVerify(drbd=True, oses=False))
    found = judge({"node1": one, "node2": two}, node_calls.NodeVerify(drbd=True, oses=False),
                  drbd_usermode_helper="/bin/true")
    assert ("error", "ENODEDRBDHELPER", "node node1.example.com",
            "wrong drbd usermode helper: /sbin/drbdadm") in found
    assert ("warning", "ENODEDRBDHELPER", "node node2.example.com",
            "DRBD version mismatch: 8.3.16 (api:88/proto:86)") in found
