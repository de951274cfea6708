"""`herder move-instance`'s edge (Ganeti's move-instance options): the target's creation body
built from the source's instance (Ganeti's `_CreateInstance`), and every option it does not
take or cannot combine refused in one line before any cluster is asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from herder.cli import move_instance
from tests.conftest import run_cli

INSTANCE = {
    "name": "web1.example.com", "disk_template": "plain", "os": "debootstrap+default",
    "hypervisor": "kvm", "admin_state": "up", "disk.sizes": [1024, 512],
    "disk.names": ["root", None], "nic.macs": ["aa:00:00:01:02:03"], "nic.ips": [None],
    "nic.modes": ["bridged"], "nic.links": ["br0"], "nic.networks.names": [None],
    "nic.names": [None], "custom_beparams": {"maxmem": 512}, "custom_hvparams": {},
    "custom_osparams": {"x": "1"},
}
EXPINFO = {"handshake": [0, "h", "s"], "x509_key_name": ["k", "h", "s"],
           "x509_ca": "X-Ganeti-Signature: s/h\n\n-----BEGIN CERTIFICATE-----"}


def test_the_creation_is_ganetis_remote_import_of_the_source_instance() -> None:
    request = move_instance.MoveRequest(name="web1.example.com", dest_name="web2.example.com",
                                        pnode="node4", beparams={"vcpus": 2})
    body = move_instance._creation(INSTANCE, request, EXPINFO)
    assert body == {
        "__version__": 1, "mode": "remote-import", "name": "web2.example.com",
        "disk_template": "plain", "disks": [{"size": 1024, "name": "root"}, {"size": 512}],
        "nics": [{"mac": "aa:00:00:01:02:03", "mode": "bridged", "link": "br0"}],
        "os": "debootstrap+default", "hypervisor": "kvm", "start": True, "ip_check": False,
        "name_check": False, "source_handshake": [0, "h", "s"],
        "source_x509_ca": EXPINFO["x509_ca"], "source_instance_name": "web1.example.com",
        "beparams": {"maxmem": 512, "vcpus": 2}, "hvparams": {}, "osparams": {"x": "1"},
        "pnode": "node4"}
    stopped = move_instance._creation({**INSTANCE, "admin_state": "down"}, request, EXPINFO)
    assert stopped["start"] is False


ARGS = ("move-instance", "src.invalid", "dst.invalid")


@pytest.mark.parametrize(("extra", "says"), [
    (("a", "b", "--dest-instance-name", "c"), "--dest-instance-name takes one instance"),
    (("a", "-I", "hail", "--dest-primary-node", "n1"), "exclude each other"),
    (("a", "--compress", "gzip"), "'gzip' is not 'none'"),
    (("a", "--parallel", "2"), "No such option '--parallel'"),
    (("a", "--opportunistic-tries", "2"), "No such option '--opportunistic-tries'"),
    (("a", "--src-rapi-port", "0"), "--src-rapi-port"),
    ((), "Missing argument 'INSTANCE...'"),
])
def test_options_it_does_not_take_are_refused(extra: tuple[str, ...], says: str) -> None:
    done = run_cli(*ARGS, *extra)
    assert done.code == 2 and says in done.err, done.err


def test_an_unreadable_password_file_is_one_line(tmp_path: Path) -> None:
    done = run_cli(*ARGS, "a", "--src-username", "u", "--src-password-file",
                   str(tmp_path / "none"))
    assert done.code == 1
    assert done.err.strip() == f"herder: error: cannot read a password from {tmp_path}/none"
