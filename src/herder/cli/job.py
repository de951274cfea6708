"""`herder job ...`: read and steer masterd's job queue."""

from __future__ import annotations

import datetime
import json
from typing import Any

import click

from herder.cli import listing, remote
from herder.cli.common import json_option
from herder.core.errors import HerderError
from herder.core.rapi import RapiClient, RapiError, job_error_message


def _api(ctx: click.Context) -> RapiClient:
    try:
        return remote.client(ctx)
    except RapiError as err:
        raise HerderError(str(err)) from None


def _when(ts: Any) -> str:
    if not ts:
        return "-"
    return datetime.datetime.fromtimestamp(ts[0] + ts[1] / 1e6, datetime.UTC).strftime("%H:%M:%S")


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except RapiError as err:
        if err.status is None:
            raise HerderError(f"{err}; start it with 'herder masterd'") from None
        raise


@click.group()
def job() -> None:
    """List, show, wait for and cancel jobs of the master daemon's queue."""


LIST = listing.ListSpec(
    "job", "jobs",
    ("id", "status", "summary"),  # Ganeti's gnt-job list defaults
    ("id", "status", "summary", "priority", "received_ts", "start_ts", "end_ts"),
    formats={"summary": listing.join,
             # Ganeti prints the list of the opcodes' timestamps
             **dict.fromkeys(("opstart", "opexec", "opend"),
                             lambda value: str([listing.split_time(v) for v in value]))},
    units=False, name_field="id", numeric_names=True)
# Ganeti's status selections (gnt-job list --pending, ...; constants.JOBS_PENDING, ...)
STATUS_SELECTIONS = {"pending": ("queued", "waiting", "canceling"), "running": ("running",),
                     "error": ("error",), "finished": ("canceled", "success", "error")}


@job.command("list")
@listing.list_options(LIST)
@click.option("--pending", "status", flag_value="pending",
              help="Only jobs pending execution or being canceled.")
@click.option("--running", "status", flag_value="running", help="Only running jobs.")
@click.option("--error", "status", flag_value="error", help="Only failed jobs.")
@click.option("--finished", "status", flag_value="finished", help="Only finished jobs.")
@click.pass_context
def list_(ctx: click.Context, names: tuple[str, ...], output: str | None, force_filter: bool,
          no_headers: bool, separator: str | None, verbose: bool, as_json: bool,
          status: str | None) -> None:
    """List jobs, as gnt-job list: ID... or a filter (e.g. 'status == "error"') selects them,
    -o the fields (list-fields shows them all)."""
    selected = None
    if status is not None:
        selected = ["|", *(["==", "status", value] for value in STATUS_SELECTIONS[status])]
    listing.run_list(ctx, LIST, names, output=output, force_filter=force_filter,
                     no_headers=no_headers, separator=separator, units=None,
                     verbose=verbose, as_json=as_json, extra_filter=selected)


listing.add_list_fields(job, LIST)


@job.command()
@click.argument("job_ids", nargs=-1, required=True, type=int, metavar="ID...")
@json_option
@click.pass_context
def info(ctx: click.Context, job_ids: tuple[int, ...], as_json: bool) -> None:
    """Show jobs: their opcodes (with reason trails), statuses, results and logs."""
    with _api(ctx) as api:
        jobs = [_call(api.get_job_status, j) for j in job_ids]
    if as_json:
        click.echo(json.dumps(jobs, indent=2))
        return
    for j in jobs:
        click.echo(f"Job {j['id']}: {j['status']}  received {_when(j.get('received_ts'))}, "
                   f"started {_when(j.get('start_ts'))}, ended {_when(j.get('end_ts'))}")
        for index, op in enumerate(j.get("ops") or []):
            click.echo(f"  opcode {index}: {op.get('OP_ID')} -> {j['opstatus'][index]}")
            result = j["opresult"][index]
            if result is not None:
                click.echo(f"    result: {json.dumps(result)}")
            for entry in (j.get("oplog") or [[]])[index]:
                click.echo(f"    log {entry[0]}: {entry[3]}")
            for source, why, _ in op.get("reason") or []:
                click.echo(f"    reason: {source}{': ' + why if why else ''}")


@job.command()
@click.argument("job_id", type=int, metavar="ID")
@click.option("--timeout", type=float, help="Give up after this many seconds.")
@json_option
@click.pass_context
def wait(ctx: click.Context, job_id: int, timeout: float | None, as_json: bool) -> None:
    """Wait until a job is finished, printing its log; exit 1 unless it succeeded."""
    with _api(ctx) as api:
        result = _call(api.wait_for_job, job_id, timeout=timeout,
                       on_log=None if as_json else remote.echo_log)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(f"Job {job_id}: {result['status']}")
    if result["status"] != "success":
        if not as_json:
            click.echo(f"herder: error: {job_error_message(result)}", err=True)
        raise click.exceptions.Exit(1)


@job.command()
@click.argument("job_id", type=int, metavar="ID")
@click.pass_context
def cancel(ctx: click.Context, job_id: int) -> None:
    """Cancel a queued or waiting job (a running one cannot be canceled)."""
    with _api(ctx) as api:
        ok, message = _call(api.cancel_job, job_id)
    if not ok:
        raise HerderError(message)
    click.echo(message)
