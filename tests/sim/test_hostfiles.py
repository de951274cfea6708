"""A simulated host's files (herder.sim.hostfiles) and which loop devices a simulation owns
(herder.sim.loopdev), without namespaces."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from herder.sim import hostfiles, loopdev, netns


def test_lvm_conf_is_valid_and_accepts_only_the_hosts_devices(tmp_path: Path) -> None:
    if shutil.which("lvmconfig") is None:
        pytest.skip("LVM is not installed")
    (tmp_path / "lvm.conf").write_text(hostfiles.lvm_conf(["/dev/loop7"]))
    env = {**os.environ, "LVM_SYSTEM_DIR": str(tmp_path), "LVM_SUPPRESS_FD_WARNINGS": "1"}
    done = subprocess.run(["lvmconfig", "--validate"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shown = subprocess.run(["lvmconfig", "devices/global_filter", "global/activation"],
                           env=env, capture_output=True, text=True, check=True).stdout
    assert 'global_filter=["a|^/dev/loop7$|","r|.*|"]' in shown
    assert "activation=0" in shown


def test_hosts_file() -> None:
    text = hostfiles.hosts_file([("198.18.1.11", ["node1.sim.herder.test", "node1"]),
                                 ("198.18.1.2", ["cluster.sim.herder.test"]), ("10.0.0.1", [])])
    assert text.splitlines() == [
        "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
        "198.18.1.11\tnode1.sim.herder.test node1", "198.18.1.2\tcluster.sim.herder.test"]


def test_addresses_and_macs() -> None:
    assert netns.address(3, 11) == "198.18.3.11"
    assert str(netns.subnet(3)) == "198.18.3.0/24"
    assert netns.host_mac(3, 258) == "02:68:73:03:01:02"
    with pytest.raises(Exception, match="no simulated address"):
        netns.address(0, 1)


def _entry(name: str, device: str, backing: str, inode: int) -> dict[str, object]:
    return {"name": name, "maj:min": f"  {device}  ", "back-maj:min": f"   {backing} ",
            "back-ino": inode, "back-file": f"/x/{inode}"}


def test_owned_loop_devices_inner_ones_first() -> None:
    listing = json.dumps({"loopdevices": [
        _entry("/dev/loop0", "7:0", "254:0", 100),   # ours: an image of the simulation
        _entry("/dev/loop1", "7:1", "254:0", 200),   # someone else's
        _entry("/dev/loop2", "7:2", "7:0", 12),      # a file on the filesystem on loop0
        _entry("/dev/loop3", "7:3", "7:2", 5),       # and one on that one
        _entry("/dev/loop4", "7:4", "7:1", 12),      # on someone else's
        {"name": "/dev/loop5", "maj:min": "7:5", "back-maj:min": None, "back-ino": None},
    ]})
    loops = loopdev.parse_list(listing)
    assert len(loops) == 5
    ours = loopdev.owned(loops, {(254, 0, 100)})
    assert [lo.name for lo in ours] == ["/dev/loop3", "/dev/loop2", "/dev/loop0"]
    assert loopdev.owned(loops, set()) == []


def test_file_identity_matches_what_a_loop_device_reports(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("losetup") is None:
        pytest.skip("loop devices need root")
    image = tmp_path / "image"
    image.write_bytes(b"\0" * 1024 * 1024)
    identity = loopdev.file_identity(image)
    device = loopdev.attach(image)
    try:
        found = [lo for lo in loopdev.list_loops() if lo.name == device]
        assert loopdev.owned(loopdev.list_loops(), {identity}) == found
        assert loopdev.owned(found, loopdev.files_under(tmp_path)) == found
    finally:
        assert loopdev.detach(found) == []
    assert loopdev.owned(loopdev.list_loops(), {identity}) == []
