"""masterd's `GET /2/herder/metrics` on a real masterd: a RAPI user's scrape gets Prometheus
text (parsed by prometheus-client's own parser) that agrees with the config and the queue; a
caller without credentials is refused."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from herder.core.store import FileStore
from tests.system.masterd_fixture import start_masterd


def test_masterd_metrics(tmp_path: Path) -> None:
    with start_masterd(tmp_path) as master:
        answer = master.client.send("GET", "/2/herder/metrics")
        assert answer.status == 200, answer.content
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(answer.content.decode())
                   for s in family.samples}
        config = FileStore(master.config_path).load()
        assert samples[("herder_masterd_config_serial", ())] == config.serial_no
        candidates = sum(n.master_candidate and not n.offline and not n.drained
                         for n in config.nodes.values())
        assert samples[("herder_masterd_nodes", (("role", "master-candidate"),))] == candidates
        assert sum(v for (name, _), v in samples.items()
                   if name == "herder_masterd_nodes") == len(config.nodes)
        assert samples[("herder_masterd_instances", (("admin_state", "up"),))] == sum(
            i.admin_state == "up" for i in config.instances.values())
        assert samples[("herder_masterd_queue_drained", ())] == 0
        assert samples[("process_open_fds", ())] > 0
        anonymous = httpx.get(f"{master.url}/2/herder/metrics", verify=False, timeout=30)
        assert anonymous.status_code == 401
