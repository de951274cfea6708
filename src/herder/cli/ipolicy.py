"""gnt-cluster's instance-policy bounds option, `--ipolicy-bounds-specs`.

Ganeti's syntax (cli_opts.check_multilist_ident_key_val, cli._InitISpecsFromFullOpts):
`min:KEY=VAL,.../max:KEY=VAL,...` for one pair of bounds, pairs separated by `//`; every key of
a bound must be given (memory-size, cpu-count, disk-count, disk-size, nic-count, spindle-use),
sizes with an optional unit (`disk-size=1G`). The standard spec must still lie within one pair
(the LU checks it).
"""

from __future__ import annotations

from herder.core import params
from herder.core.errors import ParameterError

ISPEC_KEYS = ("memory-size", "cpu-count", "disk-count", "disk-size", "nic-count", "spindle-use")
_SIZE_KEYS = ("memory-size", "disk-size")


def parse_ispec(text: str, where: str, *, complete: bool) -> dict[str, int]:
    """`KEY=VAL,...` as an ispec; ParameterError naming `where` for an unknown key, a bad
    value, a repeated key or (with `complete`) a missing one."""
    spec: dict[str, int] = {}
    for item in (text.split(",") if text else []):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in ISPEC_KEYS:
            raise ParameterError(f"ipolicy spec {where}: {item!r} is not KEY=VALUE with KEY one "
                                 f"of {', '.join(ISPEC_KEYS)}")
        if key in spec:
            raise ParameterError(f"ipolicy spec {where}: {key} given twice")
        try:
            spec[key] = (params.parse_size(value) if key in _SIZE_KEYS
                         else _non_negative(value))
        except ValueError as err:
            raise ParameterError(f"ipolicy spec {where}: {key}={value!r}: {err}") from None
    missing = [k for k in ISPEC_KEYS if k not in spec]
    if complete and missing:
        raise ParameterError(f"Missing parameters in ipolicy spec {where}: {', '.join(missing)}")
    return spec


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("must not be negative")
    return number


def parse_bounds_specs(text: str) -> list[dict[str, dict[str, int]]]:
    """`min:...,/max:...//min:.../max:...` as the policy's minmax list."""
    pairs: list[dict[str, dict[str, int]]] = []
    for line in text.split("//"):
        pair: dict[str, dict[str, int]] = {}
        for section in line.split("/"):
            ident, _, rest = section.partition(":")
            if ident not in ("min", "max"):
                raise ParameterError(f"Invalid key in bounds instance specifications: "
                                     f"{ident!r} (min or max)")
            if ident in pair:
                raise ParameterError(f"Duplicated parameter {ident!r} in --ipolicy-bounds-specs")
            pair[ident] = parse_ispec(rest, ident, complete=True)
        if set(pair) != {"min", "max"}:
            raise ParameterError("--ipolicy-bounds-specs: each pair needs both min: and max:")
        pairs.append(pair)
    return pairs
