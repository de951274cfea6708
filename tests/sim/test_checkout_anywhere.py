"""The simulator works from a checkout anywhere (issue 33): a host's /tmp (and /run, /srv, ...)
is its own, so a checkout or virtualenv under one of them is bound into every host at the same
path, and the hosts run the simulator's own herder from there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

import herder
from herder.sim.host import PRIVATE_DIRS, code_paths, hidden_code_paths, unsupported


def test_only_the_outermost_paths_under_a_private_directory_are_bound() -> None:
    paths = ["/tmp/clone/src", "/tmp/clone/.venv", "/tmp/clone", "/usr/lib/python3",
             "/root/.pyenv/versions/3.11.7", "/srv/herder/x", "/tmpfoo/src", "/run"]
    assert hidden_code_paths(paths) == ["/run", "/srv/herder/x", "/tmp/clone"]
    assert hidden_code_paths(["/work/main/src", "/work/main/.venv"]) == []
    assert all(d.startswith("/") for d in PRIVATE_DIRS)


def test_code_paths_name_this_herder_and_its_interpreter() -> None:
    found = code_paths()
    assert str(Path(herder.__file__).resolve().parents[1]) in found
    assert sys.prefix in found
    # every directory the imports come from (a .pth's too: the clone test's virtualenv
    # borrows this one's libraries, which a suite run from /tmp has under /tmp as well)
    assert str(Path(msgspec.__file__).resolve().parents[1]) in found


# A one-host simulation run by a virtualenv under /tmp whose herder is a copy under /tmp (a clone
# in /tmp, as a new user makes it): the host's PID 1 execs that virtualenv's interpreter and
# becomes `herder supervise` from that copy, and a command on the host imports the copy.
SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from herder.sim.host import HostConfig, HostSimulation
    from herder.sim import hostfiles
    sim = HostSimulation.create(Path(sys.argv[1]))
    try:
        sim.add_hosts([HostConfig("node1.sim.herder.test", sim.address(11),
                                  node_settings=hostfiles.node_toml([]),
                                  vg_mib=1024, file_storage_mib=64)])
        host = sim.hosts["node1.sim.herder.test"]
        done = host.run([sys.executable, "-c", "import herder; print(herder.__file__)"])
        print("HOST-SEES", done.stdout.strip(), done.stderr.strip())
    finally:
        sim.teardown(grace=5.0)
""")


def clone_under_tmp(checkout: Path) -> Path:
    """A copy of this herder at CHECKOUT/src and a virtualenv at CHECKOUT/.venv that imports
    it first (and this environment's libraries); returns the virtualenv's interpreter."""
    shutil.copytree(Path(herder.__file__).resolve().parent, checkout / "src" / "herder",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(checkout / ".venv")],
                   check=True, capture_output=True, timeout=120)
    venv_python = checkout / ".venv" / "bin" / "python"
    site = subprocess.run([str(venv_python), "-c", "import site; print(site.getsitepackages()[0])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    libraries = Path(msgspec.__file__).resolve().parents[1]  # this environment's site-packages
    Path(site, "herder-anywhere.pth").write_text(f"{checkout / 'src'}\n{libraries}\n")
    return venv_python


def test_a_clone_under_tmp_runs_on_the_hosts(tmp_path: Path) -> None:
    reason = unsupported()
    if reason:
        pytest.skip(reason)
    checkout = Path("/tmp") / f"herder-anywhere-{os.getpid()}"
    try:
        python = clone_under_tmp(checkout)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done = subprocess.run([str(python), "-c", SCRIPT, str(tmp_path / "sim")], env=env,
                              capture_output=True, text=True, timeout=300, cwd="/")
        assert done.returncode == 0, done.stderr[-2000:]
        assert f"HOST-SEES {checkout}/src/herder/__init__.py" in done.stdout, done.stdout
    finally:
        shutil.rmtree(checkout, ignore_errors=True)
