"""Issue 35 item 10 against a real `herder masterd`: a read-only user submitted 400
`/2/instances/NAME/info` jobs in 7 s, each kept forever and copied to every candidate, and a
writer's job then waited. The route still answers a job id (Ganeti's shape), but such a job is
no file in the queue directory, and each user's submissions are rate-limited: a reader past
its burst gets 429 with Retry-After while a writer's job goes through at once.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from herder.masterd.submissions import READ_ONLY_RATE
from tests.security.test_rapi_access import READER, add_reader, admin_auth
from tests.system.masterd_fixture import add_plain_instance, start_masterd


def test_a_readers_info_jobs_are_rate_limited_and_never_stored(tmp_path: Path) -> None:
    add_plain_instance(tmp_path)
    with start_masterd(tmp_path) as master, httpx.Client(verify=False, timeout=60) as http:
        add_reader(master.config_path)
        info = f"{master.url}/2/instances/web1/info"
        # until the first refusal: the bucket refills while the requests go (slower on a
        # loaded machine), so how many pass depends on the time they took, within bounds
        answers: list[httpx.Response] = []
        started = time.monotonic()
        while len(answers) < 400 and not any(a.status_code == 429 for a in answers):
            answers.append(http.get(info, params={"static": "1"}, auth=READER))
        elapsed = time.monotonic() - started
        accepted = [a.json() for a in answers if a.status_code == 200]
        refused = [a for a in answers if a.status_code == 429]
        assert refused and len(accepted) >= READ_ONLY_RATE.burst, \
            [a.status_code for a in answers]
        assert len(accepted) <= READ_ONLY_RATE.burst + READ_ONLY_RATE.per_second * elapsed + 1
        assert all(isinstance(job_id, int) for job_id in accepted)  # Ganeti's shape
        assert int(refused[0].headers["Retry-After"]) >= 1
        assert "viewer submits read-only jobs too fast" in refused[0].json()["explain"]
        # a writer is not held up by the reader's queries
        admin = admin_auth(master.config_path)
        tagged = http.put(f"{master.url}/2/tags", params={"tag": "busy"}, auth=admin)
        assert tagged.status_code == 200, tagged.text
        # and the queries left no job file for redistribution to copy
        queue = master.config_path.parent / "queue"
        stored = {p.name for p in queue.glob("job-*.json")}
        assert stored == {f"job-{tagged.json()}.json"}, stored
        assert http.get(f"{master.url}/2/jobs/{accepted[0]}", auth=READER).status_code == 200
        # several jobs submitted at once take a token each: one more than the burst is refused,
        # and none of them is queued
        query = [{"OP_ID": "OP_INSTANCE_QUERY_DATA", "instances": ["web1"], "static": True}]
        highest = max(job["id"] for job in http.get(f"{master.url}/2/jobs", auth=admin).json())
        many = http.post(f"{master.url}/2/herder/jobs", auth=admin,
                         json={"jobs": [query] * (READ_ONLY_RATE.burst + 1)})
        assert many.status_code == 429, many.text
        assert "submits read-only jobs too fast" in many.json()["explain"]
        after = http.get(f"{master.url}/2/jobs", auth=admin).json()  # (the reader's may expire)
        assert [job["id"] for job in after if job["id"] > highest] == []


def test_bodies_before_a_proof_are_small(tmp_path: Path) -> None:
    """Issue 35 item 8 on masterd: the announce route and `/ui/login` (a chunked body) read up
    to 4 MiB before any check; now 64 KiB (413 in Ganeti's error shape), while a write user's
    body may be larger (the deadlines: tests/unit/test_serve_limits.py)."""
    from herder.core import serve

    big = b"x" * (serve.Limits().pre_auth_body + 1)
    with start_masterd(tmp_path) as master, httpx.Client(verify=False, timeout=60) as http:
        announce = http.post(f"{master.url}/2/herder/nodes/node2.example.com/announce",
                             content=big)
        assert announce.status_code == 413 and "explain" in announce.json(), announce.text

        def chunks():
            for _ in range(8):
                yield b"u" * 16384

        login = http.post(f"{master.url}/ui/login", content=chunks(),
                          headers={"Content-Type": "application/x-www-form-urlencoded",
                                   "Origin": master.url})
        assert login.status_code == 413, login.text
        admin = admin_auth(master.config_path)
        tags = http.put(f"{master.url}/2/tags", params={"tag": "ok"}, auth=admin,
                        content=b" " * (2 * len(big)))  # proven by its head: a bigger body
        assert tags.status_code == 200, tags.text
