"""``herder alloc install``: the iallocator script Ganeti runs (``DIR/NAME``)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from alloc_support import HTOOLS

from herder.alloc import Options, answer
from herder.cli.alloc import DEFAULT_IALLOCATOR_DIR, iallocator_script

REPO = Path(__file__).resolve().parents[2]
POLICY = {
    "minmax": [{"min": {"memory-size": 1, "cpu-count": 1, "disk-size": 0, "disk-count": 0,
                        "nic-count": 0, "spindle-use": 0},
                "max": {"memory-size": 32768, "cpu-count": 8, "disk-size": 1048576,
                        "disk-count": 16, "nic-count": 8, "spindle-use": 12}}],
    "std": {"memory-size": 128, "cpu-count": 1, "disk-size": 1024, "disk-count": 1,
            "nic-count": 1, "spindle-use": 1},
    "disk-templates": ["diskless", "sharedfile"], "vcpu-ratio": 4.0, "spindle-ratio": 32.0,
}


def tiny_request() -> dict[str, Any]:
    """Two empty nodes and one diskless instance on node-a: the new one goes to node-b."""
    node = {"group": "g1", "offline": False, "drained": False, "vm_capable": True,
            "master_candidate": True, "ndparams": {"exclusive_storage": False,
                                                   "spindle_count": 1},
            "total_memory": 8192, "reserved_memory": 512, "free_memory": 7680,
            "total_disk": 102400, "free_disk": 102400, "total_cpus": 4, "reserved_cpus": 1,
            "free_spindles": 1, "total_spindles": 1, "tags": []}
    return {
        "version": 2, "cluster_name": "c.example", "cluster_tags": [],
        "enabled_hypervisors": ["fake"], "ipolicy": POLICY,
        "nodegroups": {"g1": {"name": "default", "alloc_policy": "preferred", "networks": [],
                              "ipolicy": POLICY, "tags": []}},
        "nodes": {"node-a": {**node, "free_memory": 6656}, "node-b": dict(node)},
        "instances": {"web": {"memory": 1024, "vcpus": 1, "disk_template": "diskless",
                              "disks": [], "disk_space_total": 0, "spindle_use": 1,
                              "nics": [], "tags": [], "admin_state": "up",
                              "nodes": ["node-a"]}},
        "request": {"type": "allocate", "name": "new", "disk_template": "diskless",
                    "required_nodes": 1, "disks": [], "disk_space_total": 0, "memory": 512,
                    "vcpus": 1, "spindle_use": 1, "tags": [], "nics": []},
    }


def herder(*args: str, stdin: str | None = None, cwd: Path | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "herder.cli.main", *args], capture_output=True,
                          text=True, input=stdin, cwd=cwd, timeout=60)


def test_script_runs_this_herder() -> None:
    text = iallocator_script()
    lines = text.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert lines[-1] == f'exec {os.path.abspath(sys.executable)} -m herder.cli.iallocator "$@"'
    assert iallocator_script("/opt/my python/bin/python").splitlines()[-1] == (
        "exec '/opt/my python/bin/python' -m herder.cli.iallocator \"$@\"")
    assert DEFAULT_IALLOCATOR_DIR == "/usr/lib/ganeti/iallocators"


def test_install_writes_an_executable_script(tmp_path: Path) -> None:
    done = herder("alloc", "install", "--dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    path = tmp_path / "herder"
    assert path.read_text() == iallocator_script()
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["herder"]  # no temporary left
    assert f"installed {path}" in done.stdout
    assert "gnt-cluster modify --default-iallocator herder" in done.stdout
    again = herder("alloc", "install", "--dir", str(tmp_path))
    assert again.returncode == 0
    assert "unchanged" in again.stdout


def test_install_other_name(tmp_path: Path) -> None:
    done = herder("alloc", "install", "--dir", str(tmp_path), "--name", "herder-test")
    assert done.returncode == 0
    assert (tmp_path / "herder-test").read_text() == iallocator_script()
    assert "--default-iallocator herder-test" in done.stdout


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    path = tmp_path / "herder"
    path.write_text("#!/bin/sh\necho other\n")
    done = herder("alloc", "install", "--dir", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "--force" in done.stderr
    assert path.read_text() == "#!/bin/sh\necho other\n"
    forced = herder("alloc", "install", "--dir", str(tmp_path), "--force")
    assert forced.returncode == 0, forced.stderr
    assert path.read_text() == iallocator_script()
    assert stat.S_IMODE(path.stat().st_mode) == 0o755


def test_refuses_to_replace_a_symlink_without_force(tmp_path: Path) -> None:
    # Debian's hail is a symlink to htools: never replaced by accident
    (tmp_path / "htools").write_text("#!/bin/sh\n")
    (tmp_path / "hail").symlink_to("htools")
    done = herder("alloc", "install", "--dir", str(tmp_path), "--name", "hail")
    assert done.returncode == 1
    assert (tmp_path / "hail").is_symlink()
    assert herder("alloc", "install", "--dir", str(tmp_path), "--name", "hail",
                  "--force").returncode == 0
    assert not (tmp_path / "hail").is_symlink()
    assert (tmp_path / "htools").read_text() == "#!/bin/sh\n"


def test_rewrites_a_wrong_mode(tmp_path: Path) -> None:
    path = tmp_path / "herder"
    path.write_text(iallocator_script())
    path.chmod(0o644)
    done = herder("alloc", "install", "--dir", str(tmp_path))
    assert done.returncode == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o755


@pytest.mark.parametrize("name", ["a/b", "..", ""])
def test_bad_name(tmp_path: Path, name: str) -> None:
    done = herder("alloc", "install", "--dir", str(tmp_path), "--name", name)
    assert done.returncode == 1
    assert "invalid iallocator name" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_missing_directory(tmp_path: Path) -> None:
    done = herder("alloc", "install", "--dir", str(tmp_path / "nope"))
    assert done.returncode == 1
    assert done.stderr.startswith("Error: no such directory:")
    assert done.stderr.count("\n") == 1


def test_print_writes_nothing(tmp_path: Path) -> None:
    done = herder("alloc", "install", "--print", "--dir", str(tmp_path))
    assert done.returncode == 0
    assert done.stdout == iallocator_script()
    assert list(tmp_path.iterdir()) == []


def test_help_mentions_install() -> None:
    assert "herder alloc install" in herder("alloc", "--help").stdout
    usage = herder("alloc", "install", "--help").stdout
    assert usage.startswith("Usage: herder alloc install [OPTIONS]")
    assert DEFAULT_IALLOCATOR_DIR in usage


def _installed(tmp_path: Path) -> Path:
    assert herder("alloc", "install", "--dir", str(tmp_path)).returncode == 0
    return tmp_path / "herder"


def test_installed_script_answers_like_herder_alloc(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    script = _installed(tmp_path / "bin")
    req = tmp_path / "ganeti-iallocator.abc123"
    req.write_text(json.dumps(tiny_request()))
    # Ganeti's convention: SCRIPT INPUT_FILE [--param=value...], JSON on stdout; run from /
    # with a bare environment (PYTHONPATH kept only so that a checkout under test is the one run)
    env = {"PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    done = subprocess.run([str(script), str(req)], capture_output=True, text=True, cwd="/",
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["success"] and out["result"] == ["node-b"]
    assert out == json.loads(answer(req.read_bytes(), Options()).to_json())
    # default iallocator parameters come after the file: --key=value and bare --key
    saved = tmp_path / "saved"
    done = subprocess.run([str(script), str(req), "--ignore-soft-errors", f"--save={saved}"],
                          capture_output=True, text=True, cwd="/", timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"] == ["node-b"]
    assert Path(f"{saved}.post-ialloc").is_file()
    # unusable input: exit 1 with a reason, as Ganeti expects from a failed iallocator
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    done = subprocess.run([str(script), str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == "" and done.stderr.strip()


@pytest.mark.skipif(not HTOOLS.is_dir(), reason=f"{HTOOLS} not present")
@pytest.mark.parametrize("name", ["hail-alloc-drbd.json", "hail-node-evac.json",
                                  "hail-reloc-drbd.json", "hail-change-group.json"])
def test_installed_script_on_ganeti_inputs(tmp_path: Path, name: str) -> None:
    script = _installed(tmp_path)
    src = HTOOLS / name
    done = subprocess.run([str(script), str(src)], capture_output=True, text=True, cwd="/",
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(answer(src.read_bytes(), Options()).to_json())


def test_alloc_file_argument_unchanged(tmp_path: Path) -> None:
    """``herder alloc FILE`` and ``herder alloc -`` behave as before; a request file that is
    really called ``install`` is reached as ``./install``."""
    text = json.dumps(tiny_request())
    want = json.loads(answer(text, Options()).to_json())
    (tmp_path / "install").write_text(text)
    assert json.loads(herder("alloc", str(tmp_path / "install")).stdout) == want
    assert json.loads(herder("alloc", "./install", cwd=tmp_path).stdout) == want
    assert json.loads(herder("alloc", "-", stdin=text).stdout) == want
    # the lighter entry point shares the command
    done = subprocess.run([sys.executable, "-m", "herder.cli.iallocator", "-"], input=text,
                          capture_output=True, text=True, timeout=60)
    assert json.loads(done.stdout) == want


def test_the_plain_fast_path_answers_and_fails_exactly_like_the_cli(tmp_path: Path) -> None:
    """`python -m herder.cli.iallocator FILE` skips click for the plain call: same stdout,
    stderr and exit code as `herder alloc FILE` for a good request, an unusable one and a
    missing file."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(tiny_request()))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"request": {"type": "allocate"}}))
    for path in (good, bad, tmp_path / "missing.json"):
        fast = subprocess.run([sys.executable, "-m", "herder.cli.iallocator", str(path)],
                              capture_output=True, text=True, timeout=60)
        cli = herder("alloc", str(path))
        assert (fast.returncode, fast.stdout, fast.stderr) == \
            (cli.returncode, cli.stdout, cli.stderr), path.name
    assert "click" not in subprocess.run(
        [sys.executable, "-c", "import sys, runpy; sys.argv = ['x', '" + str(good) + "'];"
         "\ntry: runpy.run_module('herder.cli.iallocator', run_name='__main__')\n"
         "except SystemExit: pass\nprint(' '.join(m for m in sys.modules if m == 'click'))"],
        capture_output=True, text=True, timeout=60).stdout.split("\n")[-2]
