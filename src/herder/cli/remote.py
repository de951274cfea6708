"""How CLI commands reach the cluster: changes are jobs through masterd's RAPI (or `--offline`
straight on the config file through the same logical units); where masterd is and how to log
in comes from the client profile (`core.client_profile`: HERDER_MASTERD, HERDER_RAPI_CA, ...),
else from the files beside the cluster config (on the master), else from this node's ssconf."""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from herder.cli.common import store_from
from herder.core import client_profile, model, ssconf
from herder.core.errors import HerderError
from herder.core.rapi import RapiClient, RapiError, job_error_message, tls_context
from herder.core.store import FileStore

DEFAULT_PORT = 5080


def root_obj(ctx: click.Context) -> dict[str, Any]:
    return ctx.find_root().obj or {}


def offline(ctx: click.Context) -> bool:
    return bool(root_obj(ctx).get("offline")) or os.environ.get("HERDER_OFFLINE", "") in (
        "1", "yes", "true")


def profile() -> client_profile.Profile:
    return client_profile.load()


def master_address(ctx: click.Context) -> str | None:
    """The master's address as this machine reaches it: the host of masterd's URL (the
    profile's), else the master IP of the local config, else of this node's ssconf."""
    url = root_obj(ctx).get("masterd") or profile().masterd
    if url:
        return urllib.parse.urlsplit(url).hostname
    store = store_from(ctx)
    if isinstance(store, FileStore):
        if store.exists():
            return store.load().cluster.master_ip
        return ssconf.master_ip(store.directory)
    return None


def masterd_url(ctx: click.Context) -> str:
    url = root_obj(ctx).get("masterd") or profile().masterd
    if url:
        return url
    host = master_address(ctx) or "127.0.0.1"
    return f"https://{host}:{DEFAULT_PORT}" if ":" not in host \
        else f"https://[{host}]:{DEFAULT_PORT}"


def client(ctx: click.Context, timeout: float = 60.0) -> RapiClient:
    """A RAPI client of the cluster: the profile's credentials, else the files beside the
    config (the master's)."""
    found = profile()
    url = masterd_url(ctx)
    if found.has_credentials:
        assert found.ca is not None and found.user is not None
        if not found.ca.is_file():
            raise RapiError(f"cluster certificate {found.ca} (HERDER_RAPI_CA) is missing")
        return RapiClient(url, found.user, found.password(),
                          verify=tls_context(found.ca, check_hostname=False), timeout=timeout)
    return RapiClient.for_herder_cluster(store_from(ctx).directory, url, timeout=timeout)


class RemoteConfig:
    """The cluster config read through masterd's RAPI (`GET /2/herder/config`), for the read
    commands on a machine without a copy of it. Only `load` works: changes are jobs."""

    def __init__(self, ctx: click.Context) -> None:
        self.url = masterd_url(ctx)
        self._ctx = ctx
        self.path = Path(f"{self.url}/2/herder/config")  # for messages only
        self.directory = store_from(ctx).directory

    def __repr__(self) -> str:
        return f"RemoteConfig({self.url!r})"

    def exists(self) -> bool:
        return True

    def load(self) -> model.ConfigData:
        try:
            with client(self._ctx) as api:
                document = api.request("GET", "/2/herder/config")
        except RapiError as err:
            raise HerderError(f"cannot read the cluster config through masterd at "
                              f"{self.url}: {err}") from None
        return model.decode(json.dumps(document))

    def _refuse(self) -> Any:
        raise HerderError("the cluster config is read through masterd here; changes are jobs "
                          "(or --offline on the master)")

    create = replace = update = locked = _refuse


def config_source(ctx: click.Context) -> Any:
    """Where a read command finds the config: the local file (the master and the master
    candidates have one), else masterd (a client profile, or this node's ssconf, names it)."""
    store = store_from(ctx)
    if store.exists() or offline(ctx) or not isinstance(store, FileStore):
        return store
    if root_obj(ctx).get("masterd") or profile().masterd or \
            ssconf.master_ip(store.directory) is not None:
        return RemoteConfig(ctx)
    return store


def echo_log(entry: Any) -> None:
    click.echo(f"  {entry[3]}" if isinstance(entry, list | tuple) and len(entry) > 3 else entry,
               err=True)


def run(ctx: click.Context, ops: Sequence[dict[str, Any]],
        rapi: Callable[[RapiClient], Any] | None = None) -> list[Any]:
    """Run opcodes; return their results. `rapi` submits through a Ganeti RAPI route when one
    exists (so the command also drives a real Ganeti cluster); otherwise herder's job route."""
    if offline(ctx):
        from herder.masterd.offline import run_offline

        store = store_from(ctx)
        if not store.exists():
            raise HerderError(f"--offline changes the cluster config itself, and there is none "
                              f"at {store.path}: run it on the master")
        return run_offline(store, ops, feedback=lambda m: click.echo(f"  {m}",
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
