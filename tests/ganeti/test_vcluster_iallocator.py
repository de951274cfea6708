"""herder's allocator as the iallocator of a real Ganeti 3.0.2 cluster (the vcluster).

``herder alloc install`` is run *inside* the cluster's namespace, so the script lands in the
overlay ``/usr/lib/ganeti/iallocators`` beside Debian's ``hail``, where Ganeti's noded finds it.

How herder is compared with hail: before each ``gnt-instance add -I herder``, Ganeti itself
builds the iallocator input for the same request (``gnt-debug iallocator --dir in``); that one
input is answered by the installed herder script and by the cluster's ``hail``. They must choose
the same node(s), or, where they differ, herder's reported cluster score (the "score: X" of the
answer's info, the cluster after the placement, lower is better) must be at most hail's, and
herder's own metric (``herder.alloc.metrics.full_score``) of hail's placement must not be better
than of herder's. Then the real ``gnt-instance add -I herder`` runs (Ganeti builds a fresh
input: the fake hypervisor reports the host's live free memory, so the two inputs are not
byte-identical) and the instance must show up in ``gnt-instance list`` on the node Ganeti's log
says herder selected. Node evacuation is compared the same way (``--mode node-evacuate``);
evacuation is greedy in the order of the request's instances, and gnt-debug's request lists them
in another order than ``gnt-node evacuate``'s, so the real evacuation is checked against the
moves Ganeti logs from herder's answer ("Instances to be moved: ...").

``gnt-cluster modify --default-iallocator herder --default-iallocator-params save=PREFIX`` makes
herder the default: Ganeti then runs ``herder INPUT --save=PREFIX`` for a plain ``gnt-instance
add``, and herder's ``-S`` files prove that herder itself answered (and that Ganeti's
``SCRIPT INPUT_FILE --param=value`` calling convention works).

The measured figures are printed (``pytest -s``) and summarised in docs/ganeti.md.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from herder.alloc.metrics import full_score
from herder.alloc.model import add_pri, remove_pri
from herder.alloc.placement import commit
from herder.alloc.protocol import Options, build_cluster, request_instance
from herder.cli.alloc import iallocator_script
from tests.ganeti.vcluster import VCluster, rapi_client, remove_instances, running_vcluster

pytestmark = [pytest.mark.peer, pytest.mark.slow]

N1 = "node1.vcluster.test"
IALLOC_DIR = "/usr/lib/ganeti/iallocators"
HERDER = f"{IALLOC_DIR}/herder"
HAIL = f"{IALLOC_DIR}/hail"
PY = sys.executable
DOMAIN = "vcluster.test"
# name, disk template, memory (MiB), vcpus, disk size (MiB, None: diskless). The nodes report
# the host's CPUs (2 here) with vcpu-ratio 4 and the reserved CPUs counted as used: a node takes
# about 6 instance vCPUs, so the instances stay small enough for any node to be evacuated.
SPECS = [
    ("inst1", "diskless", 512, 1, None),
    ("inst2", "sharedfile", 1024, 2, 1024),
    ("inst3", "diskless", 256, 1, None),
    ("inst4", "sharedfile", 2048, 1, 2048),
    ("inst5", "diskless", 768, 2, None),
    ("inst6", "sharedfile", 384, 1, 512),
]
RECORDER = """#!/bin/sh
cp "$1" {work}/input-$(date +%s%N).json
exec {herder} "$@"
"""
SELECTED = re.compile(r"Selected nodes for instance (\S+) via iallocator (\S+): (\S+)")
SCORE = re.compile(r"score: ([-+0-9.eE]+)")


@dataclass
class Env:
    vcl: VCluster
    work: Path
    install_out: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    job_times: dict[str, list[float]] = field(default_factory=dict)

    def vc(self, *cmd: str, check: bool = True) -> Any:
        return self.vcl.vc(N1, *cmd, check=check)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    work = tmp_path_factory.mktemp("ialloc")  # under /tmp: the namespace shares it
    work.chmod(0o755)
    # a vcluster as freshly started (one the module before left as it found it will do); what
    # this module adds (instances, the scripts, the default iallocator) is taken away again
    # after it, so that the vcluster is passed on to the next module
    with running_vcluster(reuse=True, keep=True) as vcl:
        probe = vcl.vc(N1, PY, "-c", "import herder.cli.main", check=False)
        if probe.returncode != 0:
            pytest.skip(f"{PY} cannot import herder inside the vcluster's namespace")
        with rapi_client(vcl) as client:
            info = client.get_info()
        out = vcl.vc(N1, PY, "-m", "herder.cli.main", "alloc", "install", "--force")
        # test-only: an iallocator that keeps a copy of Ganeti's input, then runs herder's
        # (Ganeti 3.0.2's own `gnt-debug iallocator --dir in` fails under Python 3)
        rec = work / "herder-rec"
        rec.write_text(RECORDER.format(work=work, herder=HERDER))
        vcl.vc(N1, "install", "-m", "755", str(rec), f"{IALLOC_DIR}/herder-rec")
        e = Env(vcl, work, out.stdout)
        yield e
        _report(e.rows, e.job_times)
        remove_instances(vcl)
        with rapi_client(vcl) as client:
            client.wait_for_job(client.modify_cluster(
                default_iallocator=info["default_iallocator"],
                default_iallocator_params=info["default_iallocator_params"]),
                timeout=120, raise_on_error=True)
        vcl.vc(N1, "rm", "-f", HERDER, f"{IALLOC_DIR}/herder-rec")


def _report(rows: list[dict[str, Any]], job_times: dict[str, list[float]]) -> None:
    for alloc, times in job_times.items():
        print(f"\ngnt-debug iallocator --dir out -I {alloc}: median "
              f"{statistics.median(times):.2f} s over {len(times)}")
    if not rows:
        return
    print("\nherder vs hail on Ganeti-built inputs (vcluster, 3 nodes):")
    for r in rows:
        print(f"  {r['what']:<34} herder {r['herder']!s:<48} hail {r['hail']!s:<48} "
              f"{r['verdict']:<10} herder {r['t_herder'] * 1000:3.0f} ms  "
              f"hail {r['t_hail'] * 1000:3.0f} ms  add -I herder: {r.get('ganeti', '-')}")
    th = [r["t_herder"] for r in rows]
    ta = [r["t_hail"] for r in rows]
    print(f"  median run time (through nsenter): herder {statistics.median(th) * 1000:.0f} ms, "
          f"hail {statistics.median(ta) * 1000:.0f} ms")


def _ganeti_input(e: Env, name: str, *args: str) -> tuple[Path, dict[str, Any]]:
    """Ganeti builds the input of a request and runs herder on it through the recording
    wrapper (gnt-debug iallocator --dir out -I herder-rec): (the exact input, herder's answer
    as Ganeti returned it)."""
    before = set(e.work.glob("input-*.json"))
    out = e.vc("gnt-debug", "iallocator", "--dir", "out", "-I", "herder-rec", "-o",
               "noop+default", *args, name).stdout
    new = sorted(set(e.work.glob("input-*.json")) - before)
    assert len(new) == 1, new
    return new[0], json.loads(out)


def _run(e: Env, script: str, path: Path) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    out = e.vc(script, str(path)).stdout
    return json.loads(out), time.perf_counter() - t0


def _score(info: str) -> float:
    m = SCORE.search(info)
    assert m, info
    return float(m.group(1))


def _metric_after(msg: dict[str, Any], nodes: list[str]) -> float:
    """herder's cluster score with the requested instance placed on ``nodes``."""
    cl = build_cluster(msg, Options())
    inst, _ = request_instance(cl, msg["request"])
    commit(cl, inst, tuple(cl.node_by_name[n] for n in nodes))
    return full_score(cl.nodes)


def _instances(e: Env) -> dict[str, tuple[str, str]]:
    """Ganeti's instances: name -> (primary node, secondary nodes), through RAPI (what
    `gnt-instance list -o name,pnode,snodes` prints, without a client's start each time)."""
    with rapi_client(e.vcl) as client:
        return {i["name"]: (i["pnode"], ",".join(i["snodes"]))
                for i in client.get_instances(bulk=True)}


def _add_args(tpl: str, mem: int, vcpus: int, disk: int | None) -> list[str]:
    args = ["gnt-instance", "add", "-t", tpl, "-o", "noop+default", "--no-ip-check",
            "--no-name-check", "-B", f"memory={mem},vcpus={vcpus}"]
    if disk is not None:
        args += ["--disk", f"0:size={disk}M"]
    return args


def test_install_puts_the_script_beside_hail(env: Env) -> None:
    listing = env.vc("ls", IALLOC_DIR).stdout.split()
    assert {"herder", "hail"} <= set(listing)
    assert env.vc("cat", HERDER).stdout == iallocator_script(PY)
    assert env.vc("stat", "-c", "%a", HERDER).stdout.strip() == "755"
    assert f"installed {HERDER}" in env.install_out
    assert "gnt-cluster modify --default-iallocator herder" in env.install_out
    # Ganeti finds and runs it (noded on the master, SCRIPT INPUT_FILE)
    out = env.vc("gnt-debug", "iallocator", "--dir", "out", "-I", "herder", "-o", "noop+default",
                 "-m", "allocate",
                 "-t", "diskless", "--disks", "0", "--memory", "128",
                 f"probe.{DOMAIN}").stdout
    answer = json.loads(out)
    assert answer["success"], answer
    assert answer["result"][0].endswith(DOMAIN)
    # a whole Ganeti round trip (job, noded RPC, script) with each allocator
    for alloc in ("herder", "hail") * 3:
        t0 = time.perf_counter()
        out = env.vc("gnt-debug", "iallocator", "--dir", "out", "-I", alloc, "-o",
                     "noop+default", "-m", "allocate", "-t", "diskless", "--disks", "0",
                     f"probe.{DOMAIN}").stdout
        env.job_times.setdefault(alloc, []).append(time.perf_counter() - t0)
        assert json.loads(out)["success"]


def test_gnt_instance_add_with_herder_like_hail(env: Env) -> None:
    """Six instances (diskless and sharedfile, 256 MiB-2 GiB, 1-2 vcpus) placed by herder."""
    for short, tpl, mem, vcpus, disk in SPECS:
        name = f"{short}.{DOMAIN}"
        dbg = ["-m", "allocate", "-t", tpl, "--memory", str(mem), "-p", str(vcpus),
               "--disks", str(disk if disk is not None else 0)]
        path, via_ganeti = _ganeti_input(env, name, *dbg)
        msg = json.loads(path.read_text())
        ours, t_ours = _run(env, HERDER, path)
        ref, t_ref = _run(env, HAIL, path)
        assert ours == via_ganeti
        assert ours["success"] and ref["success"], (ours, ref)
        if ours["result"] == ref["result"]:
            verdict = "same"
        else:
            # a different node is acceptable only when it scores at least as well
            assert _score(ours["info"]) <= _score(ref["info"]) + 1e-9, (ours, ref)
            assert (_metric_after(msg, ours["result"])
                    <= _metric_after(msg, ref["result"]) + 1e-9), (ours, ref)
            verdict = "not worse"
        env.rows.append({"what": f"allocate {short} {tpl} {mem}M {vcpus}cpu",
                         "herder": ours["result"], "hail": ref["result"], "verdict": verdict,
                         "t_herder": t_ours, "t_hail": t_ref})

        out = env.vc(*_add_args(tpl, mem, vcpus, disk), "-I", "herder", name)
        text = out.stdout + out.stderr
        sel = SELECTED.search(text)
        assert sel, text
        assert sel.group(1) == name and sel.group(2) == "herder"
        chosen = sel.group(3)
        assert _instances(env)[name] == (chosen, "")
        env.rows[-1]["ganeti"] = chosen
    placed = _instances(env)
    assert len(placed) == len(SPECS)
    # three identical nodes: herder spreads six instances over all of them
    assert {p for p, _ in placed.values()} == {f"node{k}.{DOMAIN}" for k in (1, 2, 3)}


def test_node_evacuate_with_herder(env: Env) -> None:
    before = _instances(env)
    counts: dict[str, int] = {}
    for p, _ in before.values():
        counts[p] = counts.get(p, 0) + 1
    victim = max(sorted(counts), key=lambda n: counts[n])
    on_victim = sorted(n for n, (p, _) in before.items() if p == victim)
    assert on_victim

    # the same node-evacuate inputs answered by herder and hail
    for mode in ("primary-only", "secondary-only"):
        path, via_ganeti = _ganeti_input(env, on_victim[0], "-m", "node-evacuate",
                                         "--evac-mode", mode, *on_victim[1:])
        ours, t_ours = _run(env, HERDER, path)
        ref, t_ref = _run(env, HAIL, path)
        assert ours == via_ganeti
        assert ours["success"] == ref["success"], (ours, ref)
        moved, failed, jobs = ours["result"]
        rmoved, rfailed, rjobs = ref["result"]
        assert [m[0] for m in moved] == [m[0] for m in rmoved]
        assert [f[0] for f in failed] == [f[0] for f in rfailed]
        assert len(jobs) == len(rjobs)
        if mode == "primary-only":
            assert sorted(m[0] for m in moved) == on_victim and not failed
            assert all(victim not in m[2] for m in moved)
        else:  # no internally mirrored (DRBD) instances on the vcluster
            assert not moved and sorted(f[0] for f in failed) == on_victim
        same = moved == rmoved
        if not same:
            msg = json.loads(path.read_text())
            ours_score = _evac_metric(msg, moved)
            ref_score = _evac_metric(msg, rmoved)
            assert ours_score <= ref_score + 1e-9, (ours, ref)
        env.rows.append({"what": f"node-evacuate {mode} {victim.split('.')[0]}",
                         "herder": [m[2] for m in moved] or [f[0] for f in failed],
                         "hail": [m[2] for m in rmoved] or [f[0] for f in rfailed],
                         "verdict": "same" if same else "not worse",
                         "t_herder": t_ours, "t_hail": t_ref})

    # Ganeti itself: secondary-only has nothing to do (no DRBD here) ...
    sec = env.vc("gnt-node", "evacuate", "-f", "-s", "-I", "herder", victim)
    assert "No instances to evacuate" in sec.stdout + sec.stderr
    # ... and "all" is refused by Ganeti 3.0 before any iallocator runs
    both = env.vc("gnt-node", "evacuate", "-f", "-I", "herder", victim, check=False)
    assert both.returncode != 0
    assert "not possible to evacuate all instances at once" in both.stdout + both.stderr
    # primary-only: herder chooses, Ganeti migrates/fails over, the node is empty afterwards
    pri = env.vc("gnt-node", "evacuate", "-f", "-p", "-I", "herder", victim)
    text = pri.stdout + pri.stderr
    assert "All instances evacuated successfully." in text, text
    planned = dict(re.findall(r"(\S+) \(to (\S+?)\)", text.split("Instances to be moved:")[-1]))
    after = _instances(env)
    assert sorted(after) == sorted(before)
    assert not [n for n, (p, _) in after.items() if p == victim]
    for name in on_victim:
        assert after[name][0] == planned[name], (name, planned)
    for name in set(before) - set(on_victim):
        assert after[name] == before[name]


def _evac_metric(msg: dict[str, Any], moved: list[list[Any]]) -> float:
    """herder's cluster score after the primary moves of a node-evacuate answer."""
    cl = build_cluster(msg, Options())
    for name, _group, nodes in moved:
        inst = cl.instances[cl.inst_by_name[name]]
        old_p, old_s = inst.pnode, inst.snode
        remove_pri(cl.nodes[old_p], inst, cl.nodes[old_s] if old_s >= 0 else None)
        new_p = cl.node_by_name[nodes[0]]
        inst.pnode = new_p
        add_pri(cl.nodes[new_p], inst, None)
    return full_score(cl.nodes)


def test_default_iallocator_is_herder(env: Env) -> None:
    prefix = env.work / "default"
    env.vc("gnt-cluster", "modify", "--default-iallocator", "herder",
           "--default-iallocator-params", f"save={prefix}")
    info = env.vc("gnt-cluster", "info").stdout
    assert re.search(r"default instance allocator: herder\b", info), info
    name = f"inst7.{DOMAIN}"
    out = env.vc(*_add_args("diskless", 640, 1, None), name)  # neither -I nor -n
    text = out.stdout + out.stderr
    sel = SELECTED.search(text)
    assert sel and sel.group(1) == name and sel.group(2) == "herder", text
    assert _instances(env)[name] == (sel.group(3), "")
    # herder ran with Ganeti's parameter (INPUT_FILE --save=PREFIX): its -S files exist, and
    # the cluster after its answer has the new instance on the node Ganeti used
    pre = Path(f"{prefix}.pre-ialloc").read_text()
    post = Path(f"{prefix}.post-ialloc").read_text()
    assert name not in pre
    line = next(x for x in post.splitlines() if x.startswith(name + "|"))
    assert sel.group(3) in line.split("|")
