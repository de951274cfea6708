"""How CLI commands change the cluster: a job through masterd's RAPI, or `--offline` straight
on the config file through the same logical units."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import click

from herder.cli.common import store_from
from herder.core.errors import HerderError
from herder.core.rapi import RapiClient, RapiError, job_error_message

DEFAULT_PORT = 5080


def root_obj(ctx: click.Context) -> dict[str, Any]:
    return ctx.find_root().obj or {}


def offline(ctx: click.Context) -> bool:
    return bool(root_obj(ctx).get("offline")) or os.environ.get("HERDER_OFFLINE", "") in (
        "1", "yes", "true")


def masterd_url(ctx: click.Context) -> str:
    url = root_obj(ctx).get("masterd") or os.environ.get("HERDER_MASTERD")
    if url:
        return url
    store = store_from(ctx)
    host = "127.0.0.1"
    if store.exists():
        host = store.load().cluster.master_ip
    return f"https://{host}:{DEFAULT_PORT}"


def client(ctx: click.Context, timeout: float = 60.0) -> RapiClient:
    store = store_from(ctx)
    return RapiClient.for_herder_cluster(store.directory, masterd_url(ctx), timeout=timeout)


def echo_log(entry: Any) -> None:
    click.echo(f"  {entry[3]}" if isinstance(entry, list | tuple) and len(entry) > 3 else entry,
               err=True)


def run(ctx: click.Context, ops: Sequence[dict[str, Any]],
        rapi: Callable[[RapiClient], Any] | None = None) -> list[Any]:
    """Run opcodes; return their results. `rapi` submits through a Ganeti RAPI route when one
    exists (so the command also drives a real Ganeti cluster); otherwise herder's job route."""
    if offline(ctx):
        from herder.masterd.offline import run_offline

        return run_offline(store_from(ctx), ops, feedback=lambda m: click.echo(f"  {m}",
                                                                               err=True))
    try:
        api = client(ctx)
    except RapiError as err:
        raise HerderError(f"{err}; or add --offline to change the config file directly") \
            from None
    with api:
        try:
            job_id = rapi(api) if rapi else api.request("POST", "/2/herder/jobs", None,
                                                        {"ops": list(ops)})
            job = api.wait_for_job(job_id, on_log=echo_log)
        except RapiError as err:
            if err.status is None:
                raise HerderError(f"{err}; start it with 'herder masterd', or add --offline "
                                  "to change the config file directly") from None
            raise
        if job.get("status") != "success":
            raise HerderError(f"job {job_id} {job.get('status')}: {job_error_message(job)}")
        return list(job.get("opresult") or [])


LIVE_TIMEOUT = 20.0  # seconds a list waits for masterd's live figures


def live_bulk(ctx: click.Context, resource: str) -> tuple[dict[str, dict[str, Any]], str | None]:
    """masterd's bulk answer of `resource` ("nodes" or "instances") by name: the live figures
    and run states the lists show. ({}, None) with --offline; ({}, why) when masterd cannot
    give them (the lists then show what the config says)."""
    if offline(ctx):
        return {}, None
    try:
        with client(ctx, timeout=LIVE_TIMEOUT) as api:
            items = api.get_nodes(bulk=True) if resource == "nodes" else \
                api.get_instances(bulk=True)
    except (RapiError, HerderError, OSError) as err:
        return {}, str(err)
    return {str(item["name"]): item for item in items if isinstance(item, dict)}, None
