"""The type of a JSON value as herder builds one for the wire (RAPI answers, views, job
results): what msgspec and the standard library's `json` encode. Its containers are read-only
(`Mapping`, `Sequence`), so a `list[str]` or a `dict[str, int]` is one as it is; a value read
back from such a document is narrowed with `isinstance`, as any value from outside is.
Standard library only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

JsonValue: TypeAlias = (Mapping[str, "JsonValue"] | Sequence["JsonValue"] | str | int | float
                        | bool | None)
JsonObject: TypeAlias = dict[str, JsonValue]  # a JSON object being built
