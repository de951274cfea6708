"""`herder job ...`: read and steer masterd's job queue."""

from __future__ import annotations

import datetime
import json
from typing import Any

import click

from herder.cli import listing, remote
from herder.cli.common import TIMESPEC, json_option, print_table
from herder.core.errors import HerderError
from herder.core.rapi import job_error_message


def _when(ts: Any) -> str:
    if not ts:
        return "-"
    return datetime.datetime.fromtimestamp(ts[0] + ts[1] / 1e6, datetime.UTC).strftime("%H:%M:%S")


@click.group()
def job() -> None:
    """List, show, wait for, cancel, reprioritize and archive jobs of the master daemon's
    queue."""


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
@click.option("--archived", is_flag=True,
              help="Also the archived jobs (read from the archive: slow for a big one); "
                   "with the default columns only.")
@click.pass_context
def list_(ctx: click.Context, names: tuple[str, ...], output: str | None, force_filter: bool,
          no_headers: bool, separator: str | None, verbose: bool, as_json: bool,
          status: str | None, archived: bool) -> None:
    """List jobs, as gnt-job list: ID... or a filter (e.g. 'status == "error"') selects them,
    -o the fields (list-fields shows them all)."""
    if archived:
        if names or output or no_headers or separator or verbose or status:
            raise HerderError("--archived lists every job with the default columns (and "
                              "--json) only")
        _list_archived(ctx, as_json)
        return
    selected = None
    if status is not None:
        selected = ["|", *(["==", "status", value] for value in STATUS_SELECTIONS[status])]
    listing.run_list(ctx, LIST, names, output=output, force_filter=force_filter,
                     no_headers=no_headers, separator=separator, units=None,
                     verbose=verbose, as_json=as_json, extra_filter=selected)


listing.add_list_fields(job, LIST)


def _list_archived(ctx: click.Context, as_json: bool) -> None:
    """The queue's and the archive's jobs (`GET /2/jobs?bulk=1&archived=1`)."""
    with remote.masterd_client(ctx) as api:
        jobs = remote.call(api.get_jobs, bulk=True, archived=True)
    if as_json:
        click.echo(json.dumps(jobs, indent=2))
        return
    print_table(["ID", "Status", "Summary", "Received", "Started", "Ended"],
                [[j["id"], j["status"], ",".join(j.get("summary") or []),
                  _when(j.get("received_ts")), _when(j.get("start_ts")), _when(j.get("end_ts"))]
                 for j in jobs])


@job.command()
@click.argument("job_ids", nargs=-1, required=True, type=int, metavar="ID...")
@json_option
@click.pass_context
def info(ctx: click.Context, job_ids: tuple[int, ...], as_json: bool) -> None:
    """Show jobs: their opcodes (with reason trails), statuses, results and logs."""
    with remote.masterd_client(ctx) as api:
        jobs = [remote.call(api.get_job_status, j) for j in job_ids]
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
    with remote.masterd_client(ctx) as api:
        result = remote.call(api.wait_for_job, job_id, timeout=timeout,
                             on_log=None if as_json else remote.echo_log,
                             on_retry=remote.echo_retry)
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
    with remote.masterd_client(ctx) as api:
        done, message = remote.call(api.cancel_job, job_id)
    if not done:
        raise HerderError(message)
    click.echo(message)


# Ganeti's --priority names (cli_opts._PRIONAME_TO_VALUE)
PRIORITY_NAMES = {"low": 10, "normal": 0, "high": -10}


def _priority(text: str) -> int:
    if text.lower() in PRIORITY_NAMES:
        return PRIORITY_NAMES[text.lower()]
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(f"{text!r}: low, normal, high or a number from -20 (first) "
                                 "to 19 (last)") from None


@job.command("change-priority")
@click.option("--priority", "priority_text", required=True, metavar="PRIORITY",
              help="low, normal, high (Ganeti's names: 10, 0, -10) or a number from -20 "
              "(taken first) to 19.")
@click.argument("job_ids", nargs=-1, required=True, type=int, metavar="ID...")
@click.pass_context
def change_priority(ctx: click.Context, priority_text: str, job_ids: tuple[int, ...]) -> None:
    """Change the priority of queued jobs' pending opcodes (those not yet running)."""
    priority = _priority(priority_text)
    failed = False
    with remote.masterd_client(ctx) as api:
        for job_id in job_ids:
            done, message = remote.call(api.change_job_priority, job_id, priority)
            click.echo(message, err=not done)
            failed = failed or not done
    if failed:
        raise click.exceptions.Exit(1)


@job.command()
@click.argument("job_ids", nargs=-1, required=True, type=int, metavar="ID...")
@click.pass_context
def archive(ctx: click.Context, job_ids: tuple[int, ...]) -> None:
    """Move finished jobs to the archive: no longer listed (but with `list --archived`),
    still shown by `job info`."""
    failed = False
    with remote.masterd_client(ctx) as api:
        for job_id in job_ids:
            done, message = remote.call(api.archive_job, job_id)
            if done:
                click.echo(message)
            else:
                click.echo(f"herder: error: failed to archive job {job_id}: {message}",
                           err=True)
                failed = True
    if failed:
        raise click.exceptions.Exit(1)


@job.command()
@click.argument("age", metavar="AGE|all")
@click.pass_context
def autoarchive(ctx: click.Context, age: str) -> None:
    """Archive the finished jobs that ended more than AGE ago (seconds, or with s, m, h, d,
    w), or every finished job (`all`), as Ganeti's gnt-job autoarchive."""
    seconds = -1 if age == "all" else TIMESPEC.convert(age, None, ctx)
    with remote.masterd_client(ctx) as api:
        archived, left = remote.call(api.auto_archive_jobs, seconds)
    click.echo(f"Archived {archived} jobs, {left} unchecked left")
