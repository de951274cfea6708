"""mond on a node without the cluster config: collector settings and DRBD minors from confd.

Against herder's own confd (in-process, always runs) and against Ganeti's `ganeti-confd` 3.0.2
from ../shared/peers (`peer`, skipped cleanly when absent): pointed at a Ganeti cluster, herder's
mond uses that cluster's data-collector settings and names its instances.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.cli.ganeti_import import import_ganeti_file
from herder.cli.main import main
from herder.core import confd, model
from herder.core.store import FileStore
from herder.mond.agent import Agent
from herder.mond.collector import CollectContext, Collector, ConfdSource, MondSettings
from herder.mond.collectors.drbd import DrbdCollector, instance_minors
from herder.mond.collectors.lvm import LvCollector, PlainCollector, lv_owners
from herder.mond.report import Kind, status
from herder.mond.runner import collect_once, render
from tests.confd.confd_support import KEY, Servers, file_processor
from tests.conftest import SHARED, build_config
from tests.mond.agent_fixture import running_mond
from tests.mond.test_lvm import LVS, VGS

NODE = "node1.example.com"


class Fake(Collector):
    category = "storage"
    kind = Kind.STATUS

    def collect(self) -> dict[str, Any]:
        return {"status": status(0)}


def fake(name: str, interval: float) -> type[Collector]:
    return type(f"Fake_{name}", (Fake,), {"name": name, "default_interval": interval})


def proc_drbd(minors: list[int]) -> str:
    lines = ["version: 8.4.11 (api:1/proto:86-101)"]
    for minor in minors:
        lines += [f" {minor}: cs:Connected ro:Primary/Secondary ds:UpToDate/UpToDate C r-----",
                  "    ns:1 nr:0 dw:1 dr:0 al:0 bm:0 lo:0 pe:0 ua:0 ap:0 ep:1 wo:f oos:0"]
    return "\n".join(lines) + "\n"


def confd_context(peers: list[str], key_file: Path | None, tmp_path: Path, *,
                  ttl: float = 15.0, timeout: float = 2.0, **inputs: Path) -> CollectContext:
    settings = MondSettings(confd_peers=peers, confd_key_file=key_file, confd_timeout=timeout,
                            confd_cache_seconds=ttl, plugin_dir=tmp_path / "no-plugins")
    return CollectContext(node_name=NODE, settings=settings, inputs=inputs)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- herder's own confd -----------------------------------------------------------------------


def herder_config() -> model.ConfigData:
    config = build_config()
    config.cluster.data_collectors["drbd"] = model.CollectorSettings(interval=2.0)
    config.cluster.data_collectors["lv"] = model.CollectorSettings(active=False, interval=30.0)
    return config


@pytest.fixture
def herder_confd(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """herder confd serving a config file: (peer, config path, key file)."""
    config_dir = tmp_path / "cluster"
    config_dir.mkdir()
    path = config_dir / "config.json"
    FileStore(path).create(herder_config())
    key_file = config_dir / "hmac.key"
    key_file.write_bytes(KEY)
    servers = Servers()
    ((host, port),) = servers.start(file_processor(path))
    try:
        yield f"{host}:{port}", path, key_file
    finally:
        servers.stop()


def test_settings_from_confd_without_config(herder_confd: tuple[str, Path, Path],
                                            tmp_path: Path) -> None:
    peer, _, key_file = herder_confd
    ctx = confd_context([peer], key_file, tmp_path)
    assert ctx.config() is None and ctx.cluster_source() == "confd"
    drbd = ctx.collector_settings("drbd", 5.0)
    assert (drbd.active, drbd.interval, drbd.min_interval, drbd.max_interval) == (
        True, 2.0, 1.0, 8.0)
    assert not ctx.collector_settings("lv", 30.0).active
    assert ctx.collector_settings("no-such-collector", 7.0).interval == 7.0
    # answers are cached: one confd query for all of them
    source = ctx.confd()
    assert source is not None and source.queries == 1


def test_diagnose_command_from_confd_without_config(herder_confd: tuple[str, Path, Path],
                                                    tmp_path: Path) -> None:
    peer, path, key_file = herder_confd
    with FileStore(path).update() as config:
        config.maintenance.diagnose_command = "check-node"
    ctx = confd_context([peer], key_file, tmp_path)
    assert ctx.config() is None and ctx.diagnose_command() == "check-node"
    # the config wins; without confd (or with a silent one) this node's setting
    ctx.config_loader = lambda: build_config()
    assert ctx.diagnose_command() == ""
    silent = confd_context([f"127.0.0.1:{free_udp_port()}"], key_file, tmp_path, timeout=0.2)
    silent.settings.diagnose_command = "local-check"
    assert silent.diagnose_command() == "local-check"


def test_config_wins_over_confd(herder_confd: tuple[str, Path, Path], tmp_path: Path) -> None:
    peer, _, key_file = herder_confd
    config = build_config()
    ctx = confd_context([peer], key_file, tmp_path)
    ctx.config_loader = lambda: config
    assert ctx.cluster_source() == "config"
    assert ctx.collector_settings("drbd", 9.0).interval == 5.0  # the config's default entry
    assert ctx.confd() is not None and ctx.confd().queries == 0  # type: ignore[union-attr]
    assert CollectContext().cluster_source() == "none"


def test_agent_schedules_from_confd(herder_confd: tuple[str, Path, Path],
                                    tmp_path: Path) -> None:
    peer, path, key_file = herder_confd
    ctx = confd_context([peer], key_file, tmp_path, ttl=0.0)
    agent = Agent(ctx, collectors={"drbd": fake("drbd", 5.0), "lv": fake("lv", 30.0),
                                   "node-os": fake("node-os", 10.0)})
    try:
        agent.refresh_units(0.0)
        assert set(agent.units) == {"drbd", "node-os"}  # lv is inactive in the cluster
        assert agent.units["drbd"].schedule.interval == 2.0
        assert agent.units["node-os"].schedule.interval == 10.0  # confd knows no setting
        # the cluster changes its settings: seen at the next look (the answer is refreshed in
        # the background, so the scheduler never waits on confd)
        with FileStore(path).update() as config:
            config.cluster.data_collectors["drbd"] = model.CollectorSettings(active=False)
            config.cluster.data_collectors["lv"] = model.CollectorSettings(interval=3.0)
        deadline = time.monotonic() + 10
        now = 0.0
        while time.monotonic() < deadline and set(agent.units) != {"lv", "node-os"}:
            now += 60.0
            agent.refresh_units(now)
            time.sleep(0.05)
        assert set(agent.units) == {"lv", "node-os"}
        assert agent.units["lv"].schedule.interval == 3.0
    finally:
        agent.close()


def test_drbd_minors_mapped_through_confd(herder_confd: tuple[str, Path, Path],
                                          tmp_path: Path) -> None:
    peer, path, key_file = herder_confd
    config = FileStore(path).load()
    node = config.find_node("node2.example.com")
    expected = instance_minors(config, node.uuid)
    assert len(expected) == 2  # secondary of one instance, primary of another
    proc = tmp_path / "proc_drbd"
    proc.write_text(proc_drbd([*sorted(expected), 9]))
    ctx = confd_context([peer], key_file, tmp_path, proc_drbd=proc)
    ctx.node_name = node.name
    collector = DrbdCollector(ctx)
    data = render(collector, collect_once(collector), verbose=True)["data"]
    got = {d["minor"]: d["instance"] for d in data["deviceInfos"]}
    assert got == {**expected, 9: None}
    assert data["status"] == {"code": 0, "message": ""}


def test_confd_failure_falls_back(herder_confd: tuple[str, Path, Path], tmp_path: Path,
                                  caplog: pytest.LogCaptureFixture) -> None:
    peer, _, key_file = herder_confd
    proc = tmp_path / "proc_drbd"
    proc.write_text(proc_drbd([0]))
    silent = f"127.0.0.1:{free_udp_port()}"
    for ctx, why in [
        (confd_context([silent], key_file, tmp_path, timeout=0.2, proc_drbd=proc),
         "no confd answer"),
        (confd_context([peer], tmp_path / "missing.key", tmp_path, proc_drbd=proc),
         "no HMAC key"),
    ]:
        settings = ctx.collector_settings("drbd", 5.0)  # never raises: the defaults
        assert (settings.active, settings.interval) == (True, 5.0)
        collector = DrbdCollector(ctx)
        sample = collect_once(collector)
        assert not sample.failed
        data = render(collector, sample, verbose=True)["data"]
        assert data["deviceInfos"][0]["instance"] is None
        assert data["status"]["code"] == 0 and why in data["status"]["message"]
        assert data["status"]["message"].startswith("instances unknown: ")
    assert "using defaults" in caplog.text
    # a node confd does not know: said too
    ctx = confd_context([peer], key_file, tmp_path, proc_drbd=proc)
    ctx.node_name = "nosuch.example.com"
    collector = DrbdCollector(ctx)
    message = render(collector, collect_once(collector), verbose=True)["data"]["status"]
    assert "instances unknown: confd node_drbd query failed" in message["message"]


def test_lv_owners_through_confd(herder_confd: tuple[str, Path, Path], tmp_path: Path) -> None:
    peer, path, key_file = herder_confd
    config = FileStore(path).load()
    for node in config.nodes.values():
        ctx = confd_context([peer], key_file, tmp_path)
        ctx.node_name = node.name
        assert ctx.instance_lvs() == lv_owners(config, node.uuid), node.name
    lvs, vgs = tmp_path / "lvs", tmp_path / "vgs"
    lvs.write_text(LVS)
    vgs.write_text(VGS)
    ctx = confd_context([peer], key_file, tmp_path, lvs=lvs, vgs=vgs)
    lv = render(LvCollector(ctx), collect_once(LvCollector(ctx)), verbose=True)["data"]
    assert {r["name"]: r["instance"] for r in lv} == {
        "d0.disk0_data": "drbd0.example.com", "d0.disk0_meta": "drbd0.example.com",
        "p0.disk0": "plain0.example.com", "other": None}
    plain = PlainCollector(ctx)
    data = render(plain, collect_once(plain), verbose=True)["data"]
    assert {v["name"]: v["instance"] for v in data["lvs"]}["p0.disk0"] == "plain0.example.com"
    assert "instances unknown" not in data["status"]["message"]
    # confd down: no instances, and the plain status says why
    silent = confd_context([f"127.0.0.1:{free_udp_port()}"], key_file, tmp_path, timeout=0.2,
                           lvs=lvs, vgs=vgs)
    plain = PlainCollector(silent)
    data = render(plain, collect_once(plain), verbose=True)["data"]
    assert all(v["instance"] is None for v in data["lvs"])
    assert "instances unknown: no confd answer" in data["status"]["message"]


class FakeClient:
    def __init__(self) -> None:
        self.answer: dict[str, tuple[bool, float]] = {"drbd": (True, 1.0)}
        self.fail = False
        self.hmac_key = KEY

    def data_collectors(self) -> dict[str, tuple[bool, float]]:
        if self.fail:
            raise confd.ConfdTimeoutError("no confd answer")
        return dict(self.answer)


def test_cache_ttl_and_background_refresh() -> None:
    now = [100.0]
    source = ConfdSource(["127.0.0.1"], lambda: KEY, ttl=15.0, clock=lambda: now[0])
    client = FakeClient()
    source.client = lambda: client  # type: ignore[method-assign]
    assert source.data_collectors() == {"drbd": (True, 1.0)} and source.queries == 1
    client.answer = {"drbd": (False, 1.0)}
    now[0] += 14.9
    assert source.data_collectors()["drbd"] == (True, 1.0) and source.queries == 1
    now[0] += 0.2  # stale: wait=True asks again
    assert source.data_collectors()["drbd"] == (False, 1.0) and source.queries == 2
    client.answer = {"drbd": (True, 9.0)}
    now[0] += 20
    # wait=False: the stale answer at once, the new one after the background refresh
    assert source.data_collectors(wait=False)["drbd"] == (False, 1.0)
    deadline = time.monotonic() + 5
    while source.data_collectors(wait=False)["drbd"] != (True, 9.0):
        assert time.monotonic() < deadline, "no background refresh"
        time.sleep(0.01)
    assert source.queries == 3
    # failures are cached for a short while only, then asked again
    client.fail = True
    now[0] += 20
    with pytest.raises(confd.ConfdError, match="no confd answer"):
        source.data_collectors()
    client.fail = False
    now[0] += 4
    with pytest.raises(confd.ConfdError):
        source.data_collectors()
    now[0] += 2
    assert source.data_collectors()["drbd"] == (True, 9.0)


def test_collect_cli_with_confd(herder_confd: tuple[str, Path, Path], tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    peer, path, key_file = herder_confd
    config = FileStore(path).load()
    expected = instance_minors(config, config.find_node(NODE).uuid)
    proc = tmp_path / "proc_drbd"
    proc.write_text(proc_drbd(sorted(expected)))
    rc = main(["--config", str(tmp_path / "absent.json"), "collect", "drbd", "--verbose",
               "--node", NODE, "--input", f"proc_drbd={proc}", "--confd", peer,
               "--confd-key", str(key_file)])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert {d["minor"]: d["instance"] for d in printed["data"]["deviceInfos"]} == expected


# --- Ganeti's ganeti-confd (the peers) --------------------------------------------------------

GROOT = Path(os.environ.get("GROOT", "/tmp/groot"))
PEER_ROOT = Path(os.environ.get("PEER_ROOT", "/tmp/gpeers/node1.example.com"))
CONFD_SH = SHARED / "peers" / "confd.sh"


@pytest.fixture(scope="module")
def ganeti_node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of Ganeti's virtual node (peers/mkcluster.sh): its own pid file, so this
    module's ganeti-confd never collides with another test's."""
    if not CONFD_SH.is_file() or not GROOT.is_dir():
        pytest.skip("Ganeti peers absent (../shared/peers, /tmp/groot)")
    if not (PEER_ROOT / "var/lib/ganeti/config.data").is_file():
        pytest.skip(f"Ganeti's virtual node is absent ({PEER_ROOT}; run peers/mkcluster.sh)")
    root = tmp_path_factory.mktemp("gpeer") / PEER_ROOT.name
    for sub in ("etc", "var/lib"):
        shutil.copytree(PEER_ROOT / sub, root / sub)
    (root / "var/run/ganeti/socket").mkdir(parents=True)
    (root / "var/log/ganeti").mkdir(parents=True)
    return root


@pytest.fixture(scope="module")
def ganeti_confd(ganeti_node: Path) -> Iterator[tuple[int, Path]]:
    """Ganeti's ganeti-confd serving the copy on a free port: (port, HMAC key file)."""
    port = free_udp_port()
    env = {**os.environ, "CONFD_PORT": str(port), "PEER_ROOT": str(ganeti_node)}
    proc = subprocess.run(["bash", str(CONFD_SH), "start"], capture_output=True, text=True,
                          env=env, timeout=120)
    if proc.returncode or f"127.0.0.1:{port}" not in proc.stdout:
        pytest.skip(f"Ganeti's confd did not start: {proc.stdout[-300:]}")
    try:
        yield port, ganeti_node / "var/lib/ganeti/hmac.key"
    finally:
        subprocess.run(["bash", str(CONFD_SH), "stop"], capture_output=True, env=env,
                       timeout=60)


@pytest.mark.peer
def test_mond_on_a_ganeti_cluster(ganeti_confd: tuple[int, Path], tmp_path: Path) -> None:
    """herder mond with no herder config, pointed at Ganeti's confd: Ganeti's collector settings
    schedule it and its DRBD report names Ganeti's instance."""
    port, key_file = ganeti_confd
    proc = tmp_path / "proc_drbd"
    proc.write_text(proc_drbd([0, 1]))
    ctx = confd_context([f"127.0.0.1:{port}"], key_file, tmp_path, proc_drbd=proc)
    source = ctx.confd()
    assert source is not None
    ganeti = source.data_collectors()
    assert ganeti["lv"] == (True, 5.0) and ganeti["drbd"] == (True, 5.0)
    collectors = {"drbd": DrbdCollector, "lv": fake("lv", 30.0),
                  "node-os": fake("node-os", 10.0)}
    with running_mond(ctx, collectors=collectors) as mond:
        agent = mond.agent
        mond.wait_for(lambda: set(agent.units) == set(collectors))
        assert agent.units["lv"].schedule.interval == 5.0  # Ganeti's, not the class's 30 s
        assert agent.units["node-os"].schedule.interval == 10.0  # Ganeti has no setting
        mond.wait_for(lambda: agent.units["drbd"].runs > 0)
        code, listing, _ = mond.get("/1/list/collectors")
        assert code == 200 and ["drbd", "storage", 1] in listing
        code, rep, _ = mond.get("/1/report/storage/drbd?verbose=1")
    assert code == 200
    minors = {d["minor"]: d["instance"] for d in rep["data"]["deviceInfos"]}
    assert minors == {0: "instance1.example.com", 1: None}
    assert rep["data"]["status"] == {"code": 0, "message": ""}


@pytest.mark.peer
def test_lv_owners_from_a_ganeti_cluster(ganeti_confd: tuple[int, Path],
                                         tmp_path: Path) -> None:
    """The LV -> instance map from Ganeti's confd equals the one from its config file."""
    port, key_file = ganeti_confd
    config, _ = import_ganeti_file(key_file.parent / "config.data")
    for node in config.nodes.values():
        ctx = confd_context([f"127.0.0.1:{port}"], key_file, tmp_path)
        ctx.node_name = node.name
        owners = ctx.instance_lvs()
        assert owners and owners == lv_owners(config, node.uuid), node.name


@pytest.mark.peer
def test_collect_cli_on_a_ganeti_cluster(ganeti_confd: tuple[int, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    port, key_file = ganeti_confd
    proc = tmp_path / "proc_drbd"
    proc.write_text(proc_drbd([0]))
    rc = main(["--config", str(tmp_path / "absent.json"), "collect", "drbd", "--verbose",
               "--node", "node3.example.com", "--input", f"proc_drbd={proc}",
               "--confd", f"127.0.0.1:{port}", "--confd-key", str(key_file)])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["data"]["deviceInfos"][0]["instance"] == "instance1.example.com"
