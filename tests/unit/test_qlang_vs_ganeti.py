"""herder's query language parser (core.qlang) against Ganeti 3.0.2's own (ganeti.qlang, run
by Debian's Python from the peers' unpacked library): for random filter texts both accept and
give the same filter, or both refuse. Skips cleanly without the peers (/tmp/groot)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herder.core import qlang

GANETI_LIB = Path("/tmp/groot/usr/share/ganeti/3.0")
DEBIAN_PYTHON = Path("/usr/bin/python3")
GANETI_PARSE = """
import json, sys
from ganeti import qlang, errors
out = []
for text in json.load(sys.stdin):
    try:
        out.append(["ok", qlang.ParseFilter(text)])
    except errors.QueryFilterParseError:
        out.append(["refused", None])
json.dump(out, sys.stdout)
"""

FIELDS = st.sampled_from(["name", "pinst_cnt", "offline", "tags", "be/vcpus", "disk.size/0"])
NUMBERS = st.integers(min_value=0, max_value=10**6).map(str)
TEXTS = st.text(alphabet="abcxyz019 -_.*?", max_size=8).map(lambda t: json.dumps(t))
VALUES = st.one_of(NUMBERS, TEXTS)
COMPARE = st.sampled_from(["==", "=", "!=", "<", "<=", ">", ">="])
REGEXPS = st.tuples(st.sampled_from(["/", "#", "m/"]), st.text(alphabet="^$.*abc", max_size=5),
                    st.sampled_from(["", "i", "s", "si"]))


def _regexp(parts: tuple[str, str, str]) -> str:
    start, body, flags = parts
    end = "/" if start == "m/" else start
    return f"{start}{body}{end}{flags}"


CONDITIONS = st.one_of(
    FIELDS,
    st.tuples(FIELDS, COMPARE, VALUES).map(" ".join),
    st.tuples(VALUES, st.sampled_from(["in", "not in"]), FIELDS).map(" ".join),
    # a regular expression in parentheses: Ganeti reads a word after one as its flags
    st.tuples(FIELDS, st.sampled_from(["=~", "!~"]), REGEXPS.map(_regexp))
      .map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
    st.tuples(FIELDS, st.sampled_from(["=*", "!*"]), TEXTS).map(" ".join),
)
EXPRESSIONS = st.recursive(
    CONDITIONS,
    lambda inner: st.one_of(
        inner.map(lambda e: f"not {e}"),
        inner.map(lambda e: f"({e})"),
        st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(" ".join)),
    max_leaves=6)
# texts that are mostly not filters: both must refuse them alike
JUNK = st.text(alphabet="name=<>!~/()\"' andor0123x*", min_size=1, max_size=20)


def ganeti_parse(texts: list[str]) -> list[list[object]]:
    done = subprocess.run([str(DEBIAN_PYTHON), "-c", GANETI_PARSE], input=json.dumps(texts),
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(GANETI_LIB)}, check=True)
    return list(json.loads(done.stdout))


def herder_parse(text: str) -> list[object]:
    try:
        return ["ok", qlang.parse(text)]
    except qlang.QueryFilterParseError:
        return ["refused", None]


@pytest.fixture(autouse=True)
def _peers() -> None:
    if not (GANETI_LIB / "ganeti" / "qlang.py").is_file() or not DEBIAN_PYTHON.exists():
        pytest.skip("Ganeti peers absent (/tmp/groot's ganeti.qlang: ../shared/peers/setup.sh)")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(texts=st.lists(st.one_of(EXPRESSIONS, JUNK), min_size=40, max_size=80))
def test_same_filters_as_ganeti(texts: list[str]) -> None:
    theirs = ganeti_parse(texts)
    ours = [json.loads(json.dumps(herder_parse(text))) for text in texts]
    different = [(text, o, t) for text, o, t in zip(texts, ours, theirs, strict=True) if o != t]
    assert not different, different[:5]


def test_the_issues_example_and_the_documented_difference() -> None:
    text = "(name =~ /^web/) and pinst_cnt > 0"
    assert herder_parse(text) == ganeti_parse([text])[0] == \
        ["ok", ["&", ["=~", "name", "^web"], [">", "pinst_cnt", 0]]]
    # docs/compat.md: Ganeti reads `and` after a regular expression as its flags
    bare = "name =~ /^web/ and pinst_cnt > 0"
    assert ganeti_parse([bare])[0] == ["refused", None]
    assert herder_parse(bare) == ["ok", ["&", ["=~", "name", "^web"], [">", "pinst_cnt", 0]]]
