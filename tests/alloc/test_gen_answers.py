"""The allocator answers Ganeti's synthetic requests (`gen_cluster.py`, 12 to 3,000 nodes) as
it did before its 10,000-node work (issue 36, goal 3): the same bytes as recorded then."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from alloc_support import herder_bin
from gen_answers import CASES, GEN_CLUSTER, RECORDED, answer, case_key, generator, request_of

from herder.cli.alloc import LEFT_AT_EXIT

pytestmark = pytest.mark.skipif(not GEN_CLUSTER.exists(), reason=f"{GEN_CLUSTER} not present")


@pytest.mark.parametrize("case", CASES, ids=case_key)
def test_same_answer_as_recorded(case: tuple[int, int, str, str, int]) -> None:
    recorded = json.loads(RECORDED.read_text())[case_key(case)]
    got = answer(request_of(generator(), case))
    assert json.loads(got)["success"] is True
    assert got == recorded


def test_the_command_answers_a_big_request_the_same(tmp_path: Path) -> None:
    """`herder alloc` itself on 30,000 instances (a model it leaves to the OS at its end)."""
    case = next(c for c in CASES if c[0] * 10 >= LEFT_AT_EXIT)
    request = tmp_path / "request.json"
    request.write_bytes(request_of(generator(), case))
    done = subprocess.run([herder_bin(), "alloc", str(request)], capture_output=True,
                          text=True, timeout=300, check=True)
    assert done.stdout.rstrip("\n") == json.loads(RECORDED.read_text())[case_key(case)]
    assert done.stderr == ""
