"""noded's GET /metrics (prometheus-client's text, parsed by its own parser): the domains
libvirt reports by state, libvirt's answer, the master epoch, uptime and the process; the KVM
verdict once the node has one."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.noded.noded_fixture import running_noded


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = httpx.get(f"{url}/metrics", timeout=30)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(answer.text) for s in family.samples}


def test_node_metrics(tmp_path: Path) -> None:
    with running_noded(tmp_path) as noded:
        samples = scrape(noded.url)
        states = Counter(noded.daemon.hv.list_domains().values())
        assert states  # libvirt's test driver has its domain "test"
        for state, count in states.items():
            assert samples[("herder_noded_domains", (("state", state),))] == count
        assert samples[("herder_noded_libvirt_up", ())] == 1
        assert samples[("herder_noded_master_epoch", ())] == noded.daemon.master_epoch
        assert samples[("herder_noded_uptime_seconds", ())] > 0
        assert samples[("process_resident_memory_bytes", ())] > 0
        # the test driver's verdict (it runs no guests; a QEMU node's once it probed)
        probe = noded.daemon.hv.kvm_probe()
        assert samples[("herder_noded_kvm_usable", ())] == float(probe.usable)
