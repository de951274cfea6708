"""A rolling upgrade of herder (`herder cluster upgrade`, docs/install.md "Upgrading") on one
simulated cluster of three nodes for the module, with real guests running throughout.

Two builds, OLD (the previous commit's tree: HEAD~1 taken out with `git archive`, built by its
own scripts/wheel.sh and cached by commit) and NEW (this tree), their versions given with
SETUPTOOLS_SCM_PRETEND_VERSION, are installed side by side on every host as the guide says
(`<prefix>/versions/<version>`, `current`, `bin`; the prefix is /srv/herder/opt, a directory of
each host's own), and the hosts' supervisors run herder's daemons as `<prefix>/bin/herder
DAEMON` without this checkout on the path (`herder.sim.cluster.start(herder_command=,
install=)`). The cluster starts on OLD with a guest on the master and one on another node. In
order: an upgrade to a build that is not installed changes nothing; `--to NEW` brings every
node to NEW (each noded's own answer, the processes' interpreters, masterd's /2/info), the
guests' QEMU processes keep their pids, the queue is undrained and maintd runs again; back
`--to OLD` with node3's OLD build broken stops at node3 with one error (the intent kept, the
master untouched, the queue drained, `--to` another version refused), and once node3's build
is repaired `--resume` finishes it, the guests still on their first QEMU processes.

Then two clusters of their own, each only while its test runs: the same upgrade on Debian
hosts, where systemd runs herder's units (the switch in a transient unit), and on the etcd
config store (the master keeps the master lease across its masterd's restart)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import simaddresses
from tests.simhelpers import herder, running_sim, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.guests]

REPO = Path(__file__).resolve().parents[2]
OLD, NEW = "0.98.0", "0.99.0"
PREFIX = "/srv/herder/opt"  # a private directory of each host (docs: /opt/herder)
# the installed build, without the simulator's PYTHONPATH (this checkout)
HERDER = ["env", "-u", "PYTHONPATH", f"{PREFIX}/bin/herder"]
NODE1, NODE2, NODE3 = (f"node{i}.sim.herder.test" for i in (1, 2, 3))
GUESTS = {"web1": NODE1, "web2": NODE2}  # the master's and another node's; node3 has none
INTENT = "/var/lib/herder/upgrade-intent.json"
UPGRADE_TIMEOUT = 900.0


# The previous commit's wheels, kept between runs on one machine (a commit's tree never
# changes): <cache>/<commit>/<version>/herder-<version>-py3-none-any.whl
PREVIOUS_CACHE = Path("/var/cache/herder-test/previous-builds")
PREVIOUS_KEPT = 8


def build(tree: Path, out: Path, version: str) -> Path:
    """`tree`'s wheel as `version`, by the tree's own scripts/wheel.sh."""
    env = {**os.environ, "SETUPTOOLS_SCM_PRETEND_VERSION": version}
    done = subprocess.run(["bash", str(tree / "scripts" / "wheel.sh"), str(out / version),
                           sys.executable], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tree)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


def previous_commit() -> str | None:
    """HEAD's first parent; None outside a git checkout or in a shallow one that lacks it."""
    done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "HEAD~1^{commit}"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def build_previous(commit: str, version: str, work: Path) -> Path | None:
    """The wheel of `commit`'s tree as `version` (cached); None when that tree has no rolling
    upgrade to test (a commit before `cluster upgrade` and scripts/wheel.sh)."""
    cached = PREVIOUS_CACHE / commit / version
    found = sorted(cached.glob("herder-*.whl"))
    if found:
        return found[0]
    tree = work / f"tree-{commit[:12]}"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=REPO,
                             capture_output=True, timeout=300, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True,
                   timeout=300)
    if not (tree / "scripts" / "wheel.sh").exists() or \
            not (tree / "src" / "herder" / "cli" / "upgrade.py").exists():
        return None
    # an unpacked tree (no .git): wheel.sh builds its files as they are
    wheel = build(tree, work / "previous", version)
    partial = cached.with_name(f".{version}.{os.getpid()}")
    partial.mkdir(parents=True)
    shutil.copy2(wheel, partial / wheel.name)
    try:
        partial.rename(cached)
    except OSError:  # another run (another worktree's) cached it first
        shutil.rmtree(partial, ignore_errors=True)
    # the newest few commits' builds stay (a checkout tests one at a time, worktrees a few)
    builds = sorted(PREVIOUS_CACHE.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in builds[PREVIOUS_KEPT:]:
        shutil.rmtree(stale, ignore_errors=True)
    return cached / wheel.name


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """OLD: the previous commit's build (the issue's "a cluster of the previous commit's
    wheel"); NEW: this tree's. Where the previous commit cannot be had (no git metadata, a
    shallow clone, a commit from before `cluster upgrade`) OLD is this tree built a second
    time, which still tests the upgrade's mechanics but not two builds' code meeting."""
    out = tmp_path_factory.mktemp("wheels")
    commit = previous_commit()
    old = build_previous(commit, OLD, out) if commit else None
    print(f"OLD ({OLD}): " + (f"the previous commit {commit}" if old else
                              "this tree again (no previous commit to build)"))
    return {OLD: old or build(REPO, out, OLD), NEW: build(REPO, out, NEW)}


def installer(wheels: dict[str, Path]) -> Callable[[Any], None]:
    """What the guide has the operator do on each host, for both builds: a venv per build
    under <prefix>/versions, the wheel installed into it, `current` on OLD, `bin` on
    current/bin. The builds' dependencies are this test environment's (a path line, as
    tests/system/test_install.py: fetching them is pip's business, not this test's)."""
    deps = "".join(f"{p}\n" for p in sorted({sysconfig.get_paths()["purelib"],
                                              sysconfig.get_paths()["platlib"]}))
    base_python = str(Path(sys._base_executable).resolve())  # type: ignore[attr-defined]

    def install(host: Any) -> None:
        dist = host.path("/srv/herder/dist")
        dist.mkdir(parents=True, exist_ok=True)
        for version, wheel in wheels.items():
            shutil.copy2(wheel, dist / wheel.name)
            venv = f"{PREFIX}/versions/{version}"
            for argv in ([base_python, "-m", "venv", "--without-pip", venv],
                         [sys.executable, "-m", "pip", "--python", f"{venv}/bin/python",
                          "install", "-q", "--no-deps", "--no-index",
                          f"/srv/herder/dist/{wheel.name}"]):
                done = host.run(argv, timeout=300)
                assert done.returncode == 0, f"{host.name}: {argv}: {done.stderr}"
            (site,) = host.path(venv).glob("lib/python3*/site-packages")
            (site / "zz_test_dependencies.pth").write_text(deps)
        os.symlink(f"versions/{OLD}", host.path(f"{PREFIX}/current"))
        os.symlink("current/bin", host.path(f"{PREFIX}/bin"))

    return install


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path]) -> Iterator[Any]:
    pytest.importorskip("libvirt")
    yield from running_sim(tmp_path_factory.mktemp("upgrade"), 3, guests="qemu",
                           first_ip=simaddresses.first_ip("upgrade"), herder_command=HERDER,
                           install=installer(wheels))


@pytest.fixture(scope="module")
def guests(sim: Any) -> dict[str, int]:
    """The guests added and running: name -> its QEMU process's pid (in its host)."""
    for name, node in GUESTS.items():
        herder(sim, "instance", "add", name, "--no-name-check", "-t", "sharedfile", "-o",
               "herder-guest", "--disk", "0:size=32M", "-n", node, timeout=300)
    return {name: qemu_pid(sim, name) for name in GUESTS}


# --- what the nodes run ----------------------------------------------------------------------

def qemu_pid(sim: Any, name: str) -> int:
    host = sim.host(GUESTS[name])
    pid = int(host.path(f"/run/libvirt/qemu/{name}.pid").read_text().strip())
    assert host.run(["kill", "-0", str(pid)], timeout=30).returncode == 0, f"{name}: no QEMU"
    return pid


def daemon_builds(sim: Any, node: str) -> dict[str, str]:
    """herder's running daemons on a node -> the build their interpreter belongs to (the
    venv under <prefix>/versions)."""
    done = sim.host(node).run(["ps", "-eo", "args="], timeout=30)
    found = {}
    for line in done.stdout.splitlines():
        argv = line.split()
        if len(argv) >= 3 and argv[0].startswith(f"{PREFIX}/versions/") and \
                argv[1].endswith("/bin/herder") and argv[2] in ("noded", "confd", "mond",
                                                                 "instmon", "masterd",
                                                                 "maintd"):
            found[argv[2]] = argv[0].split("/")[-3]
    return found


def noded_listens(sim: Any, node: str) -> bool:
    done = sim.host(node).run(["ss", "-ltnH", "sport = :1811"], timeout=30)
    return bool(done.stdout.strip())


def node_versions(sim: Any) -> dict[str, str | None]:
    """Node -> the build its noded reports to masterd (`node info`'s herder_version)."""
    with sim.rapi() as api:
        nodes = api.get_nodes(bulk=True)
    return {n["name"]: n.get("herder_version") for n in nodes}


def upgrade(sim: Any, *args: str) -> subprocess.CompletedProcess[str]:
    start = time.monotonic()
    # the node's environment: the etcd backend's config location (an operator's
    # /etc/herder/environment), nothing on the file store
    done = sim.host(NODE1).run([*HERDER, "cluster", "upgrade", *args], timeout=UPGRADE_TIMEOUT,
                               env=sim.node_environment)
    print(f"cluster upgrade {' '.join(args)}: exit {done.returncode} after "
          f"{time.monotonic() - start:.1f}s")
    return done


def drained(sim: Any) -> bool:
    with sim.rapi() as api:
        return bool(api.get_queue()["drained"])


def assert_runs(sim: Any, version: str) -> None:
    for node in (NODE1, NODE2, NODE3):
        assert os.readlink(sim.host(node).path(f"{PREFIX}/current")) == f"versions/{version}"
        builds = daemon_builds(sim, node)
        assert "noded" in builds and set(builds.values()) == {version}, (node, builds)
    assert daemon_builds(sim, NODE1).keys() >= {"masterd", "maintd"}  # maintd started again
    with sim.rapi() as api:
        assert api.get_info()["herder_version"] == version
    wait_for(lambda: set(node_versions(sim).values()) == {version}, 60,
             f"every node reporting herder {version}")
    info = json.loads(herder(sim, "node", "info", NODE2, NODE3, "--json").stdout)
    assert [n["herder_version"] for n in info] == [version, version]


# --- the cases, in order ---------------------------------------------------------------------

def test_the_cluster_runs_the_old_build(sim: Any, guests: dict[str, int]) -> None:
    assert_runs(sim, OLD)
    done = sim.host(NODE2).run([*HERDER, "--version"], timeout=60)
    assert done.stdout.strip() == f"herder, version {OLD}"


def test_a_build_that_is_not_installed_changes_nothing(sim: Any) -> None:
    done = upgrade(sim, "--to", "0.97.0")
    assert done.returncode == 1
    for node in (NODE1, NODE2, NODE3):
        assert f"{node}: herder 0.97.0 is not installed ({PREFIX}/versions/0.97.0)" in \
            done.stderr, done.stderr
    assert not sim.host(NODE1).path(INTENT).exists()
    assert not drained(sim)
    assert_runs(sim, OLD)
    elsewhere = sim.host(NODE2).run([*HERDER, "cluster", "upgrade", "--to", NEW], timeout=120)
    assert elsewhere.returncode == 1 and "run it on the master" in elsewhere.stderr, \
        elsewhere.stderr
    assert_runs(sim, OLD)


def test_upgrade_brings_every_node_to_the_new_build_guests_running(
        sim: Any, guests: dict[str, int]) -> None:
    done = upgrade(sim, "--to", NEW)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    # node by node, the master last
    switched = [line.split(":")[0] for line in lines if f"-> {NEW}" in line]
    assert switched == [NODE2, NODE3, NODE1], lines
    assert_runs(sim, NEW)
    assert {name: qemu_pid(sim, name) for name in GUESTS} == guests
    assert not drained(sim)
    assert not sim.host(NODE1).path(INTENT).exists()


def test_a_node_that_does_not_come_back_stops_it_and_resume_finishes(
        sim: Any, guests: dict[str, int]) -> None:
    # node3's OLD build starts nothing: its daemons fail after the switch
    script = sim.host(NODE3).path(f"{PREFIX}/versions/{OLD}/bin/herder")
    script.rename(script.with_name("herder.real"))
    script.write_text("#!/bin/sh\necho 'this build is broken' >&2\nexit 1\n")
    script.chmod(0o755)
    try:
        done = upgrade(sim, "--to", OLD, "--node-timeout", "20")
        assert done.returncode == 1, done.stdout + done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("herder: error:")]
        assert len(errors) == 1 and \
            f"{NODE3} did not come back with herder {OLD} within 20s" in errors[0], done.stderr
        assert "herder cluster upgrade --resume" in done.stderr
        intent = json.loads(sim.host(NODE1).path(INTENT).read_text())
        assert (intent["from_version"], intent["to_version"]) == (NEW, OLD)
        assert intent["switched"] == [NODE2]
        assert drained(sim)
        assert set(daemon_builds(sim, NODE1).values()) == {NEW}  # the master: untouched
        assert set(daemon_builds(sim, NODE2).values()) == {OLD}
        refused = upgrade(sim, "--to", NEW)
        assert refused.returncode == 1
        assert f"an upgrade from herder {NEW} to {OLD} is under way" in refused.stderr
    finally:
        script.unlink()
        script.with_name("herder.real").rename(script)
    # node3's supervisor starts its noded again (on OLD, now whole), serving once it listens
    wait_for(lambda: daemon_builds(sim, NODE3).get("noded") == OLD and noded_listens(sim, NODE3),
             90, "node3's noded on OLD")
    done = upgrade(sim, "--resume")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{NODE3}: runs herder {OLD} already" in done.stdout
    assert f"{NODE1}: herder {NEW} -> {OLD}" in done.stdout
    assert_runs(sim, OLD)
    assert {name: qemu_pid(sim, name) for name in GUESTS} == guests
    assert not drained(sim)
    assert not sim.host(NODE1).path(INTENT).exists()
    again = upgrade(sim, "--resume")
    assert again.returncode == 0 and "No upgrade is under way" in again.stdout


# --- the same upgrade under systemd: Debian hosts --------------------------------------------
# Two Debian 12 hosts (`--hosts debian`: systemd as PID 1, herder installed from this checkout's
# wheel into /opt/herder by the guide's script, its units run by systemd), a guest running.
# NEW (this tree, built as 0.99.0: newer than any build of the checkout) is installed beside
# the running build as the guide's step 1 says; `cluster upgrade --to NEW` switches each node
# in a transient unit (systemd-run) and systemd restarts herder's units from the new build.
# A function-scoped cluster: it lives only while its test runs (not beside the module's).
DEB_NODES = (NODE1, NODE2)
DEB_PREFIX = "/opt/herder"
DEB_GUEST = "deb1"


@pytest.fixture()
def debian_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from herder.sim import debroot, guest

    reason = debroot.unsupported()
    if reason:
        pytest.skip(reason)
    guest.ensure_guest()
    yield from running_sim(tmp_path_factory.mktemp("upgrade-debian"), 2, guests="qemu",
                           hosts="debian", first_ip=simaddresses.first_ip("upgrade_debian"))


def sh(sim: Any, node: str, command: str, timeout: float = 60) -> str:
    done = sim.host(node).run(["sh", "-c", command], timeout=timeout)
    assert done.returncode == 0, f"{node}: {command}: {done.stderr or done.stdout}"
    return str(done.stdout).strip()


def install_beside(sim: Any, node: str, wheel: Path, version: str) -> None:
    """docs/install.md "Upgrading" step 1 on a Debian host: a venv for the build under
    /opt/herder/versions, the wheel installed into it, `current` untouched. pip takes the
    dependencies from the simulation's wheelhouse (the hosts reach no package index)."""
    inside = "/root/upgrade-wheels"
    target = sim.host(node).path(inside)
    shutil.copytree(Path(sim.network) / "wheels", target, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("herder-*.whl"))
    shutil.copy2(wheel, target / wheel.name)
    venv = f"{DEB_PREFIX}/versions/{version}"
    sh(sim, node, f"python3 -m venv {venv} && PIP_NO_INDEX=1 PIP_FIND_LINKS={inside} "
                  f"PIP_DISABLE_PIP_VERSION_CHECK=1 {venv}/bin/pip install --quiet "
                  f"{inside}/{wheel.name}", timeout=600)


def unit_builds(sim: Any, node: str) -> dict[str, str]:
    """herder's active units on a Debian node -> the build (versions/<build>) their main
    process's interpreter belongs to."""
    found = {}
    for unit in sh(sim, node, "systemctl list-units --state=active --plain --no-legend "
                              "'herder-*.service' | cut -d' ' -f1").split():
        pid = sh(sim, node, f"systemctl show -P MainPID {unit}")
        if pid == "0":  # a oneshot's, or one between restarts
            continue
        interpreter = sh(sim, node, f"tr '\\0' '\\n' </proc/{pid}/cmdline | head -1")
        assert interpreter.startswith(f"{DEB_PREFIX}/versions/"), (node, unit, interpreter)
        found[unit.removeprefix("herder-").removesuffix(".service")] = \
            interpreter.split("/")[4]
    return found


def test_the_upgrade_under_systemd_on_debian_hosts(debian_sim: Any,
                                                   wheels: dict[str, Path]) -> None:
    sim = debian_sim
    old = sh(sim, NODE1, "herder --version").split()[-1]
    assert old != NEW
    for node in DEB_NODES:
        assert set(unit_builds(sim, node).values()) == {old}, node
        install_beside(sim, node, wheels[NEW], NEW)
        assert sh(sim, node, "readlink /opt/herder/current") == f"versions/{old}"
    herder(sim, "instance", "add", DEB_GUEST, "--no-name-check", "-t", "sharedfile", "-o",
           "herder-guest", "--disk", "32M", "--ignore-ipolicy", "-n", NODE2, "--net",
           "link=br0", timeout=300)
    pid_file = sim.host(NODE2).path(f"/run/libvirt/qemu/{DEB_GUEST}.pid")
    qemu = int(pid_file.read_text().strip())

    start = time.monotonic()
    done = sim.host(NODE1).run(["herder", "cluster", "upgrade", "--to", NEW],
                               timeout=UPGRADE_TIMEOUT)
    print(f"cluster upgrade on Debian hosts: exit {done.returncode} after "
          f"{time.monotonic() - start:.1f}s")
    assert done.returncode == 0, done.stdout + done.stderr
    switched = [line.split(":")[0] for line in done.stdout.splitlines() if f"-> {NEW}" in line]
    assert switched == [NODE2, NODE1], done.stdout  # the master last

    for node in DEB_NODES:
        assert sh(sim, node, "/opt/herder/current/bin/herder --version") == \
            f"herder, version {NEW}"
        assert sh(sim, node, "readlink /opt/herder/current") == f"versions/{NEW}"
        builds = unit_builds(sim, node)
        assert "noded" in builds and set(builds.values()) == {NEW}, (node, builds)
    # node2's switch ran in a transient unit of its own (systemd-run: not in noded's cgroup,
    # which its stop of herder-noded ends), its output in the upgrade log; the master's ran
    # under this command
    assert "herder-switch-version-" in sh(
        sim, NODE2, "journalctl -q --no-pager -o cat | grep herder-switch-version- "
                    "| tail -1")
    log = sh(sim, NODE2, "cat /var/log/herder/upgrade.log")
    assert f"switch-version: {DEB_PREFIX}/current -> versions/{NEW}" in log, log
    assert "switch-version: restarting noded" in log, log
    assert unit_builds(sim, NODE1).keys() >= {"masterd", "maintd"}
    with sim.rapi() as api:
        assert api.get_info()["herder_version"] == NEW
    wait_for(lambda: set(node_versions(sim).values()) == {NEW}, 60,
             f"every node reporting herder {NEW}")
    info = json.loads(herder(sim, "node", "info", *DEB_NODES, "--json").stdout)
    assert [n["herder_version"] for n in info] == [NEW, NEW]
    assert int(pid_file.read_text().strip()) == qemu
    assert sim.host(NODE2).run(["kill", "-0", str(qemu)], timeout=30).returncode == 0
    assert not sim.host(NODE1).path(INTENT).exists() and not drained(sim)


# --- the same upgrade with the config in etcd ------------------------------------------------
# `--store etcd`: masterd campaigns for the master lease on every candidate, so the master's
# masterd restarting on the new build must not hand the cluster to another node: the master
# switches last and is still the master after it (the lease's holder, the config's
# master_node). libvirt's test driver: this case is about the store, not the guests.
ETCD_NODES = (NODE1, NODE2, NODE3)


@pytest.fixture()
def etcd_sim(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path]) -> Iterator[Any]:
    # OLD is this tree here: what keeps the master lease across masterd's restart is the old
    # side's (the command, switch-version and the stopping masterd all run OLD), so a fix of
    # it is tested only when OLD has it; the previous commit's OLD is the module's cluster's
    out = tmp_path_factory.mktemp("wheels-etcd")
    both = {OLD: build(REPO, out, OLD), NEW: wheels[NEW]}
    yield from running_sim(tmp_path_factory.mktemp("upgrade-etcd"), 3, guests="test",
                           store="etcd", first_ip=simaddresses.first_ip("upgrade_etcd"),
                           herder_command=HERDER, install=installer(both))


def test_the_upgrade_with_the_config_in_etcd(etcd_sim: Any) -> None:
    sim = etcd_sim
    with sim.rapi() as api:
        assert api.get_info()["master"] == NODE1
    done = upgrade(sim, "--to", NEW)
    assert done.returncode == 0, done.stdout + done.stderr
    switched = [line.split(":")[0] for line in done.stdout.splitlines() if f"-> {NEW}" in line]
    assert switched == [NODE2, NODE3, NODE1], done.stdout
    for node in ETCD_NODES:
        assert os.readlink(sim.host(node).path(f"{PREFIX}/current")) == f"versions/{NEW}"
        builds = daemon_builds(sim, node)
        assert "noded" in builds and set(builds.values()) == {NEW}, (node, builds)
    # the master stayed where it was: its masterd's restart did not hand the lease over, the
    # next masterd held the kept one
    assert daemon_builds(sim, NODE1).keys() >= {"masterd", "maintd"}
    log = sim.host(NODE1).path("/var/log/herder/masterd.log").read_text(errors="replace")
    assert "holds the lease its previous masterd kept" in log
    with sim.rapi() as api:
        info = api.get_info()
    assert (info["master"], info["herder_version"]) == (NODE1, NEW)
    wait_for(lambda: set(node_versions(sim).values()) == {NEW}, 60,
             f"every node reporting herder {NEW}")
    assert not drained(sim)
    assert not sim.host(NODE1).path(INTENT).exists()
