"""The web console's pure parts: sessions (expiry, CSRF), the overview's alerts, the node
samples kept for an hour."""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from herder.core import livefigures, model
from herder.masterd.livecache import NodeAnswer, Snapshot
from herder.masterd.web import overview, samples
from herder.masterd.web.samples import NodeSamples
from herder.masterd.web.sessions import MAX_SESSIONS_PER_USER, SessionStore, csrf_matches
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


def test_sessions_are_capped_per_user_so_no_user_ends_anothers() -> None:
    """One user's flood of logins ends that user's oldest sessions only (issue 35 item 6)."""
    clock = Clock()
    store = SessionStore(clock=clock)
    admin = store.create("admin")
    viewer = [store.create("viewer") for _ in range(MAX_SESSIONS_PER_USER)]
    for _ in range(1005):
        clock.now += 0.01
        store.create("viewer")
    assert store.lookup(admin.id) is admin
    assert all(store.lookup(s.id) is None for s in viewer)  # the viewer's oldest went
    assert store.count("viewer") == MAX_SESSIONS_PER_USER
    assert store.count("admin") == 1


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
    died = {"uuid": "i3", "node": dead, "action": "node-failed", "repair-status": "completed",
            "jobs": [5, 6, 7], "original": {"step": "done",
                                            "detail": "recovered 1 instance(s)"}}
    jobs = [{"id": 1, "status": "running"}, {"id": 2, "status": "success"}]
    view = overview.build(config, snapshot(config, dead), jobs,
                          {"incidents": [failed, done, died], "reports": []}, None)
    kinds = {(a["kind"], a["subject"]) for a in view["alerts"]}
    assert f"node {config.node_name(dead)} failed (completed): done: recovered 1 instance(s)" \
        in [a["message"] for a in view["alerts"]]
    assert kinds == {("unreachable", config.node_name(dead)),
                     ("node-failed", config.node_name(dead)),
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
    config.maintenance.node_recovery = False  # the cluster's switch: said while it is off
    switched_off = overview.build(config, snapshot(config, None), [], {"incidents": []}, None)
    assert [a["kind"] for a in switched_off["alerts"]] == ["node-recovery-off"]


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


def test_daemon_collectors_give_the_nodes_health_and_alerts() -> None:
    from herder.mond.report import Status, status

    def daemon(name: str, code: Status, message: str = "") -> dict[str, Any]:
        return {"name": name, "category": "daemon", "kind": 1,
                "data": {"status": status(code, message), "daemon": name}}

    # mond's answer to the samples' question names every daemon collector
    assert all(f"daemon/{name}" in samples.MOND_REPORTS for name in samples.DAEMONS)
    figures = samples.mond_figures([daemon("mond", Status.OK), daemon("confd", Status.OK),
                                    daemon("noded", Status.BAD, "noded is not running")])
    assert figures == {"daemons_bad": {"noded": "noded is not running"}}
    assert "daemons_bad" not in samples.mond_figures([])  # no daemon report: not known
    config = build_config(2, drbd_instances=0, plain_instances=0)
    first, second = sorted(config.nodes)
    view = overview.build(config, snapshot(config, None), [], {"incidents": []}, None,
                          {first: figures["daemons_bad"], second: {}})
    rows = {r["uuid"]: r for r in view["nodes"]}
    assert rows[first]["daemons_bad"] == {"noded": "noded is not running"}
    assert rows[second]["daemons_bad"] == {}
    assert [(a["kind"], a["subject"]) for a in view["alerts"]] == [
        ("daemon", config.node_name(first))]
    assert overview.build(config, snapshot(config, None), [], {"incidents": []},
                          None)["nodes"][0]["daemons_bad"] is None


# --- the compact NodeSamples against the dicts it replaced ------------------------------------

def fresh(text: str) -> str:
    """An equal string that is another object (as an error message made anew each round)."""
    return "".join(list(text))


INTS = st.one_of(st.integers(-5, 5), st.integers(-(2**70), 2**70))
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    **{name: st.one_of(st.none(), INTS, st.booleans())
       for name in samples.NUMBERS if name not in samples.FLOATS},
    **{name: st.one_of(st.none(), st.floats(allow_nan=False), st.integers(0, 3))
       for name in samples.FLOATS},
    "error": st.sampled_from(["timed out", "no answer", "connection refused"]).map(fresh),
    "mond_error": st.one_of(st.none(), st.sampled_from(["mond answered 500", "down"]).map(fresh)),
    "daemons_bad": st.sampled_from([{}, {"noded": "not running"}, {"mond": "over limit"}]).map(
        dict),
    "unknown": st.integers(),
}
SAMPLES = st.fixed_dictionaries(
    {"t": st.one_of(st.floats(0, 1000), st.integers(0, 1000))},
    optional=FIELD_VALUES)
OPERATIONS = st.lists(st.one_of(
    st.tuples(st.sampled_from("abc"), SAMPLES),  # a sample of that node
    st.tuples(st.sampled_from("abc"), st.none())), max_size=40)  # that node removed


def exactly(found: list[dict[str, Any]]) -> list[dict[str, tuple[type, Any]]]:
    """Samples compared with their values' types (1, 1.0 and True are equal otherwise)."""
    return [{key: (type(value), value) for key, value in sample.items()} for sample in found]


@settings(max_examples=300, deadline=None)
@given(OPERATIONS, st.floats(0, 1000))
def test_compact_samples_read_back_as_the_dicts_kept_before(
        operations: list[tuple[str, dict[str, Any] | None]], since: float) -> None:
    kept = NodeSamples(keep=40, interval=10)  # a ring of 5: it wraps within a few samples
    model: dict[str, deque[dict[str, Any]]] = {}  # what the dict-based NodeSamples kept
    for node, sample in operations:
        if sample is not None:
            kept.add(node, sample)
            model.setdefault(node, deque(maxlen=5)).append(dict(sample))
        else:
            kept.keep_only(set("abc") - {node})
            model.pop(node, None)
        for uuid in "abc":
            expected = list(model.get(uuid, ()))
            assert exactly(kept.of(uuid)) == exactly(expected)
            assert exactly(kept.of(uuid, since)) == exactly(
                [s for s in expected if s["t"] >= since])
            latest = kept.latest(uuid)
            assert exactly([latest] if latest else []) == exactly(expected[-1:])
            # an error (or daemons_bad) that repeats is kept once
            for before, after in itertools.pairwise(kept.of(uuid)):
                for name in samples.OBJECTS & before.keys() & after.keys():
                    if before[name] == after[name]:
                        assert before[name] is after[name]
