"""The node's Ceph client facts (pure parsing: `mon host`, `CEPH_ARGS`, keyrings), the libvirt
secret that holds its key, and the rbd network disk of a domain with its cephx auth.
(tests/noded/bdev/test_rbd_ceph.py reads the same facts from a real Ceph's configuration.)"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from herder.core import params
from herder.noded import ceph_secret
from herder.noded.bdev.base import BlockDevError
from herder.noded.bdev.cephclient import (
    CephClient,
    entity_from_ceph_args,
    parse_keyring,
    parse_mon_host,
)
from herder.noded.kvm.domain import DiskSpec, InstanceSpec, NetworkSource, domain_xml

FSID = "0b0e7b3c-6c57-4d0e-8a51-6f2f3c1d9e10"
KEY = "AQDwPgVrNynsIxAAJwUo19+wsSXPJtSzK03V2Q=="
SECRET_UUID = "5f0e4e36-1111-5222-8333-444455556666"


@pytest.mark.parametrize(("value", "monitors"), [
    ("[v2:127.0.0.36:3300,v1:127.0.0.36:6789]", (("127.0.0.36", 6789),)),
    ("v2:10.0.0.1:3300/0,v1:10.0.0.1:6789/0", (("10.0.0.1", 6789),)),
    ("[v2:10.0.0.1:3300],[v2:10.0.0.2:3300]", (("10.0.0.1", 3300), ("10.0.0.2", 3300))),
    ("10.0.0.1:6789,10.0.0.2", (("10.0.0.1", 6789), ("10.0.0.2", None))),
    ("mon-a mon-b;mon-c", (("mon-a", None), ("mon-b", None), ("mon-c", None))),
    ("[v2:[2001:db8::1]:3300,v1:[2001:db8::1]:6789]", (("2001:db8::1", 6789),)),
    ("[2001:db8::2]:6789", (("2001:db8::2", 6789),)),
    ("", ()),
])
def test_mon_host_spellings(value: str, monitors: tuple[tuple[str, int | None], ...]) -> None:
    assert parse_mon_host(value) == monitors


def test_unreadable_mon_host_is_one_line() -> None:
    with pytest.raises(BlockDevError, match="cannot read the Ceph monitor addresses"):
        parse_mon_host("[[[")


@pytest.mark.parametrize(("ceph_args", "entity"), [
    ("", "client.admin"), ("--id herder", "client.herder"), ("--user=ops", "client.ops"),
    ("--name client.x --keyring /k", "client.x"), ("-n y", "client.y"),
    ("--conf /etc/ceph/other.conf", "client.admin"),
])
def test_entity_from_ceph_args(ceph_args: str, entity: str) -> None:
    assert entity_from_ceph_args(ceph_args) == entity


def test_keyring_sections() -> None:
    text = ("[client.admin]\n\tkey = ADMINKEY==\n\tcaps mon = \"allow *\"\n"
            f"[client.herder]\n\tkey = {KEY}\n")
    assert parse_keyring(text, "client.herder") == KEY
    assert parse_keyring(text, "client.admin") == "ADMINKEY=="
    assert parse_keyring(text, "client.other") is None


def test_secret_is_the_same_on_every_node_and_names_the_user() -> None:
    client = CephClient("client.herder", FSID, (("10.0.0.1", 6789),), KEY)
    again = CephClient("client.herder", FSID, (("10.0.0.9", None),), "ANOTHERKEY==")
    other = CephClient("client.admin", FSID, (("10.0.0.1", 6789),), KEY)
    assert ceph_secret.secret_uuid(client) == ceph_secret.secret_uuid(again)
    assert ceph_secret.secret_uuid(client) != ceph_secret.secret_uuid(other)
    root = ET.fromstring(ceph_secret.secret_xml(client))
    assert root.get("private") == "yes" and root.get("ephemeral") == "no"
    assert root.findtext("uuid") == ceph_secret.secret_uuid(client)
    assert root.find("usage").get("type") == "ceph"
    assert KEY not in ceph_secret.secret_xml(client)  # the value is set apart, never in XML


def test_rbd_network_disk_with_cephx_auth() -> None:
    source = NetworkSource("rbd", "herder/u1.rbd.disk0", (("198.18.3.1", 6789),),
                           auth_username="herder", secret_uuid=SECRET_UUID)
    spec = InstanceSpec(name="r1", uuid="6f1c3a46-1f4b-4b7e-9b0a-1a2b3c4d5e6f", maxmem=128,
                        vcpus=1, hvparams=params.hv_family("kvm").defaults(),
                        disks=(DiskSpec("", "rbd", network=source),))
    disk = ET.fromstring(domain_xml(spec)).find("devices/disk")
    assert disk is not None and disk.get("type") == "network"
    assert disk.find("source").attrib == {"protocol": "rbd", "name": "herder/u1.rbd.disk0"}
    assert disk.find("source/host").attrib == {"name": "198.18.3.1", "port": "6789"}
    assert disk.find("auth").get("username") == "herder"
    assert disk.find("auth/secret").attrib == {"type": "ceph", "uuid": SECRET_UUID}
    # without cephx (libvirt's test driver, which opens no disk) there is no auth element
    plain = InstanceSpec(name="r1", uuid="6f1c3a46-1f4b-4b7e-9b0a-1a2b3c4d5e6f", maxmem=128,
                         vcpus=1, hvparams=params.hv_family("kvm").defaults(),
                         disks=(DiskSpec("", "rbd", network=NetworkSource(
                             "rbd", "herder/u1.rbd.disk0", (("198.18.3.1", 6789),))),))
    assert ET.fromstring(domain_xml(plain)).find("devices/disk/auth") is None
