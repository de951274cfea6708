"""Ganeti's query filters in their list form (`ganeti.qlang`'s structure), checked once and
evaluated against a row's fields.

A filter is a JSON list whose first item is the operator:

- logic: `["&", F...]` (all hold; none given: true), `["|", F...]` (one holds; none: false),
  `["!", F]`;
- `["?", FIELD]`: the field's value is true (Python's truth, as Ganeti's `operator.truth`);
- binary, `[OP, FIELD, VALUE]`: `=` and `==` (equal), `!=`, `<`, `<=`, `>`, `>=`, `=~` (the
  value a regular expression that matches somewhere in the field's text, `re.search`),
  `=[]` (the field's list, or text, contains the value).

As Ganeti's `query._FilterCompilerHelper`: unknown operators, a wrong number of operands, a
bad regular expression or nesting deeper than 10 levels are refused when the filter is checked
(`compile_filter`, a `ValueError` naming the problem), never when it is evaluated. Where Ganeti
checks the value against the field's declared type, a filter over fields without declared
types (job filter rules: an opcode's parameters, a reason trail's entries) compares what it
finds: a field the row lacks, or an ordering or a regular expression between values that do not
compare (a number and a text, a list), does not hold; it never raises.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

LEVELS_MAX = 10  # Ganeti's _FilterCompilerHelper._LEVELS_MAX

LOGIC = {"&": all, "|": any}
UNARY = ("!", "?")
EQUALITY = ("=", "==", "!=")
ORDERING: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
OTHER_BINARY = ("=~", "=[]")
OPERATORS = (*LOGIC, *UNARY, *EQUALITY, *ORDERING, *OTHER_BINARY)

# A row: field name -> value; a field the row lacks is absent (never None-for-missing).
Row = Mapping[str, Any]
Predicate = Callable[[Row], bool]
# What a binary operator's value becomes before it is compared (job filter rules replace the
# text "watermark" with the rule's watermark)
ValueMap = Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


def compile_filter(qfilter: Any, fields: frozenset[str] | None = None,
                   value_map: ValueMap = _same) -> Predicate:
    """The predicate of `qfilter`, checked; `fields`: the only field names it may use (None:
    any). ValueError names the first problem."""
    return _compile(qfilter, 0, fields, value_map)


def check(qfilter: Any, fields: frozenset[str] | None = None) -> None:
    """Refuse a filter `compile_filter` would refuse."""
    compile_filter(qfilter, fields)


def _compile(qfilter: Any, level: int, fields: frozenset[str] | None,
             value_map: ValueMap) -> Predicate:
    if not isinstance(qfilter, list) or not qfilter:
        raise ValueError(f"Invalid filter on level {level}: {_short(qfilter)}")
    if level >= LEVELS_MAX:
        raise ValueError(f"Only up to {LEVELS_MAX} levels are allowed (filter nested too deep)")
    op, operands = qfilter[0], qfilter[1:]
    if not isinstance(op, str) or op not in OPERATORS:
        raise ValueError(f"Unknown operator {_short(op)} (known: {' '.join(OPERATORS)})")
    if op in LOGIC:
        combine = LOGIC[op]
        inner = [_compile(part, level + 1, fields, value_map) for part in operands]
        return lambda row: combine(p(row) for p in inner)
    if op in UNARY:
        if len(operands) != 1:
            raise ValueError(f"Unary operator '{op}' expects exactly one operand")
        if op == "!":
            negated = _compile(operands[0], level + 1, fields, value_map)
            return lambda row: not negated(row)
        name = _field(operands[0], fields)
        return lambda row: bool(row.get(name))
    if len(operands) != 2:
        raise ValueError(f"Invalid binary operator '{op}', expected exactly two operands")
    name = _field(operands[0], fields)
    return _binary(op, name, value_map(operands[1]))


def _field(name: Any, fields: frozenset[str] | None) -> str:
    if not isinstance(name, str):
        raise ValueError(f"a field name must be a text, got {_short(name)}")
    if fields is not None and name not in fields:
        raise ValueError(f"Unknown field '{name}' (known: {', '.join(sorted(fields))})")
    return name


def _binary(op: str, name: str, value: Any) -> Predicate:
    if op in EQUALITY:
        wanted = op != "!="
        return lambda row: name in row and (row[name] == value) is wanted
    if op in ORDERING:
        compare = ORDERING[op]
        return lambda row: name in row and _ordered(compare, row[name], value)
    if op == "=~":
        if not isinstance(value, str):
            raise ValueError(f"'=~' needs a regular expression (a text), got {_short(value)}")
        try:
            pattern = re.compile(value)
        except re.error as err:
            raise ValueError(f"Invalid regex pattern ({err})") from None
        return lambda row: isinstance(row.get(name), str) and pattern.search(row[name]) is not None
    return lambda row: _contains(row.get(name), value)


def _ordered(compare: Callable[[Any, Any], bool], lhs: Any, rhs: Any) -> bool:
    numbers = (int, float)
    if isinstance(lhs, bool) or isinstance(rhs, bool):
        return False
    if isinstance(lhs, numbers) and isinstance(rhs, numbers):
        return compare(lhs, rhs)
    if isinstance(lhs, str) and isinstance(rhs, str):
        return compare(lhs, rhs)
    return False


def _contains(container: Any, value: Any) -> bool:
    if isinstance(container, list):
        return value in container
    if isinstance(container, str) and isinstance(value, str):
        return value in container
    return False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
