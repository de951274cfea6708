"""maintd repairs a real Ganeti 3.0.2 cluster (../shared/peers/vcluster) through its RAPI, with
herder mond beside Ganeti's on every node serving the self-diagnose collector.

- node2's diagnose starts printing `evacuate` -> maintd drains node2 through RAPI, migrates its
  instances (diskless, sharedfile), offlines it and tags it `maintd:repairready:<event>`;
  removing the tag and fixing the script forgets the incident;
- node3 holds a file-based instance, which Ganeti refuses to migrate: the incident fails, node3
  is tagged `maintd:repairfailed:<event>`, and no further jobs are submitted for it;
- wrong RAPI credentials: a clear one-line error, exit 1, no job submitted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ganeti import vcluster
from tests.simhelpers import wait_for

pytestmark = pytest.mark.slow

N1, N2, N3 = vcluster.NODES


@pytest.fixture(scope="module")
def vcl(tmp_path_factory) -> Iterator[tuple[vcluster.VCluster, Path]]:
    work = tmp_path_factory.mktemp("vc-maintd")
    # the unit's last module: the vcluster the module before left as it found it, or a new one
    with vcluster.running_vcluster(reuse=True) as cluster:
        add = ["gnt-instance", "add", "-o", "noop+default", "--no-ip-check", "--no-name-check",
               "-B", "memory=128"]
        vcluster.vc_together(
            cluster, N1, (*add, "-t", "diskless", "-n", N2, "inst1.vcluster.test"),
            (*add, "-t", "sharedfile", "--disk", "0:size=512M", "-n", N2, "inst2.vcluster.test"),
            (*add, "-t", "file", "--disk", "0:size=256M", "-n", N3, "inst3.vcluster.test"))
        procs = vcluster.start_monds(cluster, work)
        try:
            yield cluster, work
        finally:
            vcluster.stop(procs)


def rapi(vcl: vcluster.VCluster) -> Any:
    from herder.core.rapi import RapiClient

    return RapiClient(vcl.url, vcl.user, vcl.password, verify=str(vcl.rapi_cert),
                      check_hostname=False)


def instances(vcl: vcluster.VCluster) -> dict[str, str]:
    with rapi(vcl) as client:
        return {i["name"]: i["pnode"] for i in client.get_instances(bulk=True)}


def node(vcl: vcluster.VCluster, name: str) -> dict[str, Any]:
    with rapi(vcl) as client:
        return client.get_node(name)


def job_count(vcl: vcluster.VCluster) -> int:
    with rapi(vcl) as client:
        return len(client.get_jobs())


def maintd_jobs(vcl: vcluster.VCluster, after: int = 0) -> list[str]:
    """maintd's jobs (its reason trail entry) with ids above `after`: "id summary status"."""
    out = []
    with rapi(vcl) as client:
        for job_id in client.get_jobs():
            if job_id <= after:
                continue
            job = client.get_job_status(job_id)
            trail = [r for op in job["ops"] for r in op.get("reason", [])]
            if any(str(r[1]).startswith("gnt:daemon:maintd") for r in trail):
                out.append(f"{job_id} {','.join(job['summary'])} {job['status']}")
    return out


def status(base: str) -> list[dict[str, Any]]:
    try:
        return httpx.get(f"{base}/1/status", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return []


def test_wrong_rapi_credentials_are_a_clear_error_and_nothing_is_done(vcl) -> None:
    cluster, work = vcl
    wrong = work / "wrong-password"
    wrong.write_text("not-the-password\n")
    before = job_count(cluster)
    done = subprocess.run([sys.executable, "-m", "herder.cli.main",
                           *vcluster.maintd_args(cluster, work, wrong)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    assert "credentials of RAPI user 'admin' were refused (401)" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert job_count(cluster) == before


def test_maintd_evacuates_a_failing_node_and_fails_visibly_on_a_refusal(vcl) -> None:
    cluster, work = vcl
    log = work / "maintd.log"
    maintd = vcluster.spawn(log, *vcluster.maintd_args(cluster, work))
    base = f"http://{vcluster.IPS[N1]}:1816"
    try:
        wait_for(lambda: maintd.poll() is not None or "listening on" in log.read_text(),
                 timeout=60, what="maintd to listen")
        assert maintd.poll() is None, log.read_text()[-2000:]
        time.sleep(2)
        assert status(base) == []  # every node says Ok

        # node2 fails: drained, its instances migrated, offlined, tagged
        vcluster.write_diagnose(work / N2 / "diagnose", "evacuate")
        [inc] = wait_for(lambda: [i for i in status(base) if i["node"] == node(cluster, N2)
                                  ["uuid"] and i["repair-status"] == "completed"],
                         timeout=180, what="the evacuation to complete")
        tag = f"maintd:repairready:{inc['uuid']}"
        state = node(cluster, N2)
        assert state["offline"] and tag in state["tags"]
        placed = instances(cluster)
        assert placed["inst1.vcluster.test"] != N2 and placed["inst2.vcluster.test"] != N2
        listed = cluster.vc(N1, "gnt-instance", "list", "--no-headers", "-o", "name,pnode")
        assert N2 not in listed.stdout
        with rapi(cluster) as client:
            jobs = [client.get_job_status(j) for j in inc["jobs"]]
        assert all(j["status"] == "success" for j in jobs)
        reasons = [r for j in jobs for op in j["ops"] for r in op.get("reason", [])]
        assert any(r[0] == "gnt:user" and r[1] == f"gnt:daemon:maintd {inc['uuid']}"
                   for r in reasons), reasons

        # the tag removed and the script fixed: the incident is forgotten
        cluster.vc(N1, "gnt-node", "remove-tags", N2, tag)
        vcluster.write_diagnose(work / N2 / "diagnose", "Ok")
        wait_for(lambda: not [i for i in status(base) if i["uuid"] == inc["uuid"]],
                 timeout=60, what="the incident to be forgotten")

        # node3 holds a file-based instance: Ganeti refuses its migration
        vcluster.write_diagnose(work / N3 / "diagnose", "evacuate")
        [failed] = wait_for(lambda: [i for i in status(base) if i["node"] == node(cluster, N3)
                                     ["uuid"] and i["repair-status"] == "failed"],
                            timeout=180, what="the incident to fail")
        bad_tag = f"maintd:repairfailed:{failed['uuid']}"
        wait_for(lambda: bad_tag in node(cluster, N3)["tags"], timeout=60,
                 what="the repairfailed tag")
        assert instances(cluster)["inst3.vcluster.test"] == N3
        with rapi(cluster) as client:
            refused = [client.get_job_status(j) for j in failed["jobs"]]
        assert any(j["status"] == "error" and "migrat" in json.dumps(j["opresult"]).lower()
                   for j in refused), refused
        with rapi(cluster) as client:
            last = max(client.get_jobs())
        time.sleep(4)  # several maintd rounds
        assert maintd_jobs(cluster, last) == [], "maintd went on submitting jobs"
        assert [i["repair-status"] for i in status(base) if i["uuid"] == failed["uuid"]] == \
            ["failed"]
    finally:
        vcluster.stop([maintd])


def test_herder_mond_on_a_ganeti_node_follows_the_clusters_collector_settings(vcl) -> None:
    """herder mond beside Ganeti's own: protocol v1, collectors scheduled by the settings
    Ganeti's confd serves (a collector Ganeti disables disappears; an interval Ganeti sets is
    used)."""
    cluster, _work = vcl
    ip = vcluster.IPS[N3]
    herder_url, ganeti_url = f"http://{ip}:{vcluster.HERDER_MOND_PORT}", f"http://{ip}:1815"
    assert httpx.get(f"{herder_url}/", timeout=5).json() == [1]
    ganeti = {tuple(c[:2]) for c in httpx.get(f"{ganeti_url}/1/list/collectors",
                                              timeout=5).json()}
    ours = {tuple(c[:2]) for c in httpx.get(f"{herder_url}/1/list/collectors",
                                            timeout=5).json()}
    # every collector Ganeti's mond lists that herder has too is listed by herder's
    assert ("lv", "storage") in ganeti and ("lv", "storage") in ours
    assert ganeti & ours >= {("lv", "storage"), ("diskstats", "storage")}
    cluster.vc(N1, "gnt-cluster", "modify", "--enabled-data-collectors", "lv=false")
    try:
        wait_for(lambda: ("lv", "storage") not in {
            tuple(c[:2]) for c in httpx.get(f"{herder_url}/1/list/collectors",
                                            timeout=5).json()},
                 timeout=60, what="herder mond to drop the collector Ganeti disabled")
        report = httpx.get(f"{herder_url}/1/report/all", timeout=10).json()
        assert "lv" not in {r["name"] for r in report}
        assert all(r["format_version"] == 1 for r in report)
    finally:
        cluster.vc(N1, "gnt-cluster", "modify", "--enabled-data-collectors", "lv=true")
