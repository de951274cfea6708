"""The KVM probe runs a real QEMU: under TCG it must succeed (the probe's own check), and
its verdict is cached by its inputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from herder.noded.kvm import kvmprobe


@pytest.fixture
def qemu() -> str:
    if not shutil.which(kvmprobe.DEFAULT_QEMU):
        pytest.skip("qemu-system-x86 is not installed (scripts/sysdeps.sh)")
    if kvmprobe.probe_kernel() is None:
        pytest.skip("no kernel in /boot (linux-image-amd64)")
    return kvmprobe.DEFAULT_QEMU


def test_probe_boots_a_kernel_under_tcg(qemu: str) -> None:
    probe = kvmprobe.run_probe(qemu, timeout=30, accel="tcg")
    assert probe.usable, probe.reason
    assert probe.domain_type == "kvm"  # usable answers the accelerator asked for


def test_a_guest_that_never_boots_is_not_usable(qemu: str, tmp_path: Path) -> None:
    not_a_kernel = tmp_path / "vmlinuz-broken"
    not_a_kernel.write_bytes(b"\0" * 4096)
    probe = kvmprobe.run_probe(qemu, timeout=5, accel="tcg", kernel=not_a_kernel)
    assert not probe.usable and probe.domain_type == "qemu"
    assert "plain QEMU emulation" in probe.reason


def test_missing_qemu_says_so() -> None:
    probe = kvmprobe.run_probe("/nonexistent/qemu", accel="tcg")
    assert not probe.usable and "not installed" in probe.reason


def test_verdict_is_cached_by_its_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_probe(qemu: str, timeout: float) -> kvmprobe.KvmProbe:
        calls.append(qemu)
        return kvmprobe.KvmProbe(False, "a KVM guest did not reach its kernel", timeout)

    monkeypatch.setattr(kvmprobe, "run_probe", fake_probe)
    cache = tmp_path / "kvm-probe.json"
    first = kvmprobe.kvm_probe(cache, qemu="/bin/true")
    second = kvmprobe.kvm_probe(cache, qemu="/bin/true")
    assert first == second and len(calls) == 1
    stored = json.loads(cache.read_text())
    stored["key"] = "another kernel"
    cache.write_text(json.dumps(stored))
    kvmprobe.kvm_probe(cache, qemu="/bin/true")
    assert len(calls) == 2
