"""The simulated clusters' published addresses (tests/simaddresses.py): no two test modules
share one; none reaches the vcluster's or `make run`'s."""

from __future__ import annotations

import itertools

from tests.simaddresses import BLOCKS


def spans() -> dict[str, range]:
    return {module: range(start, start + count) for module, (start, count) in BLOCKS.items()}


def test_no_two_spans_overlap() -> None:
    for (one, a), (two, b) in itertools.combinations(spans().items(), 2):
        assert not set(a) & set(b), (one, two, a, b)


def test_every_span_is_a_usable_loopback_address_away_from_the_defaults() -> None:
    for key, addresses in spans().items():
        assert addresses.start >= 16 and addresses.stop - 1 <= 255, key


def test_every_module_that_starts_a_cluster_names_its_block() -> None:
    """A test module that starts a simulated cluster takes its address from the table."""
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    for path in sorted(tests.rglob("test_*.py")):
        text = path.read_text()
        if "running_sim(" in text or "cluster.start(" in text:
            assert "simaddresses" in text, f"{path.relative_to(tests)}: no address from the table"
