"""No function of herder is over 100 lines (issue 33), counted from its `def` to its last
line (decorators not counted; a nested function counts within its outer one too): a longer
one is split into the steps it takes."""

from __future__ import annotations

from tests.sourcetree import PACKAGE, Function, functions_of, modules

MAX_LINES = 100

# Functions the checker knows of and lets stand for now, each with why. Remove an entry when
# its function is short enough (the test then insists).
KNOWN_LONG: dict[str, str] = {}


def long_functions() -> list[Function]:
    return [f for path in modules() for f in functions_of(path) if f.lines > MAX_LINES]


def functions_named(*parts: str) -> dict[str, Function]:
    path = PACKAGE.joinpath(*parts)
    return {f.name: f for f in functions_of(path)}


def test_the_checker_measures_functions_methods_and_nested_ones() -> None:
    rounds = functions_named("maintd", "rounds.py")
    assert {"plan_round", "_Round.start", "_Round.healthy", "annotate"} <= set(rounds)
    start = rounds["_Round.start"]
    assert start.module == "herder.maintd.rounds" and 10 < start.lines < 40
    # a nested function is measured on its own, its lines also count in the outer one
    instances = functions_named("masterd", "rapi", "instances.py")
    outer, inner = instances["instance_op"], instances["instance_op.handler"]
    assert outer.line < inner.line and inner.lines < outer.lines


def test_no_function_over_100_lines() -> None:
    long = long_functions()
    unknown = [str(f) for f in long if f"{f.module}.{f.name}" not in KNOWN_LONG]
    assert not unknown, f"functions over {MAX_LINES} lines:\n" + "\n".join(unknown)
    gone = sorted(set(KNOWN_LONG) - {f"{f.module}.{f.name}" for f in long})
    assert not gone, "known long functions that are short now (remove them from " \
                     f"KNOWN_LONG): {', '.join(gone)}"
