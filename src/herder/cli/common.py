"""Shared CLI plumbing: finding the store, printing tables or JSON, one-line errors."""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import msgspec

from herder.core import gcpause, locations

if TYPE_CHECKING:
    from herder.core.store import ConfigStore


def config_location(ctx: click.Context) -> str | None:
    """The config location given (--config, else $HERDER_CONFIG through click), or None."""
    location = (ctx.find_root().obj or {}).get("config_path")
    return str(location) if location is not None else None


def store_from(ctx: click.Context) -> ConfigStore:
    # the store (and the config model with it) only for commands that read or change the
    # config here: the lists through masterd start without it (docs/scale.md)
    from herder.core.store import open_store

    return open_store(config_location(ctx))


def config_directory(ctx: click.Context) -> Path:
    """The directory of the cluster's local files (secrets, certificates, ssconf): the config
    file's, or the etcd store's local directory."""
    location = config_location(ctx)
    if locations.is_etcd_location(location):
        return store_from(ctx).directory
    return (Path(location) if location is not None
            else locations.default_config_path()).parent


@contextlib.contextmanager
def many_rows() -> Iterator[None]:
    """Around a list's fetch and print: no cyclic garbage collection. 10,000 rows are some
    300,000 containers, and each collection would walk them all again (a third of the time);
    a list command is a short process, and what it drops is freed by reference counting."""
    with gcpause.paused():
        yield


PARAM_HELP = "KEY=VALUE[,...]; KEY=default or -KEY resets, no_KEY sets false"
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def print_json(value: Any) -> None:
    click.echo(json.dumps(msgspec.to_builtins(value), indent=2, sort_keys=True))


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Aligned columns for people; `-` stands for an empty cell. Made a column at a time (a
    list of 10,000 rows has 100,000 cells) and written at once."""
    columns = [[(value or "-") if type(value) is str else _cell(value) for value in column]
               for column in zip(*rows, strict=True)] or [[] for _ in headers]
    if len(columns) != len(headers):
        raise ValueError("rows of another width than the headers")
    # every column padded to its width but the last (lines end without blanks)
    padded = [[header, *column] if number == len(columns) - 1 else
              [cell.ljust(width) for cell in (header, *column)]
              for number, (header, column) in enumerate(zip(headers, columns, strict=True))
              for width in (max([len(header), *map(len, column)]),)]
    click.echo("\n".join([line.rstrip() for line in map("  ".join, zip(*padded, strict=True))]))


def _cell(value: Any) -> str:
    kind = type(value)
    if kind is str:  # most cells: tested first (a list of 10,000 rows has 100,000 cells)
        return value or "-"
    if kind is int:
        return str(value)
    if kind is list or kind is tuple or kind is set:  # names, tags
        return ",".join(map(str, value)) if value else "-"
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "Y" if value else "N"
    return str(value)


def print_mapping(data: dict[str, Any], indent: int = 0) -> None:
    """A nested mapping as indented `key: value` lines."""
    pad = "  " * indent
    for key, value in data.items():
        if isinstance(value, dict) and value:
            click.echo(f"{pad}{key}:")
            print_mapping(value, indent + 1)
        else:
            click.echo(f"{pad}{key}: {_cell(value) if not isinstance(value, dict) else '-'}")


def timestamp(value: float) -> str:
    if not value:
        return "-"
    return datetime.datetime.fromtimestamp(value, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def yes_no(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.lower() in ("yes", "y", "true", "on", "1")


YES_NO = click.Choice(["yes", "no"], case_sensitive=False)




class Timespec(click.ParamType):
    """Ganeti's time specification (`cli.ParseTimespec`): seconds, or a number with s, m, h, d
    or w; the value in seconds."""

    name = "TIME"
    UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        multiplier = self.UNITS.get(text[-1:], 1)
        number = text[:-1] if text[-1:] in self.UNITS else text
        if not number.isascii() or not number.isdigit():
            self.fail(f"invalid time specification {text!r} (seconds, or a number with "
                      "s, m, h, d or w)", param, ctx)
        return int(number) * multiplier


TIMESPEC = Timespec()
