"""Sizes written as a number and a unit letter: the one parser for the command line's disk and
memory sizes, LVM's reports and htools' text data. Standard library only (the allocator, which
runs as a bare iallocator script, uses it).

Two conventions exist, and each caller names its own:

- herder's and Ganeti's command line (``2G``, ``512M``, ``1.5T``, ``2048K``): the letter's case
  does not matter and every unit is a power of 1024; ``B``/``iB`` may follow (``2GiB``, ``2GB``);
- LVM and htools (``si_upper``): lower case is a power of 1024, upper case a power of 1000
  (``1.31t`` is 1.31 TiB, ``2K`` is 2000 bytes); ``b``/``B`` is a byte, ``s``/``S`` a 512-byte
  sector (LVM).

The result is not rounded (a float in the unit asked for); rounding is the caller's choice:
the command line rounds to whole MiB, LVM to bytes, htools truncates as Ganeti does.
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"\s*(?P<num>\d+(?:\.\d*)?)\s*(?P<unit>[A-Za-z]*)\s*")
# the command line's units: k, m, g, t in either case, optionally followed by B or iB
_CLI_UNIT = re.compile(r"(?P<letter>[kmgt])(?:i?b)?", re.IGNORECASE)
_LVM_UNITS = "bBsSkKmMgGtTpPeE"
_POWERS = "kmgtpe"
_SECTOR = 512


def _bytes_per(unit: str, si_upper: bool) -> int:
    """The size of one `unit` (b, s, k..e) in bytes."""
    if unit in "bB":
        return 1
    if unit in "sS":
        return _SECTOR
    base = 1000 if si_upper and unit.isupper() else 1024
    return int(base ** (_POWERS.index(unit.lower()) + 1))


def parse_size(text: str, unit: str = "m", *, default_unit: str | None = None,
               si_upper: bool = False) -> float:
    """`text` (a number, optionally followed by a unit) as a number of `unit` (b, s, k, m, g,
    t, p, e: powers of 1024). `default_unit` applies to a bare number (default: `unit`).
    `si_upper`: LVM's and htools' convention (see the module doc), else the command line's.
    ValueError for anything else."""
    match = _SIZE.fullmatch(text)
    letter: str | None = None
    if match is not None:
        given = match["unit"]
        if not given:
            letter = default_unit or unit
        elif si_upper:
            letter = given if len(given) == 1 and given in _LVM_UNITS else None
        else:
            cli = _CLI_UNIT.fullmatch(given)
            letter = cli["letter"] if cli else None
    if match is None or letter is None:
        raise ValueError(f"not a size: {text!r}")
    return float(match["num"]) * _bytes_per(letter, si_upper) / _bytes_per(unit, False)


def format_mib(mib: int | float) -> str:
    """A size in MiB as people read it, by Ganeti's human rule (`gnt-node list`'s default
    units): below 1 GiB whole MiB (`512M`), below 1 TiB GiB with one decimal (`2.5G`), else
    TiB (`1.2T`)."""
    if mib < 1024:
        return f"{int(mib)}M"
    if mib < 1024 * 1024:
        return f"{mib / 1024:.1f}G"
    return f"{mib / (1024 * 1024):.1f}T"
