"""The allocator answers Ganeti's synthetic requests (`gen_cluster.py`, 12 to 3,000 nodes) as
it did before its 10,000-node work (issue 36, goal 3): the same bytes as recorded then."""

from __future__ import annotations

import json

import pytest
from gen_answers import CASES, GEN_CLUSTER, RECORDED, answer, case_key, generator, request_of

pytestmark = pytest.mark.skipif(not GEN_CLUSTER.exists(), reason=f"{GEN_CLUSTER} not present")


@pytest.mark.parametrize("case", CASES, ids=case_key)
def test_same_answer_as_recorded(case: tuple[int, int, str, str, int]) -> None:
    recorded = json.loads(RECORDED.read_text())[case_key(case)]
    got = answer(request_of(generator(), case))
    assert json.loads(got)["success"] is True
    assert got == recorded
