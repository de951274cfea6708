"""libvirt's own CA and its rotations, with real certificates and real node daemons called
in-process (issue 35 item 1; the simulated cluster's libvirtds: test_trust_sim.py).

The master issues each node's libvirt certificate for a key the node makes; removing a node
makes a new CA, of which the removed node gets nothing, while the others trust the old and the
new CA until each has its new certificate; a certificate another CA issued (the cluster CA,
which every node holds) is never a libvirt certificate.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from herder.core import libvirtd_conf, model, node_certs, ssconf
from herder.core.cluster_secrets import self_signed_certificate
from herder.core.errors import HerderError
from herder.core.noderpc import RpcTransport
from herder.core.rpcdefs import file_calls
from herder.core.store import FileStore
from herder.masterd import libvirt_trust
from herder.noded import libvirt_tls
from herder.noded import rpc as noded_rpc
from herder.noded.node import Node, NodeSettings
from tests.conftest import build_config

KEY = b"0123456789abcdef0123456789abcdef01234567\n"


class InProcessRpc(RpcTransport):
    """Node RPCs answered by each node's handlers, in this process; `down` do not answer."""

    def __init__(self, daemons: dict[str, Node]) -> None:
        self.daemons = daemons
        self.down: set[str] = set()
        self.calls: list[tuple[str, str]] = []

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        self.calls.append((node.name, method))
        if node.name in self.down:
            raise HerderError(f"{node.name}: connection refused")
        return msgspec.to_builtins(noded_rpc.dispatch(self.daemons[node.name], method,
                                                      dict(args)))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[model.ConfigData, InProcessRpc, Path]]:
    config = build_config(3)
    config_path = tmp_path / "master" / "config.json"
    config_path.parent.mkdir()
    FileStore(config_path).create(config)
    daemons = {}
    for node in config.nodes.values():
        root = tmp_path / node.name
        daemons[node.name] = Node(NodeSettings(
            node_name=node.name, state_dir=root / "state", run_dir=root / "run", hmac_key=KEY,
            libvirt_uri="test:///default", file_root=root / "root",
            config_dir=root / "cluster"))
    yield FileStore(config_path).load(), InProcessRpc(daemons), config_path
    for daemon in daemons.values():
        daemon.hv.close()


def pki(rpc: InProcessRpc, name: str) -> libvirtd_conf.LibvirtPki:
    return libvirtd_conf.LibvirtPki(rpc.daemons[name].data_dir / "libvirt-pki")


def publisher(rpc: InProcessRpc, config_path: Path, config: model.ConfigData,
              published: list[list[str]]) -> libvirt_trust.Publish:
    """Records the CAs in the config and writes them as every answering node's ssconf."""
    def publish(cas: list[str]) -> None:
        published.append(list(cas))
        with FileStore(config_path).update() as changed:
            changed.cluster.libvirt_cas = list(cas)
        for node in config.nodes.values():
            if node.name not in rpc.down:
                rpc.call(node, file_calls.WriteSsconf(
                    values={libvirtd_conf.SSCONF_CAS: "".join(cas)}))

    return publish


def issuer_of(rpc: InProcessRpc, name: str, cas: list[str]) -> int | None:
    """Which of `cas` issued the node's libvirt certificate (None: none of them)."""
    shown = pki(rpc, name).server_cert.read_bytes()
    for index, ca in enumerate(cas):
        if node_certs.is_issued_by(shown, ca.encode()):
            return index
    return None


def test_a_removed_node_has_no_certificate_of_the_new_ca(cluster: Any) -> None:
    config, rpc, config_path = cluster
    names = sorted(n.name for n in config.nodes.values())
    published: list[list[str]] = []
    publish = publisher(rpc, config_path, config, published)
    said: list[str] = []
    # the first node added: the master has no CA yet, so every node gets a certificate
    libvirt_trust.issue(rpc, config, config_path, config.find_node(names[2]), publish,
                        said.append)
    first = FileStore(config_path).load().cluster.libvirt_cas
    assert len(first) == 1 and published == [first, first] and said == []
    for name in names:
        assert issuer_of(rpc, name, first) == 0, name
        assert node_certs.common_name(pki(rpc, name).server_cert.read_bytes()) == name
        assert (pki(rpc, name).server_key.stat().st_mode & 0o777) == 0o600
        assert ssconf.read(libvirtd_conf.SSCONF_CAS, rpc.daemons[name].data_dir) == \
            first[0].strip()
    assert (libvirt_trust.ca_path(config_path).stat().st_mode & 0o777) == 0o600
    # names[2] is removed: a new CA for the others, trusted beside the old while they change
    removed = names[2]
    with FileStore(config_path).update() as changed:
        del changed.nodes[changed.find_node(removed).uuid]
    published.clear()
    libvirt_trust.renew(rpc, FileStore(config_path).load(), config_path, publish, said.append)
    second = FileStore(config_path).load().cluster.libvirt_cas
    assert len(second) == 1 and second != first
    assert published == [[first[0], second[0]], second]
    for name in names[:2]:
        assert issuer_of(rpc, name, second) == 0
    assert issuer_of(rpc, removed, second) is None  # the old CA's certificate only
    assert ssconf.read(libvirtd_conf.SSCONF_CAS, rpc.daemons[names[0]].data_dir) == \
        second[0].strip()
    # a node the master adds later gets the current CA's certificate, without a rotation
    rpc.calls.clear()
    libvirt_trust.issue(rpc, FileStore(config_path).load(), config_path,
                        config.find_node(names[1]), publish, said.append)
    assert {name for name, _ in rpc.calls} == {names[1]}
    assert FileStore(config_path).load().cluster.libvirt_cas == second


def test_a_node_that_misses_a_rotation_is_named(cluster: Any) -> None:
    config, rpc, config_path = cluster
    names = sorted(n.name for n in config.nodes.values())
    said: list[str] = []
    publish = publisher(rpc, config_path, config, [])
    rpc.down.add(names[1])
    libvirt_trust.renew(rpc, config, config_path, publish, said.append)
    assert len(said) == 1 and said[0].startswith(f"{names[1]}: no libvirt certificate")
    assert f"herder node add --readd {names[1]}" in said[0]
    cas = FileStore(config_path).load().cluster.libvirt_cas
    assert issuer_of(rpc, names[0], cas) == 0
    assert not pki(rpc, names[1]).server_cert.exists()


def test_a_master_without_the_current_key_rotates_before_it_issues(cluster: Any) -> None:
    """After a master failover the new master has no `libvirt-ca.pem`: it cannot sign with
    the CA the nodes trust, so it makes a new one for every node."""
    config, rpc, config_path = cluster
    names = sorted(n.name for n in config.nodes.values())
    published: list[list[str]] = []
    publish = publisher(rpc, config_path, config, published)
    libvirt_trust.renew(rpc, config, config_path, publish, lambda _: None)
    before = FileStore(config_path).load().cluster.libvirt_cas
    libvirt_trust.ca_path(config_path).unlink()  # the new master's directory
    libvirt_trust.issue(rpc, FileStore(config_path).load(), config_path,
                        config.find_node(names[0]), publish, lambda _: None)
    after = FileStore(config_path).load().cluster.libvirt_cas
    assert after != before and published[-2] == [before[0], after[0]]
    assert all(issuer_of(rpc, name, after) == 0 for name in names)


def test_a_node_installs_only_a_certificate_for_its_own_request(tmp_path: Path) -> None:
    where = libvirtd_conf.LibvirtPki(tmp_path / "pki")
    ca = self_signed_certificate("herder-libvirt-test")
    request = libvirt_tls.request("node1.example.com", where)
    for wrong in (node_certs.sign_request(ca, request, "node2.example.com"),  # another name
                  node_certs.issue(ca, "node1.example.com").split(b"-----END PRIVATE KEY"
                                                                 b"-----\n")[1]):  # another key
        with pytest.raises(HerderError):
            libvirt_tls.install_certificate("node1.example.com", where, wrong)
    assert not where.server_cert.exists()
    good = node_certs.sign_request(ca, request, "node1.example.com")
    libvirt_tls.install_certificate("node1.example.com", where, good)
    assert where.server_cert.read_bytes() == where.client_cert.read_bytes() == good
    assert not libvirt_tls.request_key(where).exists()
    with pytest.raises(HerderError, match="no libvirt certificate request is pending"):
        libvirt_tls.install_certificate("node1.example.com", where, good)


def test_libvirts_default_paths_link_to_herders_files(tmp_path: Path) -> None:
    where = libvirtd_conf.LibvirtPki(tmp_path / "pki")
    root = tmp_path / "root"
    libvirt_tls.link_defaults(where, root)
    libvirt_tls.link_defaults(where, root)  # again: nothing to change
    for default, target in libvirtd_conf.default_server_pki(where).items():
        link = root / default.relative_to("/")
        assert link.is_symlink() and Path(link.readlink()) == target
