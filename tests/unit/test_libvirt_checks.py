"""issue 34 item 2, the pure parts: the systemd drop-ins `herder node libvirt-tls` writes on a
Debian host (and only when they differ), the restart's order and retry, what the node reads
for `cluster verify` (/proc/net/tcp, libvirt's settings, QEMU's user, directory traversal) and
the master's decisions on it (`core.nodeverify.libvirt_problems`)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from herder.core import model, node_certs
from herder.core.cluster_secrets import self_signed_certificate
from herder.core.errors import HerderError
from herder.core.nodeverify import libvirt_problems
from herder.core.rpcdefs.node_calls import LibvirtFacts
from herder.noded import libvirt_systemd, libvirtcheck
from tests.conftest import build_config

# /proc/net/tcp and tcp6 as the kernel writes them (header, then one line per socket)
TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid
   0: 0A0012C6:4082 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0
   1: 00000000:4082 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0
   2: 0A0012C6:4082 0B0012C6:9C40 01 00000000:00000000 00:00000000 00000000     0
   3: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0
"""
TCP6 = """  sl  local_address                         remote_address                        st
   0: 00000000000000000000000000000000:4082 00000000000000000000000000000000:0000 0A
   1: B80D0120000000000000000001000000:4082 00000000000000000000000000000000:0000 0A
"""


def test_the_drop_ins_put_tls_on_the_primary_ip_only_and_the_sockets_root_s() -> None:
    units = libvirt_systemd.drop_ins("198.18.0.10")
    # the empty ListenStream= first: Debian's own [::]:16514 is dropped, not kept beside it
    assert units["libvirtd-tls.socket"] == \
        "[Socket]\nListenStream=\nListenStream=198.18.0.10:16514\n"
    assert units["libvirtd.socket"] == units["libvirtd-ro.socket"] == \
        "[Socket]\nSocketMode=0600\n"
    assert "ListenStream=[2001:db8::1]:16514\n" in \
        libvirt_systemd.drop_ins("2001:db8::1")["libvirtd-tls.socket"]


def test_drop_ins_are_written_only_when_they_differ(tmp_path: Path) -> None:
    assert sorted(libvirt_systemd.write_drop_ins("198.18.0.10", tmp_path)) == \
        ["libvirtd-ro.socket", "libvirtd-tls.socket", "libvirtd.socket"]
    path = tmp_path / "libvirtd-tls.socket.d" / "herder.conf"
    assert "198.18.0.10:16514" in path.read_text()
    stamp = path.stat().st_mtime_ns
    assert libvirt_systemd.write_drop_ins("198.18.0.10", tmp_path) == []
    assert path.stat().st_mtime_ns == stamp
    (tmp_path / "libvirtd.socket.d" / "herder.conf").write_text("[Socket]\nSocketMode=0666\n")
    assert libvirt_systemd.write_drop_ins("198.18.0.10", tmp_path) == ["libvirtd.socket"]
    assert libvirt_systemd.write_drop_ins("198.18.0.11", tmp_path) == ["libvirtd-tls.socket"]


class Systemctl:
    """systemctl's answers: the first `failing` start jobs fail."""

    def __init__(self, failing: int = 0) -> None:
        self.calls: list[list[str]] = []
        self.failing = failing

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        code = 0
        if argv[0] == "start" and self.failing:
            self.failing -= 1
            code = 1
        return subprocess.CompletedProcess(["systemctl", *argv], code, "", "start failed")


def test_the_restart_stops_sockets_and_service_in_one_job_and_retries(tmp_path: Path) -> None:
    run = Systemctl(failing=1)
    done = libvirt_systemd.configure("198.18.0.10", restart_needed=False, directory=tmp_path,
                                     run=run)
    assert done.restarted and done.tries == 2
    units = [*libvirt_systemd.SOCKETS, libvirt_systemd.SERVICE]
    assert run.calls == [["daemon-reload"], ["enable", "libvirtd-tls.socket"],
                         ["stop", *units], ["reset-failed", *units], ["start", *units],
                         ["stop", *units], ["reset-failed", *units], ["start", *units]]
    # nothing changed and nothing asked for: enabled again (cheap), no restart
    again = Systemctl()
    done = libvirt_systemd.configure("198.18.0.10", restart_needed=False, directory=tmp_path,
                                     run=again)
    assert not done.restarted and again.calls == [["enable", "libvirtd-tls.socket"]]
    with pytest.raises(HerderError, match="did not start after 3 tries"):
        libvirt_systemd.restart(Systemctl(failing=3), pause=0)


def test_systemd_applies_only_with_systemd_running_and_libvirtd_s_socket(tmp_path: Path) -> None:
    assert not libvirt_systemd.applies(tmp_path)
    (tmp_path / "run" / "systemd" / "system").mkdir(parents=True)
    assert not libvirt_systemd.applies(tmp_path)  # a systemd host without Debian's libvirt
    (tmp_path / "lib" / "systemd" / "system").mkdir(parents=True)
    (tmp_path / "lib" / "systemd" / "system" / "libvirtd.socket").write_text("")
    assert libvirt_systemd.applies(tmp_path)


def test_listening_sockets_from_proc_net_tcp() -> None:
    # 198.18.0.10 and 0.0.0.0 listen on 16514 (0x4082); the established one and 8080 do not
    assert libvirtcheck.listening_in(TCP, 16514) == ["198.18.0.10:16514", "0.0.0.0:16514"]
    assert libvirtcheck.listening_in(TCP6, 16514) == ["[::]:16514", "[2001:db8::1]:16514"]
    assert libvirtcheck.listening_in(TCP, 16509) == []


def test_libvirt_settings_and_qemu_s_user() -> None:
    text = ('# user = "nobody"\nuser = "root"\ntls_allowed_dn_list = ["CN=a",\n  "CN=b"]\n'
            'user = "libvirt-qemu"\n')
    assert libvirtcheck.setting(text, "user") == "libvirt-qemu"  # the last one wins
    assert libvirtcheck.setting(text, "tls_allowed_dn_list") == ["CN=a", "CN=b"]
    assert libvirtcheck.setting(text, "group") is None
    assert libvirtcheck.qemu_user('user = "+64055"\n', lambda name: True) == "+64055"
    assert libvirtcheck.qemu_user("", lambda name: True) == "libvirt-qemu"  # Debian's default
    assert libvirtcheck.qemu_user("", lambda name: False) == "root"


def test_traversal_takes_the_first_class_that_matches() -> None:
    def st(mode: int, uid: int = 0, gid: int = 0) -> os.stat_result:
        return os.stat_result((0o040000 | mode, 0, 0, 2, uid, gid, 0, 0, 0, 0))

    assert libvirtcheck.may_traverse(st(0o711), 999, {108})
    assert not libvirtcheck.may_traverse(st(0o750), 999, {108})
    assert libvirtcheck.may_traverse(st(0o750, gid=108), 999, {108})
    assert not libvirtcheck.may_traverse(st(0o607, uid=999), 999, {108})  # owner: no x
    assert libvirtcheck.may_traverse(st(0o700), 0, set())


@pytest.fixture
def storage() -> Iterator[Path]:
    """A storage directory under /tmp (pytest's own base is root's 0700: nobody gets there)."""
    with tempfile.TemporaryDirectory(prefix="debian5-storage-") as directory:
        base = Path(directory)
        base.chmod(0o755)
        yield base


def test_an_instance_directory_qemu_cannot_traverse_is_found(storage: Path) -> None:
    instance = storage / "inst1.example.com"
    instance.mkdir(mode=0o711)
    assert libvirtcheck.untraversable([str(storage)], "nobody") == {}
    assert libvirtcheck.untraversable([str(storage)], "root") == {}
    instance.chmod(0o700)
    found = libvirtcheck.untraversable([str(storage)], "nobody")
    assert found == {str(storage): f"Path '{instance}' cannot be traversed by QEMU's user "
                                   "nobody (mode 0700, owner root:root)"}
    instance.chmod(0o711)
    storage.chmod(0o750)  # the storage directory itself
    assert f"Path '{storage}' cannot" in libvirtcheck.untraversable([str(storage)],
                                                                     "nobody")[str(storage)]


def test_libvirt_tls_grants_qemu_s_user_the_traversal_it_lacks(storage: Path) -> None:
    instance = storage / "inst1.example.com"
    instance.mkdir(mode=0o700)
    storage.chmod(0o750)
    assert libvirtcheck.grant_traversal([str(storage)], "nobody") == [storage, instance]
    assert (storage.stat().st_mode & 0o777, instance.stat().st_mode & 0o777) == (0o751, 0o701)
    assert libvirtcheck.untraversable([str(storage)], "nobody") == {}
    assert libvirtcheck.grant_traversal([str(storage)], "nobody") == []


# the decisions of cluster verify


@pytest.fixture
def config() -> model.ConfigData:
    config = build_config(nodes=2, drbd_instances=0, plain_instances=0)
    config.cluster.enabled_disk_templates = ["file", "sharedfile"]
    return config


def _node(config: model.ConfigData) -> model.Node:
    return config.find_node("node1")


def _clean(config: model.ConfigData) -> LibvirtFacts:
    node = _node(config)
    ca = self_signed_certificate("herder-libvirt-test")
    config.cluster.libvirt_cas = [node_certs.certificate_pem(ca).decode()]
    return LibvirtFacts(
        systemd=True, configured=True, tls_listen=[f"{node.primary_ip}:16514"],
        sockets={"/run/libvirt/libvirt-sock": 0o600, "/run/libvirt/libvirt-sock-ro": 0o600},
        ca_digests=[node_certs.digest(ca)],
        certificate=node_certs.certificate_pem(node_certs.issue(ca, node.name)).decode(),
        qemu_user="libvirt-qemu")


def test_a_node_set_up_by_libvirt_tls_has_no_libvirt_problem(config: model.ConfigData) -> None:
    assert libvirt_problems(config, _node(config), _clean(config)) == []


def test_tls_on_every_address_or_not_listening_is_reported(config: model.ConfigData) -> None:
    facts = _clean(config)
    primary = facts.tls_listen[0]
    facts.tls_listen = ["[::]:16514"]
    assert libvirt_problems(config, _node(config), facts) == [
        ("ENODEHV", f"libvirt's TLS port listens on [::]:16514, not on the node's primary IP "
                    f"only ({primary})")]
    facts.tls_listen = []
    assert libvirt_problems(config, _node(config), facts) == [
        ("ENODEHV", f"libvirt's TLS port is not listening on {primary} (live migrations to "
                    "this node fail)")]


def test_a_socket_others_may_write_is_reported(config: model.ConfigData) -> None:
    facts = _clean(config)
    facts.sockets["/run/libvirt/libvirt-sock"] = 0o666
    facts.sockets["/run/libvirt/libvirt-sock-ro"] = None  # none: nothing to say
    assert libvirt_problems(config, _node(config), facts) == [
        ("ENODEHV", "libvirt's unix socket /run/libvirt/libvirt-sock is usable by users other "
                    "than root (mode 0666; herder node libvirt-tls makes it root's alone)")]


def test_stale_trust_a_foreign_certificate_and_a_dn_list_are_reported(
        config: model.ConfigData) -> None:
    facts = _clean(config)
    old = self_signed_certificate("herder-libvirt-old")
    facts.ca_digests.append(node_certs.digest(old))  # a rotation's old CA left in
    facts.certificate = node_certs.certificate_pem(node_certs.issue(old, "node2")).decode()
    facts.dn_list = ["CN=node1.example.com", "CN=gone.example.com"]
    names = sorted(n.name for n in config.nodes.values())
    assert [message for _, message in libvirt_problems(config, _node(config), facts)] == [
        "libvirt does not trust the cluster's current libvirt CA(s): 1 other CA(s) trusted, "
        "0 current one(s) missing",
        "libvirt's certificate is not issued by the cluster's current libvirt CA",
        "libvirt's certificate is for node2, not for this node",
        f"libvirtd's tls_allowed_dn_list is not the cluster's current nodes (extra: "
        f"{', '.join(sorted({'node1.example.com', 'gone.example.com'} - set(names)))}; "
        f"missing: {', '.join(sorted(set(names) - {'node1.example.com'}))})"]


def test_an_unconfigured_libvirtd_and_untraversable_storage(config: model.ConfigData) -> None:
    facts = LibvirtFacts(systemd=True, configured=False,
                         untraversable={config.cluster.shared_file_storage_dir: "Path 'x' ..."})
    assert libvirt_problems(config, _node(config), facts) == [
        ("ENODESHAREDFILESTORAGEPATHUNUSABLE",
         "The configured sharedfile storage path is unusable: Path 'x' ..."),
        ("ENODEHV", "libvirtd is not configured for TLS by herder on this node (live "
                    "migrations to it fail): run herder node libvirt-tls there")]
    config.cluster.enabled_disk_templates = ["file"]  # sharedfile not enabled: not judged
    assert [code for code, _ in libvirt_problems(config, _node(config), facts)] == ["ENODEHV"]
