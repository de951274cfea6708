"""MonD load data (--mond, --mond-data, --mond-xen, --ignore-dynu) as hail/hbal use it."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from alloc_support import CONF, GROOT, REPO, needs_shared

from herder.alloc.mond import MondOptions, apply_mond, parse_mond_data
from herder.alloc.protocol import InputError
from herder.alloc.textdata import parse_text

HBAL = GROOT / "bin" / "hbal"
SAMPLE = CONF / "mond-data.txt"  # Ganeti's own mock file (../shared)
needs_sample = pytest.mark.skipif(not SAMPLE.exists(), reason=f"{SAMPLE} not present")


def cluster_text(names: list[str], insts: list[tuple[str, int, int, int]]) -> str:
    """Nodes ``names``; DRBD instances (name, vcpus, primary index, secondary index)."""
    lines = ["group-01|fake-uuid-01|preferred||", ""]
    lines += [f"{n}|16384|0|16384|100000|100000|4|N|fake-uuid-01|1" for n in names]
    lines.append("")
    lines += [f"{i}|512|1000|{v}|running|Y|{names[p]}|{names[s]}|drbd||1"
              for i, v, p, s in insts]
    return "\n".join(lines) + "\n\n\n"


NAMES4 = [f"node{k}.example.com" for k in range(1, 5)]
INSTS = [("i1", 1, 0, 1), ("i2", 1, 0, 2), ("i3", 2, 1, 2), ("i4", 1, 1, 0), ("i5", 1, 2, 0),
         ("i6", 1, 2, 1)]


def cpu_report(total: float, ncpu: int = 4) -> dict[str, Any]:
    return {"name": "cpu-avg-load", "version": "B", "format_version": 1,
            "timestamp": 1379507272000000000, "category": None, "kind": 0,
            "data": {"cpu_number": ncpu, "cpus": [total / ncpu] * ncpu, "cpu_total": total}}


def mond_file(tmp_path: Path, loads: dict[str, float]) -> Path:
    path = tmp_path / "mond.json"
    path.write_text(json.dumps([{"node": n, "reports": [cpu_report(v)]}
                                for n, v in loads.items()]))
    return path


LOADS4 = {"node1.example.com": 3.6, "node2.example.com": 0.4, "node3.example.com": 0.2,
          "node4.example.com": 0.05}


def herder(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "herder.cli.main", *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO)


def summary(out: str) -> list[str]:
    """Initial score, each move's instance, new primary and score, the final line."""
    keep = []
    for line in out.splitlines():
        if line.startswith(("Initial score", "Cluster score", "No solution", "Solution length")):
            keep.append(line.strip())
        m = re.match(r"\s+\d+\. (\S+) \S+ => (\S+?)(?::\S+)?\s+([\d.]+) a=", line)
        if m:
            keep.append(f"{m.group(1)} -> {m.group(2)} {m.group(3)}")
    return keep


# --- the mock file ---------------------------------------------------------------------------


@needs_sample
def test_sample_file_parses() -> None:
    data = parse_mond_data(SAMPLE.read_text())
    assert set(data) == {"node1.example.com", "node2.example.com"}
    assert data["node1.example.com"][0]["data"]["cpu_total"] == pytest.approx(0.203643517607712)


@pytest.mark.parametrize(("text", "message"), [
    ("garbage", "Parsing MonD's answer: Invalid JSON"),
    ("{}", "Parsing MonD's answer: Unable to read list"),
    ("[3]", "Parsing MonD's answer: Unable to read JSObject"),
    ('[{"node":"x"}]', "Parsing node's reports: key 'reports' not found, object contains "
                       'only ["node"]'),
    ('[{"node":"x","reports":[{"name":"cpu-avg-load"}]}]',
     "Parsing node's reports: key 'reports': key 'version' not found, object contains only "
     '["name"]'),
])
def test_bad_files_fail_like_hbal(text: str, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        parse_mond_data(text)


@needs_sample
def test_sample_file_sets_node_and_instance_cpu_load() -> None:
    names = ["node1.example.com", "node2.example.com"]
    cl = parse_text(cluster_text(names, [("a", 1, 0, 1), ("b", 3, 0, 1), ("c", 2, 1, 0)]))
    warnings: list[str] = []
    ok = apply_mond(cl, MondOptions(enabled=True, data=parse_mond_data(SAMPLE.read_text())),
                    warnings.append)
    assert ok and not warnings
    n1, n2 = cl.nodes
    assert n1.load[0] == pytest.approx(0.203643517607712)
    assert n2.load[0] == pytest.approx(7.614031289927129e-3)
    a, b, c = cl.instances
    assert n1.u_cpu == 5 and n2.u_cpu == 3  # one reserved CPU (text format default) + vCPUs
    assert a.util[0] == pytest.approx(0.203643517607712 / 5 * 1)  # share of the vCPUs in use
    assert b.util[0] == pytest.approx(0.203643517607712 / 5 * 3)
    assert c.util[0] == pytest.approx(7.614031289927129e-3 / 3 * 2)
    assert a.util[1:] == (1.0, 1.0, 1.0)  # only the cpu component changes


@needs_sample
def test_missing_node_ignores_the_collector() -> None:
    cl = parse_text(cluster_text(NAMES4, INSTS))
    before = [list(n.load) for n in cl.nodes]
    data = parse_mond_data(SAMPLE.read_text())  # knows node1 and node2 only
    warnings: list[str] = []
    assert not apply_mond(cl, MondOptions(enabled=True, data=data), warnings.append)
    assert warnings == ["Didn't receive an answer by all MonDs, cpu-avg-load's data will be "
                        "ignored."]
    assert [list(n.load) for n in cl.nodes] == before


def test_disabled_or_ignore_dynu_change_nothing(tmp_path: Path) -> None:
    data = parse_mond_data(mond_file(tmp_path, LOADS4).read_text())
    for opts in (MondOptions(enabled=False, data=data),
                 MondOptions(enabled=True, data=data, ignore_dynu=True)):
        cl = parse_text(cluster_text(NAMES4, INSTS))
        before = [list(n.load) for n in cl.nodes]
        assert apply_mond(cl, opts)
        assert [list(n.load) for n in cl.nodes] == before


def test_xen_collector_uses_instance_values() -> None:
    names = ["n1", "n2"]
    cl = parse_text(cluster_text(names, [("a", 1, 0, 1), ("b", 3, 0, 1), ("c", 2, 1, 0)]))
    rep = {"name": "xen-cpu-avg-load", "version": "B", "format_version": 1, "timestamp": 1,
           "category": None, "kind": 0}
    data = {"n1": [dict(rep, data={"a": 0.5, "b": 1.25})], "n2": [dict(rep, data={"c": 2.0})]}
    assert apply_mond(cl, MondOptions(enabled=True, data=data, xen=True))
    assert [n.load[0] for n in cl.nodes] == [1.75, 2.0]
    # an instance without data: everything ignored
    cl = parse_text(cluster_text(names, [("a", 1, 0, 1), ("b", 3, 0, 1), ("c", 2, 1, 0)]))
    data["n2"] = [dict(rep, data={})]
    warnings: list[str] = []
    assert not apply_mond(cl, MondOptions(enabled=True, data=data, xen=True), warnings.append)
    assert warnings == ['No CPU information available for ["c"]']
    assert [n.load[0] for n in cl.nodes] == [2.0, 1.0]


# --- the command line against hbal -----------------------------------------------------------


@needs_sample
def test_cli_mond_data_changes_balancing(tmp_path: Path) -> None:
    data = tmp_path / "c.data"
    data.write_text(cluster_text(NAMES4, INSTS))
    mond = mond_file(tmp_path, LOADS4)
    plain = herder("balance", "-t", str(data))
    used = herder("balance", "-t", str(data), "--mond=yes", "--mond-data", str(mond))
    unused = herder("balance", "-t", str(data), "--mond-data", str(mond))  # needs --mond=yes
    ignored = herder("balance", "-t", str(data), "--mond", "--mond-data", str(mond),
                     "--ignore-dynu")
    assert plain.returncode == used.returncode == unused.returncode == 0
    assert "Initial score: 4.70718558" in plain.stdout
    assert "Initial score: 5.31143864" in used.stdout  # hbal 3.0.2's figures
    assert summary(unused.stdout) == summary(plain.stdout)
    assert "Initial score: 0.37705857" in ignored.stdout
    missing = herder("balance", "-t", str(data), "--mond=yes", "--mond-data", str(SAMPLE),
                     "--exit-on-missing-mond-data")
    assert missing.returncode == 1
    assert missing.stderr.endswith("Error: Not all required data available\n")
    bad = tmp_path / "bad.json"
    bad.write_text("[3]")
    proc = herder("balance", "-t", str(data), "--mond=yes", "--mond-data", str(bad))
    assert proc.returncode == 1
    assert proc.stderr == ("Error: can't parse MonD data: Parsing MonD's answer: Unable to read "
                           "JSObject\n")


@pytest.mark.skipif(not HBAL.exists(), reason=f"{HBAL} not present")
@pytest.mark.parametrize("extra", [[], ["--ignore-dynu"], ["--mond-xen"]])
def test_cli_mond_data_matches_hbal(tmp_path: Path, extra: list[str]) -> None:
    data = tmp_path / "c.data"
    data.write_text(cluster_text(NAMES4, INSTS))
    mond = mond_file(tmp_path, LOADS4)
    args = ["-t", str(data), "--mond=yes", "--mond-data", str(mond), *extra]
    ours = herder("balance", *args)
    theirs = subprocess.run([str(HBAL), *args], capture_output=True, text=True, timeout=120)
    assert ours.returncode == theirs.returncode == 0
    assert summary(ours.stdout) == summary(theirs.stdout)
    assert ours.stderr.strip() == theirs.stderr.strip()


# --- live agents -----------------------------------------------------------------------------


@contextmanager
def agents(loads: dict[str, float], base: Path) -> Iterator[int]:
    """One herder mond per address (127.0.0.x), all on the same port, reporting ``loads``."""
    from herder.mond.agent import Agent
    from herder.mond.collector import CollectContext, Collector, MondSettings
    from herder.mond.server import serve

    def fixed(total: float) -> type[Collector]:
        class FakeCpuLoad(Collector):
            name = "cpu-avg-load"
            category = None

            def collect(self) -> Any:
                return cpu_report(total)["data"]

        return FakeCpuLoad

    port = 0
    stops: list[tuple[asyncio.AbstractEventLoop, asyncio.Event, threading.Thread]] = []
    try:
        for host, total in loads.items():
            run_dir = base / f"mond-{host}"
            run_dir.mkdir(exist_ok=True)
            ctx = CollectContext(node_name=host,
                                 settings=MondSettings(plugin_dir=run_dir, run_dir=run_dir))
            agent = Agent(ctx, collectors={"cpu-avg-load": fixed(total)})
            ready = threading.Event()
            box: list[Any] = []

            async def main(agent: Agent = agent, host: str = host, ready: threading.Event = ready,
                           box: list[Any] = box, port: int = port) -> None:
                stop = asyncio.Event()
                box.extend([asyncio.get_running_loop(), stop])
                await serve(agent, host, port, stop=stop,
                            ready=lambda p: (box.append(p), ready.set()))

            thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
            thread.start()
            if not ready.wait(10):
                pytest.skip(f"mond did not start on {host}")
            stops.append((box[0], box[1], thread))
            port = box[2]
            deadline = 100
            while deadline and not (agent.units.get("cpu-avg-load")
                                    and agent.units["cpu-avg-load"].runs):
                threading.Event().wait(0.05)
                deadline -= 1
        yield port
    finally:
        for loop, stop, thread in stops:
            loop.call_soon_threadsafe(stop.set)
            thread.join(10)


LIVE = {"127.0.0.1": 3.6, "127.0.0.2": 0.4, "127.0.0.3": 0.2, "127.0.0.4": 0.05}


def test_live_agents_change_balancing_like_hbal(tmp_path: Path) -> None:
    names = list(LIVE)
    data = tmp_path / "c.data"
    data.write_text(cluster_text(names, INSTS))
    try:
        ctx = agents(LIVE, tmp_path)
        port = ctx.__enter__()
    except OSError as err:
        pytest.skip(f"cannot bind the loopback addresses: {err}")
    try:
        live = herder("balance", "-t", str(data), "--mond=yes", "--mond-port", str(port))
        # what the agents serve, as a mock file
        from herder.alloc.mond import fetch_report

        reports = [{"node": n, "reports": [fetch_report(n, "cpu-avg-load", port)[0]]}
                   for n in names]
    finally:
        ctx.__exit__(None, None, None)
    assert live.returncode == 0, live.stderr
    assert live.stderr == ""
    mock = tmp_path / "mond.json"
    mock.write_text(json.dumps(reports))
    assert [r["reports"][0]["data"]["cpu_total"] for r in reports] == list(LIVE.values())
    from_file = herder("balance", "-t", str(data), "--mond=yes", "--mond-data", str(mock))
    assert summary(live.stdout) == summary(from_file.stdout)
    assert "Initial score: 5.31143864" in live.stdout
    if HBAL.exists():
        theirs = subprocess.run([str(HBAL), "-t", str(data), "--mond=yes", "--mond-data",
                                 str(mock)], capture_output=True, text=True, timeout=120)
        assert summary(live.stdout) == summary(theirs.stdout)


def test_unreachable_agents_are_ignored(tmp_path: Path) -> None:
    names = ["127.0.0.1", "127.0.0.2"]
    data = tmp_path / "c.data"
    data.write_text(cluster_text(names, [("a", 1, 0, 1), ("b", 1, 1, 0)]))
    with agents({"127.0.0.1": 1.0}, tmp_path) as port:  # nothing listens on 127.0.0.2
        proc = herder("balance", "-t", str(data), "--mond=yes", "--mond-port", str(port))
    plain = herder("balance", "-t", str(data))
    assert proc.returncode == 0
    assert proc.stderr.splitlines() == [
        "Failed to contact node's 127.0.0.2 MonD for DC cpu-avg-load",
        "Didn't receive an answer by all MonDs, cpu-avg-load's data will be ignored."]
    assert summary(proc.stdout) == summary(plain.stdout)


@needs_shared
def test_alloc_accepts_mond(tmp_path: Path) -> None:
    req = CONF / "htools" / "hail-alloc-drbd.json"
    base = herder("alloc", str(req))
    with_mond = herder("alloc", "--mond-port", "9", "--mond", str(req))  # bare: yes, not FILE
    assert base.returncode == with_mond.returncode == 0
    assert with_mond.stdout == base.stdout  # no agent answers: data ignored
    assert "data will be ignored" in with_mond.stderr
    module = subprocess.run([sys.executable, "-m", "herder.cli.iallocator", "--mond=no", str(req)],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert module.returncode == 0 and module.stdout == base.stdout and not module.stderr
