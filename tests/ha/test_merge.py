"""Cluster merge (issue 10, design-2.1 "Automated Ganeti Cluster Merger"): the checks, the DRBD
port reallocation and the merged config on in-memory configs; then two simulated clusters of
separate namespaced hosts on one network, merged through the other cluster's RAPI and node
daemons only: a merge failed at a step after the instances were stopped, rolled back (the other
cluster as before, this one unchanged), then the merge (every node and instance present, DRBD
ports unique, instances running, merged nodes no master candidates, the other cluster gone as a
cluster: no config, no master daemons, its nodes answer this cluster's key)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from herder.core import configdiff, model
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

    def stop_master_daemons(self, other: merge.OtherCluster,
                            config: model.ConfigData) -> list[str]:
        self.calls.append("stop")
        return ["masterd"]

    def start_master_daemons(self, other: merge.OtherCluster, config: model.ConfigData) -> None:
        self.calls.append("start")

    def adopt_nodes(self, other: merge.OtherCluster, config: model.ConfigData,
                    ours: Path) -> None:
        self.calls.append("adopt")


@pytest.fixture
def offline_other(monkeypatch) -> model.ConfigData:
    """The other cluster without a network: its config is this `other_config()`."""
    theirs = other_config()
    monkeypatch.setattr(merge.OtherCluster, "check", lambda self: None)
    monkeypatch.setattr(merge.OtherCluster, "load_config", lambda self: copy.deepcopy(theirs))
    return theirs


def test_rollback_undoes_done_steps_in_reverse(tmp_path, monkeypatch, offline_other) -> None:
    """Steps run in order; a failing step rolls back the done ones, newest first, and the
    other cluster's maintenance setting is restored (no daemons needed: the remote steps are
    replaced)."""
    from herder.core.store import FileStore

    ours = tmp_path / "a" / "config.json"
    FileStore(ours).create(build_config())
    control = FakeControl()
    log: list[str] = []
    maintenance: list[bool] = []
    ours_maintenance: list[bool] = []
    job = merge.Merge(ours, merge.OtherCluster("other.example.com", tmp_path / "b"), control,
                      say=log.append)
    monkeypatch.setattr(job, "_key_do", lambda: "borrowed")
    monkeypatch.setattr(job, "_set_other_maintenance", maintenance.append)
    monkeypatch.setattr(job, "_set_our_maintenance", ours_maintenance.append)
    monkeypatch.setattr(job, "_stop_do", lambda: "stopped")
    monkeypatch.setattr(job, "_stop_undo", lambda: "started")
    monkeypatch.setenv(merge.FAIL_ENV, "merge")
    with pytest.raises(merge.MergeError, match="failed at step merge.*rolled back"):
        job.run()
    assert control.calls == ["stop", "start"]
    assert [line for line in log if line.startswith("rollback")] == [
        "rollback daemons", "rollback stop", "rollback pause"]
    assert maintenance == [False, True]  # paused, then as it was (enabled)
    assert ours_maintenance == [False, True]  # this cluster's maintd too
    assert len(FileStore(ours).load().nodes) == 3  # this cluster unchanged


def test_plan_and_refusals(tmp_path, offline_other) -> None:
    from herder.core.store import FileStore

    ours = tmp_path / "a" / "config.json"
    FileStore(ours).create(build_config())
    other = merge.OtherCluster("other.example.com", tmp_path / "b")
    plan = merge.Merge(ours, other, FakeControl(), say=lambda line: None).plan()
    assert any("merge (point of no return)" in line and "11000->11002" in line
               for line in plan)
    same = tmp_path / "same" / "config.json"
    FileStore(same).create(offline_other)
    with pytest.raises(merge.MergeError, match="the other cluster is this cluster"):
        merge.Merge(same, other, FakeControl(), say=lambda line: None).plan()
    assert len(FileStore(ours).load().nodes) == 3


def test_cli_needs_the_borrowed_secrets_and_the_master(tmp_path) -> None:
    from herder.core.store import FileStore
    from tests.conftest import run_cli

    ours = tmp_path / "a" / "config.json"
    FileStore(ours).create(build_config())
    missing = run_cli("cluster", "merge", "other.example.com", "--secrets-dir",
                      str(tmp_path / "none"), "--dry-run", config=ours)
    assert missing.code == 1 and "copy hmac.key, server.pem, rapi_users" in missing.err
    elsewhere = run_cli("cluster", "merge", "other.example.com", "--dry-run",
                        config=tmp_path / "nothing" / "config.json",
                        env={"HERDER_MASTERD": "https://127.0.0.1:1"})
    assert elsewhere.code == 1 and "on this cluster's master" in elsewhere.err
    assert len(FileStore(ours).load().nodes) == 3


# --- two simulated clusters, one network ---------------------------------------------------


def first_ips() -> tuple[int, int]:
    """This module's addresses (tests/simaddresses.py): two clusters of 2 nodes, 3 addresses
    each."""
    from tests import simaddresses

    base = simaddresses.first_ip("merge")
    return base, base + 3


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from herder.sim import cluster
    from tests.simhelpers import cannot_simulate

    reason = cannot_simulate()
    if reason:
        pytest.skip(reason)
    a_ip, b_ip = first_ips()
    a_dir, b_dir = tmp_path_factory.mktemp("merge-a"), tmp_path_factory.mktemp("merge-b")
    try:
        a = cluster.start(a_dir, 2, first_ip=a_ip, domain="a.sim.herder.test", guests="test")
        b = cluster.start(b_dir, 2, first_ip=b_ip, domain="b.sim.herder.test", network=a_dir,
                          guests="test")
    except BaseException:  # herder's own start-up failed: the tests' error, not a skip
        cluster.stop(b_dir)
        cluster.stop(a_dir)
        raise
    try:
        yield a, b
    finally:
        cluster.stop(b_dir)
        cluster.stop(a_dir)


def populate(state, suffix: str) -> None:
    from tests.simhelpers import herder

    # sharedfile and file: the templates whose disks hold data on simulated nodes (DRBD's
    # port renumbering is covered on configs above: DRBD cannot run here)
    herder(state, "instance", "add", f"web-{suffix}", "--no-name-check", "-t", "sharedfile",
           "-o", "debootstrap+default", "--disk", "1G")
    herder(state, "instance", "add", f"db-{suffix}", "--no-name-check", "-t", "file", "-o",
           "debootstrap+default", "--disk", "1G")


# what maintd itself writes into the maintenance section in every round while it runs (the
# diagnose reports it accepted, its jobs, incidents, intents and backup runs): a merge, dry or
# failed, must leave the section's settings as they were, not stop maintd's own bookkeeping
MAINTD_ROUND_STATE = frozenset({"seen", "jobs", "incidents", "intents", "evacuated",
                                "backupRuns", "serial_no", "mtime"})


def maintenance_settings(config_data: model.ConfigData) -> dict[str, object]:
    fields = model.to_builtins(config_data.maintenance)
    return {k: v for k, v in fields.items() if k not in MAINTD_ROUND_STATE}


def changed(before: model.ConfigData, after: model.ConfigData) -> list[str]:
    """The config's objects (table/uuid, or section) that differ, the document's serial and
    times aside (the store's own diff); the maintenance section counts as changed only when
    its settings did (maintd's round state moves while maintd runs)."""
    change = configdiff.diff(configdiff.Encoded.of(before), after)
    sections = [section for section in change.sections if section != "maintenance"
                or maintenance_settings(before) != maintenance_settings(after)]
    return sorted([f"{table}/{uuid}" for table, puts in change.puts.items() for uuid in puts]
                  + [f"{table}/{uuid}" for table, gone in change.deletes.items() for uuid in gone]
                  + sections)


def running_on(states) -> dict[str, str]:
    """Instance name -> node name, for every running domain on these clusters' nodes but the
    test driver's own "test": it comes back when all of a node's libvirt clients go at once, as
    node_adopt restarts them (libvirt's test driver keeps its state only while one is
    connected)."""
    from tests.simhelpers import domains

    where = {}
    for state in states:
        for node in state.nodes:
            for name, active in domains(state, node.name).items():
                if active and name != "test":
                    where[name] = node.name
    return where


def borrow_secrets(a, b) -> str:
    """What the operator does first: copy the other master's secrets to this master."""
    from herder.sim import cluster

    target = f"/var/lib/herder/merge/{b.cluster_name}"
    for name in ("hmac.key", "server.pem", "rapi_users", "node.pem"):
        cluster.copy_file(b.host("node1"), f"/var/lib/herder/{name}", a.host("node1"),
                          f"{target}/{name}")
    return target


def merge_on_a(a, b, *args: str, fail_at: str | None = None):
    from herder.sim.host import herder_argv

    env = {merge.FAIL_ENV: fail_at} if fail_at else None
    return a.host("node1").run(herder_argv("cluster", "merge", b.cluster_name, *args),
                               env=env, timeout=300)


def master_daemons(state, node: str = "node1") -> dict[str, str]:
    return {d.name: d.state for d in state.host(node).supervisor(
        "status", ["masterd", "maintd"]).daemons}


@pytest.mark.slow
def test_failed_merge_rolls_back(pair) -> None:
    from tests.simhelpers import config, wait_for

    a, b = pair
    populate(a, "a")
    populate(b, "b")
    cfg_a, cfg_b = config(a), config(b)
    borrow_secrets(a, b)
    dry = merge_on_a(a, b, "--dry-run")
    assert dry.returncode == 1
    assert "node group default exists in both clusters" in dry.stderr  # refused: groups
    dry = merge_on_a(a, b, "--groups", "merge", "--dry-run")
    assert "point of no return" in dry.stdout, dry.stderr
    assert changed(cfg_a, config(a)) == []  # a dry run changes nothing

    failed = merge_on_a(a, b, "--groups", "merge", fail_at="merge")
    assert failed.returncode != 0
    out = failed.stdout + failed.stderr
    assert "rollback daemons" in out and "rollback stop" in out and "rollback pause" in out
    assert "rolled back" in out
    after_a, after_b = config(a), config(b)
    assert merge.listing(after_a) == merge.listing(cfg_a)
    # this cluster unchanged but for its maintd's pause, undone (the pause's jobs move the
    # cluster's and the maintenance section's serial numbers and times, nothing else)
    assert set(changed(cfg_a, after_a)) <= {"cluster", "maintenance"}
    moving = {"serial_no", "mtime"}
    before_fields = model.to_builtins(cfg_a.cluster)
    after_fields = model.to_builtins(after_a.cluster)
    assert {k: v for k, v in before_fields.items() if k not in moving} == \
        {k: v for k, v in after_fields.items() if k not in moving}
    assert maintenance_settings(cfg_a) == maintenance_settings(after_a)
    assert merge.listing(after_b) == merge.listing(cfg_b)
    assert after_b.maintenance.enabled is True and after_a.maintenance.enabled is True
    assert merge.drbd_ports(after_b) == merge.drbd_ports(cfg_b)
    assert all(n.master_candidate == cfg_b.nodes[n.uuid].master_candidate
               for n in after_b.nodes.values())
    assert all(i.admin_state == "up" for i in after_b.instances.values())
    wait_for(lambda: {"web-b", "db-b"} <= set(running_on([b])), 60, "b's instances running")
    # the supervisor runs them again (one that exits while the other is still starting is
    # restarted after its back-off)
    wait_for(lambda: master_daemons(b) == {"masterd": "running", "maintd": "running"}, 90,
             "b's master daemons running")


@pytest.mark.slow
def test_merge_two_simulated_clusters(pair) -> None:
    from tests.simhelpers import config, herder, wait_for

    a, b = pair
    cfg_a, cfg_b = config(a), config(b)
    secrets = borrow_secrets(a, b)
    done = merge_on_a(a, b, "--groups", "merge")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verify:" in done.stdout and "all unique" in done.stdout, done.stdout
    merged = config(a)
    assert {n.uuid: n.name for n in merged.nodes.values()} == {
        **merge.listing(cfg_a)["nodes"], **merge.listing(cfg_b)["nodes"]}
    assert {i.uuid: i.name for i in merged.instances.values()} == {
        **merge.listing(cfg_a)["instances"], **merge.listing(cfg_b)["instances"]}
    for uuid in cfg_b.nodes:
        assert not merged.nodes[uuid].master_candidate
        # this cluster's maintd was paused while they were handed over: none taken for dead
        assert not merged.nodes[uuid].offline
    assert all(i.admin_state == "up" for i in merged.instances.values())
    assert merged.maintenance.enabled is True  # resumed
    seen: list[dict[str, str]] = [{}]

    def all_running() -> bool:
        seen[0] = running_on([a, b])
        return len(seen[0]) == 4

    try:
        wait_for(all_running, 60, "all four instances running")
    except AssertionError:
        raise AssertionError(f"running: {seen[0]}") from None
    for inst in merged.instances.values():
        assert seen[0][inst.name] == merged.node_name(inst.primary_node)
    # The other cluster is no cluster any more: no master daemons, no config copy on its
    # nodes, the borrowed secrets gone; its nodes answer this cluster's calls.
    assert set(master_daemons(b).values()) <= {"stopped", "not-my-role"}
    for node in b.nodes:
        assert not b.host(node.name).path("/var/lib/herder/config.json").exists()
    assert a.host("node1").run(["test", "-e", secrets]).returncode == 1
    herder(a, "cluster", "verify")
    listed = herder(a, "node", "list").stdout
    assert all(n.name.split(".")[0] in listed for n in cfg_b.nodes.values())
    # This cluster's masterd drives the merged instances.
    herder(a, "instance", "shutdown", "web-b")
    assert "web-b" not in running_on([a, b])
