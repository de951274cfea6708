"""Master-only daemons on a node that is not the master stop at once with exit code 11 ("not my
role", which systemd's units and `herder supervise` do not restart), without asking anybody: on
a node without a config (not a master candidate) and on one whose config names another master,
even when no masterd runs anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.system.masterd_fixture import make_cluster

NOT_MY_ROLE = 11


def herder(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HERDER_CONFIG": str(config)}
    return subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("daemon", ["masterd", "maintd"])
def test_no_config_here(tmp_path: Path, daemon: str) -> None:
    config = tmp_path / "var-lib-herder" / "config.json"
    done = herder(config, daemon, "--run-dir", str(tmp_path / "run"))
    assert done.returncode == NOT_MY_ROLE, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"herder {daemon}: no cluster config at {config} (the master and the master candidates "
        "have one)")


@pytest.mark.parametrize("daemon", ["masterd", "maintd"])
def test_the_config_names_another_master(tmp_path: Path, daemon: str) -> None:
    config = make_cluster(tmp_path)  # node1 is the master; no masterd runs
    done = herder(config, daemon, "--node", "node2.example.com", "--run-dir",
                  str(tmp_path / "run"))
    assert done.returncode == NOT_MY_ROLE, done.stderr
    assert "this node (node2.example.com) is not the master" in done.stderr
    assert "cannot ask masterd" not in done.stderr
