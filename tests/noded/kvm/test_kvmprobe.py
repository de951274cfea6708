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


def test_a_positive_verdict_is_cached_by_its_inputs(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """(No hardware KVM here: the probe's positive answer is given; what is tested is the
    cache around it.)"""
    calls = []

    def kvm_works(qemu: str, timeout: float) -> kvmprobe.KvmProbe:
        calls.append(qemu)
        return kvmprobe.KvmProbe(True, "a KVM guest reached its kernel in 0.2s", 0.2)

    monkeypatch.setattr(kvmprobe, "run_probe", kvm_works)
    cache = tmp_path / "kvm-probe.json"
    first = kvmprobe.kvm_probe(cache, qemu="/bin/true")
    second = kvmprobe.kvm_probe(cache, qemu="/bin/true")
    assert first == second and first.usable and len(calls) == 1
    stored = json.loads(cache.read_text())
    stored["key"] = "another kernel"
    cache.write_text(json.dumps(stored))
    kvmprobe.kvm_probe(cache, qemu="/bin/true")
    assert len(calls) == 2


def test_a_negative_verdict_is_never_kept(tmp_path: Path) -> None:
    """A slow start must not pin the node to emulation: a negative answer is not written, and
    it removes a positive one of the same inputs that a refresh overturned; the next ask
    probes again. (A real negative: the QEMU binary does not exist.)"""
    cache = tmp_path / "kvm-probe.json"
    missing = str(tmp_path / "qemu-system-x86_64")
    first = kvmprobe.kvm_probe(cache, qemu=missing)
    assert not first.usable and "is not installed" in first.reason
    assert not cache.exists()
    cache.write_text(json.dumps({"key": kvmprobe._cache_key(missing), "probe": {
        "usable": False, "reason": "an old negative verdict", "seconds": 3.0}}))
    again = kvmprobe.kvm_probe(cache, qemu=missing)
    assert again.reason != "an old negative verdict"  # an older herder's record is not read
    assert not cache.exists()
