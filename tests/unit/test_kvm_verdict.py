"""The KVM probe's verdict where the operator sees it: the job log of a KVM instance's start
(through the `kvm_probe` node RPC, noded's own handler) and `cluster verify` (a warning when the
node emulates); a negative verdict is probed again after `REPROBE_AFTER`, never kept on disk.
The probe is the real one (this machine's /dev/kvm and QEMU): either verdict is checked."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from herder.core import nodeverify
from herder.core.rpcdefs import node_calls
from herder.masterd.lu.common import kvm_verdict_feedback
from herder.noded.hypervisor import Hypervisor
from herder.noded.kvm import kvmprobe
from tests.conftest import build_config
from tests.unit.standin_cluster import stand_in_env


@pytest.fixture
def qemu_hypervisor(tmp_path: Path) -> Iterator[Hypervisor]:
    """A node's hypervisor for a QEMU libvirt (never connected: the probe needs no libvirtd)."""
    if not shutil.which(kvmprobe.DEFAULT_QEMU) or kvmprobe.probe_kernel() is None:
        pytest.fail("needs qemu-system-x86_64 and a kernel in /boot (scripts/sysdeps.sh)")
    hv = Hypervisor("qemu:///system", tmp_path / "hv")
    hv.probe_cache = tmp_path / "kvm-probe.json"
    yield hv
    hv.close()


def test_a_negative_verdict_is_probed_again_later(qemu_hypervisor: Hypervisor) -> None:
    first = qemu_hypervisor.kvm_probe()
    assert qemu_hypervisor.kvm_probe() is first  # kept while fresh
    if first.usable:
        assert qemu_hypervisor.probe_cache.exists()
        return
    assert not qemu_hypervisor.probe_cache.exists()
    qemu_hypervisor._probed_at -= kvmprobe.REPROBE_AFTER + 1  # as REPROBE_AFTER seconds later
    assert qemu_hypervisor.kvm_probe() is not first


def test_the_live_figures_never_wait_for_a_probe(qemu_hypervisor: Hypervisor) -> None:
    """masterd asks for a node's figures with a 3 s timeout: the verdict in them is the one at
    hand; a missing one is probed in the background and answered once there."""
    import time

    assert qemu_hypervisor.kvm_verdict_nowait() is None  # none yet: a probe starts
    deadline = time.monotonic() + 120
    while qemu_hypervisor.kvm_verdict_nowait() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    verdict = qemu_hypervisor.kvm_verdict_nowait()
    assert verdict is not None and verdict is qemu_hypervisor.kvm_probe()  # no second probe
    if not verdict.usable:  # a negative one due again: still answered while it is probed
        qemu_hypervisor._probed_at -= kvmprobe.REPROBE_AFTER + 1
        assert qemu_hypervisor.kvm_verdict_nowait() is verdict


def test_the_start_job_log_says_how_the_instance_runs(tmp_path: Path,
                                                      qemu_hypervisor: Hypervisor) -> None:
    config = build_config(nodes=2, drbd_instances=1, plain_instances=0)
    env, rpc = stand_in_env(tmp_path, config)
    rpc.nodes["node1"].node.hv = qemu_hypervisor
    inst = next(iter(config.instances.values()))
    node = config.nodes[inst.primary_node]
    said: list[str] = []
    kvm_verdict_feedback(env, node, inst, said.append)
    probe = qemu_hypervisor.kvm_probe()
    how = "hardware KVM" if probe.usable else "no hardware KVM, emulated (TCG)"
    assert said == [f"{node.name}: {how}: {probe.reason}"]
    assert ("node1", "kvm_probe", None) in rpc.calls
    # an instance of another hypervisor: nothing is asked
    inst.hypervisor = "fake"
    kvm_verdict_feedback(env, node, inst, said.append)
    assert len(said) == 1


def test_cluster_verify_warns_of_an_emulating_node() -> None:
    config = build_config(nodes=1, drbd_instances=0, plain_instances=0)
    node = next(iter(config.nodes.values()))
    verdict = node_calls.KvmVerdict(usable=False, reason="a KVM guest did not reach its "
                                    "kernel within 3s: plain QEMU emulation (TCG) is used",
                                    seconds=3.0)
    answer = node_calls.NodeVerifyAnswer(time=1000.0, version="1", kvm=verdict)
    found = nodeverify.node_verify_findings(
        config, {node.uuid: node_calls.NodeVerify(oses=False)}, {node.uuid: answer},
        nodeverify.Window(start=999.0, end=1001.0), "1")
    assert [(f.severity, f.code, f.message) for f in found] == [
        ("warning", "ENODEHV", f"hypervisor kvm: hardware virtualization is not used: "
         f"{verdict.reason}")]


def test_the_hypervisor_version_is_kept_and_asked_again_when_due(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A migration's start needs libvirt's hypervisor version (the TCG hazard check), whose
    first answer in a libvirtd's life probes an emulator for seconds: the node keeps it
    VERSION_KEEP seconds (libvirt's test driver here: a real connection, no libvirtd); an
    unanswered question is not kept."""
    from herder.core import libvirt_host
    from herder.noded import hypervisor

    hv = Hypervisor("test:///default", tmp_path / "hv")
    opened: list[str] = []
    real_open = libvirt_host.open_connection

    def counting_open(uri: str, **kwargs: object) -> object:
        opened.append(uri)
        return real_open(uri)

    monkeypatch.setattr(libvirt_host, "open_connection", counting_open)
    try:
        version = hv.hypervisor_version()
        assert version > 0 and opened == ["test:///default"]
        assert hv.hypervisor_version() == version and len(opened) == 1  # kept
        assert hv._version is not None
        uri, kept, at = hv._version
        hv._version = (uri, kept, at - hypervisor.VERSION_KEEP - 1)  # as if kept that long
        assert hv.hypervisor_version() == version and len(opened) == 2  # asked again
        assert hv._version is not None and hv._version[2] > at  # kept anew
        assert hv.hypervisor_version(max_age=0) == version and len(opened) == 3  # the early ask

        def unreachable(uri: str, **kwargs: object) -> object:
            raise libvirt_host.Unreachable(f"cannot connect to {uri}")

        monkeypatch.setattr(libvirt_host, "open_connection", unreachable)
        hv._version = None
        assert hv.hypervisor_version() == 0 and hv._version is None  # not kept
    finally:
        hv.close()
