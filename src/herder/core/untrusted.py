"""Decoding documents from outside (JSON bodies, packets, files) with a size and a depth limit.

A JSON value nested 100,000 deep is a few hundred kilobytes; every recursive decoder (the
standard library's, msgspec's, tomllib's) fails on it with a RecursionError, and code that walks
a value nested a few hundred deep fails later. Every edge that reads JSON from another machine,
a client or a file therefore checks it here first (`check`, or `loads` / `decode` which check
and decode): a document larger than `max_bytes` or nested deeper than `max_depth` is refused
with a `BadDocument`, one line saying which, before any recursive code sees it.

The depth check is a scan of the raw text (strings left out), done in C by `re` and `bytes`
methods: its cost is linear in the size times at most `max_depth` passes of `bytes.replace`.
Standard library only (msgspec is imported when `decode` is called), so the allocator, which
runs as a bare iallocator script, uses it too.
"""

from __future__ import annotations

import json
import re
from typing import Any

# herder's own documents nest about a dozen deep (a config's DRBD disk with its children, an
# iallocator request); Ganeti's too. 64 leaves room and is far below any recursion limit.
MAX_DEPTH = 64
MAX_BYTES = 64 << 20  # the largest document any edge takes unless it says less

# What the depth check keeps of a JSON text once escapes are gone: quotes and brackets (a few
# bytes per string and container, so the string-removing pass runs over little).
_NOT_STRUCTURE = bytes(range(256)).translate(None, b'"[]{}')
_PLAIN_STRING = re.compile(rb'"[^"]*"')
_NOT_BRACKET = bytes(range(256)).translate(None, b"[]{}")
_ONE_BRACKET = bytes.maketrans(b"{}", b"[]")
# TOML: basic and literal strings (one- and multi-line), comments; dotted keys nest too.
_TOML_SKIPPED = re.compile(
    rb'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\n]*\'|#[^\n]*',
    re.S)
_TOML_KEY = re.compile(rb"(?:^|[{,\[\n])[ \t]*([A-Za-z0-9_.\- \t]+?)[ \t]*(?:=|\]\]?[ \t]*$)",
                       re.M)


class BadDocument(ValueError):
    """A document from outside is too large, nested too deeply, or not valid: one line."""


def _as_bytes(raw: bytes | bytearray | memoryview | str) -> bytes:
    return raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)


def _bracket_depth_at_most(brackets: bytes, max_depth: int) -> bool:
    """Whether a string of `[` and `]` nests at most `max_depth` deep: each pass removes the
    innermost pairs; an unbalanced remainder is the decoder's to report."""
    for _ in range(max_depth):
        if not brackets:
            return True
        inner_removed = brackets.replace(b"[]", b"")
        if inner_removed == brackets:
            return True
        brackets = inner_removed
    return not brackets


def _structure(data: bytes) -> bytes:
    """`data` without its strings' contents, keeping brackets outside strings only: escaped
    backslashes go first, then escaped quotes, then every byte but quotes and brackets, so the
    remaining strings are plain `"..."` runs: the same brackets as removing each whole string,
    over far fewer bytes (megabyte config documents are checked in milliseconds)."""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    bare = data.translate(None, _NOT_STRUCTURE).replace(b'""', b"")  # most strings: no bracket
    return _PLAIN_STRING.sub(b"", bare)


def check(raw: bytes | bytearray | memoryview | str, *, what: str = "JSON document",
          max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES) -> None:
    """Refuse (BadDocument) a JSON text larger than `max_bytes` or nested deeper than
    `max_depth` arrays and objects."""
    data = _as_bytes(raw)
    if len(data) > max_bytes:
        raise BadDocument(f"{what} is too large ({len(data)} bytes; at most {max_bytes})")
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return  # cannot nest deeper than it has brackets
    brackets = _structure(data).translate(_ONE_BRACKET, _NOT_BRACKET)
    if not _bracket_depth_at_most(brackets, max_depth):
        raise BadDocument(f"{what} is nested too deeply (more than {max_depth} levels)")


def loads(raw: bytes | bytearray | memoryview | str, *, what: str = "JSON document",
          max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES) -> Any:
    """The value of a JSON text, checked first (standard library decoder); BadDocument for
    anything wrong with it, with the decoder's reason."""
    check(raw, what=what, max_depth=max_depth, max_bytes=max_bytes)
    try:
        text = raw if isinstance(raw, str) else _as_bytes(raw).decode("utf-8")
        return json.loads(text, parse_constant=_no_constant)
    except UnicodeDecodeError as err:
        raise BadDocument(f"{what} is not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise BadDocument(f"{what} is not valid JSON: {err.msg} at char {err.pos}") from None
    except (ValueError, RecursionError) as err:  # NaN/Infinity, or a limit above ours
        raise BadDocument(f"{what} is not valid JSON: {err}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode(raw: bytes | bytearray | memoryview | str, type: Any = Any, *,
           what: str = "JSON document", max_depth: int = MAX_DEPTH,
           max_bytes: int = MAX_BYTES) -> Any:
    """Like `loads` with msgspec (faster; `type` validates the value: msgspec's
    ValidationError is the caller's to word); BadDocument for bad JSON."""
    check(raw, what=what, max_depth=max_depth, max_bytes=max_bytes)
    try:
        return decode_bounded(raw, type, what=what, max_bytes=max_bytes)
    except RecursionError:
        raise BadDocument(f"{what} is nested too deeply") from None


def decode_bounded(raw: bytes | bytearray | memoryview | str, type: Any, *,
                   what: str = "JSON document", max_bytes: int = MAX_BYTES) -> Any:
    """A JSON text decoded and validated as `type`, a type whose nesting is bounded (structs,
    lists and tuples of scalars, no `Any` and no recursion): msgspec refuses a container
    where the type has none before it reads into it, so the type bounds the depth and the
    scan of `check` is not needed (it costs ~10 ms a megabyte). msgspec's ValidationError is
    the caller's to word; BadDocument for bad JSON or too many bytes."""
    import msgspec

    if len(raw) > max_bytes:
        raise BadDocument(f"{what} is too large ({len(raw)} bytes; at most {max_bytes})")
    try:
        return msgspec.json.decode(raw if isinstance(raw, str) else _as_bytes(raw), type=type)
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError as err:
        raise BadDocument(f"{what} is not valid JSON: {err}") from None


def check_toml(text: str, *, what: str = "TOML document", max_depth: int = MAX_DEPTH,
               max_bytes: int = 1 << 20) -> None:
    """Refuse a TOML text larger than `max_bytes` or nesting deeper than `max_depth`: arrays
    and inline tables, plus the levels of a dotted key or table header (tomllib is slow on
    long dotted keys as well as recursive)."""
    data = _as_bytes(text)
    if len(data) > max_bytes:
        raise BadDocument(f"{what} is too large ({len(data)} bytes; at most {max_bytes})")
    if data.count(b"[") + data.count(b"{") + data.count(b".") <= max_depth:
        return
    bare = _TOML_SKIPPED.sub(b'""', data)
    dots = max((key.count(b".") + 1 for key in _TOML_KEY.findall(bare)), default=0)
    brackets = bare.translate(_ONE_BRACKET, _NOT_BRACKET)
    if dots > max_depth or not _bracket_depth_at_most(brackets, max_depth):
        raise BadDocument(f"{what} is nested too deeply (more than {max_depth} levels)")
