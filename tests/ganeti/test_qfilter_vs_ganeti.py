"""core.qfilter against Ganeti 3.0.2's own query filter compiler (`query._CompileFilter`, run
with Debian's python3 on the peers' unpacked library): the same filters over the same rows give
the same answers, and the same filters are refused. Rows and filters are generated from a fixed
seed with values of the fields' own types (Ganeti checks a value against its field's type; for
job filter rules herder compares what it finds, core.qfilter's docstring).
Skips when Ganeti's code (/tmp/groot) is absent.
"""

from __future__ import annotations

import json
import random
import subprocess
from typing import Any

import pytest

from herder.core import qfilter
from tests.noded.bdev import harness

pytestmark = pytest.mark.peer

# field -> Ganeti's kind (query.QFT_*)
FIELDS = {"a": "number", "b": "number", "s": "text", "t": "text", "l": "other", "f": "bool"}

GANETI = """
import json, sys
from ganeti import query, objects, errors
fields = {}
for name, kind in json.loads(sys.argv[1]).items():
    fdef = objects.QueryFieldDefinition(name=name, title=name.upper(), kind=kind, doc=name)
    fields[name] = (fdef, None, 0, (lambda n: lambda ctx, item: item[n])(name))
cases = json.load(sys.stdin)
out = []
for expression, rows in cases:
    try:
        fn = query._CompileFilter(fields, None, expression)
    except errors.ParameterError as err:
        out.append("refused")
        continue
    out.append([bool(fn(None, row)) for row in rows])
json.dump(out, sys.stdout)
"""


def _value(rng: random.Random, field: str) -> Any:
    kind = FIELDS[field]
    if kind == "number":
        return rng.randint(-3, 3)
    if kind == "text":
        return rng.choice(["web1", "web2", "db1", "", "Web"])
    if kind == "bool":
        return rng.random() < 0.5
    return rng.sample([1, 2, 3, "x"], rng.randint(0, 3))


def _row(rng: random.Random) -> dict[str, Any]:
    return {name: _value(rng, name) for name in FIELDS}


def _filter(rng: random.Random, depth: int = 0) -> list[Any]:
    if depth < 3 and rng.random() < 0.4:
        op = rng.choice(["&", "|", "!"])
        if op == "!":
            return ["!", _filter(rng, depth + 1)]
        return [op, *(_filter(rng, depth + 1) for _ in range(rng.randint(0, 3)))]
    field = rng.choice(list(FIELDS))
    kind = FIELDS[field]
    if rng.random() < 0.15:
        return ["?", field]
    if kind == "number":
        return [rng.choice(["=", "==", "!=", "<", "<=", ">", ">="]), field, rng.randint(-3, 3)]
    if kind == "text":
        op = rng.choice(["=", "!=", "<", ">=", "=~"])
        value = rng.choice(["^web", "1$", "b", "^$", "[Ww]eb"]) if op == "=~" else \
            _value(rng, field)
        return [op, field, value]
    if kind == "bool":
        return [rng.choice(["=", "!="]), field, rng.random() < 0.5]
    return ["=[]", field, rng.choice([1, 2, "x", 9])]


def _nested(levels: int) -> list[Any]:
    expression: list[Any] = ["?", "a"]
    for _ in range(levels):
        expression = ["&", expression]
    return expression


REFUSED = [[], ["~", "a", 1], ["=", "a"], ["?", "a", "b"], ["=~", "s", "("], ["=", "zz", 1],
           _nested(10)]


def test_the_same_answers_and_refusals_as_ganeti() -> None:
    if not harness.ganeti_available():
        pytest.skip("Ganeti 3.0.2 from ../shared/peers (/tmp/groot) is absent")
    rng = random.Random(32)
    rows = [_row(rng) for _ in range(12)]
    filters = [_filter(rng) for _ in range(400)] + REFUSED
    proc = subprocess.run([str(harness.DEBIAN_PYTHON), "-c", GANETI, json.dumps(FIELDS)],
                          input=json.dumps([[f, rows] for f in filters]),
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(harness.GROOT)},
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"Ganeti's compiler did not run: {proc.stderr[-2000:]}"
    ganeti = json.loads(proc.stdout)
    matched = 0
    for expression, theirs in zip(filters, ganeti, strict=True):
        try:
            predicate = qfilter.compile_filter(expression, frozenset(FIELDS))
        except ValueError:
            assert theirs == "refused", expression
            continue
        ours = [predicate(row) for row in rows]
        assert ours == theirs, (expression, rows)
        matched += sum(ours)
    assert ganeti[-len(REFUSED):] == ["refused"] * len(REFUSED)
    assert 0 < matched < 400 * len(rows)  # the filters were neither all true nor all false
