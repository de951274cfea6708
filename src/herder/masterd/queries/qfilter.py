"""Ganeti's query filters (`qfilter` of `/2/query`, the list form `core.qlang` parses a
filter's text into) checked against a resource's field definitions and evaluated on its rows.

The semantics are those of Ganeti 3.0's query server (luxid), which answers Ganeti's
`/2/query` and `gnt-* list` (tests/ganeti compare with its answers and with Ganeti's Python
query code, `query._CompileFilter`):

- `["&", F...]` all hold (none: true), `["|", F...]` one holds (none: false), `["!", F]`;
  `["?", FIELD]` a boolean field is true; `[OP, FIELD, VALUE]` with `==` (`=`), `!=`, `<`,
  `<=`, `>`, `>=` (texts with texts, numbers with numbers), `=~` (a regular expression found
  in a text), `=[]` (a list holds the value);
- on a host name field (node and instance names, an instance's primary node) `==` and `!=`
  match by leading components: `node1` and `node1.example` match `node1.example.com`;
- a job's `[seconds, microseconds]` timestamps compare with a number of seconds;
- a condition on a value the answer does not have (a live figure of an offline node: status
  not normal) holds, as in Ganeti (`mfree > 1024` keeps an offline node; `not (...)` drops it);
- values are texts and integers (an integral JSON float is its integer); `true`, `null`,
  lists and fractions are refused, as Ganeti refuses them.

Every problem Ganeti finds is an error here too, named in one line (`FilterError`, a 400 on
the wire): a malformed filter, an unknown operator or field, a value of another type than the
field's, a bad regular expression, nesting deeper than 10 levels. Ganeti finds some of them
only on a row that has the value (and answers 500); herder refuses what the field's kind
rules out before looking at any row, and what only a value tells (a field of kind `other`)
on the first row that shows it.

A filter that is only names (`["|", ["==", "name", N]...]`, Ganeti's "requested names") asks
for those objects: in the order named, each named object once per mention, and an unknown
name is an error, as in Ganeti (`compiled.names`).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from herder.core import names
from herder.core.errors import HerderError
from herder.masterd import livefields
from herder.masterd.queries.fields import BOOL, NUMBER, OTHER, TEXT, TIMESTAMP, UNIT, FieldDef

LEVELS_MAX = 10  # Ganeti's _FilterCompilerHelper._LEVELS_MAX

Row = Mapping[str, livefields.Result]
Test = Callable[[Row], bool]

ORDERINGS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
EQUALITIES = ("==", "=", "!=")
BINARY = (*EQUALITIES, *ORDERINGS, "=~", "=[]")
OPERATORS = ("&", "|", "!", "?", *BINARY)
NUMERIC_KINDS = frozenset({NUMBER, UNIT, TIMESTAMP, "float"})


class FilterError(HerderError):
    """A query filter Ganeti would refuse; the message names the problem."""


@dataclass(frozen=True)
class Compiled:
    test: Test
    fields: frozenset[str]  # the fields the filter reads
    names: list[Any] | None  # the objects it names (None: it selects by other fields)


def _json(value: object) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= 80 else f"{text[:77]}..."


def compile_filter(qfilter: object, table: Mapping[str, FieldDef],
                   name_field: str = "name") -> Compiled:
    """The checked filter; FilterError names the first problem."""
    builder = _Builder(table)
    test = builder.build(qfilter, 0)
    return Compiled(test, frozenset(builder.used), _requested_names(qfilter, name_field))


def _requested_names(qfilter: object, name_field: str) -> list[Any] | None:
    """The names of a filter that is an `|` of `==` on the name field (or one such `==`),
    as Ganeti's _FilterHints finds them; None for any other filter."""
    if not isinstance(qfilter, list) or not qfilter:
        return None
    if qfilter[0] == "|":
        names: list[Any] = []
        for part in qfilter[1:]:
            found = _requested_names(part, name_field)
            if found is None:
                return None
            names.extend(found)
        return names
    if qfilter[0] in ("==", "=") and len(qfilter) == 3 and qfilter[1] == name_field:
        return [qfilter[2]]
    return None


def _value(value: object) -> str | int:
    """A binary operator's value: a text or an integer, as Ganeti reads one."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise FilterError(f"Cannot read filter value {_json(value)}: expecting a text or an "
                      "integer")


class _Builder:
    def __init__(self, table: Mapping[str, FieldDef]) -> None:
        self.table = table
        self.used: set[str] = set()

    def build(self, qfilter: object, level: int) -> Test:
        if not isinstance(qfilter, list) or not qfilter:
            raise FilterError(f"Invalid filter on level {level}: {_json(qfilter)} is not "
                              "[operator, operand...]")
        if level >= LEVELS_MAX:
            raise FilterError(f"Only up to {LEVELS_MAX} levels are allowed (filter nested "
                              "too deep)")
        op, operands = qfilter[0], qfilter[1:]
        if not isinstance(op, str) or op not in OPERATORS:
            raise FilterError(f"Unknown operator {_json(op)} (known: {' '.join(OPERATORS)})")
        if op in ("&", "|"):
            parts = [self.build(part, level + 1) for part in operands]
            combine = all if op == "&" else any
            # every part is evaluated (no short cut): an error shows whatever came first
            return lambda row: combine([part(row) for part in parts])
        if op in ("!", "?"):
            if len(operands) != 1:
                raise FilterError(f"Unary operator '{op}' expects exactly one operand")
            if op == "!":
                inner = self.build(operands[0], level + 1)
                return lambda row: not inner(row)
            return self._true(operands[0])
        if len(operands) != 2:
            raise FilterError(f"Invalid binary operator '{op}', expected exactly two "
                              "operands (a field and a value)")
        name = self._field(operands[0])
        return _binary(op, name, self.table[name], _value(operands[1]))

    def _field(self, name: object) -> str:
        if not isinstance(name, str):
            raise FilterError(f"A field name must be a text, not {_json(name)}")
        if name not in self.table:
            raise FilterError(f"Unknown field '{name}'")
        self.used.add(name)
        return name

    def _true(self, operand: object) -> Test:
        name = self._field(operand)
        kind = self.table[name].kind
        if kind not in (BOOL, OTHER):
            raise FilterError(f"Field '{name}' (type '{kind}') cannot be used in boolean "
                              "context")

        def test(row: Row) -> bool:
            status, value = row[name]
            if status != livefields.RS_NORMAL:
                return True
            if not isinstance(value, bool):
                raise FilterError(f"Unexpected value '{_json(value)}' of field '{name}' in "
                                  "boolean context")
            return value

        return test


def _binary(op: str, name: str, field: FieldDef, value: str | int) -> Test:
    kind = field.kind
    if op == "=~":
        return _regexp(name, kind, value)
    if op == "=[]":
        if kind != OTHER:
            raise FilterError(f"Unable to look for {_json(value)} in field '{name}' (type "
                              f"'{kind}'): it is not a list")
        return _holds(name, value)
    if field.split_timestamp:
        if isinstance(value, str):
            raise FilterError(f"Unable to compare field '{name}' (a timestamp) with a text")
    elif kind == BOOL or (kind == TEXT and not isinstance(value, str)) or (
            kind in NUMERIC_KINDS and isinstance(value, str)):
        raise FilterError(f"Unable to compare field '{name}' (type '{kind}') with "
                          f"'{type(value).__name__}'")
    compare = _equality(op, field, value) if op in EQUALITIES else ORDERINGS[op]
    merge = field.split_timestamp

    def test(row: Row) -> bool:
        status, found = row[name]
        if status != livefields.RS_NORMAL:
            return True
        if merge:
            found = _merged_time(name, found)
        elif not _comparable(found, value):
            raise FilterError(f"Invalid types in comparison, trying to compare field "
                              f"'{name}' {_json(found)} with {_json(value)}")
        return compare(found, value)

    return test


def _equality(op: str, field: FieldDef, value: str | int) -> Callable[[object, object], bool]:
    by_name = field.hostname and isinstance(value, str)  # (`rhs` below is `value`)
    wanted = op != "!="

    def compare(lhs: object, rhs: object) -> bool:
        same = _name_match(lhs, rhs) if by_name and isinstance(rhs, str) else lhs == rhs
        return bool(same) is wanted

    return compare


def _name_match(found: object, wanted: str) -> bool:
    """A host name and a name given for it: the same, or its leading components
    (Ganeti's MatchNameComponent, case-sensitive as Ganeti 3.0's server)."""
    return isinstance(found, str) and names.matches_component(wanted, found)


def _comparable(found: object, value: str | int) -> bool:
    if isinstance(value, str):
        return isinstance(found, str)
    return isinstance(found, int | float) and not isinstance(found, bool)


def _merged_time(name: str, found: object) -> float:
    if (isinstance(found, list) and len(found) == 2
            and all(isinstance(part, int) for part in found)):
        return found[0] + found[1] / 1e6
    raise FilterError(f"Field '{name}' holds {_json(found)}, not a [seconds, microseconds] "
                      "timestamp")


def _regexp(name: str, kind: str, pattern: str | int) -> Test:
    if not isinstance(pattern, str):
        raise FilterError(f"'=~' needs a regular expression (a text), not {_json(pattern)}")
    if kind not in (TEXT, OTHER):
        raise FilterError(f"Unable to match field '{name}' (type '{kind}') with a regular "
                          "expression: it is not a text")
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise FilterError(f"Invalid regex pattern ({err})") from None

    def test(row: Row) -> bool:
        status, found = row[name]
        if status != livefields.RS_NORMAL:
            return True
        if not isinstance(found, str):
            raise FilterError(f"Invalid field value used in regexp matching, expecting string "
                              f"but got '{_json(found)}' (field '{name}')")
        return compiled.search(found) is not None

    return test


def _holds(name: str, value: str | int) -> Test:
    def test(row: Row) -> bool:
        status, found = row[name]
        if status != livefields.RS_NORMAL:
            return True
        if not isinstance(found, list) or not all(_comparable(item, value) for item in found):
            raise FilterError(f"Field '{name}' holds {_json(found)}, not a list of values "
                              f"like {_json(value)}")
        return value in found

    return test
