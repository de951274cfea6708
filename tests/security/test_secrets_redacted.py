"""Secrets stay secret wherever a reader looks (issue 35 items 3 and 4).

Item 3: a read-only RAPI user read `OP_NODE_ADD.join_token` in `GET /2/jobs/ID` and
`GET /2/jobs?bulk=1`; whoever used a queued or failed add's token first joined the machine.
Secret opcode fields (Ganeti's private/secret parameter types: `opcodes.SecretText`) are now
shown as Ganeti's "<redacted>" wherever jobs are shown (RAPI, the CLI, the web console's
streams), and a finished job keeps none in its stored opcodes.

Item 4: `GET /2/instances/NAME/info` (readable by everyone) ran a job whose result held each
DRBD disk's whole `logical_id`, its shared secret included. Now the secret is None there (as
Ganeti's LUInstanceQueryData), and every route a read-only user may call is walked with a DRBD
instance written into the config: no answer carries the secret, the cluster key or a token.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from herder.core import access, model
from herder.core.rapi_users import UsersFile
from herder.core.store import ConfigCache, FileStore
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.lu.base import MasterEnv
from herder.masterd.processor import Processor
from herder.masterd.rapi import app as rapi_app
from herder.masterd.rapi import base as rapi_base
from herder.masterd.web.context import WebContext
from tests.conftest import build_config, run_cli

from .serving import Served, routes, serving
from .test_route_table import KEY, READER, WRITER, users_file

TOKEN = f"{'s3cretJ0inT0ken' * 2}.{'0' * 64}"


def drbd_secrets(config: model.ConfigData) -> list[str]:
    found = []
    for inst in config.instances.values():
        for disk in inst.disks:
            if isinstance(disk.logical_id, model.DrbdId):
                found.append(disk.logical_id.secret)
    return found


@pytest.fixture
def masterd(tmp_path: Path) -> Iterator[tuple[Served, rapi_base.RapiContext]]:
    """A masterd running jobs with the real LUs, without node daemons (a join fails, a query
    is static); the config has a DRBD instance (no devices are needed to query it)."""
    directory = tmp_path / "masterd"
    directory.mkdir()
    (directory / "hmac.key").write_bytes(KEY)
    store = FileStore(directory / "config.json")
    config = build_config(3, drbd_instances=1, plain_instances=1)
    assert drbd_secrets(config)
    store.create(config)
    (directory / "queue").mkdir()
    locks = locking.LockManager(config.nodes, list(config.nodegroups), config.instances)
    queue = JobQueue(directory / "queue", Processor(MasterEnv(store=store, locks=locks)))
    queue.start()
    ctx = rapi_base.RapiContext(config=ConfigCache(store.path), queue=queue,
                                users=UsersFile(users_file(directory)), store=store,
                                web=WebContext())
    try:
        with serving(rapi_app.make_app(ctx)) as served:
            yield served, ctx
    finally:
        queue.stop()


def get(served: Served, path: str, auth: tuple[str, str] | None = READER) -> httpx.Response:
    with httpx.Client(timeout=30) as http:
        return http.get(served.plain + path, auth=auth)


def test_a_join_token_is_never_shown_to_a_reader(
        masterd: tuple[Served, rapi_base.RapiContext]) -> None:
    served, ctx = masterd
    with httpx.Client(timeout=30) as http:
        submitted = http.post(served.plain + "/2/herder/jobs", auth=WRITER, json={"ops": [{
            "OP_ID": "OP_NODE_ADD", "node_name": "node9.example.com",
            "primary_ip": "192.0.2.99", "join_token": TOKEN}]})
    assert submitted.status_code == 200, submitted.text
    job_id = submitted.json()
    assert ctx.queue.wait(job_id, 30).status == "error"  # a failed add: its token is live
    for path in (f"/2/jobs/{job_id}", "/2/jobs?bulk=1"):
        for who in (READER, WRITER):
            answer = get(served, path, who)
            assert answer.status_code == 200
            assert TOKEN not in answer.text and "s3cretJ0inT0ken" not in answer.text, path
            assert opcodes.REDACTED in answer.text, path
    # the stored job keeps none either (the archive, the candidates' copies)
    assert ctx.store is not None
    stored = (ctx.store.directory / "queue" / f"job-{job_id}.json").read_text()
    assert "s3cretJ0inT0ken" not in stored and opcodes.REDACTED in stored


def test_the_cli_shows_no_join_token(tmp_path: Path) -> None:
    from tests.system.masterd_fixture import start_masterd

    with start_masterd(tmp_path) as master:
        job_id = master.client.request("POST", "/2/herder/jobs", None, {"ops": [{
            "OP_ID": "OP_NODE_ADD", "node_name": "node9.example.com",
            "primary_ip": "192.0.2.99", "join_token": TOKEN}]})
        env = {"HERDER_MASTERD": master.url}
        for args in (("job", "info", str(job_id), "--json"),
                     ("job", "list", "-o", "+ops", "--json"), ("job", "info", str(job_id))):
            shown = run_cli(*args, config=master.config_path, env=env)
            assert shown.code == 0, shown.err
            assert "s3cretJ0inT0ken" not in shown.out + shown.err, args
            assert args[-1] != "--json" or opcodes.REDACTED in shown.out, shown.out


def test_query_data_has_no_drbd_secret(masterd: tuple[Served, rapi_base.RapiContext]) -> None:
    served, ctx = masterd
    config = ctx.config()
    assert config is not None
    inst = next(i for i in config.instances.values() if i.disk_template == "drbd")
    answer = get(served, f"/2/instances/{inst.name}/info?static=1")
    assert answer.status_code == 200, answer.text
    job = ctx.queue.wait(answer.json(), 30)
    assert job.status == "success"
    shown = get(served, f"/2/jobs/{answer.json()}").json()
    (disk,) = shown["opresult"][0][inst.name]["disks"]
    assert disk["logical_id"]["secret"] is None  # as Ganeti's: the secret's place is None
    assert disk["drbd_info"]["port"] == disk["logical_id"]["port"]
    assert disk["drbd_info"]["primary_node"] == shown["opresult"][0][inst.name]["pnode"]
    assert all(secret not in json.dumps(shown) for secret in drbd_secrets(config))


def open_reads(served: Served, ctx: rapi_base.RapiContext, on: bool) -> None:
    """The cluster setting for anonymous RAPI reads, changed by a writer's job."""
    with httpx.Client(timeout=30) as http:
        answer = http.put(served.plain + "/2/modify", auth=WRITER,
                          json={"rapi_anonymous_reads": on})
    assert answer.status_code == 200, answer.text
    assert ctx.queue.wait(answer.json(), 30).status == "success"


@pytest.mark.parametrize("reader", [READER, None], ids=["read-only user", "anonymous"])
def test_no_answer_a_reader_gets_carries_a_secret(
        masterd: tuple[Served, rapi_base.RapiContext], reader: tuple[str, str] | None) -> None:
    """Every route a read-only user (or, with the cluster's anonymous reads on, anyone) may
    call, with the DRBD instance's names: no answer (nor the result of a job one starts)
    carries a DRBD secret, the cluster key or a join token."""
    served, ctx = masterd
    if reader is None:
        open_reads(served, ctx, True)
    config = ctx.config()
    assert config is not None
    inst = next(i for i in config.instances.values() if i.disk_template == "drbd")
    node = config.nodes[inst.primary_node]
    group = next(iter(config.nodegroups.values()))
    with httpx.Client(timeout=30) as http:
        http.post(served.plain + "/2/herder/jobs", auth=WRITER, json={"ops": [{
            "OP_ID": "OP_NODE_ADD", "node_name": "node9.example.com",
            "primary_ip": "192.0.2.99", "join_token": TOKEN}]})
    secrets = [*drbd_secrets(config), KEY.decode().strip(), TOKEN.split(".")[0]]
    app = rapi_app.make_app(ctx)
    readable = [r for r in routes(app, rapi_base.ROUTES)
                if r.method == "GET" and r.rule in (access.RAPI_READ, access.ANYONE)]
    assert len(readable) > 20
    answers = {}
    for route in readable:
        path = route.canonical.format(name=inst.name, kind="instances", job_id="1",
                                      resource="instances", path="app.js",
                                      uuid="00000000-0000-4000-8000-000000000000",
                                      snapshot="before-upgrade")
        path = path.replace(f"/nodes/{inst.name}", f"/nodes/{node.name}") \
            .replace(f"/groups/{inst.name}", f"/groups/{group.name}")
        if route.canonical == "/2/herder/events":
            continue  # a stream: below
        answers[path] = get(served, path, reader).text
    for path in ("/2/instances?bulk=1", "/2/nodes?bulk=1", "/2/groups?bulk=1",
                 "/2/query/instances?fields=name,disk.sizes,disk_template",
                 "/2/jobs?bulk=1"):
        answers[path] = get(served, path, reader).text
    started = get(served, f"/2/instances/{inst.name}/info?static=1", reader).json()
    ctx.queue.wait(started, 30)
    answers["the info job"] = get(served, f"/2/jobs/{started}", reader).text
    answers["the job's stream"] = get(served, f"/2/herder/events?job={started}", reader).text
    assert "event: end" in answers["the job's stream"]
    for path, text in answers.items():
        for secret in secrets:
            assert secret not in text, (path, secret)
    # the control: a writer's copy of the config has them (the route readers are refused)
    assert drbd_secrets(config)[0] in get(served, "/2/herder/config", WRITER).text


def test_anonymous_reads_are_a_cluster_setting_off_by_default(
        masterd: tuple[Served, rapi_base.RapiContext]) -> None:
    """Ganeti's RAPI answers GETs without credentials; herder only once a writer turned the
    cluster's `rapi_anonymous_reads` on (docs/compat.md row 54). Writes, queries and wrong
    credentials stay refused; turning it off closes the reads again at once."""
    served, ctx = masterd
    config = ctx.config()
    assert config is not None and config.cluster.rapi_anonymous_reads is False
    assert get(served, "/2/nodes?bulk=1", None).status_code == 401
    with httpx.Client(timeout=30) as http:
        refused = http.put(served.plain + "/2/modify", auth=READER,
                           json={"rapi_anonymous_reads": True})
        assert refused.status_code == 403  # a read-only user may not open the reads
        assert http.put(served.plain + "/2/modify",
                        json={"rapi_anonymous_reads": True}).status_code == 401
        open_reads(served, ctx, True)
        config = ctx.config()
        assert config is not None and config.cluster.rapi_anonymous_reads is True
        for path in ("/2/nodes?bulk=1", "/2/instances?bulk=1", "/2/groups?bulk=1", "/2/info"):
            answer = http.get(served.plain + path)
            assert answer.status_code == 200, (path, answer.text)
        assert http.get(served.plain + "/2/nodes").json() == \
            get(served, "/2/nodes").json()  # the same answer a read-only user gets
        # writes, Ganeti's query resource and wrong credentials: still refused
        assert http.put(served.plain + "/2/tags?tag=x").status_code == 401
        assert http.get(served.plain + "/2/query/node?fields=name").status_code == 401
        assert http.get(served.plain + "/2/nodes", auth=(READER[0], "wrong")).status_code == 401
        assert ctx.config().cluster.tags == []  # type: ignore[union-attr]
        open_reads(served, ctx, False)
        assert http.get(served.plain + "/2/nodes?bulk=1").status_code == 401


def test_the_cli_turns_anonymous_reads_on_and_off(tmp_path: Path) -> None:
    from tests.system.masterd_fixture import start_masterd

    with start_masterd(tmp_path) as master:
        env = {"HERDER_MASTERD": master.url}
        with httpx.Client(verify=False, timeout=30) as anonymous:
            assert anonymous.get(f"{master.url}/2/info").status_code == 401
            for value, status in (("yes", 200), ("no", 401)):
                done = run_cli("cluster", "modify", "--rapi-anonymous-reads", value,
                               config=master.config_path, env=env)
                assert done.code == 0, done.err
                assert anonymous.get(f"{master.url}/2/info").status_code == status, value
        shown = run_cli("cluster", "info", config=master.config_path, env=env)
        assert "rapi anonymous reads" in shown.out
        bad = run_cli("cluster", "modify", "--rapi-anonymous-reads", "maybe",
                      config=master.config_path, env=env)
        assert bad.code != 0 and "maybe" in bad.err
