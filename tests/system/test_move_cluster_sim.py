"""A move between clusters (`herder move-instance`, Ganeti's move-instance) on two simulated
clusters of two nodes each on one network (a one-node cluster issues no libvirt
certificate, which real guests need) (`simulate --network`), sharing the cluster domain
secret, with real guests: a guest whose OS wrote its pattern runs on cluster A; refused moves
(an unknown instance, wrong credentials, a target that cannot fit it, another domain
secret) fail in one line and change nothing; a move whose target's masterd is killed
mid-stream fails: the target's restarted master fails the creation and removes its half-made
instance (its disk too), and the guest is started again on A (an OS import script failing
mid-stream: tests/system/test_remote_streams_lu.py); then the move: shut down, its disk
streamed from A's node straight into B's new instance (OS export and import scripts, TLS
with each cluster's node certificates), the guest boots on B with the same disk (sha256 of
its first MiB, not the new name's pattern), and the source removed only once the target
runs.

Both clusters are Debian 12 hosts (`hosts="debian"`, issue 34: systemd, Debian's libvirtd,
herder installed from the wheel by the install guide's script); B's hosts join A's network
(`simulate --hosts debian --network`), so the disk streams between the two clusters' nodes
over their TLS as between real hosts. B's masterd killed mid-stream is started again by its
systemd unit (`Restart=on-failure`)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from herder.core import client_profile
from herder.core.cluster_secrets import DOMAIN_SECRET_FILE
from tests import simaddresses
from tests.simhelpers import cannot_simulate, client_env, config, herder, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.guests]

NAME, MOVED = "mv1", "mv2"
BOOT = 600.0  # a TCG guest boots in ~10 s idle; under a load of 20 on 2 cores 300 s were short
NODE_A, NODE_B = "node1.a.sim.herder.test", "node1.b.sim.herder.test"
CONFIG_DIR = "/var/lib/herder"
OS_DIR = "/srv/herder/os"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    pytest.importorskip("libvirt")
    from herder.sim import cluster, guest

    reason = cannot_simulate()
    if reason:
        pytest.skip(reason)
    try:
        guest.ensure_guest()
    except guest.GuestBuildError as err:
        pytest.skip(str(err))
    first = simaddresses.first_ip("move_cluster")
    a_dir, b_dir = tmp_path_factory.mktemp("xmove-a"), tmp_path_factory.mktemp("xmove-b")
    try:
        # both clusters boot at once (one after the other took ~100 s of Debian hosts): B
        # joins A's network as soon as A's simulation exists (its record)
        with ThreadPoolExecutor(max_workers=2) as pool:
            started_a = pool.submit(cluster.start, a_dir, 2, first_ip=first,
                                    domain="a.sim.herder.test", guests="qemu", mond=False,
                                    maintd=False, hosts="debian")
            wait_for(lambda: started_a.done() or cluster.SimState.load(a_dir) is not None,
                     600, "cluster A's simulation", interval=0.2)
            started_b = pool.submit(
                cluster.start, b_dir, 2, first_ip=first + 3, domain="b.sim.herder.test",
                network=a_dir, guests="qemu", mond=False, maintd=False, hosts="debian"
            ) if cluster.SimState.load(a_dir) is not None else None
            a = started_a.result()
            assert started_b is not None, "cluster A started without a record"
            b = started_b.result()
    except BaseException:  # herder's own start-up failed: the tests' error, not a skip
        cluster.stop(b_dir)
        cluster.stop(a_dir)
        raise
    try:
        # clusters that move instances share the cluster domain secret (as Ganeti's)
        secret = Path(a.host(NODE_A).path(f"{CONFIG_DIR}/{DOMAIN_SECRET_FILE}"))
        Path(b.host(NODE_B).path(f"{CONFIG_DIR}/{DOMAIN_SECRET_FILE}")).write_bytes(
            secret.read_bytes())
        yield a, b
    finally:
        cluster.stop(b_dir)
        cluster.stop(a_dir)


def options(state: Any, side: str) -> list[str]:
    """move-instance's options reaching `state`'s RAPI as `side` (src or dest)."""
    profile = client_profile.load({client_profile.ENV_FILE: state.profile})
    assert profile.masterd and profile.ca and profile.user and profile.password_file
    port = urllib.parse.urlsplit(profile.masterd).port or 5080
    return [f"--{side}-rapi-port", str(port), f"--{side}-ca-file", str(profile.ca),
            f"--{side}-username", profile.user, f"--{side}-password-file",
            str(profile.password_file)]


def address(state: Any) -> str:
    host = urllib.parse.urlsplit(state.masterd_url).hostname
    assert host is not None
    return host


def move(a: Any, b: Any, *extra: str, src: list[str] | None = None,
         check: bool = True) -> Any:
    return herder(a, "move-instance", address(a), address(b), *(src or options(a, "src")),
                  *options(b, "dest"), *extra, timeout=1200, check=check)


def serial(state: Any, node: str, name: str) -> str:
    done = state.host(node).run(["cat", f"/var/log/herder/instances/{name}.serial.log"],
                                timeout=30)
    return done.stdout if done.returncode == 0 else ""


def guest_beats(state: Any, name: str) -> list[Any]:
    from herder.sim import guest

    return guest.parse_heartbeats(serial(state, NODE_A, name))


def restarted(state: Any, name: str, *before: str) -> Any:
    """The newest heartbeat of a boot of `name` on A other than the boots `before`: the guest
    is up again (the next test's shutdown needs a booted guest: one still booting ignores the
    ACPI request until its shutdown timeout)."""
    return wait_for(lambda: [b for b in guest_beats(state, name) if b.boot_id not in before],
                    BOOT, f"a new boot of {name} on {NODE_A}", interval=1.0)[-1]


def beat(state: Any, node: str, name: str, after: float = -1.0) -> Any:
    from herder.sim import guest

    def newest() -> Any:
        beats = [b for b in guest.parse_heartbeats(serial(state, node, name))
                 if b.uptime > after]
        return beats[-1] if beats else None

    return wait_for(newest, BOOT, f"a heartbeat of {name} on {node}", interval=1.0)


@pytest.fixture(scope="module")
def guest_on_a(pair: tuple[Any, Any]) -> Any:
    """The guest on cluster A, running, its disk holding its OS's pattern: its heartbeat."""
    from herder.sim import guest

    a, _ = pair
    herder(a, "instance", "add", NAME, "--no-name-check", "-t", "file", "-o", "herder-guest",
           "--disk", "32M", "--net", "link=br0", "-n", NODE_A, timeout=600)
    first = beat(a, NODE_A, NAME)
    assert first.disk == guest.disk_pattern_hash(NAME)
    return first


def test_refused_moves_change_nothing(pair: tuple[Any, Any], guest_on_a: Any,
                                      tmp_path: Path) -> None:
    """An unknown instance, a wrong password, a target that cannot fit the instance, a target
    cluster with another domain secret: one line each; the guest runs on as it ran (the same
    boot), nothing on B."""
    a, b = pair
    unknown = move(a, b, "nosuch", check=False)
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == \
        "herder: error: instance nosuch not found on the source cluster"
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    src = options(a, "src")
    src[src.index("--src-password-file") + 1] = str(wrong)
    refused = move(a, b, NAME, src=src, check=False)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert "401" in refused.stderr, refused.stderr
    too_big = move(a, b, NAME, "-B", "maxmem=900000,minmem=900000", check=False)
    assert too_big.returncode == 1 and len(too_big.stderr.strip().splitlines()) == 1
    assert "the target's checks" in too_big.stderr, too_big.stderr
    secret = Path(b.host(NODE_B).path(f"{CONFIG_DIR}/{DOMAIN_SECRET_FILE}"))
    shared = secret.read_bytes()
    secret.write_text("another-clusters-secret\n")
    try:
        strangers = move(a, b, NAME, check=False)
    finally:
        secret.write_bytes(shared)
    assert strangers.returncode == 1 and len(strangers.stderr.strip().splitlines()) == 1
    assert "don't share the same domain secret" in strangers.stderr, strangers.stderr
    assert config(b).instances == {}
    assert config(a).find_instance(NAME).admin_state == "up"
    assert beat(a, NODE_A, NAME, after=guest_on_a.uptime).boot_id == guest_on_a.boot_id


# B's OS import script in the next test: 64 KiB at a time, slowly after the first MiB, so that
# B's masterd is killed while the disk streams; it marks that the stream has begun
TRICKLE_IMPORT = """#!/bin/bash
set -euo pipefail
touch /run/herder/trickle-import.started
chunk=/run/herder/trickle-import.chunk
i=0
while :; do
  head -c 65536 > "$chunk"
  [ -s "$chunk" ] || exit 0
  dd if="$chunk" of="$IMPORT_DEVICE" bs=65536 seek=$i count=1 conv=notrunc status=none
  i=$((i + 1))
  [ $i -lt 16 ] || sleep 0.3
done
"""


def test_a_remote_import_whose_master_dies_leaves_nothing_on_the_target(
        pair: tuple[Any, Any], guest_on_a: Any) -> None:
    """Issue 30: B's masterd killed (-9) while A's disk streams into B's half-made instance.
    B's masterd, started again by its supervisor, fails the creation job (never runs it
    twice) and follows it with the removal of the half-made instance: B's config holds no
    instance and its node no disk of it (the listener ended with it); the move fails and the
    guest is started again on A with its disk as it was."""
    from herder.core import model

    a, b = pair
    before = beat(a, NODE_A, NAME)  # (the boot the previous test left)
    host = b.host(NODE_B)
    script = Path(host.path(f"{OS_DIR}/herder-guest/import"))
    started = Path(host.path("/run/herder/trickle-import.started"))
    started.unlink(missing_ok=True)
    pid_file = Path(host.path("/run/herder/masterd.pid"))
    dead = pid_file.read_text().strip()
    kept = script.read_bytes()
    script.write_text(TRICKLE_IMPORT)
    moving = subprocess.Popen(
        [sys.executable, "-m", "herder.cli.main", "move-instance", address(a), address(b),
         *options(a, "src"), *options(b, "dest"), NAME, "--dest-instance-name", MOVED,
         "--dest-primary-node", NODE_B],
        env=client_env(a), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        wait_for(started.exists, BOOT, "the stream into B's import script")
        ids = [d.logical_id for d in config(b).find_instance(MOVED).disks]
        files = [Path(host.path(i.path)) for i in ids if isinstance(i, model.FileId)]
        assert len(files) == 1
        assert all(f.exists() for f in files), files
        killed = host.run(["kill", f"-{int(signal.SIGKILL)}", dead], timeout=30)
        assert killed.returncode == 0, killed.stderr
        out, err = moving.communicate(timeout=1200)
    finally:
        if moving.poll() is None:
            moving.kill()
            moving.communicate()
        script.write_bytes(kept)
        started.unlink(missing_ok=True)
    assert moving.returncode == 1 and len(err.strip().splitlines()) == 1, (out, err)
    assert f"move of {NAME} failed" in err, err
    assert f"starting {NAME} again on the source cluster" in out, out
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() not in ("", dead),
             180, "B's masterd started again by its systemd unit")
    wait_for(lambda: config(b).instances == {}, 300, "the half-made instance removed from B")
    assert not any(f.exists() for f in files), files
    jobs = json.loads(herder(b, "job", "list", "--json").stdout)
    made = [j["status"] for j in jobs if j["summary"] == [f"INSTANCE_CREATE({MOVED})"]]
    removed = [j["status"] for j in jobs if j["summary"] == [f"INSTANCE_REMOVE({MOVED})"]]
    assert made[-1:] == ["error"] and removed == ["success"], jobs
    assert config(a).find_instance(NAME).admin_state == "up"
    assert restarted(a, NAME, guest_on_a.boot_id, before.boot_id).disk == guest_on_a.disk


def test_a_guest_moves_to_the_other_cluster_with_its_disk(pair: tuple[Any, Any],
                                                          guest_on_a: Any) -> None:
    from herder.sim import guest

    a, b = pair
    done = move(a, b, NAME, "--dest-instance-name", MOVED, "--dest-primary-node", NODE_B)
    lines = done.stdout.splitlines()
    assert lines.index(f"{MOVED} runs on the target cluster") < \
        lines.index(f"removing {NAME} from the source cluster"), done.stdout
    assert f"Moved {NAME} to {address(b)}" in lines
    after = beat(b, NODE_B, MOVED)
    assert after.disk == guest_on_a.disk != guest.disk_pattern_hash(MOVED)
    moved = config(b).find_instance(MOVED)
    assert (moved.admin_state, moved.disk_template, moved.os) == ("up", "file",
                                                                  "herder-guest")
    assert [d.size for d in moved.disks] == [32]
    assert NAME not in {i.name for i in config(a).instances.values()}
