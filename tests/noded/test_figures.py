"""noded's `node_info`: the node's figures (Ganeti's rules for memory), its storage units, and the
run states of its live instances, on libvirt's test driver (in process) and this machine's
/proc; memory compared with Ganeti's own code where it is unpacked (../shared/peers)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import msgspec
import pytest

from herder.core import livefigures, params
from herder.noded import figures
from herder.noded import rpc as noded_rpc
from herder.noded.bdev.base import CommandResult, Host
from herder.noded.hypervisor import Hypervisor
from herder.noded.kvm.domain import InstanceSpec
from herder.noded.node import Node, NodeSettings

GANETI = Path(os.environ.get("GROOT", "/tmp/groot")) / "usr/share/ganeti/3.0"

MEMINFO = """MemTotal:       24683364 kB
MemFree:         1234567 kB
MemAvailable:   20000000 kB
Buffers:          204800 kB
Cached:         19000000 kB
SwapCached:            0 kB
Active:           999999 kB
Inactive:        8888888 kB
"""


def test_meminfo_by_ganetis_rule() -> None:
    # total = MemTotal; free = MemFree + Buffers + Cached (each rounded down to MiB first);
    # the node's own = Active
    assert figures.parse_meminfo(MEMINFO) == (
        24683364 // 1024, 1234567 // 1024 + 204800 // 1024 + 19000000 // 1024, 999999 // 1024)


@pytest.mark.peer
def test_meminfo_matches_ganeti_on_this_machine(tmp_path: Path) -> None:
    if not (GANETI / "ganeti" / "hypervisor" / "hv_base.py").is_file():
        pytest.skip(f"Ganeti 3.0's Python code is not unpacked in {GANETI}")
    snapshot = tmp_path / "meminfo"
    snapshot.write_text(Path("/proc/meminfo").read_text())
    code = ("import json, sys; from ganeti.hypervisor import hv_base; "
            "print(json.dumps(hv_base.BaseHypervisor.GetLinuxNodeInfo(meminfo=sys.argv[1])))")
    done = subprocess.run(["/usr/bin/python3", "-c", code, str(snapshot)], capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": str(GANETI)})
    if done.returncode != 0:
        pytest.skip(f"Ganeti's Python does not run here: {done.stderr.strip()[-200:]}")
    ganeti = json.loads(done.stdout)
    total, free, node = figures.parse_meminfo(snapshot.read_text())
    assert (total, free, node) == (ganeti["memory_total"], ganeti["memory_free"],
                                   ganeti["memory_dom0"])


class VgsRunner:
    """`vgs` answering for one volume group (the command line is the block-device layer's)."""

    def __init__(self) -> None:
        self.argv: list[str] = []

    def __call__(self, argv, *, env=None, timeout=None, cwd=None) -> CommandResult:
        self.argv = list(argv)
        return CommandResult(tuple(argv), 0, "  xenvg|20480.00|wz--n-|102396.00\n")


def test_storage_units_are_the_real_ones(tmp_path: Path) -> None:
    runner = VgsRunner()
    units = figures.storage_units(Host(runner=runner), [("lvm-vg", "xenvg"),
                                                        ("file", str(tmp_path)),
                                                        ("file", str(tmp_path / "missing"))])
    assert runner.argv[0] == "vgs"
    vg, directory = units  # a directory this node lacks is left out
    assert (vg.type, vg.name, vg.storage_size, vg.storage_free) == ("lvm-vg", "xenvg", 102396,
                                                                    20480)
    usage = shutil.disk_usage(tmp_path)
    assert (directory.type, directory.name) == ("file", str(tmp_path))
    assert directory.storage_size == usage.total // 2**20
    assert abs(directory.storage_free - usage.free // 2**20) < 64  # others write meanwhile


def test_the_cluster_asks_for_its_templates_units() -> None:
    assert livefigures.cluster_storage_units(
        ["sharedfile", "plain", "file", "drbd", "diskless"], "xenvg", "/srv/fs") == [
        ("lvm-vg", "xenvg"), ("file", "/srv/fs")]
    assert livefigures.cluster_storage_units(["sharedfile", "ext"], "xenvg", "/srv/fs") == []


@pytest.fixture
def hv(tmp_path: Path):
    hypervisor = Hypervisor("test:///default", tmp_path / "state")
    yield hypervisor
    hypervisor.close()


def test_node_info_on_the_test_driver(hv: Hypervisor, tmp_path: Path) -> None:
    disks, records = tmp_path / "disks", tmp_path / "instances"
    disks.mkdir()
    records.mkdir()
    hvparams = params.hv_family("kvm").defaults()
    hv.define(InstanceSpec("web", "6f6c3b5e-2d43-4f7b-a9d1-8a0f0e1c2b3a", 256, 2, hvparams))
    hv.define(InstanceSpec("idle", "7f6c3b5e-2d43-4f7b-a9d1-8a0f0e1c2b3a", 512, 1, hvparams))
    hv.start("web")
    (records / "web.json").write_text(json.dumps({"expected_state": "up",
                                                  "changed": time.time() - 30}))
    info = figures.node_info(hv, records, with_instances=True,
                             storage=figures.storage_units(Host(), [("file", str(disks))]))
    # the test driver's host: 3 GiB, 16 CPUs in 2 NUMA cells of 2 sockets; its own domain
    # "test" (2 GiB) and "web" run, "idle" is only defined
    assert (info.memory_total, info.memory_free, info.memory_dom0) == (3072, 3072 - 2048 - 256, 0)
    assert (info.cpu_total, info.cpu_dom0, info.cpu_nodes, info.cpu_sockets) == (16, 16, 2, 4)
    assert info.bootid == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    (pool,) = info.storage
    assert (pool.type, pool.name) == ("file", str(disks)) and pool.storage_size > 0
    assert info.instances is not None and set(info.instances) == {"test", "web"}
    web = info.instances["web"]
    assert (web.state, web.memory, web.vcpus) == ("running", 256, 2)
    assert web.uptime is not None and 29 <= web.uptime < 300
    assert info.instances["test"].uptime is None  # not started by noded
    assert figures.node_info(hv, records).instances is None  # not asked


def test_node_info_of_a_real_host_reads_proc_meminfo(hv: Hypervisor, tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(MEMINFO)
    hv.domain_type = "kvm"  # what noded reads for a host whose memory is real
    (tmp_path / "disks").mkdir()
    info = figures.node_info(hv, tmp_path, meminfo=meminfo)
    assert (info.memory_total, info.memory_free, info.memory_dom0) == \
        figures.parse_meminfo(MEMINFO)


def test_the_rpc_answers_the_wire_format(tmp_path: Path) -> None:
    daemon = Node(NodeSettings(node_name="node1", state_dir=tmp_path / "state",
                                     run_dir=tmp_path / "run", hmac_key=b"k" * 40,
                                     libvirt_uri="test:///default"))
    try:
        uuid = "8f6c3b5e-2d43-4f7b-a9d1-8a0f0e1c2b3a"
        noded_rpc.dispatch(daemon, "instance_start", {"instance": {
            "name": "db", "uuid": uuid, "memory": 128, "vcpus": 1, "disks": [], "nics": []},
            "claim": {"uuid": uuid, "primary": "node1", "serial": 1, "epoch": 0}})

        def wire(method: str, args: dict[str, object]) -> object:
            return json.loads(msgspec.json.encode(noded_rpc.dispatch(daemon, method, args)))

        raw = wire("node_info", {"instances": True, "storage_units": [["file", str(tmp_path)]]})
        info = livefigures.decode_node_info(raw)
        assert info.instances is not None and info.instances["db"].memory == 128
        assert info.instances["db"].uptime is not None
        assert [(u.type, u.name) for u in info.storage] == [("file", str(tmp_path))]
        assert wire("node_info", {})["instances"] is None
        assert wire("ping", {})["vm_lock_kb"] >= 0
    finally:
        daemon.hv.close()
