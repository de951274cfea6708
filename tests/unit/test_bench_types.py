"""The benches call herder's internals (the CLI's list specs, masterd's query, the stores), so a
change to herder can break a bench that nobody runs that day: `bench/scale.py` once used list
tables that had moved, and failed only when run. mypy reads bench/ with herder (pyproject's
`files`); this test runs it over bench/ so the suite fails when a bench stops type-checking."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"


def test_mypy_covers_the_benches() -> None:
    config = (REPO / "pyproject.toml").read_text()
    assert '"bench"' in config.split("[tool.mypy]", 1)[1].split("[[tool.mypy.overrides]]")[0]


def test_every_bench_type_checks_against_herder() -> None:
    benches = sorted(str(path.relative_to(REPO)) for path in BENCH.glob("*.py"))
    assert "bench/scale.py" in benches
    done = subprocess.run([sys.executable, "-m", "mypy", *benches], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
