"""Shared CLI plumbing: finding the store, printing tables or JSON, one-line errors."""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import click

from herder.core import model
from herder.core.store import ConfigStore, open_store

P = ParamSpec("P")
R = TypeVar("R")


def store_from(ctx: click.Context) -> ConfigStore:
    root = ctx.find_root()
    path = (root.obj or {}).get("config_path")
    return open_store(path)


def pass_store(func: Callable[Concatenate[ConfigStore, P], R]) -> Callable[P, R]:
    """Give the command the cluster's config store as its first argument: the local file, or
    on a machine without one the config read through masterd (`remote.config_source`)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        from herder.cli.remote import config_source

        return func(config_source(click.get_current_context()), *args, **kwargs)

    return wrapper


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def print_json(value: Any) -> None:
    click.echo(json.dumps(model.to_builtins(value), indent=2, sort_keys=True))


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Aligned columns for people; `-` stands for an empty cell."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    click.echo(line.format(*headers).rstrip())
    for row in cells:
        click.echo(line.format(*row).rstrip())


def _cell(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, bool):
        return "Y" if value else "N"
    if isinstance(value, list | tuple | set):
        return ",".join(str(v) for v in value)
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


