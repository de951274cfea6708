"""Ganeti's hbal/hspace shell tests against ``herder balance`` / ``herder capacity``.

The cases of a test file run in order (later ones read files earlier ones wrote), once per
module; each case then checks the test's own expectations and the real tools' recorded outcome:
the same moves for hbal, the same instance counts and tiered specs for hspace.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from alloc_support import herder_bin, needs_shared, reference_cases
from shelltests import check_expectations, run, simu_fixtures, to_herder

FILES = ("htools-hbal.test", "htools-balancing.test", "htools-hspace.test",
         "htools-hbal-evac.test", "htools-excl.test", "htools-dynutil.test",
         "htools-multi-group.test")
NO_EQUIVALENT = ("hinfo", "hcheck", "hroller", "hscan", "hsqueeze")
CASES = reference_cases(*FILES)
MOVE = re.compile(r"^\s+\d+\. (\S+)\s+(\S+)\s+=>\s+(\S+)\s+[\d.]+ a=(.*)$", re.M)


def _expand(cmd: str, tmp: Path) -> str:
    cmd = cmd.replace("$BACKEND_BAL_STD", f"-t{tmp}/simu-rebal-merged.standard")
    cmd = cmd.replace("$BACKEND_BAL_TIER", f"-t{tmp}/simu-rebal-merged.tiered")
    cmd = cmd.replace("$BACKEND_DYNU", f"-t {tmp}/simu-onegroup.standard")
    return cmd.replace("$BACKEND_EXCL", f"-t {tmp}/simu-onegroup.standard")


def _skip_reason(rec: dict[str, Any]) -> str | None:
    cmd = rec["cmd"]
    for tool in NO_EQUIVALENT:
        if f"./test/hs/{tool}" in cmd:
            return f"{tool} has no herder equivalent"
    return None


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Any]:
    tmp = tmp_path_factory.mktemp("htools")
    herder = herder_bin()
    simu_fixtures(tmp, herder)
    out: dict[tuple[str, int], Any] = {}
    for rec in CASES:
        if _skip_reason(rec) is None:
            out[(rec["file"], rec["line"])] = run(to_herder(_expand(rec["cmd"], tmp), herder,
                                                           tmp))
    return out


def _moves(text: str) -> list[tuple[str, str, str]]:
    return [(m.group(1), m.group(3), m.group(4).strip()) for m in MOVE.finditer(text)]


@needs_shared
@pytest.mark.parametrize("rec", CASES, ids=[f"{r['file'][7:-5]}-line{r['line']}" for r in CASES])
def test_htools_case(rec: dict[str, Any], results: dict[tuple[str, int], Any]) -> None:
    reason = _skip_reason(rec)
    if reason:
        pytest.skip(reason)
    proc = results[(rec["file"], rec["line"])]
    check_expectations(rec, proc)
    assert (proc.returncode == 0) == (rec["rc"] == 0), proc.stderr
    ref = rec["out"]
    if "./test/hs/hbal" in rec["cmd"] and "Solution length=" in ref:
        assert _moves(proc.stdout) == _moves(ref)
        for key in ("Solution length=", "Initial check done:", "Group size"):
            line = next((ln for ln in ref.splitlines() if ln.startswith(key)), None)
            if line is not None:
                assert line in proc.stdout.splitlines()
    if "./test/hs/hspace" in rec["cmd"]:
        for key in ("HTS_TSPEC=", "HTS_ALLOC_INSTANCES=", "HTS_TRL_INST_CNT="):
            line = next((ln for ln in ref.splitlines() if ln.startswith(key)), None)
            if line is not None:
                assert line in proc.stdout.splitlines()
        for pat in (r"\d+ instances allocated", r"\d+ instances of spec .*"):
            assert re.findall(pat, proc.stdout) == re.findall(pat, ref)
