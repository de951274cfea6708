"""The operator's guide's Ceph client step (`scripts/node-install.sh ceph-client`, docs/install.md
section 6), which `herder cluster simulate --hosts debian --ceph` runs on every host (issue 34):
the simulator runs the very command the guide shows, and the step leaves the files and the
environment line the guide says. The script runs in a mount namespace of its own whose /etc/ceph
and /etc/herder are empty directories of the test's (this machine's are not touched)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from herder.sim import cluster, debhost

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "node-install.sh"


def test_the_simulator_runs_the_step_the_guide_shows() -> None:
    argv = cluster.ceph_client_step()
    assert argv[:3] == ["bash", debhost.NODE_SCRIPT, "ceph-client"]
    files = [f"{cluster.CEPH_CLIENT_FILES}/ceph.conf",
             f"{cluster.CEPH_CLIENT_FILES}/ceph.client.herder.keyring"]
    assert argv[3:] == [*files, "herder", "herder"]
    # the guide's command, on the files as the operator copied them (their names only)
    shown = ("scripts/node-install.sh ceph-client ceph.conf ceph.client.herder.keyring "
             "herder herder")
    guide = (REPO / "docs" / "install.md").read_text()
    assert guide.count(shown) >= 2  # in the list of steps and in section 6
    assert [Path(f).name for f in files] + argv[5:] == shlex.split(shown)[2:]


def run_step(tmp_path: Path, *args: str, environment: str | None = None
             ) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """`node-install.sh ceph-client ARGS` with /etc/ceph and /etc/herder private to the run
    (bound from tmp_path); those two directories afterwards."""
    ceph, herder = tmp_path / "etc-ceph", tmp_path / "etc-herder"
    ceph.mkdir()
    herder.mkdir()
    if environment is not None:
        (herder / "environment").write_text(environment)
    script = (f"mount --bind {ceph} /etc/ceph && mount --bind {herder} /etc/herder && "
              f"exec bash {SCRIPT} ceph-client {shlex.join(args)}")
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    return done, ceph, herder


def mode(path: Path) -> str:
    return oct(path.stat().st_mode & 0o777)


def test_the_step_installs_the_files_and_the_user(tmp_path: Path) -> None:
    (tmp_path / "ceph.conf").write_text("[global]\nfsid = f\nmon host = 192.0.2.1\n")
    (tmp_path / "key").write_text("[client.hv]\n\tkey = AQBfake==\n")
    (tmp_path / "key").chmod(0o644)  # as copied: the step makes the installed one private
    done, ceph, herder = run_step(
        tmp_path, "ceph.conf", "key", "hv",
        environment="HERDER_CONFIG=etcds://192.0.2.9:2379/x\nCEPH_ARGS=--id old\n")
    assert done.returncode == 0, done.stderr
    assert (ceph / "ceph.conf").read_text() == (tmp_path / "ceph.conf").read_text()
    assert (ceph / "ceph.client.hv.keyring").read_text() == (tmp_path / "key").read_text()
    assert (mode(ceph / "ceph.conf"), mode(ceph / "ceph.client.hv.keyring")) == (
        "0o644", "0o600")
    # one CEPH_ARGS line, the others kept
    assert (herder / "environment").read_text().splitlines() == [
        "HERDER_CONFIG=etcds://192.0.2.9:2379/x", "CEPH_ARGS=--id hv"]
    assert sorted(os.listdir(ceph)) == ["ceph.client.hv.keyring", "ceph.conf"]


def test_the_step_makes_the_environment_file(tmp_path: Path) -> None:
    (tmp_path / "ceph.conf").write_text("[global]\n")
    (tmp_path / "key").write_text("[client.herder]\n")
    done, _, herder = run_step(tmp_path, "ceph.conf", "key", "herder")
    assert done.returncode == 0, done.stderr
    assert (herder / "environment").read_text() == "CEPH_ARGS=--id herder\n"


def test_the_step_without_a_user_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "ceph.conf").write_text("[global]\n")
    (tmp_path / "key").write_text("[client.herder]\n")
    refused, ceph, herder = run_step(tmp_path, "ceph.conf", "key")
    assert refused.returncode != 0
    assert "usage: node-install.sh ceph-client CONF KEYRING USER" in refused.stderr
    assert list(ceph.iterdir()) == list(herder.iterdir()) == []
