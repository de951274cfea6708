"""Run recorded Ganeti shell-test cases against herder's CLIs (helper, not a test module)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from alloc_support import HTOOLS

TOOLS = {"hail": "alloc", "hbal": "balance", "hspace": "capacity"}


def make_fixtures(tmp: Path) -> None:
    """The derived inputs Ganeti's offline-test.sh writes into $T."""
    for name in ("hail-alloc-drbd.json", "hail-reloc-drbd.json", "hail-node-evac.json",
                 "hail-change-group.json", "hail-alloc-twodisks.json",
                 "hail-alloc-invalid-twodisks.json", "hail-alloc-spindles.json"):
        text = (HTOOLS / name).read_text()
        excl = text.replace('"exclusive_storage": false', '"exclusive_storage": true')
        (tmp / f"{name}.excl-stor").write_text(excl)
        (tmp / f"{name}.fail-excl-stor").write_text(re.sub(r'"spindles": \d+,', "", excl))
    evac = re.sub(r'"spindles": \d+,', "", (HTOOLS / "hail-node-evac.json").read_text())
    for mode in ("primary-only", "secondary-only", "all"):
        (tmp / f"hail-node-evac.json.{mode}").write_text(
            evac.replace('"evac_mode": "all"', f'"evac_mode": "{mode}"'))


def to_herder(cmd: str, herder: str, tmp: Path) -> str:
    cmd = cmd.replace("$TESTDATA_DIR", str(HTOOLS)).replace("$T/", f"{tmp}/")
    for tool, sub in TOOLS.items():
        cmd = cmd.replace(f"./test/hs/{tool}", f"{herder} {sub}")
    return cmd


def run(cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)


def check_expectations(rec: dict[str, Any], proc: subprocess.CompletedProcess[str]) -> None:
    """What shelltestrunner checks: stdout/stderr patterns and the exit code."""
    for key, text in (("exp_out", proc.stdout), ("exp_err", proc.stderr)):
        exp = rec[key]
        if not exp:
            continue
        kind, pat = exp
        if kind == "re":
            assert re.search(pat, text, re.M), f"{key} /{pat}/ not in {text!r}"
        elif kind == "nre":
            assert not re.search(pat, text, re.M), f"{key} /{pat}/ unexpectedly in {text!r}"
        else:
            assert text.strip() == pat.strip(), f"{key} {text!r} != {pat!r}"
    exp_rc = str(rec["exp_rc"])
    if exp_rc.startswith("!"):
        assert proc.returncode != int(exp_rc[1:]), proc.stderr
    else:
        assert proc.returncode == int(exp_rc), proc.stderr


def simu_fixtures(tmp: Path, herder: str) -> None:
    """What Ganeti's offline-test.sh writes with hspace -S, written by herder capacity -S."""
    cap = f"{herder} capacity"
    cmds = [
        f"{cap} --simu p,4,8T,64g,16 -S {tmp}/simu-onegroup --disk-template drbd -l 8",
        f"{cap} --simu p,4,8T,64g,16 --simu p,4,8T,64g,16 -S {tmp}/simu-twogroups "
        "--disk-template drbd -l 8",
        f"{cap} --simu u,4,8T,64g,16 --simu p,4,8T,64g,16 -S {tmp}/simu-rebal-orig "
        "--disk-template drbd -l 8",
    ]
    for cmd in cmds:
        subprocess.run(["bash", "-c", cmd + " >/dev/null"], check=True, timeout=120)
    for suffix in ("standard", "tiered"):
        text = (tmp / f"simu-rebal-orig.{suffix}").read_text()
        text = re.sub(r"^(node-.*|fake-uuid-)-02(|.*)$", r"\1-01\2", text, flags=re.M)
        (tmp / f"simu-rebal-merged.{suffix}").write_text(text)
