"""Settings files (TOML) decoded once, at start, into a strict typed structure.

A schema is a msgspec Struct with `forbid_unknown_fields=True` (nested tables: nested Structs
with the same option). `load(path, Schema, "mond config")` returns the decoded Struct or raises a
`HerderError` of one line naming the file and the key:

    mond config /etc/herder/mond.toml: unknown key 'enable' in [repair] (known: enabled, ...)
    mond config /etc/herder/mond.toml: port: expected `int`, got `str`
    mond config /etc/herder/mond.toml: not valid TOML: Invalid value (at line 1, column 8)

What the types cannot say (a key's format, a path that must exist) the caller checks after
decoding, with `problem(path, what, key, text)` for the same form of message.
"""

from __future__ import annotations

import re
import tomllib
import typing
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from herder.core import untrusted
from herder.core.errors import HerderError

S = TypeVar("S", bound=msgspec.Struct)
_AT = re.compile(r" - at `\$\.?([^`]*)`$")
_UNKNOWN = re.compile(r"Object contains unknown field `([^`]*)`")


def problem(path: Path, what: str, key: str, text: str) -> HerderError:
    """The one-line error about `key` (a dotted path; "" for the whole file)."""
    return HerderError(f"{what} {path}: {key or 'the file'}: {text}".replace("\n", " "))


def _struct_in(annotation: Any) -> type[msgspec.Struct] | None:
    """The Struct type inside an annotation (`Repair`, `Repair | None`, ...), if any."""
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return annotation
    for arg in typing.get_args(annotation):
        found = _struct_in(arg)
        if found is not None:
            return found
    return None


def _known_keys(schema: type[msgspec.Struct], where: str) -> tuple[str, ...]:
    """The keys of the table at dotted path `where` ("" for the top level)."""
    table: type[msgspec.Struct] | None = schema
    for part in filter(None, where.split(".")):
        assert table is not None
        table = _struct_in(typing.get_type_hints(table).get(part))
        if table is None:
            return ()
    return tuple(table.__struct_fields__) if table is not None else ()


def one_line(path: Path, what: str, schema: type[msgspec.Struct],
             err: msgspec.ValidationError) -> HerderError:
    """msgspec's validation error in TOML's words, on one line."""
    text = str(err)
    match = _AT.search(text)
    where = match.group(1) if match else ""
    text = _AT.sub("", text)
    unknown = _UNKNOWN.fullmatch(text)
    if unknown:
        table = f" in [{where}]" if where else ""
        known = _known_keys(schema, where)
        listed = f" (known: {', '.join(known)})" if known else ""
        return HerderError(f"{what} {path}: unknown key {unknown.group(1)!r}{table}{listed}")
    # TOML words, not JSON's: no null; arrays and tables
    text = (text.replace(" | null`", "`").replace("`object`", "`table`")
            .replace("`array`", "`array (list)`"))
    return problem(path, what, where, f"{text[0].lower()}{text[1:]}")


def decode(text: str, path: Path, schema: type[S], what: str) -> S:
    """A settings file's text, validated into `schema`."""
    try:
        untrusted.check_toml(text, what=f"{what} {path}")
        data = tomllib.loads(text)
    except untrusted.BadDocument as err:
        raise HerderError(str(err)) from None
    except tomllib.TOMLDecodeError as err:
        raise HerderError(f"{what} {path}: not valid TOML: {err}".replace("\n", " ")) from None
    try:
        return msgspec.convert(data, schema)
    except msgspec.ValidationError as err:
        raise one_line(path, what, schema, err) from None


def load(path: str | Path, schema: type[S], what: str) -> S:
    """Read and validate a settings file (HerderError in one line when it is unusable)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise HerderError(f"cannot read {what} {path}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise HerderError(f"{what} {path}: not UTF-8 text") from None
    return decode(text, path, schema, what)
