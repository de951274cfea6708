"""herder's mond beside Ganeti 3.0.2's ganeti-mond, on the same inputs (../shared/peers).

Skips cleanly when the peer or ../shared is absent.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from herder.mond import registry
from herder.mond.collector import CollectContext, MondSettings
from tests.mond.agent_fixture import running_mond

SHARED = Path(__file__).resolve().parents[3] / "shared"
PEERS = SHARED / "peers"
GANETI = SHARED / "conformance" / "ganeti"
PEER_URL = "http://127.0.0.1:18150"

pytestmark = pytest.mark.peer


@pytest.fixture(scope="module")
def peer():
    if not (PEERS / "mond.sh").exists() or not Path("/tmp/groot/usr/lib/ganeti/3.0").is_dir():
        pytest.skip("Ganeti's mond peer is not installed (bash ../shared/peers/setup.sh)")
    status = subprocess.run(["bash", str(PEERS / "mond.sh"), "status"], capture_output=True,
                            text=True, timeout=30)
    if "running" in status.stdout and "not running" not in status.stdout:
        pytest.skip("a ganeti-mond peer is already running")
    started = subprocess.run(["bash", str(PEERS / "mond.sh"), "start"], capture_output=True,
                             text=True, timeout=180)
    if started.returncode != 0:
        pytest.skip(f"ganeti-mond did not start: {started.stdout[-300:]}")
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                get(PEER_URL, "/1/list/collectors")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.skip("ganeti-mond does not answer")
                time.sleep(0.2)
        yield PEER_URL
    finally:
        subprocess.run(["bash", str(PEERS / "mond.sh"), "stop"], capture_output=True, timeout=60)


def get(base: str, path: str):
    with urllib.request.urlopen(base + path, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.fixture
def ours(tmp_path: Path):
    inputs = {"proc_drbd": GANETI / "proc_drbd84.txt",
              "proc_diskstats": GANETI / "proc_diskstats.txt"}
    ctx = CollectContext(node_name="node1.example.com", inputs=inputs,
                         settings=MondSettings(plugin_dir=tmp_path, run_dir=tmp_path))
    names = ("cpu-avg-load", "diskstats", "drbd")
    collectors = {n: registry.get(n) for n in names if n in registry.builtin_collectors()}
    with running_mond(ctx, collectors) as mond:
        mond.wait_for(lambda: all(n in mond.agent.units and mond.agent.units[n].runs
                                  for n in collectors))
        yield mond


def test_version_routes_match(peer: str, ours) -> None:
    assert get(peer, "/") == ours.get("/")[1] == [1]
    assert get(peer, "/1") is None and ours.get("/1")[1] is None


def test_list_format_matches(peer: str, ours) -> None:
    theirs = {c[0]: c for c in get(peer, "/1/list/collectors")}
    mine = {c[0]: c for c in ours.get("/1/list/collectors")[1]}
    shared = set(theirs) & set(mine)
    assert {"cpu-avg-load", "diskstats", "drbd"} <= shared
    for name in shared:
        assert mine[name] == theirs[name], name  # [name, category, kind], same values


def test_report_envelopes_match(peer: str, ours) -> None:
    for category, name in (("default", "cpu-avg-load"), ("storage", "diskstats"),
                           ("storage", "drbd")):
        theirs = get(peer, f"/1/report/{category}/{name}")
        mine = ours.get(f"/1/report/{category}/{name}?verbose=1")[1]
        assert list(mine) == list(theirs), name  # same fields, same order
        for key in ("name", "version", "format_version", "category", "kind"):
            assert mine[key] == theirs[key], (name, key)
        assert isinstance(mine["timestamp"], int)


def test_diskstats_values_match(peer: str, ours) -> None:
    theirs = get(peer, "/1/report/storage/diskstats")["data"]
    mine = ours.get("/1/report/storage/diskstats")[1]["data"]
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs, strict=True):
        assert {k: a[k] for k in b} == b


def test_drbd_values_match_except_status(peer: str, ours) -> None:
    theirs = get(peer, "/1/report/storage/drbd")["data"]
    mine = ours.get("/1/report/storage/drbd?verbose=1")[1]["data"]
    assert mine["versionInfo"] == theirs["versionInfo"]
    assert len(mine["deviceInfos"]) == len(theirs["deviceInfos"])
    for a, b in zip(mine["deviceInfos"], theirs["deviceInfos"], strict=True):
        a, b = dict(a), dict(b)
        a.pop("instance", None)  # the peer maps minors through its confd; ours has no config
        b.pop("instance", None)
        assert a == b
    # Both call the same minors unhealthy (herder also looks at disk states)
    assert theirs["status"]["code"] == 4 and mine["status"]["code"] == 4
