"""The real Ganeti 3.0.2 cluster of ../shared/peers/vcluster for end-to-end tests: brought up
from scratch (60-90 s on this 2-core machine under a test run's load) by the first test module
that needs it, under an exclusive file lock so that test modules on other xdist workers wait
instead of sharing it, and stopped again by that module, or, when the module leaves it as it
found it (`keep`: checked against what a fresh start showed, `_state`), passed on to the next
module of the same process that accepts such a vcluster (`reuse`) instead of being started
afresh. Tests skip cleanly when ../shared, Debian's Ganeti binaries or root are missing; a
vcluster that is there but does not come up fails them (a test that cannot start what it tests
fails).

Nodes node1..3.vcluster.test = 127.0.0.11-13 (node1 is the master; RAPI on :5080, user admin,
password in /tmp/vcluster/rapi-password); `vc(node, *cmd)` runs a command as that node inside
the cluster's mount namespace (gnt-* tools, Ganeti's paths)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

REPO = Path(__file__).resolve().parents[2]
VCDIR = REPO.parent / "shared" / "peers" / "vcluster"
VC = Path(os.environ.get("VC", "/tmp/vcluster"))
GROOT = Path(os.environ.get("GROOT", "/tmp/groot"))
LOCK = Path("/tmp/herder-vcluster.lock")
NODES = ("node1.vcluster.test", "node2.vcluster.test", "node3.vcluster.test")
IPS = {"node1.vcluster.test": "127.0.0.11", "node2.vcluster.test": "127.0.0.12",
       "node3.vcluster.test": "127.0.0.13"}
RAPI_URL = "https://127.0.0.11:5080"
MASTER_DATA = VC / "nodes" / NODES[0] / "var" / "lib" / "ganeti"


@dataclass
class VCluster:
    url: str = RAPI_URL
    user: str = "admin"

    @property
    def password(self) -> str:
        return (VC / "rapi-password").read_text().strip()

    @property
    def rapi_cert(self) -> Path:
        return MASTER_DATA / "rapi.pem"

    @property
    def hmac_key(self) -> Path:
        return MASTER_DATA / "hmac.key"

    def data_dir(self, node: str) -> Path:
        return VC / "nodes" / node / "var" / "lib" / "ganeti"

    def vc(self, node: str, *cmd: str, check: bool = True,
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run `cmd` as virtual node `node` (inside the cluster's namespace)."""
        done = subprocess.run([str(VC / "bin" / "vc"), node, *cmd], capture_output=True,
                              text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"vc {node} {' '.join(cmd)}: exit {done.returncode}: "
                                 f"{done.stderr.strip() or done.stdout.strip()}")
        return done


def vc_together(vcl: VCluster, node: str, *commands: Sequence[str],
                timeout: float = 300) -> None:
    """Run independent commands (`vc` each) side by side and fail when one fails: Ganeti runs
    their jobs at once (one after another, each gnt-* command took 2-4 s under the suite's
    load, most of it the client's start and the job's own process)."""
    procs = [(cmd, subprocess.Popen([str(VC / "bin" / "vc"), node, *cmd], text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE))
             for cmd in commands]
    failed = []
    for cmd, proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        if proc.returncode != 0:
            failed.append(f"vc {node} {' '.join(cmd)}: exit {proc.returncode}: "
                          f"{err.strip() or out.strip()}")
    assert not failed, "\n".join(failed)


def _why_not() -> str | None:
    if not (VCDIR / "vcluster-up.sh").is_file():
        return f"{VCDIR} is absent"
    if os.geteuid() != 0:
        return "the vcluster needs root"
    if not (GROOT / "usr" / "lib" / "ganeti").exists() and not (GROOT / "bin" / "hail").exists():
        return f"Debian's Ganeti binaries are not unpacked in {GROOT} (scripts/peers.sh)"
    return None


# The lock of a vcluster a module left up for the next one (`running_vcluster(keep=True)`):
# held until a module reuses it, a module starts a fresh one, or `release_kept()` stops it
# (tests/conftest.py does when the next test is not the vcluster's).
_kept: IO[str] | None = None
# What the vcluster looked like when it was started (`_state()`): a module that keeps it must
# leave it so, or the next module would test on what this one left behind.
_fresh_state: dict[str, Any] | None = None


def _up() -> None:
    """Start the vcluster from scratch (vcluster-up.sh stops a running one first); fail the
    test when it does not come up."""
    try:
        up = subprocess.run(["bash", str(VCDIR / "vcluster-up.sh")], capture_output=True,
                            text=True, timeout=300)
    except subprocess.TimeoutExpired:
        _down()
        pytest.fail("the vcluster did not come up within 300 s")
    if up.returncode != 0:
        _down()
        tail = " | ".join((up.stderr or up.stdout).strip().splitlines()[-3:])
        pytest.fail(f"the vcluster did not come up: {tail}")


def _down() -> None:
    subprocess.run(["bash", str(VCDIR / "vcluster-down.sh")], capture_output=True, timeout=120)


def _alive() -> bool:
    """Whether the vcluster's namespace holder (which vcluster-down.sh stops last) still runs."""
    try:
        os.kill(int((VC / "ns" / "holder.pid").read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


def rapi_client(vcl: VCluster) -> Any:
    from herder.core.rapi import RapiClient

    return RapiClient(vcl.url, vcl.user, vcl.password, verify=False, timeout=60.0)


def _state(vcl: VCluster) -> dict[str, Any]:
    """What the modules sharing one vcluster change (instances, tags, node flags, networks,
    the default iallocator, the data collectors), read through RAPI (one connection: a second
    where five gnt-* commands took ten under the suite's load)."""
    with rapi_client(vcl) as client:
        info = client.get_info()
        return {
            "instances": sorted(client.get_instances()),
            "nodes": sorted((n["name"], sorted(n["tags"]), n["offline"], n["drained"],
                             n["master_candidate"], n["role"])
                            for n in client.get_nodes(bulk=True)),
            "groups": sorted((g["name"], sorted(g["tags"]))
                             for g in client.get_groups(bulk=True)),
            "networks": sorted(str(n["name"]) for n in client.request("GET", "/2/networks")),
            "cluster": {key: info.get(key) for key in (
                "tags", "default_iallocator", "default_iallocator_params",
                "enabled_data_collectors", "data_collector_interval", "master")},
        }


def remove_instances(vcl: VCluster, names: list[str] | None = None) -> None:
    """Remove `names` (every instance when None) through RAPI: their jobs are submitted at
    once and Ganeti runs them side by side (one `gnt-instance remove` after another took 3-5 s
    each under the suite's load)."""
    with rapi_client(vcl) as client:
        if names is None:
            names = list(client.get_instances())
        jobs = {name: client.delete_instance(name) for name in names}
        failed = {name: job["opresult"] for name, job in (
            (name, client.wait_for_job(job_id, timeout=240)) for name, job_id in jobs.items())
            if job["status"] != "success"}
    assert not failed, f"instances not removed: {failed}"


def release_kept() -> None:
    """Stop a vcluster left up for a next module that did not come, and release its lock."""
    global _kept
    lock, _kept = _kept, None
    if lock is not None:
        try:
            _down()
        finally:
            lock.close()


@contextlib.contextmanager
def running_vcluster(*, reuse: bool = False, keep: bool = False) -> Iterator[VCluster]:
    """Exclusive use of a vcluster (skip without the peers; fail when they are there and it does
    not come up): a freshly started one, unless `reuse` (the module needs the state of a fresh
    one, not a new start) and the previous module left one up. `keep`: the module leaves the
    vcluster as it found it (whatever it changes, it undoes, even when a test fails), so it
    stays up for the next module; it is stopped when the module's own code failed."""
    global _kept, _fresh_state
    reason = _why_not()
    if reason:
        pytest.skip(f"no vcluster: {reason}")
    lock, _kept = _kept, None
    fresh = lock is None or not (reuse and _alive())
    try:
        if lock is None:
            lock = open(LOCK, "w")  # noqa: SIM115 (held beyond this call when kept)
            fcntl.flock(lock, fcntl.LOCK_EX)
        if fresh:  # vcluster-up.sh stops the one left up first
            _fresh_state = None
            _up()
            if keep or reuse:  # a module of the chain: what the next one must find
                try:
                    _fresh_state = _state(VCluster())
                except BaseException:
                    _down()
                    raise
    except BaseException:
        if lock is not None:
            lock.close()
        raise
    passed_on = False
    try:
        yield VCluster()
        if keep:  # what this module changed, it undid (else the next one starts a new one)
            left = _state(VCluster())
            assert left == _fresh_state, \
                f"the vcluster was not left as found: {left} (found {_fresh_state})"
        passed_on = keep
    finally:
        if passed_on:
            _kept = lock
        else:
            try:
                _down()
            finally:
                lock.close()


# ---- herder's daemons beside Ganeti's ----

HERDER_MOND_PORT = 1825  # Ganeti's own mond has 1815 on every node
DIAGNOSE = "herder-diagnose"


def write_diagnose(directory: Path, status: str = "Ok") -> Path:
    """A white-listed self-diagnose command (root-owned, 0755) printing `status`."""
    from herder.sim.cluster import diagnose_script

    return diagnose_script(directory / DIAGNOSE, {
        "status": status, "command": "", "details": {"test": True} if status != "Ok" else {}})


def spawn(log: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    import sys

    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "herder.cli.main", *args],
                                env={**os.environ, "HERDER_CONFIG": str(log.parent / "none"),
                                     **(env or {})},
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def start_monds(vcl: VCluster, work: Path, interval: float = 1.0
                ) -> dict[str, subprocess.Popen[bytes]]:
    """herder mond on every vcluster node (port 1825), configured by a local file: the
    diagnose command, the cluster's HMAC key; collector settings from Ganeti's confd."""
    import time

    procs = {}
    for node in NODES:
        ndir = work / node
        ndir.mkdir(parents=True, exist_ok=True)
        write_diagnose(ndir / "diagnose")
        key = vcl.data_dir(node) / "hmac.key"
        config = ndir / "mond.toml"
        config.write_text(
            f'node = "{node}"\nbind = "{IPS[node]}"\nport = {HERDER_MOND_PORT}\n'
            f'diagnose_command = "{DIAGNOSE}"\ndiagnose_dir = "{ndir / "diagnose"}"\n'
            f"diagnose_interval = {interval}\n"
            f'hmac_key = "{key}"\nconfd = ["{IPS[NODES[0]]}"]\nconfd_key = "{key}"\n'
            # a change of Ganeti's collector settings shows within 2-4 s, not 15-30 s
            "confd_cache_seconds = 2\n"
            f'run_dir = "{ndir / "run"}"\n')
        procs[node] = spawn(ndir / "mond.log", "mond", "--config", str(config),
                            "--plugin-dir", str(ndir / "plugins"))
    import httpx

    deadline = time.monotonic() + 30
    for node, proc in procs.items():
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"herder mond on {node} exited: "
                                     f"{(work / node / 'mond.log').read_text()[-1500:]}")
            try:
                httpx.get(f"http://{IPS[node]}:{HERDER_MOND_PORT}/", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"herder mond on {node} does not answer") from None
                time.sleep(0.1)
    return procs


def maintd_args(vcl: VCluster, work: Path, password_file: Path | None = None) -> list[str]:
    return ["maintd", "--ganeti-rapi", vcl.url, "--rapi-password-file",
            str(password_file or VC / "rapi-password"), "--rapi-ca", str(vcl.rapi_cert),
            "--hmac-key", str(vcl.hmac_key), "--node", NODES[0], "--bind", IPS[NODES[0]],
            "--notify-port", "0", "--mond-port", str(HERDER_MOND_PORT), "--round-delay", "0",
            "--poll-interval", "0.5", "--state", str(work / "maintd-state.json"),
            "--run-dir", str(work / "maintd-run")]


def stop(procs: Any) -> None:
    import signal

    for proc in (procs.values() if isinstance(procs, dict) else procs):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def in_use() -> bool:
    """Whether a test module holds the vcluster now (tests that only use a running vcluster
    skip then: it is being changed under them)."""
    try:
        with open(LOCK, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(lock, fcntl.LOCK_UN)
    except OSError:
        return False
    return False
