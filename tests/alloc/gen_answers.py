"""The answers of `herder alloc` to Ganeti's synthetic requests (`gen_cluster.py`), recorded
before the allocator's 10,000-node work (issue 36, goal 3) so that its answers can be shown
unchanged: `test_gen_answers.py` compares, this module records (`python gen_answers.py`)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from alloc_support import SHARED

GEN_CLUSTER = SHARED / "peers" / "gen_cluster.py"
RECORDED = Path(__file__).resolve().parent / "data" / "gen_cluster_answers.json"

# (nodes, groups, template, request, seed): small to 3,000 nodes, one and several groups
CASES: list[tuple[int, int, str, str, int]] = [
    (nodes, groups, template, request, seed)
    for nodes, groups, seed in ((12, 1, 1), (60, 3, 2), (400, 1, 3), (400, 4, 4))
    for template, request in itertools.product(("drbd", "plain"),
                                               ("allocate", "relocate", "multi-allocate"))
    if (template, request) != ("plain", "relocate")  # gen_cluster relocates DRBD only
] + [(3000, 2, "drbd", "allocate", 5), (3000, 1, "drbd", "relocate", 6)]


def case_key(case: tuple[int, int, str, str, int]) -> str:
    return "n{}-g{}-{}-{}-s{}".format(*case)


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_cluster", GEN_CLUSTER)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def request_of(gen: ModuleType, case: tuple[int, int, str, str, int]) -> bytes:
    nodes, groups, template, request, seed = case
    data: dict[str, Any] = gen.build(nodes, nodes * 10, groups, template, request, seed)
    return json.dumps(data).encode()


def answer(data: bytes) -> str:
    """`herder alloc`'s answer (its standard output) to a request, in this process."""
    from herder.alloc import answer_message
    from herder.alloc.protocol import Options, build_cluster, parse_message

    opts = Options()
    msg = parse_message(data)
    return answer_message(msg, opts, build_cluster(msg, opts)).to_json()


def main() -> int:
    gen = generator()
    answers = {case_key(c): answer(request_of(gen, c)) for c in CASES}
    RECORDED.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    print(f"{len(answers)} answers -> {RECORDED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
