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


def masterd_client(ctx: click.Context) -> RapiClient:
    """`client`, a problem finding it one line."""
    from herder.core.rapi import RapiError

    try:
        return client(ctx)
    except RapiError as err:
        raise HerderError(str(err)) from None


def call(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """A call of the RAPI client; masterd not answering is said as such."""
    from herder.core.rapi import RapiError

    try:
        return fn(*args, **kwargs)
    except RapiError as err:
        if err.status is None:
            raise HerderError(f"{err}; start it with 'herder masterd'") from None
        raise


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


def echo_retry(message: str) -> None:
    """A poll of a followed job that got no answer (masterd restarting): said, then asked
    again (`RapiClient.wait_for_job`)."""
    click.echo(f"herder: {message}", err=True)


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
        job_id = None
        try:
            job_id = rapi(api) if rapi else api.request("POST", "/2/herder/jobs", None,
                                                        {"ops": list(ops)})
            job = api.wait_for_job(job_id, on_log=echo_log, on_retry=echo_retry)
        except RapiError as err:
            if err.status is None and job_id is not None:
                raise HerderError(f"{err}; job {job_id} was submitted and may still run: "
                                  f"'herder job wait {job_id}' follows it") from None
            if err.status is None:
                raise HerderError(f"{err}; start it with 'herder masterd', or add --offline "
                                  "to change the config file directly") from None
            raise
        if job.get("status") != "success":
            raise HerderError(f"job {job_id} {job.get('status')}: {job_error_message(job)}")
        return list(job.get("opresult") or [])


QUERY_TIMEOUT = 60.0  # seconds a list waits for masterd's rows


# A query answer as the lists read it (Ganeti's `objects.QueryResponse`), decoded and
# validated in one pass; a value is any JSON (parameters, opcode logs), its nesting bounded by
# the RAPI client's decoder (`core.untrusted`).
class QueryField(msgspec.Struct, frozen=True):
    name: str
    title: str = ""
    kind: str = ""
    doc: str = ""


class QueryAnswer(msgspec.Struct, frozen=True):
    fields: list[QueryField]
    data: Sequence[Sequence[tuple[int, object]]]


# The values of nearly every list field (names, numbers, lists of them, parameters), their
# nesting bounded by the type itself: an answer of them is decoded and validated in one pass
# into tuples, without the generic decoder's depth scan and a second pass to validate (at
# 50,000 rows 0.35 s of the CLI's 0.5 s of CPU before the table). An answer with a deeper
# value is read the generic way.
_Scalar = str | int | float | bool | None
_Shallow = (_Scalar | list[_Scalar | list[_Scalar] | dict[str, _Scalar]]
            | dict[str, _Scalar | list[_Scalar] | dict[str, _Scalar]])


class _ShallowAnswer(msgspec.Struct, frozen=True):
    fields: list[QueryField]
    data: list[tuple[tuple[int, _Shallow], ...]]


def decode_query_answer(method: str, path: str, answer: Any) -> QueryAnswer:
    """A query resource's answer (`core.rapi.Answer`) as a QueryAnswer: RapiError for an error
    answer or one that is not JSON, msgspec's ValidationError for JSON that is no query
    answer."""
    from herder.core import gcpause, rapi, untrusted

    if 200 <= answer.status < 300 and answer.content.strip():
        try:
            with gcpause.paused():  # (what decoding makes holds no reference cycles)
                shallow = untrusted.decode_bounded(answer.content, _ShallowAnswer,
                                                   max_bytes=rapi.ANSWER_MAX_BYTES)
            return QueryAnswer(fields=shallow.fields, data=shallow.data)
        except (msgspec.ValidationError, untrusted.BadDocument):
            pass  # a deeper value, or no JSON: the generic way says which
    raw = rapi.parse_answer(method, path, answer.status, answer.reason, answer.content)
    return msgspec.convert(raw, QueryAnswer)


class QueryFields(msgspec.Struct, frozen=True):
    fields: list[QueryField]


def _masterd_error(ctx: click.Context, err: Exception, what: str) -> HerderError:
    from herder.core.rapi import RapiError

    if isinstance(err, RapiError) and err.status is not None and 200 <= err.status < 300:
        return HerderError(f"masterd at {masterd_url(ctx)} answered {what} with something "
                           "that is not a query answer")
    return HerderError(f"masterd at {masterd_url(ctx)}: {err}")


def query(ctx: click.Context, resource: str, fields: Sequence[str],
          qfilter: object = None) -> QueryAnswer:
    """Ganeti's query answer for a list, from masterd's query resource (`PUT
    /2/query/RESOURCE` with the fields and the filter), as Ganeti's CLI asks its masterd.
    With --offline, or on the master when masterd cannot be reached, the same answer from
    the config file here, without the nodes' live figures (and a note why on stderr); the
    job list needs masterd. An error answer of masterd is a HerderError (one line)."""
    from herder.core.rapi import RapiError

    why = "--offline"
    if not offline(ctx):
        try:
            with client(ctx, timeout=QUERY_TIMEOUT) as api:
                # decoded with the depth check (a value is any JSON), then validated
                got = api.request_answer("PUT", f"/2/query/{resource}", None,
                                         {"fields": list(fields), "qfilter": qfilter})
            answer = decode_query_answer("PUT", f"/2/query/{resource}", got)
        except msgspec.ValidationError:
            raise HerderError(f"masterd at {masterd_url(ctx)} answered PUT /2/query/{resource} "
                              "with something that is not a query answer") from None
        except RapiError as err:
            if err.status is not None:
                raise _masterd_error(ctx, err, f"PUT /2/query/{resource}") from None
            why = str(err)
        except (HerderError, OSError) as err:
            why = str(err)
        else:
            if any(len(row) != len(fields) for row in answer.data):
                raise HerderError(f"masterd at {masterd_url(ctx)} answered PUT "
                                  f"/2/query/{resource} with rows of another width than the "
                                  f"{len(fields)} fields asked")
            return answer
    store = store_from(ctx)
    if resource == "job" or not store.exists():
        raise HerderError(f"cannot ask masterd for the {resource} list: {why}")
    local = _local_answer(store.load(), resource, fields, qfilter)
    if why != "--offline" and local.live:
        click.echo(f"no live figures: {why}", err=True)
    return local.answer


class LocalAnswer(msgspec.Struct, frozen=True):
    answer: QueryAnswer
    live: bool  # whether it shows a live figure (each one without data)


def _local_answer(config: model.ConfigData, resource: str, fields: Sequence[str],
                  qfilter: object) -> LocalAnswer:
    """The query answer computed here from the config (masterd's own code): the nodes' live
    figures and the instances' run states are Ganeti's RS_NODATA, as a node that did not
    answer (the config alone does not say them)."""
    from herder.masterd import livefields
    from herder.masterd import query as queries
    from herder.masterd.livecache import EMPTY
    from herder.masterd.queries.qfilter import FilterError

    try:
        compiled = queries.compile_filter(resource, qfilter)
        answer = msgspec.convert(queries.answer(config, resource, fields, EMPTY, compiled),
                                 QueryAnswer)
    except FilterError as err:
        raise HerderError(str(err)) from None
    live = {"node": livefields.NODE_LIVE_FIELDS,
            "instance": livefields.INSTANCE_LIVE_FIELDS}.get(resource, ())
    masked = [name in live for name in fields]
    if not any(masked):
        return LocalAnswer(answer, False)
    nodata = (livefields.RS_NODATA, None)
    return LocalAnswer(QueryAnswer(answer.fields, [
        [nodata if mask else cell for mask, cell in zip(masked, row, strict=True)]
        for row in answer.data]), True)


def query_fields(ctx: click.Context, resource: str,
                 fields: Sequence[str] | None) -> list[QueryField]:
    """The definitions of `fields` (None: all) of a query resource: masterd's `GET
    /2/query/RESOURCE/fields`, or herder's own with --offline."""
    from herder.core.rapi import RapiError

    if not offline(ctx):
        try:
            with client(ctx, timeout=QUERY_TIMEOUT) as api:
                raw = api.request("GET", f"/2/query/{resource}/fields",
                                  [("fields", ",".join(fields))] if fields else None)
            return msgspec.convert(raw, QueryFields).fields
        except msgspec.ValidationError:
            raise HerderError(f"masterd at {masterd_url(ctx)} answered GET /2/query/{resource}"
                              "/fields with something that is not a list of fields") from None
        except RapiError as err:
            if err.status is not None:
                raise _masterd_error(ctx, err, f"GET /2/query/{resource}/fields") from None
        except (HerderError, OSError):
            pass
    from herder.masterd import query as queries

    return msgspec.convert(queries.field_definitions(resource, fields), QueryFields).fields


def query_rows(ctx: click.Context, resource: str, fields: Mapping[str, str]
               ) -> tuple[list[dict[str, Any]], None]:
    """The rows of a query answer as dicts: a row's key -> the query field it shows (`fields`),
    null where the result status is not normal (the bulk answers' form); `query`'s answer,
    from masterd or, without it, from the config here."""
    answer = query(ctx, resource, list(fields.values()))
    return [{key: value if status == 0 else None  # Ganeti's RS_NORMAL
             for key, (status, value) in zip(fields, row, strict=True)}
            for row in answer.data], None


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
            job = api.wait_for_job(int(what), on_log=echo_log, on_retry=echo_retry)
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
