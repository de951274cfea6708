"""mond over real HTTP: every route, verbose, errors, isolation of bad collectors, plugins."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from herder.core import model
from herder.mond.collector import CollectContext, MondSettings
from tests.mond import fakes
from tests.mond.agent_fixture import running_mond

FAST = {n: fakes.ALL[n] for n in ("steady", "perf", "raising", "refusing", "unavailable")}


@pytest.fixture
def ctx(tmp_path: Path) -> CollectContext:
    settings = MondSettings(plugin_dir=tmp_path / "plugins", run_dir=tmp_path / "run",
                            collector_timeout=2.0, plugin_timeout=3.0)
    settings.plugin_dir.mkdir()
    return CollectContext(node_name="node1.example.com", settings=settings)


def ready(running, names=None) -> bool:
    """Every unit (or the named ones) has finished a run."""
    units = dict(running.agent.units)
    wanted = names or [n for n in FAST if n != "unavailable"]
    return all(n in units for n in wanted) and all(u.runs > 0 for u in units.values())


def test_routes(ctx: CollectContext) -> None:
    with running_mond(ctx, FAST) as mond:
        mond.wait_for(lambda: ready(mond))
        assert mond.get("/")[:2] == (200, [1])
        assert mond.get("/1")[:2] == (200, None)
        code, listing, ctype = mond.get("/1/list/collectors")
        assert code == 200 and ctype.startswith("application/json")
        assert listing == [["steady", "storage", 1], ["perf", "default", 0],
                           ["raising", "storage", 1], ["refusing", "default", 0]]
        code, reports, _ = mond.get("/1/report/all")
        assert code == 200
        assert [r["name"] for r in reports] == ["steady", "perf", "raising", "refusing"]
        for rep in reports:
            assert list(rep) == ["name", "version", "format_version", "timestamp", "category",
                                 "kind", "data"]
            assert rep["version"] == "B" and rep["format_version"] == 1
            assert isinstance(rep["timestamp"], int) and rep["timestamp"] > 1.7e18
        code, one, _ = mond.get("/1/report/default/perf")
        assert code == 200 and one["data"]["count"] >= 1 and one["category"] is None


def test_verbose_switch(ctx: CollectContext) -> None:
    with running_mond(ctx, FAST) as mond:
        mond.wait_for(lambda: ready(mond))
        assert mond.get("/1/report/storage/steady")[1]["data"] == {
            "status": {"code": 0, "message": ""}}
        verbose = mond.get("/1/report/storage/steady?verbose=1")[1]["data"]
        assert verbose == {"status": {"code": 0, "message": ""}, "free": 10, "used": 5,
                           "total": 15}
        all_verbose = mond.get("/1/report/all?verbose=1")[1]
        assert next(r for r in all_verbose if r["name"] == "steady")["data"]["total"] == 15
        # performance collectors look the same either way
        assert "count" in mond.get("/1/report/default/perf")[1]["data"]


def test_report_all_only_the_named_reports(ctx: CollectContext) -> None:
    """herder extension: `/1/report/all?only=CATEGORY/NAME,...` (maintd's one poll)."""
    with running_mond(ctx, FAST) as mond:
        mond.wait_for(lambda: ready(mond))
        code, reports, ctype = mond.get(
            "/1/report/all?verbose=1&only=default/perf,storage/steady,storage/nope,x")
        assert code == 200 and ctype.startswith("application/json")
        assert [r["name"] for r in reports] == ["perf", "steady"]
        assert reports[1]["data"]["total"] == 15  # verbose
        assert "total" not in mond.get("/1/report/all?only=storage/steady")[1][0]["data"]
        assert mond.get("/1/report/all?only=")[:2] == (200, [])


def test_report_all_only_is_deduplicated_and_bounded(ctx: CollectContext) -> None:
    """Issue 35 item 11: a name repeated (in one `only=` or in several) is answered once, so
    a small request cannot ask for the same report hundreds of times; more names than
    `MAX_ONLY` is a 400."""
    from herder.mond.server import MAX_ONLY

    with running_mond(ctx, FAST) as mond:
        mond.wait_for(lambda: ready(mond))
        repeated = ",".join(["storage/steady", "default/perf"] * (MAX_ONLY // 2))
        code, reports, _ = mond.get(f"/1/report/all?verbose=1&only={repeated}")
        assert code == 200 and [r["name"] for r in reports] == ["steady", "perf"]
        code, reports, _ = mond.get("/1/report/all?only=default/perf&only=storage/steady"
                                    "&only=default/perf")
        assert code == 200 and [r["name"] for r in reports] == ["perf", "steady"]
        too_many = ",".join(f"storage/x{i}" for i in range(MAX_ONLY + 1))
        code, answer, ctype = mond.get(f"/1/report/all?only={too_many}")
        assert code == 400 and ctype.startswith("application/json")
        assert f"at most {MAX_ONLY}" in answer["message"]


def test_failing_collectors_are_isolated(ctx: CollectContext) -> None:
    with running_mond(ctx, FAST) as mond:
        mond.wait_for(lambda: ready(mond))
        code, reports, _ = mond.get("/1/report/all")
        assert code == 200  # never a 500 for the whole report
        by_name = {r["name"]: r for r in reports}
        assert by_name["raising"]["data"]["status"] == {
            "code": 4, "message": "collector crashed: RuntimeError: disk on fire"}
        assert by_name["refusing"]["data"] == {"error": "backend pv unavailable"}
        assert by_name["steady"]["data"]["status"]["code"] == 0
        assert "unavailable" not in by_name  # not present on this node: not offered


def test_hanging_collector_is_reported_and_others_go_on(ctx: CollectContext) -> None:
    fakes.RELEASE.clear()
    collectors = {"steady": fakes.Steady, "perf": fakes.Perf, "hanging": fakes.Hanging}
    try:
        with running_mond(ctx, collectors) as mond:
            mond.wait_for(lambda: "hanging" in mond.agent.units
                          and mond.agent.units["hanging"].hung_reported, timeout=10)
            code, rep, _ = mond.get("/1/report/daemon/hanging")
            assert code == 200
            assert rep["data"]["status"]["code"] == 4
            assert "did not finish within 2s" in rep["data"]["status"]["message"]
            before = mond.agent.units["perf"].runs
            mond.wait_for(lambda: mond.agent.units["perf"].runs > before + 2)
            fakes.RELEASE.set()  # it finally answers: its real report replaces the hang report
            mond.wait_for(lambda: mond.agent.units["hanging"].runs >= 1)
            assert mond.get("/1/report/daemon/hanging")[1]["data"]["status"]["code"] == 0
    finally:
        fakes.RELEASE.set()


def test_errors_are_json_with_messages(ctx: CollectContext) -> None:
    with running_mond(ctx, FAST) as mond:
        code, body, ctype = mond.get("/nope")
        assert code == 404 and ctype.startswith("application/json")
        assert body["error"] == "unknown path"
        code, body, _ = mond.get("/1/report/storage/nosuch")
        assert code == 404 and body["error"] == "unknown collector"
        assert "no active collector 'nosuch'" in body["message"]
        code, body, _ = mond.get("/1/report/Storage/steady")
        assert code == 404 and "lowercase" in body["message"]
        code, body, _ = mond.get("/1/report/storage")
        assert code == 404 and body["error"] == "unknown collector"
        for method in ("POST", "PUT", "DELETE"):
            code, body = mond.request(method, "/1/report/all")
            assert code == 405 and "use GET" in body["message"]


def test_deactivated_collector_disappears(ctx: CollectContext, config: model.ConfigData) -> None:
    config.cluster.data_collectors["perf"] = model.CollectorSettings(active=False, interval=1)
    ctx.config_loader = lambda: config
    with running_mond(ctx, FAST) as mond:
        mond.wait_for(lambda: ready(mond, ["steady", "raising", "refusing"]))
        assert "perf" not in [c[0] for c in mond.get("/1/list/collectors")[1]]
        assert mond.get("/1/report/default/perf")[0] == 404


def test_configured_interval_is_used(ctx: CollectContext, config: model.ConfigData) -> None:
    config.cluster.data_collectors["steady"] = model.CollectorSettings(
        interval=300, min_interval=200, max_interval=400)
    ctx.config_loader = lambda: config
    with running_mond(ctx, FAST) as mond:
        mond.wait_for(lambda: ready(mond))
        unit = mond.agent.units["steady"]
        assert unit.schedule.interval == 300 and 200 <= unit.schedule.current <= 400


def _write_plugin(directory: Path, name: str, body: str, executable: bool = True) -> Path:
    path = directory / name
    path.write_text(body)
    if executable:
        path.chmod(0o755)
    return path


def test_plugins(ctx: CollectContext) -> None:
    plugin_dir = ctx.settings.plugin_dir
    good = {"name": "raid", "version": "1.0", "format_version": 1, "timestamp": 123,
            "category": "storage", "kind": 1,
            "data": {"status": {"code": 0, "message": ""}, "disks": 4}}
    _write_plugin(plugin_dir, "raid", f"#!/bin/sh\necho '{json.dumps(good)}'\n")
    _write_plugin(plugin_dir, "static.json", json.dumps(
        [{**good, "name": "fans", "kind": 0, "category": None, "data": {"rpm": 900}}]), False)
    _write_plugin(plugin_dir, "garbage", "#!/bin/sh\necho 'not json'\n")
    _write_plugin(plugin_dir, "nostatus", "#!/bin/sh\necho '" + json.dumps(
        {**good, "name": "x", "data": {}}) + "'\n")
    _write_plugin(plugin_dir, "shadow", "#!/bin/sh\necho '" + json.dumps(
        {**good, "name": "steady"}) + "'\n")
    _write_plugin(plugin_dir, "slow", "#!/bin/sh\nsleep 5\n")
    _write_plugin(plugin_dir, "failing", "#!/bin/sh\necho oops >&2; exit 3\n")
    _write_plugin(plugin_dir, "notes.txt", "not executable", False)
    with running_mond(ctx, {"steady": fakes.Steady}) as mond:
        plugins = ["raid", "static.json", "garbage", "nostatus", "shadow", "slow", "failing"]
        mond.wait_for(lambda: ready(mond, ["steady", *(str(plugin_dir / p) for p in plugins)])
                      and all(u.runs or u.hung_reported for u in mond.agent.units.values()),
                      timeout=15)
        reports = {r["name"]: r for r in mond.get("/1/report/all?verbose=1")[1]}
        assert reports["raid"]["data"]["disks"] == 4 and reports["raid"]["timestamp"] == 123
        assert reports["fans"]["data"] == {"rpm": 900}
        assert mond.get("/1/report/storage/raid")[1]["data"]["disks"] == 4  # plugins: verbatim

        def problem(plugin: str) -> str:
            rep = reports[f"plugin:{plugin}"]
            assert rep["kind"] == 1 and rep["data"]["status"]["code"] == 4
            return rep["data"]["status"]["message"]

        assert "output is not JSON" in problem("garbage")
        assert "needs data.status" in problem("nostatus")
        assert "clashes with a built-in collector" in problem("shadow")
        assert "did not finish within 3s" in problem("slow")
        assert "exit code 3: oops" in problem("failing")
        assert "plugin:notes.txt" not in reports
        assert reports["steady"]["version"] == "B"  # the built-in is not shadowed


def test_metrics_expose_cached_data(ctx: CollectContext) -> None:
    with running_mond(ctx, FAST) as mond:
        mond.wait_for(lambda: ready(mond))
        code, text, ctype = mond.get("/metrics")
        assert code == 200 and ctype.startswith("text/plain")
        assert 'herder_mond_collector_status{category="storage",collector="steady"} 0.0' in text
        assert 'herder_mond_collector_status{category="storage",collector="raising"} 4.0' in text
        assert 'herder_mond_value{category="storage",collector="steady",path="total"} 15.0' \
            in text
        assert "herder_mond_collector_interval_seconds" in text


def test_openapi_document(ctx: CollectContext) -> None:
    with running_mond(ctx, FAST) as mond:
        code, doc, _ = mond.get("/openapi.json")
        assert code == 200 and doc["openapi"].startswith("3.")
        assert {"/", "/1", "/1/list/collectors", "/1/report/all",
                "/1/report/{category}/{name}", "/metrics"} <= set(doc["paths"])


def test_pid_file_written_and_removed(ctx: CollectContext) -> None:
    pid_file = ctx.settings.run_dir / "mond.pid"
    with running_mond(ctx, FAST):
        assert int(pid_file.read_text()) == os.getpid()
    assert not pid_file.exists()
