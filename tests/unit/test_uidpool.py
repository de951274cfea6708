"""The uid pool's range syntax (design-2.1 "User-id pool")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herder.core import uidpool
from herder.core.errors import ConfigError


def test_parse_and_format() -> None:
    assert uidpool.parse_pool("1000-1009, 2000,3000-3000") == [(1000, 1009), (2000, 2000),
                                                               (3000, 3000)]
    assert uidpool.format_pool([(1000, 1009), (2000, 2000)]) == "1000-1009, 2000"
    assert uidpool.parse_pool("") == []
    assert uidpool.parse_pool("5\n7-8", separator="\n") == [(5, 5), (7, 8)]


@pytest.mark.parametrize(("text", "message"), [
    ("abc", "invalid user-id 'abc'"),
    ("10-5", "upper bound is below"),
    ("1-2-3", "invalid user-id '2-3'"),
    ("-5", "invalid user-id ''"),
    ("99999999999", "out of range"),
])
def test_bad_definitions_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        uidpool.parse_pool(text)


def test_add_merges_and_remove_splits() -> None:
    pool = uidpool.add([(1000, 1009)], [(1010, 1015), (2000, 2000)])
    assert pool == [(1000, 1015), (2000, 2000)]
    pool = uidpool.remove(pool, [(1005, 1005)])
    assert uidpool.format_pool(pool) == "1000-1004, 1006-1015, 2000"
    assert uidpool.remove(pool, [(2000, 2000)]) == [(1000, 1004), (1006, 1015)]
    with pytest.raises(ConfigError, match="1005 is not in the uid pool"):
        uidpool.remove(pool, [(1005, 1005)])
    with pytest.raises(ConfigError, match="3000-3001 is not in the uid pool"):
        uidpool.remove(pool, [(3000, 3001)])


ranges = st.lists(
    st.tuples(st.integers(0, 5000), st.integers(0, 50)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=8,
)


@given(ranges)
def test_format_is_accepted_by_parse(pool: list[tuple[int, int]]) -> None:
    normal = uidpool.normalise(pool)
    assert uidpool.normalise(uidpool.parse_pool(uidpool.format_pool(normal))) == normal
    assert set(uidpool.expand(normal)) == {u for lo, hi in pool for u in range(lo, hi + 1)}


@given(ranges, ranges)
def test_add_and_remove_are_set_operations(pool: list, extra: list) -> None:
    base = set(uidpool.expand(uidpool.normalise(pool)))
    more = set(uidpool.expand(uidpool.normalise(extra)))
    added = uidpool.add(pool, extra)
    assert set(uidpool.expand(added)) == base | more
    removed = uidpool.remove(added, extra) if extra else added
    assert set(uidpool.expand(removed)) == (base | more) - more
