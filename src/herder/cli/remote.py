"""How CLI commands reach the cluster: changes are jobs through masterd's RAPI (or `--offline`
straight on the config file through the same logical units); where masterd is and how to log
in comes from the client profile (`core.client_profile`: HERDER_MASTERD, HERDER_RAPI_CA, ...),
else from the files beside the cluster config (on the master), else from this node's ssconf."""

from __future__ import annotations

import functools
import json
import os
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import click
import msgspec

from herder.cli.common import config_directory, store_from
from herder.core import client_profile, ports, ssconf
from herder.core.errors import HerderError

if TYPE_CHECKING:
    from herder.core import model
    from herder.core.rapi import RapiClient
    from herder.core.store import ConfigStore

P = ParamSpec("P")
R = TypeVar("R")

# The RAPI client (httpx), the store and the config model are imported where used: `--help`
# needs none of them, and a list through masterd needs no store or model (docs/scale.md).



def root_obj(ctx: click.Context) -> dict[str, Any]:
    return ctx.find_root().obj or {}


def offline(ctx: click.Context) -> bool:
    return bool(root_obj(ctx).get("offline")) or os.environ.get("HERDER_OFFLINE", "") in (
        "1", "yes", "true")


def profile() -> client_profile.Profile:
    return client_profile.load()


def master_address(ctx: click.Context) -> str | None:
    """The master's address as this machine reaches it: the host of masterd's URL (the
    profile's), else the master IP of this node's ssconf (the master and the candidates have
    one too), else of the local config (read whole: 16 MB at 10,000 instances)."""
    url = root_obj(ctx).get("masterd") or profile().masterd
    if url:
        return urllib.parse.urlsplit(url).hostname
    from herder.core.store import FileStore

    store = store_from(ctx)
    if isinstance(store, FileStore):
        from_ssconf = ssconf.master_ip(store.directory)
        if from_ssconf is None and store.exists():
            return store.load().cluster.master_ip
        return from_ssconf
    return None


def masterd_url(ctx: click.Context) -> str:
    url = root_obj(ctx).get("masterd") or profile().masterd
    if url:
        return url
    host = master_address(ctx) or "127.0.0.1"
    return f"https://{host}:{ports.MASTERD}" if ":" not in host \
        else f"https://[{host}]:{ports.MASTERD}"


def client(ctx: click.Context, timeout: float = 60.0) -> RapiClient:
    """A RAPI client of the cluster: the profile's credentials, else the files beside the
    config (the master's)."""
    from herder.core.rapi import RapiClient, RapiError, tls_context

    found = profile()
    url = masterd_url(ctx)
    if found.has_credentials:
        assert found.ca is not None and found.user is not None
        if not found.ca.is_file():
            raise RapiError(f"cluster certificate {found.ca} (HERDER_RAPI_CA) is missing")
        return RapiClient(url, found.user, found.password(),
                          verify=tls_context(found.ca, check_hostname=False), timeout=timeout)
    return RapiClient.for_herder_cluster(config_directory(ctx), url, timeout=timeout)


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
        from herder.core import model
        from herder.core.rapi import RapiError

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
    from herder.core.store import FileStore

    store = store_from(ctx)
    if store.exists() or offline(ctx) or not isinstance(store, FileStore):
        return store
    if root_obj(ctx).get("masterd") or profile().masterd or \
            ssconf.master_ip(store.directory) is not None:
        return RemoteConfig(ctx)
    return store


def pass_store(func: Callable[Concatenate[ConfigStore, P], R]) -> Callable[P, R]:
    """Give the command the cluster's config store as its first argument: the local file, or
    on a machine without one the config read through masterd (`config_source`)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return func(config_source(click.get_current_context()), *args, **kwargs)

    return wrapper


def echo_log(entry: Any) -> None:
    click.echo(f"  {entry[3]}" if isinstance(entry, list | tuple) and len(entry) > 3 else entry,
               err=True)


def run(ctx: click.Context, ops: Sequence[dict[str, Any]],
        rapi: Callable[[RapiClient], Any] | None = None) -> list[Any]:
    """Run opcodes; return their results. `rapi` submits through a Ganeti RAPI route when one
    exists (so the command also drives a real Ganeti cluster); otherwise herder's job route."""
    from herder.core.rapi import RapiError, job_error_message

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


QUERY_TIMEOUT = 60.0  # seconds a list waits for masterd's rows
QUERY_RS_NORMAL, QUERY_RS_UNKNOWN = 0, 1  # Ganeti's result statuses (constants.RS_*)

# A query answer as the lists read it (Ganeti's `objects.QueryResponse`): the type bounds the
# nesting (a value is a scalar, a list of scalars: names, counts, tags, or a list of such lists:
# a network's groups), so it is decoded and validated in one pass (`untrusted.decode_bounded`).
QueryScalar = str | int | float | bool | None
QueryValue = QueryScalar | list[QueryScalar | list[QueryScalar]]


class QueryField(msgspec.Struct, frozen=True):
    name: str
    title: str = ""
    kind: str = ""
    doc: str = ""


class QueryAnswer(msgspec.Struct, frozen=True):
    fields: list[QueryField]
    data: list[list[tuple[int, QueryValue]]]


def query_rows(ctx: click.Context, resource: str, fields: Mapping[str, str]
               ) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The rows of a list from masterd's query resource (`GET /2/query/RESOURCE?fields=...`),
    as Ganeti's CLI takes them from its masterd. `fields`: a row's key -> the query field it
    shows; each row holds the values, null where the result status is not normal (the bulk
    answers' form). (None, None) with --offline; (None, why) when masterd cannot be reached
    (the list then reads the config itself). An error answer of masterd is a HerderError (one
    line)."""
    from herder.core.rapi import RapiError

    if offline(ctx):
        return None, None
    keys, names = list(fields), list(fields.values())
    try:
        with client(ctx, timeout=QUERY_TIMEOUT) as api:
            answer: QueryAnswer = api.request("GET", f"/2/query/{resource}",
                                              [("fields", ",".join(names))],
                                              answer_type=QueryAnswer)
    except RapiError as err:
        if err.status is None:
            return None, str(err)
        if 200 <= err.status < 300:
            raise HerderError(f"masterd at {masterd_url(ctx)} answered GET /2/query/{resource} "
                              "with something that is not a query answer") from None
        raise HerderError(f"masterd at {masterd_url(ctx)}: {err}") from None
    except (HerderError, OSError) as err:
        return None, str(err)
    if any(len(row) != len(keys) for row in answer.data):
        raise HerderError(f"masterd at {masterd_url(ctx)} answered GET /2/query/{resource} "
                          f"with rows of another width than the {len(keys)} fields asked")
    # a field masterd does not know is unknown in every row
    unknown = [name for name, (status, _) in zip(names, answer.data[0], strict=True)
               if status == QUERY_RS_UNKNOWN] if answer.data else []
    rows = [{key: value if status == QUERY_RS_NORMAL else None
             for key, (status, value) in zip(keys, row, strict=True)} for row in answer.data]
    if unknown:
        raise HerderError(f"masterd at {masterd_url(ctx)} does not know the field(s) "
                          f"{', '.join(unknown)} (an older herder?); add --offline on the "
                          "master")
    return rows, None


def follow_jobs(ctx: click.Context, result: object) -> list[str]:
    """Wait for the jobs an opcode's result lists (Ganeti's `{"jobs": [[true, id], ...]}`:
    evacuations, change-group, multi-allocation), as gnt-* commands do, showing their log; the
    failures, one line each (empty: every job succeeded). With --offline they already ran."""
    from herder.core.rapi import job_error_message

    entries = result.get("jobs") if isinstance(result, dict) else None
    if not entries:
        return []
    if offline(ctx):
        return [str(what) for ok, what in entries if not ok]
    problems = []
    with client(ctx) as api:
        for ok, what in entries:
            if not ok:
                problems.append(f"a job was not submitted: {what}")
                continue
            job = api.wait_for_job(int(what), on_log=echo_log)
            if job.get("status") != "success":
                problems.append(f"job {what} {job.get('status')}: {job_error_message(job)}")
    return problems


def run_and_follow(ctx: click.Context, op: dict[str, Any]) -> object:
    """One opcode whose result lists jobs: run it, wait for them, exit 1 (each failure
    printed) when one failed."""
    (result,) = run(ctx, [op])
    problems = follow_jobs(ctx, result)
    for problem in problems:
        click.echo(problem, err=True)
    if problems:
        raise click.exceptions.Exit(1)
    return result
