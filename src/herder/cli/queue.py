"""`herder cluster queue drain|undrain|info`: the job queue's drain flag for a maintenance
window (Ganeti's `gnt-cluster queue`), through masterd's RAPI."""

from __future__ import annotations

import json

import click

from herder.cli import remote
from herder.cli.common import json_option


@click.group()
def queue() -> None:
    """Drain the job queue for a maintenance window, undrain it, show it."""


@queue.command()
@click.pass_context
def drain(ctx: click.Context) -> None:
    """Refuse new jobs (queued and running ones go on) until `undrain`; kept across restarts
    and master failovers."""
    with remote.masterd_client(ctx) as api:
        remote.call(api.set_queue_drained, True)
    click.echo("The job queue is drained: new jobs are refused")


@queue.command()
@click.pass_context
def undrain(ctx: click.Context) -> None:
    """Take new jobs again."""
    with remote.masterd_client(ctx) as api:
        remote.call(api.set_queue_drained, False)
    click.echo("The job queue takes new jobs")


@queue.command()
@json_option
@click.pass_context
def info(ctx: click.Context, as_json: bool) -> None:
    """Whether the queue is drained, its jobs per status, and the queued jobs held back (a
    dependency, a filter rule) with why."""
    with remote.masterd_client(ctx) as api:
        state = remote.call(api.get_queue)
    if as_json:
        click.echo(json.dumps(state, indent=2))
        return
    click.echo(f"The drain flag is {'set' if state['drained'] else 'unset'}")
    counts = state.get("jobs") or {}
    click.echo("Jobs: " + (", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
                           or "none"))
    for job_id, why in (state.get("held") or {}).items():
        click.echo(f"  job {job_id}: {why}")
