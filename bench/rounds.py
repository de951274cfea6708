"""What the benches of a simulated cluster share: their options and the "median (min-max)"
of their rounds. Imported by the bench scripts beside it (run as scripts, this directory is
first on their path)."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path


def spread(values: list[float], digits: int = 1) -> str:
    """'median (min-max)' of the values, or '-' when there are none."""
    if not values:
        return "-"
    return (f"{statistics.median(values):.{digits}f} "
            f"({min(values):.{digits}f}-{max(values):.{digits}f})")


def sim_options(doc: str, *, rounds: int, directory: str, first_ip: int,
                rounds_help: str = "rounds") -> argparse.Namespace:
    """`--rounds`, `--dir` and `--first-ip` of a bench on its own simulated cluster."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=rounds, help=rounds_help)
    parser.add_argument("--dir", type=Path, default=Path(directory))
    parser.add_argument("--first-ip", type=int, default=first_ip,
                        help="127.0.0.N of the cluster (above the test modules' spans)")
    return parser.parse_args()
