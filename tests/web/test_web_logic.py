"""The web console's pure parts: sessions (expiry, CSRF), the overview's alerts, the node
samples kept for an hour."""

from __future__ import annotations

from herder.core import livefigures, model
from herder.masterd.livecache import NodeAnswer, Snapshot
from herder.masterd.web import overview, samples
from herder.masterd.web.samples import NodeSamples
from herder.masterd.web.sessions import SessionStore, csrf_matches
from tests.conftest import build_config


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_ends_when_idle_or_too_old_and_at_logout() -> None:
    clock = Clock()
    store = SessionStore(idle=60, lifetime=300, clock=clock)
    session = store.create("admin")
    assert store.lookup(session.id) is session
    clock.now += 59
    assert store.lookup(session.id) is session  # a request keeps it alive
    clock.now += 61
    assert store.lookup(session.id) is None  # idle too long
    old = store.create("admin")
    for _ in range(7):
        clock.now += 50
        store.lookup(old.id)
    assert store.lookup(old.id) is None  # 300 s after the login, however busy
    gone = store.create("viewer")
    store.drop(gone.id)
    assert store.lookup(gone.id) is None
    assert store.lookup("") is None and store.lookup("forged") is None


def test_csrf_tokens_are_per_session() -> None:
    store = SessionStore()
    one, two = store.create("admin"), store.create("admin")
    assert one.id != two.id and one.csrf != two.csrf
    assert csrf_matches(one, one.csrf)
    assert not csrf_matches(one, two.csrf) and not csrf_matches(one, None)
    assert not csrf_matches(one, "")


def info(free: int = 1024) -> livefigures.NodeInfo:
    return livefigures.NodeInfo(
        bootid="b", memory_total=4096, memory_free=free, memory_dom0=512, cpu_total=4,
        cpu_dom0=4, cpu_nodes=1, cpu_sockets=1,
        storage=(livefigures.StorageUnit("lvm-vg", "xenvg", 10240, 4096),
                 livefigures.StorageUnit("lvm-pv", "/dev/sdb", 10240, 4096)),
        instances={})


def snapshot(config: model.ConfigData, dead: str | None) -> Snapshot:
    answers = {n.uuid: NodeAnswer(1.0, 1.0, None if n.uuid == dead else info(),
                                  "connection refused" if n.uuid == dead else None)
               for n in config.nodes.values()}
    return Snapshot(frozenset(answers), answers)


def test_alerts_name_unreachable_nodes_degraded_mirrors_and_failed_repairs() -> None:
    config = build_config(3, drbd_instances=1, plain_instances=1)
    drbd = next(i for i in config.instances.values() if i.disk_template == "drbd")
    dead = drbd.secondary_nodes[0]
    failed = {"uuid": "i1", "node": drbd.primary_node, "action": "live-repair",
              "repair-status": "failed", "jobs": []}
    done = {"uuid": "i2", "node": drbd.primary_node, "action": "Ok",
            "repair-status": "completed", "jobs": []}
    jobs = [{"id": 1, "status": "running"}, {"id": 2, "status": "success"}]
    view = overview.build(config, snapshot(config, dead), jobs,
                          {"incidents": [failed, done], "reports": []}, None)
    kinds = {(a["kind"], a["subject"]) for a in view["alerts"]}
    assert kinds == {("unreachable", config.node_name(dead)),
                     ("failed-repair", config.node_name(drbd.primary_node)),
                     ("degraded-mirror", drbd.name)}
    assert [j["id"] for j in view["jobs"]] == [1]  # running jobs only
    rows = {r["name"]: r for r in view["nodes"]}
    assert rows[config.node_name(dead)]["live_error"] == "connection refused"
    assert rows[config.node_name(drbd.primary_node)]["incidents"] == [failed]
    healthy = overview.build(config, snapshot(config, None), [], {"incidents": []}, None)
    assert healthy["alerts"] == []
    assert all(r["mtotal"] == 4096 for r in healthy["nodes"])
    unreachable_maintd = overview.build(config, snapshot(config, None), [], None, "no maintd")
    assert [a["kind"] for a in unreachable_maintd["alerts"]] == ["maintd"]


def test_samples_keep_an_hour_per_node() -> None:
    config = build_config(2, drbd_instances=0, plain_instances=0)
    samples = NodeSamples(keep=60, interval=10)
    first, second = sorted(config.nodes)
    answers = {first: NodeAnswer(1.0, 1.0, info(free=1000)),
               second: NodeAnswer(1.0, 1.0, None, "timed out")}
    for step in range(10):
        samples.record(config, Snapshot(frozenset(answers), answers), 100.0 + 10 * step)
    kept = samples.of(first)
    assert len(kept) == 7 and kept[0]["t"] == 130.0  # 60 s (+1) of samples
    assert kept[-1]["mem_used"] == 3096 and kept[-1]["disk_used"] == 6144  # PVs not counted
    assert samples.of(second)[-1] == {"t": 190.0, "error": "timed out"}
    assert [s["t"] for s in samples.of(first, since=180.0)] == [180.0, 190.0]
    del config.nodes[second]
    samples.record(config, Snapshot(frozenset({first}), {first: answers[first]}), 200.0)
    assert samples.of(second) == []


def test_mond_figures_cpu_disk_io_and_drbd_sync() -> None:
    from herder.mond.collectors.diskstats import parse_diskstats

    diskstats = parse_diskstats(
        "   8       0 sda 100 0 2000 0 50 0 4000 0 0 0 0\n"
        "   8       1 sda1 100 0 2000 0 50 0 4000 0 0 0 0\n"  # a partition: counted in sda
        " 253       0 dm-0 10 0 500 0 5 0 700 0 0 0 0\n"  # an LV: counted in its PV
        "   7       0 loop0 1 0 8 0 1 0 16 0 0 0 0\n")
    reports = [
        {"name": "cpu-avg-load", "category": None, "data": {"cpu_total": 1.25, "cpus": []}},
        {"name": "diskstats", "category": "storage", "data": diskstats},
        {"name": "drbd", "category": "storage", "data": {"deviceInfos": [
            {"minor": 0, "syncStatus": {"percentage": 40.5}},
            {"minor": 1, "syncStatus": {"percentage": 90.0}}, {"minor": 2}]}},
    ]
    figures = samples.mond_figures(reports)
    assert figures == {"cpu_load": 1.25, "sectors_read": 2008, "sectors_written": 4016,
                       "drbd_minors": 3, "drbd_syncing": 2, "drbd_sync_pct": 40.5}
    assert samples.mond_figures({"not": "a list"}) == {}
    later = {**figures, "t": 110.0, "sectors_read": 2008 + 20480, "sectors_written": 4016}
    assert samples.io_rates({**figures, "t": 100.0}, later) == {
        "io_read_bps": 1048576, "io_write_bps": 0}
    rebooted = {**later, "sectors_read": 5}
    assert samples.io_rates(later, {**rebooted, "t": 120.0})["io_read_bps"] is None
    assert samples.io_rates(None, later) == {}
