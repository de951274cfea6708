"""The CLI lists' rows decoded in one pass (`remote.decode_query_answer`) and their table made
column by column (`listing.format_answer`): the same answer and the same lines as decoding
generically and formatting cell by cell (Ganeti's `FormatQueryResult`, as herder printed it
before), for missing values of every status, units, booleans, separators, -v, no headers, and
a value nested deeper than the one-pass type takes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from herder.cli import instance, listing, node, remote
from herder.core import rapi
from herder.core.http_pool import Answer

FIELDS = [{"name": "name", "title": "Node", "kind": "text"},
          {"name": "mtotal", "title": "MTotal", "kind": "unit"},
          {"name": "master_candidate", "title": "MasterC", "kind": "bool"},
          {"name": "pinst_cnt", "title": "Pinst", "kind": "number"},
          {"name": "tags", "title": "Tags", "kind": "other"},
          {"name": "ndparams", "title": "NDParams", "kind": "other"}]


def rows(deep: bool) -> list[list[list[Any]]]:
    made = []
    for n in range(12):
        status = n % 5  # 0 normal, 1 unknown, 2 nodata, 3 unavail, 4 offline
        made.append([[0, f"node{n}.example.com"], [status, 1024 * n * n if not status else None],
                     [0, n % 2 == 0], [0, n * 7], [0, [f"t{n}", "x"]],
                     [0, {"a": {"b": [1, {"c": n}]}} if deep and n == 3 else {"spindles": n}]])
    made.append([[0, "empty.example.com"], [0, 0], [0, False], [7, None], [0, []], [0, {}]])
    return made


def reference_cell(column: listing.Column, result: Sequence[Any], verbose: bool) -> str:
    status, value = result
    if status == listing.RS_NORMAL:
        return column.format(value)
    texts = listing.STATUS_TEXTS.get(status, ("(unknown)", "??"))
    return texts[0] if verbose else texts[1]


def reference(answer: remote.QueryAnswer, spec: listing.ListSpec, *, units: str | None,
              separator: str | None, header: bool, verbose: bool) -> list[str]:
    """The lines as the CLI made them cell by cell."""
    chosen = units or ("m" if separator else "h")
    columns = [listing._column(d, spec, chosen) for d in answer.fields]
    cells = [[reference_cell(c, r, verbose) for c, r in zip(columns, row, strict=True)]
             for row in answer.data]
    return listing.format_table(cells, columns, header, separator)


@pytest.mark.parametrize("deep", [False, True])
def test_one_pass_decoding_gives_the_generic_answer(deep: bool) -> None:
    content = json.dumps({"fields": FIELDS, "data": rows(deep)}).encode()
    fast = remote.decode_query_answer("PUT", "/2/query/node",
                                      Answer(200, "OK", "application/json", content))
    generic = msgspec.convert(rapi.parse_answer("PUT", "/x", 200, "OK", content),
                              remote.QueryAnswer)
    assert [list(map(list, row)) for row in fast.data] == \
        [list(map(list, row)) for row in generic.data] == rows(deep)
    assert fast.fields == generic.fields


def test_an_error_answer_or_no_query_answer_is_refused() -> None:
    with pytest.raises(rapi.RapiError, match="500"):
        remote.decode_query_answer("PUT", "/x", Answer(500, "Oops", "text/plain", b"broken"))
    with pytest.raises(rapi.RapiError, match="not JSON"):
        remote.decode_query_answer("PUT", "/x", Answer(200, "OK", "", b"{nope"))
    with pytest.raises(msgspec.ValidationError):
        remote.decode_query_answer("PUT", "/x", Answer(200, "OK", "", b'{"fields": 3}'))


@pytest.mark.parametrize("units", [None, "m", "g"])
@pytest.mark.parametrize("separator", [None, "|"])
@pytest.mark.parametrize("header", [True, False])
@pytest.mark.parametrize("verbose", [False, True])
def test_the_table_made_by_column_is_the_table_made_by_cell(
        units: str | None, separator: str | None, header: bool, verbose: bool) -> None:
    answer = msgspec.convert({"fields": FIELDS, "data": rows(True)}, remote.QueryAnswer)
    for spec in (node.LIST, instance.LIST):
        options = {"units": units, "separator": separator, "header": header,
                   "verbose": verbose}
        assert listing.format_answer(answer, spec, **options) == \
            reference(answer, spec, **options)
    empty = remote.QueryAnswer(fields=answer.fields, data=[])
    assert listing.format_answer(empty, node.LIST, **options) == \
        reference(empty, node.LIST, **options)
    one = remote.QueryAnswer(fields=answer.fields[:1], data=[row[:1] for row in answer.data])
    assert listing.format_answer(one, node.LIST, **options) == \
        reference(one, node.LIST, **options)
