"""Ganeti's lists (`gnt-node list`, `gnt-instance list`, ...) for herder's list commands: the
options (`-o FIELDS` and `-o +FIELDS`, `-F/--filter`, `--no-headers`, `--separator`,
`--units`, `-v`), the rows from masterd's query resource (`PUT /2/query/RESOURCE` with the
fields and the filter: `masterd.rapi.query`), and the table as Ganeti's `cli.FormatQueryResult`
prints it: titles for headers, unit fields in the chosen units (`h`uman without a
separator, MiB with one), numbers right-aligned, `Y`/`N`, each list command's own formats
(Ganeti's format overrides), `-`/`*`/`?`/`??` for a value the answer does not have, a warning
and exit code 14 for an unknown field. `list-fields` prints Ganeti's field table.

Arguments are names (globs `*.site` too) or, with `-F` or when one argument reads as one, a
filter in Ganeti's query language (`core.qlang`). `--json` (herder's) prints the rows as
objects by field name (null where the answer has no value).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from herder.cli import remote
from herder.cli.common import many_rows

EXIT_UNKNOWN_FIELD = 14  # Ganeti's constants.EXIT_UNKNOWN_FIELD
RS_NORMAL, RS_UNKNOWN = 0, 1
# a result status's text (Ganeti's RSS_DESCRIPTION): (with -v, without)
STATUS_TEXTS = {1: ("(unknown)", "??"), 2: ("(nodata)", "?"), 3: ("(unavail)", "-"),
                4: ("(offline)", "*")}
KIND_NAMES = {"unknown": "Unknown", "text": "Text", "bool": "Boolean", "number": "Number",
              "float": "Floating-point number", "unit": "Storage size",
              "timestamp": "Timestamp", "other": "Custom"}
UNITS = ("h", "m", "g", "t")

Format = Callable[[Any], str]


def join(value: Any) -> str:
    """A list as `a,b` (Ganeti's `",".join(str(item) ...)` formats)."""
    return ",".join(str(item) for item in value)


def params_text(value: Any) -> str:
    """Parameters as `k=v, k=v` (Ganeti's gnt-group `_FmtDict`)."""
    if not value:
        return "(empty)"
    return ", ".join(f"{key}={item}" for key, item in value.items())


def format_time(value: Any) -> str:
    """Seconds since the epoch as local time (Ganeti's `utils.FormatTime`)."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return "N/A"
    return time.strftime("%F %T", time.localtime(value))


def split_time(value: Any) -> str:
    """A `[seconds, microseconds]` timestamp (Ganeti's `cli.FormatTimestamp`)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return "?"
    return f"{format_time(value[0])}.{value[1]:06d}"


def format_unit(value: Any, units: str) -> str:
    """MiB in `units` (Ganeti's `utils.FormatUnit`): `h` picks M, G or T with a suffix."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return str(value)
    human = units == "h"
    if units == "m" or (human and value < 1024):
        return f"{value:0.0f}{'M' if human else ''}"
    if units == "g" or (human and value < 1024 * 1024):
        return f"{value / 1024:0.1f}{'G' if human else ''}"
    return f"{value / 1024 / 1024:0.1f}{'T' if human else ''}"


def _bool(value: Any) -> str:
    return "Y" if value else "N"


# a field kind's format and whether its column is right-aligned (Ganeti's
# _DEFAULT_FORMAT_QUERY; units: `format_unit`)
KIND_FORMATS: dict[str, tuple[Format, bool]] = {
    "text": (str, False), "bool": (_bool, False), "number": (str, True),
    "float": (str, True), "timestamp": (format_time, False), "other": (str, False),
    "unknown": (str, False)}


@dataclass(frozen=True)
class ListSpec:
    """One list command: its query resource and Ganeti's defaults for it."""

    resource: str
    what: str  # "nodes"
    default_fields: tuple[str, ...]  # Ganeti's _LIST_DEF_FIELDS
    json_fields: tuple[str, ...]  # herder's: what --json shows without -o
    formats: Mapping[str, Format] = field(default_factory=dict)  # Ganeti's format_override
    units: bool = True  # whether it takes --units (Ganeti: node and instance lists)
    name_field: str = "name"
    numeric_names: bool = False


def parse_fields(selected: str | None, default: Sequence[str]) -> list[str]:
    """`-o`'s fields (Ganeti's `cli.ParseFields`): `+a,b` adds to the defaults."""
    if selected is None:
        return list(default)
    if selected.startswith("+"):
        return [*default, *selected[1:].split(",")]
    return selected.split(",")


@dataclass(frozen=True)
class Column:
    title: str
    format: Format
    right: bool


def _column(definition: remote.QueryField, spec: ListSpec, units: str) -> Column:
    if definition.name in spec.formats:
        return Column(definition.title, spec.formats[definition.name], False)
    if definition.kind == "unit":
        return Column(definition.title, lambda value: format_unit(value, units), True)
    fmt, right = KIND_FORMATS.get(definition.kind, (str, False))
    return Column(definition.title, fmt, right)


def _column_texts(column: Column, results: Sequence[Sequence[Any]], verbose: bool) -> list[str]:
    """One column's cells: a value in the column's format, a missing one as its status says
    (`STATUS_TEXTS`: with -v the reason); in bulk: when every value is there (or none is),
    one C-level map over the column."""
    if not results:
        return []
    statuses, values = zip(*results, strict=True)
    normal = statuses.count(RS_NORMAL)
    if normal == len(statuses):
        return list(map(column.format, values))
    missing = {status: texts[0] if verbose else texts[1]
               for status, texts in STATUS_TEXTS.items()}
    unknown = "(unknown)" if verbose else "??"
    if normal == 0:  # (a live field of nodes that do not answer, say)
        return list(map(missing.get, statuses, itertools.repeat(unknown)))
    fmt = column.format
    return [fmt(value) if status == RS_NORMAL else missing.get(status, unknown)
            for status, value in results]


def format_table(rows: Sequence[Sequence[str]], columns: Sequence[Column], header: bool,
                 separator: str | None) -> list[str]:
    """Lines of a table (Ganeti's `cli.FormatTable`): the columns padded to their widths
    (left, or right for right-aligned ones; the last left-aligned one unpadded), or joined by
    `separator`."""
    data = ([[c.title for c in columns]] if header else []) + [list(row) for row in rows]
    if separator is not None:
        return [separator.join(row) for row in data]
    widths = [max([len(row[i]) for row in data], default=0) for i in range(len(columns))]
    if columns and not columns[-1].right:
        widths[-1] = 0
    lines = []
    for row in data:
        cells = [cell.rjust(width) if column.right else cell.ljust(width)
                 for cell, width, column in zip(row, widths, columns, strict=True)]
        lines.append(" ".join(cells))
    return lines


def format_columns(texts: Sequence[list[str]], columns: Sequence[Column], header: bool,
                   separator: str | None) -> list[str]:
    """`format_table` of the table given by column (a list of cells per column, at least
    one column), each column padded in bulk (at 50,000 rows a cell at a time was most of the
    CLI's time)."""
    if header:
        texts = [[column.title, *cells] for column, cells in zip(columns, texts, strict=True)]
    if separator is not None:
        return list(map(separator.join, zip(*texts, strict=True)))
    padded = []
    for number, (column, cells) in enumerate(zip(columns, texts, strict=True)):
        width = max(map(len, cells), default=0)
        if number == len(columns) - 1 and not column.right:
            width = 0
        if width == 0:
            padded.append(cells)  # (a width of 0 pads nothing)
        else:
            pad = str.rjust if column.right else str.ljust
            padded.append(list(map(pad, cells, itertools.repeat(width))))
    return list(map(" ".join, zip(*padded, strict=True)))


def format_answer(answer: remote.QueryAnswer, spec: ListSpec, *, units: str | None,
                  separator: str | None, header: bool, verbose: bool) -> list[str]:
    """The lines Ganeti's `FormatQueryResult` prints for an answer."""
    chosen = units or ("m" if separator else "h")
    columns = [_column(definition, spec, chosen) for definition in answer.fields]
    if not columns:  # (no column to carry the rows: one empty line each)
        return format_table([[] for _ in answer.data], columns, header, separator)
    by_column = list(zip(*answer.data, strict=True)) if answer.data else \
        [() for _ in columns]
    texts = [_column_texts(column, results, verbose)
             for column, results in zip(columns, by_column, strict=True)]
    return format_columns(texts, columns, header, separator)


def unknown_fields(answer: remote.QueryAnswer) -> list[str]:
    return [definition.name for definition in answer.fields if definition.kind == "unknown"]


def warn_unknown(answer: remote.QueryAnswer) -> bool:
    unknown = unknown_fields(answer)
    if unknown:
        click.echo(f"Warning: Queried for unknown fields {', '.join(unknown)}", err=True)
    return bool(unknown)


def name_filter(spec: ListSpec, names: Sequence[str], force_filter: bool) -> Any:
    """The filter of a list's arguments (Ganeti's `qlang.MakeFilter`); None: none."""
    if not names and not force_filter:
        return None
    from herder.core import qlang  # only when there is something to parse

    return qlang.make_filter(list(names), force_filter, spec.name_field, spec.numeric_names)


def both(first: Any, second: Any) -> Any:
    """Two filters, either possibly None, that must both hold."""
    if first is None or second is None:
        return second if first is None else first
    return ["&", first, second]


def print_json(answer: remote.QueryAnswer) -> None:
    names = [definition.name for definition in answer.fields]
    click.echo(json.dumps([{name: value if status == RS_NORMAL else None
                            for name, (status, value) in zip(names, row, strict=True)}
                           for row in answer.data], indent=2, sort_keys=True))


def run_list(ctx: click.Context, spec: ListSpec, names: Sequence[str], *,
             output: str | None, force_filter: bool, no_headers: bool,
             separator: str | None, units: str | None, verbose: bool, as_json: bool,
             extra_filter: Any = None) -> None:
    """A list command, as Ganeti's `cli.GenericList` (exit 14 on an unknown field)."""
    defaults = spec.json_fields if as_json and output is None else spec.default_fields
    fields = parse_fields(output, defaults)
    qfilter = both(name_filter(spec, names, force_filter), extra_filter)
    with many_rows():
        answer = remote.query(ctx, spec.resource, fields, qfilter)
        found_unknown = warn_unknown(answer)
        if as_json:
            print_json(answer)
        else:
            lines = format_answer(answer, spec, units=units, separator=separator,
                                  header=not no_headers, verbose=verbose)
            if lines:
                click.echo("\n".join(lines))
    if found_unknown:
        raise click.exceptions.Exit(EXIT_UNKNOWN_FIELD)


def run_list_fields(ctx: click.Context, spec: ListSpec, fields: Sequence[str], *,
                    no_headers: bool, separator: str | None) -> None:
    """`list-fields` (Ganeti's `cli.GenericListFields`): name, type, title, description."""
    answer = remote.query_fields(ctx, spec.resource, list(fields) or None)
    found_unknown = any(definition.kind == "unknown" for definition in answer)
    if found_unknown:
        click.echo("Warning: Queried for unknown fields "
                   f"{', '.join(d.name for d in answer if d.kind == 'unknown')}", err=True)
    columns = [Column(title, str, False) for title in ("Name", "Type", "Title", "Description")]
    rows = [[d.name, KIND_NAMES.get(d.kind, d.kind), d.title, d.doc] for d in answer]
    lines = format_table(rows, columns, not no_headers, separator)
    if lines:
        click.echo("\n".join(lines))
    if found_unknown:
        raise click.exceptions.Exit(EXIT_UNKNOWN_FIELD)


# ---- the commands ---------------------------------------------------------------------------

def list_options(spec: ListSpec, *, names: bool = True
                 ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options Ganeti's list command for `spec` takes, plus herder's --json; `names`:
    whether it takes names or a filter as arguments (gnt-backup list takes none)."""
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        selection = [
            click.argument("names", nargs=-1, metavar="[NAME...|FILTER]"),
            click.option("-F", "--filter", "force_filter", is_flag=True,
                         help="Read the argument as a filter in Ganeti's query language "
                              "(e.g. 'name =~ /^web/ and pinst_cnt > 0')."),
        ]
        options = [
            *(selection if names else []),
            click.option("-o", "--output", metavar="FIELDS",
                         help="Comma-separated fields to show; +FIELDS adds to the "
                              f"defaults ({','.join(spec.default_fields)}). See list-fields."),
            click.option("--no-headers", is_flag=True, help="Print no header line."),
            click.option("--separator", metavar="SEP",
                         help="Separate the fields by SEP instead of aligning them."),
            click.option("-v", "--verbose", is_flag=True,
                         help="Say why a value is missing ((offline), (nodata), ...)."),
            click.option("--json", "as_json", is_flag=True,
                         help="Print the rows as JSON objects by field name."),
        ]
        if spec.units:
            options.append(click.option(
                "--units", type=click.Choice(UNITS),
                help="Units of sizes: h (human: M, G, T; the default without --separator), "
                     "m (MiB; the default with one), g, t."))
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def add_list_fields(group: click.Group, spec: ListSpec) -> None:
    @group.command("list-fields")
    @click.argument("fields", nargs=-1, metavar="[FIELD...]")
    @click.option("--no-headers", is_flag=True, help="Print no header line.")
    @click.option("--separator", metavar="SEP", help="Separate the columns by SEP.")
    @click.pass_context
    def list_fields(ctx: click.Context, fields: tuple[str, ...], no_headers: bool,
                    separator: str | None) -> None:
        """List the fields -o and filters take: name, type, title (the column's header),
        description."""
        run_list_fields(ctx, spec, fields, no_headers=no_headers, separator=separator)

    list_fields.__doc__ = f"List the fields of {spec.what} -o and filters take: name, " \
                          "type, title (the column's header), description."
