"""Job filter rules applied to the queue (Ganeti 3.0's `gnt-filter`, its scheduler's filtering).

Rules (`model.FilterRule`, the config's `filters`) are taken in order of `priority`, then
`watermark`, then `uuid`. A rule applies to a job when every one of its predicates holds (no
predicate: always):

- `["jobid", F]`: F over the job's `id` (the text `watermark` in a value position stands for
  the rule's watermark);
- `["opcode", F]`: F holds for one of the job's opcodes, over its fields (`OP_ID` and every
  parameter as submitted);
- `["reason", F]`: F holds for one entry of one opcode's reason trail, over `source`,
  `reason` and `timestamp`.

The first rule that applies and whose action is not CONTINUE decides: ACCEPT (run),
PAUSE (stay queued), REJECT (canceled), RATE_LIMIT n (stay queued while n running jobs are
decided by this rule); none: the job runs. Only jobs not yet started are held or rejected
(the queue asks; a running job goes on).

Ad-hoc rate limits (Ganeti's scheduler, no rule needed): a job one of whose opcodes carries the
reason `rate-limit:N:LABEL` stays queued while N running jobs carry that same reason text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from herder.core import model, qfilter

WATERMARK = "watermark"  # in a jobid predicate's value: the rule's watermark
AD_HOC_LIMIT = re.compile(r"^rate-limit:(\d+):")

Verdict = Literal["ACCEPT", "PAUSE", "REJECT", "RATE_LIMIT"]


@dataclass(frozen=True)
class CompiledRule:
    rule: model.FilterRule
    predicates: tuple[tuple[str, qfilter.Predicate], ...]

    @property
    def uuid(self) -> str:
        return self.rule.uuid

    def applies(self, job_id: int, ops: Sequence[Mapping[str, Any]]) -> bool:
        return all(_holds(kind, predicate, job_id, ops) for kind, predicate in self.predicates)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    rule: str | None = None  # the deciding rule's UUID (None: no rule decided)
    limit: int = 0  # RATE_LIMIT's number of jobs


ACCEPTED = Decision("ACCEPT")


def compile_rules(rules: Iterable[model.FilterRule]) -> tuple[CompiledRule, ...]:
    """The rules in the order they are taken, their predicates compiled (a rule in the config
    was checked when written, so this does not fail for it)."""
    ordered = sorted(rules, key=lambda r: (r.priority, r.watermark, r.uuid))
    return tuple(CompiledRule(rule, tuple(_compile(rule, kind, expression)
                                          for kind, expression in rule.predicates))
                 for rule in ordered)


def _compile(rule: model.FilterRule, kind: str,
             expression: object) -> tuple[str, qfilter.Predicate]:
    def watermark(value: object) -> object:
        return rule.watermark if value == WATERMARK else value

    value_map = watermark if kind == "jobid" else (lambda value: value)
    return kind, qfilter.compile_filter(expression, model.FILTER_PREDICATE_FIELDS[kind],
                                        value_map)


def _holds(kind: str, predicate: qfilter.Predicate, job_id: int,
           ops: Sequence[Mapping[str, Any]]) -> bool:
    if kind == "jobid":
        return predicate({"id": job_id})
    if kind == "opcode":
        return any(predicate(op) for op in ops)
    return any(predicate({"source": entry[0], "reason": entry[1], "timestamp": entry[2]})
               for op in ops for entry in op.get("reason") or () if len(entry) == 3)


def decide(rules: Sequence[CompiledRule], job_id: int,
           ops: Sequence[Mapping[str, Any]]) -> Decision:
    """What the rules say of a job (its id and its opcodes' dict forms)."""
    for compiled in rules:
        action = compiled.rule.action
        if action == "CONTINUE" or not compiled.applies(job_id, ops):
            continue
        if isinstance(action, tuple):
            return Decision("RATE_LIMIT", compiled.uuid, action[1])
        return Decision(action, compiled.uuid)
    return ACCEPTED



def ad_hoc_limits(ops: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """A job's ad-hoc rate limits: reason text `rate-limit:N:LABEL` -> N (the text is the
    bucket: jobs with the same one share it)."""
    found: dict[str, int] = {}
    for op in ops:
        for entry in op.get("reason") or ():
            text = entry[1] if len(entry) == 3 and isinstance(entry[1], str) else ""
            match = AD_HOC_LIMIT.match(text)
            if match:
                found[text] = int(match.group(1))
    return found
