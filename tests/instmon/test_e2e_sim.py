"""End to end on a simulated cluster of namespaced hosts (`herder cluster simulate`: per node a
libvirtd with the test driver, noded, mond and instmon; masterd and maintd on the master): a
crashed instance (an external destroy of an admin-up domain, virsh on its node) runs again on the
same node, after a second crash on another node; an I/O error (injected through instmon's filter
on that node: the test driver has none) drains its node and moves the instance; the opt-out tag
is honoured; a migration herder ordered produces no failure notification. Every recovery job's
reason trail names the event."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests import simaddresses
from tests.simhelpers import config, domains, herder, on, running_sim, wait_for

pytestmark = pytest.mark.slow

OPTOUT = "herder:instmon:norecover"


def first_ip() -> int:
    """This module's addresses (tests/simaddresses.py)."""
    return simaddresses.first_ip("instmon_e2e")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    yield from running_sim(tmp_path_factory.mktemp("instmon-sim"), 3, first_ip=first_ip())


def node_of(sim, name: str):
    return sim.node(name)


def maintd(sim, path: str) -> Any:
    try:
        return httpx.get(f"{sim.maintd_url}{path}", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return None


def running(sim, node, name: str) -> bool:
    return bool(domains(sim, node.name).get(name))


def crash(sim, node, name: str) -> None:
    """What the test driver can do of a crash: destroy the domain behind herder's back."""
    done = sim.host(node.name).run(["virsh", "-q", "-c", "test+unix:///default", "destroy",
                                    name])
    assert done.returncode == 0, done.stderr


def primary(sim, name: str):
    cfg = config(sim)
    inst = cfg.find_instance(name)
    return cfg.nodes[inst.primary_node].name, inst


def incidents_for(sim, uuid: str) -> list[dict[str, Any]]:
    return [i for i in maintd(sim, "/1/status") or [] if i.get("instance") == uuid]


def notifications_for(sim, uuid: str) -> list[dict[str, Any]]:
    return [n for n in maintd(sim, "/1/notifications") or []
            if n["payload"]["instance_uuid"] == uuid]


def job_reasons(sim, job_id: int) -> list[list[Any]]:
    out = json.loads(herder(sim, "job", "info", "--json", str(job_id)).stdout)
    jobs = out if isinstance(out, list) else [out]
    return [r for job in jobs for op in job["ops"] for r in op.get("reason", [])]


def test_instance_failures_are_recovered_through_maintd(sim) -> None:
    herder(sim, "instance", "add", "web1", "--no-name-check",
           "-t", "sharedfile", "-o", "debootstrap+default", "--disk", "1G")
    herder(sim, "instance", "add", "keep1", "--no-name-check",
           "-t", "sharedfile", "-o", "debootstrap+default", "--disk", "1G")
    herder(sim, "tags", "add", "instance", "keep1", OPTOUT)
    pname, web = primary(sim, "web1")
    pnode = node_of(sim, pname)
    assert running(sim, pnode, "web1")

    # opted out: crashed, notified, and left alone (checked at the end)
    kname, keep = primary(sim, "keep1")
    crash(sim, node_of(sim, kname), "keep1")

    # first crash: restarted on the same node
    crash(sim, pnode, "web1")
    first = wait_for(lambda: [i for i in incidents_for(sim, web.uuid)
                              if i["repair-status"] == "completed"], what="a completed restart")
    assert first[0]["action"] == "restart" and first[0]["node"] == config(sim).find_node(pname).uuid
    wait_for(lambda: running(sim, pnode, "web1"), what="web1 running again")
    assert primary(sim, "web1")[0] == pname
    reasons = job_reasons(sim, first[0]["jobs"][0])
    assert any(r[0] == "gnt:daemon:instmon" and "LIFECYCLE/STOPPED_DESTROYED" in r[1]
               and pname in r[1] for r in reasons), reasons
    assert any(r[0] == "gnt:daemon:maintd" and r[1] == first[0]["uuid"] for r in reasons)
    note = notifications_for(sim, web.uuid)[0]
    assert note["status"] == "new" and note["hostname"] == pname

    # a second crash within the window: started on another node
    crash(sim, pnode, "web1")
    second = wait_for(lambda: [i for i in incidents_for(sim, web.uuid)
                               if i["action"] == "relocate"
                               and i["repair-status"] == "completed"], what="a relocation")
    new_name = wait_for(lambda: (p := primary(sim, "web1")[0]) != pname and p,
                        what="a new primary")
    wait_for(lambda: running(sim, node_of(sim, new_name), "web1"), what="web1 running elsewhere")
    assert not running(sim, pnode, "web1")
    assert any(r[0] == "gnt:daemon:instmon" for r in job_reasons(sim, second[0]["jobs"][0]))

    # a migration herder orders: no failure notification
    before = len(notifications_for(sim, web.uuid))
    src = node_of(sim, new_name)
    herder(sim, "instance", "migrate", "web1")
    dst_name = primary(sim, "web1")[0]
    assert dst_name != new_name
    wait_for(lambda: running(sim, node_of(sim, dst_name), "web1"), what="web1 migrated")
    state = wait_for(lambda: (s := json.loads(sim.host(src.name).path(
        "/run/herder/instmon.json").read_text()))["domains"].get(web.uuid, {}).get(
        "last_event", {}).get("verdict", "").startswith("ordered") and s,
        what="instmon seeing the ordered stop")
    assert state["domains"][web.uuid]["last_event"]["verdict"] == "ordered:migrate"
    time.sleep(2)
    assert len(notifications_for(sim, web.uuid)) == before

    # an I/O error: the node is drained and the instance moved (not on the master: draining
    # the master is refused, as in Ganeti)
    io_node = sim.nodes[1]
    herder(sim, "instance", "add", "io1", "--no-name-check",
           "-t", "sharedfile", "-o", "debootstrap+default",
           "--disk", "1G", "-n", io_node.name)
    io1 = config(sim).find_instance("io1")
    on(sim, io_node.name, "instmon", "inject", "IO_ERROR.REPORT", "io1")  # on that node
    drained = wait_for(lambda: [i for i in incidents_for(sim, io1.uuid)
                                if i["action"] == "drain-relocate"
                                and i["repair-status"] == "completed"],
                       what="a drain-relocate")
    assert config(sim).find_node(io_node.name).drained
    moved_to = primary(sim, "io1")[0]
    assert moved_to != io_node.name
    wait_for(lambda: running(sim, node_of(sim, moved_to), "io1"), what="io1 running off the node")
    reasons = job_reasons(sim, drained[0]["jobs"][0])
    assert any(r[0] == "gnt:daemon:instmon" and "IO_ERROR/IO_ERROR_REPORT" in r[1]
               for r in reasons), reasons
    herder(sim, "node", "modify", io_node.name, "--drained", "no")

    # the opted-out instance: notified, ignored, still down, no incident
    knote = wait_for(lambda: notifications_for(sim, keep.uuid), what="keep1's notification")
    assert knote[0]["status"] == "ignored" and OPTOUT in knote[0]["reason"]
    assert incidents_for(sim, keep.uuid) == []
    assert not running(sim, node_of(sim, kname), "keep1")
    # what instmon saw is in mond's instance status of that node
    def seen_by_mond() -> dict[str, Any] | None:
        url = f"http://{node_of(sim, kname).published}:1815/1/report/instance/inst-status" \
            "?verbose=1"
        report = httpx.get(url, timeout=10).json()
        assert "instances" in report["data"], report
        entry = next(i for i in report["data"]["instances"] if i["name"] == "keep1")
        return (entry.get("instmon") or {}).get("last_failure")

    failure = wait_for(seen_by_mond, what="mond reporting instmon's view")
    assert failure["detail"] == "STOPPED_DESTROYED"
