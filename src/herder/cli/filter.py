"""`herder filter ...`: job filter rules (Ganeti's `gnt-filter`), through masterd's RAPI
(`/2/filters`).

A rule holds queued jobs its predicates match: ACCEPT, PAUSE, REJECT, CONTINUE or
`RATE_LIMIT n` (docs/rapi.md; `herder.masterd.jobs.filters`).
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from herder.cli import remote
from herder.cli.common import json_option, print_table
from herder.core.errors import HerderError

FIELDS = ("uuid", "watermark", "priority", "predicates", "action", "reason_trail")
ACTION_HELP = ("ACCEPT, PAUSE, REJECT, CONTINUE or 'RATE_LIMIT n' (at most n matching jobs "
               "running at once)")


def parse_action(text: str) -> Any:
    """Ganeti's check_filteraction: `RATE_LIMIT n` -> ["RATE_LIMIT", n]; any other text as it
    is (masterd checks it)."""
    words = text.split()
    if len(words) == 2 and words[0] == "RATE_LIMIT" and words[1].isdigit():
        return ["RATE_LIMIT", int(words[1])]
    return text


def parse_predicates(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as err:
        raise click.BadParameter(f"not JSON: {err}") from None


def shown_action(action: Any) -> str:
    return " ".join(str(part) for part in action) if isinstance(action, list) else str(action)


def _trail(reason: str | None) -> list[Any]:
    """Ganeti's --reason: one `gnt:user` entry."""
    return [["gnt:user", reason, time.time_ns()]] if reason else []


def _rule(priority: int | None, predicates_text: str | None, action_text: str | None,
          reason: str | None) -> tuple[int, Any, Any, list[Any]]:
    """A rule as gnt-filter add and replace make it: what is not given takes its default
    (priority 0, no predicates, CONTINUE)."""
    return (priority or 0, parse_predicates(predicates_text) if predicates_text else [],
            parse_action(action_text) if action_text else "CONTINUE", _trail(reason))


def rule_options(func: Any) -> Any:
    func = click.option("--reason", help="Why (kept in the rule's reason trail).")(func)
    func = click.option("--action", "action_text", metavar="ACTION", help=ACTION_HELP)(func)
    func = click.option("--predicates", "predicates_text", metavar="JSON",
                        help="A JSON list of predicates: [\"jobid\", FILTER], [\"opcode\", "
                        "FILTER], [\"reason\", FILTER], FILTER in Ganeti's query language "
                        "(e.g. '[[\"jobid\", [\">\", \"id\", \"watermark\"]]]').")(func)
    return click.option("--priority", type=click.IntRange(min=0),
                        help="The rule's place: lower numbers first.")(func)


@click.group("filter")
def filter_group() -> None:
    """Job filter rules: accept, pause, reject or rate-limit queued jobs (gnt-filter)."""


@filter_group.command()
@rule_options
@click.pass_context
def add(ctx: click.Context, priority: int | None, predicates_text: str | None,
        action_text: str | None, reason: str | None) -> None:
    """Add a rule (priority 0, no predicates: every job, action CONTINUE unless given);
    prints its UUID."""
    with remote.masterd_client(ctx) as api:
        uuid = remote.call(api.add_filter,
                           *_rule(priority, predicates_text, action_text, reason))
    click.echo(uuid)


@filter_group.command()
@click.argument("uuid")
@rule_options
@click.pass_context
def replace(ctx: click.Context, uuid: str, priority: int | None, predicates_text: str | None,
            action_text: str | None, reason: str | None) -> None:
    """Replace a rule as Ganeti's gnt-filter replace (what is not given takes its default),
    or add it under this UUID; the rule gets a new watermark."""
    with remote.masterd_client(ctx) as api:
        remote.call(api.replace_filter, uuid,
                    *_rule(priority, predicates_text, action_text, reason))
    click.echo(uuid)


@filter_group.command()
@click.argument("uuid")
@rule_options
@click.pass_context
def modify(ctx: click.Context, uuid: str, priority: int | None, predicates_text: str | None,
           action_text: str | None, reason: str | None) -> None:
    """Change what is given of a rule, keeping the rest (herder's; the rule gets a new
    watermark, as on replace)."""
    if priority is None and predicates_text is None and action_text is None:
        raise click.UsageError("give --priority, --predicates or --action")
    with remote.masterd_client(ctx) as api:
        rule = remote.call(api.get_filter, uuid)
        remote.call(api.replace_filter, uuid,
                    rule["priority"] if priority is None else priority,
                    rule["predicates"] if predicates_text is None
                    else parse_predicates(predicates_text),
                    rule["action"] if action_text is None else parse_action(action_text),
                    [*(rule.get("reason_trail") or []), *_trail(reason)])
    click.echo(uuid)


@filter_group.command("delete")
@click.argument("uuid")
@click.pass_context
def delete(ctx: click.Context, uuid: str) -> None:
    """Remove a rule (held jobs it paused or rate-limited are looked at again)."""
    with remote.masterd_client(ctx) as api:
        remote.call(api.delete_filter, uuid)


filter_group.add_command(delete, "remove")


@filter_group.command("list")
@click.argument("uuids", nargs=-1, metavar="[UUID...]")
@json_option
@click.pass_context
def list_(ctx: click.Context, uuids: tuple[str, ...], as_json: bool) -> None:
    """The rules in the order they are taken (priority, then watermark, then UUID)."""
    with remote.masterd_client(ctx) as api:
        rules = remote.call(api.get_filters, bulk=True)
    if uuids:
        missing = sorted(set(uuids) - {r["uuid"] for r in rules})
        if missing:
            raise HerderError(f"no such filter rule: {', '.join(missing)}")
        rules = [r for r in rules if r["uuid"] in uuids]
    if as_json:
        click.echo(json.dumps(rules, indent=2))
        return
    print_table(["UUID", "Watermark", "Priority", "Predicates", "Action", "ReasonTrail"],
                [[r["uuid"], r["watermark"], r["priority"], json.dumps(r["predicates"]),
                  shown_action(r["action"]), json.dumps(r["reason_trail"])] for r in rules])


@filter_group.command()
@click.argument("uuids", nargs=-1, metavar="[UUID...]")
@click.pass_context
def info(ctx: click.Context, uuids: tuple[str, ...]) -> None:
    """Each rule as gnt-filter info shows it (every rule without UUIDs)."""
    with remote.masterd_client(ctx) as api:
        rules = [remote.call(api.get_filter, uuid) for uuid in uuids] if uuids \
            else remote.call(api.get_filters, bulk=True)
    for rule in rules:
        click.echo(f"UUID: {rule['uuid']}")
        click.echo(f"  Watermark: {rule['watermark']}")
        click.echo(f"  Priority: {rule['priority']}")
        click.echo(f"  Predicates: {json.dumps(rule['predicates'])}")
        click.echo(f"  Action: {shown_action(rule['action'])}")
        click.echo(f"  Reason trail: {json.dumps(rule['reason_trail'])}")
