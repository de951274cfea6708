"""Cluster merge (issue 10, design-2.1 "Automated Ganeti Cluster Merger"): the checks, the DRBD
port reallocation and the merged config on in-memory configs; then two simulated clusters merged
(every node and instance present, DRBD ports unique, instances running, merged nodes no master
candidates, the other cluster gone as a cluster) and a merge failed at a step after the
instances were stopped, rolled back (the other cluster as before, this one unchanged)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from herder.core import model
from herder.masterd import merge
from tests.conftest import build_config


def other_config() -> model.ConfigData:
    """A second cluster like `build_config`'s, with its own names, addresses and MACs (its DRBD
    ports are the same: 11000, 11001)."""
    cfg = build_config(nodes=3, drbd_instances=2, plain_instances=1)
    cfg.cluster.name = "other.example.com"
    for node in cfg.nodes.values():
        node.name = node.name.replace("node", "onode")
        node.primary_ip = node.primary_ip.replace("192.0.2.", "192.0.2.1")
        node.secondary_ip = (node.secondary_ip or "").replace("198.51.100.", "198.51.100.1")
    for inst in cfg.instances.values():
        inst.name = "o" + inst.name
        for nic in inst.nics:
            nic.mac = nic.mac.replace("aa:00:00:", "aa:00:01:")
            nic.ip = nic.ip.replace("203.0.113.", "203.0.113.1") if nic.ip else None
    for group in cfg.nodegroups.values():
        group.name = "other"
    return model.revalidate(cfg)


def test_clean_pair_has_no_problems() -> None:
    assert merge.check(build_config(), other_config()) == []


def test_collisions_are_all_listed() -> None:
    ours, other = build_config(), other_config()
    other.instances[next(iter(other.instances))].name = next(iter(ours.instances.values())).name
    node = next(iter(other.nodes.values()))
    node.name = next(iter(ours.nodes.values())).name
    group = next(iter(other.nodegroups.values()))
    group.name = "default"
    problems = merge.check(ours, other)
    text = "\n".join(problems)
    assert "node name node1.example.com exists in both clusters" in text
    assert "instance name drbd0.example.com" in text
    assert "node group default exists in both clusters (--groups merge or rename)" in text
    assert not any("node group" in p for p in merge.check(ours, other, groups="merge"))
    same = copy.deepcopy(ours)
    assert merge.check(ours, same) == ["the other cluster is this cluster"]
    uuids = copy.deepcopy(ours)
    uuids.cluster.uuid = model.new_uuid()
    text = "\n".join(merge.check(ours, uuids))
    assert "node UUID" in text and "instance UUID" in text and "disk UUID" in text


def test_disabled_template_or_hypervisor_refused() -> None:
    ours, other = build_config(), other_config()
    ours.cluster.enabled_disk_templates = ["plain"]
    ours.cluster.enabled_hypervisors = ["xen-pvm"]
    text = "\n".join(merge.check(ours, other))
    assert "disk template drbd is not enabled" in text
    assert "hypervisor kvm is not enabled" in text


def test_ports_reallocated_unique_from_our_pool() -> None:
    ours, other = build_config(), other_config()
    assert set(merge.drbd_ports(ours)) == set(merge.drbd_ports(other)) == {11000, 11001}
    ours.cluster.tcpudp_port_pool = [11000, 12000]  # 11000 is in use: only 12000 is free
    moves = merge.reallocate_ports(ours, other)
    assert sorted(new for _, new in moves.values()) == [11002, 12000]
    assert sorted(old for old, _ in moves.values()) == [11000, 11001]


def test_merge_into_and_final_check() -> None:
    ours, other = build_config(), other_config()
    before_ours, before_other = merge.listing(ours), merge.listing(other)
    summary = merge.merge_into(ours, copy.deepcopy(other))
    merged = model.revalidate(ours)
    assert summary["nodes"] == sorted(n.name for n in other.nodes.values())
    ports = merge.drbd_ports(merged)
    assert len(ports) == len(set(ports)) == 4
    assert merged.cluster.highest_used_port == max(ports)
    for uuid in other.nodes:
        assert not merged.nodes[uuid].master_candidate
        assert merged.nodes[uuid].group in merged.nodegroups
    assert merge.final_check(before_ours, before_other, merged) == []
    # A lost instance and a duplicated port are found.
    lost = copy.deepcopy(merged)
    del lost.instances[next(iter(other.instances))]
    assert any("instances missing" in p for p in merge.final_check(before_ours, before_other,
                                                                   lost))
    dup = copy.deepcopy(merged)
    drbd = [d for i in dup.instances.values() for d in i.disks
            if isinstance(d.logical_id, model.DrbdId)]
    drbd[0].logical_id.port = drbd[-1].logical_id.port
    assert any("DRBD ports used twice" in p for p in merge.final_check(before_ours,
                                                                       before_other, dup))


def test_groups_merge_and_rename() -> None:
    ours, other = build_config(), other_config()
    for group in other.nodegroups.values():
        group.name = "default"
    merged = copy.deepcopy(ours)
    merge.merge_into(merged, copy.deepcopy(other), groups="merge")
    assert len(merged.nodegroups) == 1
    renamed = copy.deepcopy(ours)
    merge.merge_into(renamed, copy.deepcopy(other), groups="rename")
    assert sorted(g.name for g in renamed.nodegroups.values()) == ["default", "default-other"]
    with pytest.raises(merge.MergeError, match="node group default"):
        merge.merge_into(copy.deepcopy(ours), copy.deepcopy(other))


class FakeControl:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def stop_master_daemons(self, other_config: Path) -> list[str]:
        self.calls.append("stop")
        return ["masterd"]

    def start_master_daemons(self, other_config: Path) -> None:
        self.calls.append("start")

    def adopt_nodes(self, other_config: Path, config: Path) -> None:
        self.calls.append("adopt")


def test_rollback_undoes_done_steps_in_reverse(tmp_path, monkeypatch) -> None:
    """Steps run in order; a failing step rolls back the done ones, newest first, and the
    other cluster's maintenance setting is restored (no daemons needed: the remote steps are
    replaced)."""
    from herder.core.store import FileStore

    ours, other = tmp_path / "a" / "config.json", tmp_path / "b" / "config.json"
    FileStore(ours).create(build_config())
    FileStore(other).create(other_config())
    control = FakeControl()
    log: list[str] = []
    job = merge.Merge(ours, other, control, say=log.append)
    monkeypatch.setattr(job, "_key_do", lambda: "borrowed")
    monkeypatch.setattr(job, "_stop_do", lambda: "stopped")
    monkeypatch.setattr(job, "_stop_undo", lambda: "started")
    monkeypatch.setenv(merge.FAIL_ENV, "merge")
    with pytest.raises(merge.MergeError, match="failed at step merge.*rolled back"):
        job.run()
    assert control.calls == ["stop", "start"]
    assert [line for line in log if line.startswith("rollback")] == [
        "rollback daemons", "rollback stop", "rollback pause"]
    assert FileStore(other).load().maintenance.enabled is True
    assert len(FileStore(ours).load().nodes) == 3  # this cluster unchanged


def test_cli_dry_run_and_refusals(tmp_path) -> None:
    from herder.core.store import FileStore
    from tests.conftest import run_cli

    ours, other = tmp_path / "a" / "config.json", tmp_path / "b" / "config.json"
    FileStore(ours).create(build_config())
    FileStore(other).create(other_config())
    dry = run_cli("cluster", "merge", str(other), "--dry-run", config=ours)
    assert dry.code == 0, dry.err
    assert "plan: merge (point of no return)" in dry.out and "11000->11002" in dry.out
    real = run_cli("cluster", "merge", str(other), config=ours)
    assert real.code == 1 and "only simulated clusters" in real.err
    clash = run_cli("cluster", "merge", str(ours), "--dry-run", config=ours)
    assert clash.code == 1 and "the other cluster is this cluster" in clash.err
    assert len(FileStore(ours).load().nodes) == 3


# --- two simulated clusters ------------------------------------------------------------------

LIBVIRTD = Path("/usr/sbin/libvirtd").exists()


def first_ips() -> tuple[int, int]:
    """127.0.0.180-183 for xdist worker 0 (two clusters of 2 nodes), 184-187 for worker 1: away
    from 100-179 (system, maintd), 190-199 (redist) and 200-255 (instmon, ha failover)."""
    from tests.simhelpers import worker_offset

    base = 180 + worker_offset(4, 2)
    return base, base + 2


@pytest.fixture
def pair(tmp_path):
    if not LIBVIRTD:
        pytest.skip("libvirtd is not installed")
    from tests.simhelpers import running_sim

    a_ip, b_ip = first_ips()
    first = running_sim(tmp_path / "a", 2, first_ip=a_ip, domain="a.sim.herder.test")
    second = running_sim(tmp_path / "b", 2, first_ip=b_ip, domain="b.sim.herder.test")
    a = next(first)
    try:
        b = next(second)
        try:
            yield a, b
        finally:
            second.close()
    finally:
        first.close()


def run(state, *args: str, fail_at: str | None = None, check: bool = True):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("HERDER_OFFLINE", "HERDER_MASTERD", merge.FAIL_ENV)}
    env["HERDER_CONFIG"] = state.config
    if fail_at:
        env[merge.FAIL_ENV] = fail_at
    done = subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=240)
    if check:
        assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


def populate(state, suffix: str) -> None:
    run(state, "instance", "add", f"web-{suffix}", "--no-name-check",
        "-t", "drbd", "-o", "debootstrap+default", "--disk", "1G")
    run(state, "instance", "add", f"db-{suffix}", "--no-name-check",
        "-t", "plain", "-o", "debootstrap+default", "--disk", "1G")


def load(path) -> model.ConfigData:
    from herder.core.store import FileStore

    return FileStore(path).load()


def running_on(states) -> dict[str, str]:
    """Instance name -> node name, for every running domain of these simulated clusters."""
    from tests.simhelpers import domains

    where = {}
    for state in states:
        for node in state.nodes:
            for name, active in domains(node.libvirt_uri).items():
                if active:
                    where[name] = node.name
    return where


def sim_pids(state) -> dict[str, dict[str, int]]:
    data = json.loads((Path(state.directory) / "sim.json").read_text())
    return {n["name"]: n["pids"] for n in data["nodes"]}


@pytest.mark.slow
def test_merge_two_simulated_clusters(pair) -> None:
    from tests.simhelpers import wait_for

    a, b = pair
    populate(a, "a")
    populate(b, "b")
    cfg_a, cfg_b = load(a.config), load(b.config)
    assert set(merge.drbd_ports(cfg_a)) == set(merge.drbd_ports(cfg_b))  # they collide
    dry = run(a, "cluster", "merge", b.config, "--dry-run", check=False)
    assert dry.returncode == 1
    assert "node group default exists in both clusters" in dry.stderr  # refused: groups
    dry = run(a, "cluster", "merge", b.config, "--groups", "merge", "--dry-run")
    assert "point of no return" in dry.stdout and "11001->" in dry.stdout
    assert load(a.config).serial_no == cfg_a.serial_no  # a dry run changes nothing
    done = run(a, "cluster", "merge", b.config, "--groups", "merge")
    assert "verify:" in done.stdout and "all unique" in done.stdout, done.stdout
    merged = load(a.config)
    assert {n.uuid: n.name for n in merged.nodes.values()} == {
        **merge.listing(cfg_a)["nodes"], **merge.listing(cfg_b)["nodes"]}
    assert {i.uuid: i.name for i in merged.instances.values()} == {
        **merge.listing(cfg_a)["instances"], **merge.listing(cfg_b)["instances"]}
    ports = merge.drbd_ports(merged)
    assert len(ports) == len(set(ports)) == 2
    for uuid in cfg_b.nodes:
        assert not merged.nodes[uuid].master_candidate
    assert all(i.admin_state == "up" for i in merged.instances.values())
    seen: list[dict[str, str]] = [{}]

    def all_running() -> bool:
        seen[0] = running_on([a, b])
        return len(seen[0]) == 4

    try:
        wait_for(all_running, 30, "all four instances running")
    except AssertionError:
        raise AssertionError(f"running: {seen[0]}") from None
    where = seen[0]
    for inst in merged.instances.values():
        assert where[inst.name] == merged.node_name(inst.primary_node)
    # The other cluster is no cluster any more: no masterd, no config, no key; its nodes
    # answer this cluster's signed RPCs.
    assert not Path(b.config).exists() and Path(b.config + ".merged").exists()
    assert not (Path(b.config).parent / "hmac.key").exists()
    assert not any("masterd" in p or "maintd" in p for p in sim_pids(b).values())
    run(a, "cluster", "verify")
    listed = run(a, "node", "list").stdout
    assert all(n.name.split(".")[0] in listed for n in cfg_b.nodes.values())
    # This cluster's masterd drives the merged instances.
    run(a, "instance", "shutdown", "web-b")
    assert "web-b" not in running_on([a, b])


@pytest.mark.slow
def test_failed_merge_rolls_back(pair) -> None:
    from herder.core.rapi import RapiClient
    from tests.simhelpers import wait_for

    a, b = pair
    populate(b, "b")
    cfg_a, cfg_b = load(a.config), load(b.config)
    failed = run(a, "cluster", "merge", b.config, "--groups", "merge", fail_at="merge",
                 check=False)
    assert failed.returncode != 0
    out = failed.stdout + failed.stderr
    assert "rollback daemons" in out and "rollback stop" in out and "rollback pause" in out
    assert "rolled back" in out
    after_a, after_b = load(a.config), load(b.config)
    assert merge.listing(after_a) == merge.listing(cfg_a)
    assert after_a.serial_no == cfg_a.serial_no  # this cluster unchanged
    assert merge.listing(after_b) == merge.listing(cfg_b)
    assert after_b.maintenance.enabled is True
    assert merge.drbd_ports(after_b) == merge.drbd_ports(cfg_b)
    assert all(n.master_candidate == cfg_b.nodes[n.uuid].master_candidate
               for n in after_b.nodes.values())
    assert all(i.admin_state == "up" for i in after_b.instances.values())
    wait_for(lambda: {"web-b", "db-b"} <= set(running_on([b])), 60, "b's instances running")
    assert any("masterd" in p for p in sim_pids(b).values())
    assert any("maintd" in p for p in sim_pids(b).values())
    with RapiClient.for_herder_cluster(Path(b.config).parent, b.masterd_url) as api:
        assert {i["name"] for i in api.get_instances(bulk=True)} >= {"web-b", "db-b"}
    assert (Path(b.config).parent / "hmac.key").exists()
