"""core.qfilter: Ganeti's query filters in their list form (ganeti.qlang's structure)."""

from __future__ import annotations

import pytest

from herder.core import qfilter

ROW = {"name": "web1.example.com", "pinst_cnt": 3, "tags": ["a", "b"], "offline": False,
       "ratio": 0.5}


@pytest.mark.parametrize(("expression", "expected"), [
    (["=", "name", "web1.example.com"], True),
    (["==", "pinst_cnt", 3], True),
    (["!=", "pinst_cnt", 3], False),
    (["<", "pinst_cnt", 4], True),
    ([">=", "ratio", 0.5], True),
    (["<", "name", 4], False),  # a text and a number do not compare: the row does not match
    (["=~", "name", "^web"], True),
    (["=~", "pinst_cnt", "3"], False),  # a regular expression matches texts only
    (["=[]", "tags", "b"], True),
    (["=[]", "name", "example"], True),
    (["?", "offline"], False),
    (["?", "tags"], True),
    (["!", ["?", "offline"]], True),
    (["&", ["=~", "name", "^web"], [">", "pinst_cnt", 0]], True),
    (["|", ["=", "name", "x"], ["=", "name", "y"]], False),
    (["&"], True),
    (["|"], False),
    (["=", "missing", None], False),  # a field the row lacks never matches
    (["!=", "missing", 1], False),
])
def test_operators(expression: list[object], expected: bool) -> None:
    assert qfilter.compile_filter(expression)(ROW) is expected


@pytest.mark.parametrize(("expression", "message"), [
    ([], "Invalid filter on level 0"),
    ("name", "Invalid filter on level 0"),
    (["~", "name", "x"], "Unknown operator '~'"),
    (["=", "name"], "expected exactly two operands"),
    (["?", "name", "x"], "expects exactly one operand"),
    (["=~", "name", "("], "Invalid regex pattern"),
    (["=~", "name", 3], "needs a regular expression"),
    (["=", 3, 3], "a field name must be a text"),
    (["&", ["|", ["&", ["|", ["&", ["|", ["&", ["|", ["&", ["|", ["?", "x"]]]]]]]]]]],
     "Only up to 10 levels"),
])
def test_refused_when_checked(expression: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        qfilter.check(expression)


def test_fields_and_value_map() -> None:
    with pytest.raises(ValueError, match="Unknown field 'name' \\(known: id\\)"):
        qfilter.check(["=", "name", "x"], frozenset({"id"}))
    newer = qfilter.compile_filter([">", "id", "watermark"], frozenset({"id"}),
                                   lambda value: 10 if value == "watermark" else value)
    assert newer({"id": 11}) and not newer({"id": 10})
