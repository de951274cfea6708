"""The driver: concurrent jobs against a simulated cluster of real guests, chosen at random
from a seed, each recorded with its job id (acknowledged) or RAPI's refusal.

Operations: create (a 32 MiB sharedfile or file instance running the heartbeat guest), migrate
and failover (sharedfile instances, to a random other node), move (file instances: Ganeti's RAPI
has no move, so `herder instance move` and its job found in the queue), modify (a backend
parameter), remove, tags. Instances are the driver's own (`chaosN`)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from herder.core.rapi import RapiClient, RapiError
from herder.sim import cluster
from tests.chaos.history import Operation

JOB_TIMEOUT = 300.0  # a job the driver stops waiting for is still checked at the end
TEMPLATES = ("sharedfile", "sharedfile", "file")
# seconds a failover or move waits for the guest's clean shutdown before it stops it (a guest
# still booting ignores the ACPI button: Ganeti's default of 120 s would idle the run)
SHUTDOWN_TIMEOUT = 10


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass
class Driver:
    state: cluster.SimState
    rng: random.Random
    max_instances: int = 4
    job_timeout: float = JOB_TIMEOUT
    operations: list[Operation] = field(default_factory=list)
    instances: dict[str, str] = field(default_factory=dict)  # name -> disk template
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _made: int = 0

    @property
    def nodes(self) -> list[str]:
        return [n.name for n in self.state.nodes]

    def _record(self, op: Operation) -> None:
        with self._lock:
            self.operations.append(op)

    def _wait(self, api: RapiClient, job_id: int) -> tuple[str, str]:
        """The job's status once final (or when the driver stopped waiting) and its error;
        through a masterd that is restarting or slow to answer."""
        deadline = time.monotonic() + self.job_timeout
        while True:
            try:
                job = api.wait_for_job(job_id, timeout=max(1.0, deadline - time.monotonic()))
                break
            except (RapiError, OSError) as exc:
                if time.monotonic() >= deadline:
                    return "unknown", one_line(exc)
                time.sleep(2)
        status = str(job.get("status", "unknown"))
        if status == "success":
            return status, ""
        return status, one_line(RuntimeError(str(job.get("opresult") or "")))

    def submit(self, kind: str, name: str, detail: str,
               submit: Callable[[RapiClient], int | str]) -> Operation:
        """Run one RAPI operation: `submit(api)` returns the job id."""
        started = time.time()
        try:
            with self.state.rapi(timeout=60) as api:
                job_id = int(submit(api))
                status, error = self._wait(api, job_id)
        except (RapiError, OSError) as exc:
            op = Operation(kind, name, started, time.time(), refused=one_line(exc), detail=detail)
        else:
            op = Operation(kind, name, started, time.time(), job_id, status=status,
                           detail="; ".join(x for x in (detail, error) if x))
        self._record(op)
        return op

    def _new_name(self) -> str:
        with self._lock:
            self._made += 1
            return f"chaos{self._made}"

    def create(self) -> None:
        name, template = self._new_name(), self.rng.choice(TEMPLATES)
        node = self.rng.choice(self.nodes)
        op = self.submit("create", name, f"{template} on {node}", lambda api: api.create_instance(
            "create", name, template, [{"size": 32}], [], os_type="herder-guest", pnode=node,
            name_check=False, ip_check=False))
        if op.status == "success" or (op.job_id is not None and self._exists(name)):
            with self._lock:  # (a failed create must leave nothing; the checker sees if not)
                self.instances[name] = template

    def _exists(self, name: str) -> bool:
        """Whether the config holds the instance (True when masterd cannot say)."""
        try:
            with self.state.rapi(timeout=30) as api:
                api.get_instance(name)
        except RapiError as exc:
            return exc.status != 404
        except OSError:
            return True
        return True

    def other_node(self, name: str) -> str:
        """A node other than the instance's primary (any node when that is unknown)."""
        try:
            with self.state.rapi(timeout=30) as api:
                primary = str(api.get_instance(name).get("pnode", ""))
        except (RapiError, OSError):
            primary = ""
        return self.rng.choice([n for n in self.nodes if n != primary] or self.nodes)

    def migrate(self, name: str) -> None:
        target = self.other_node(name)
        self.submit("migrate", name, f"to {target}",
                    lambda api: api.migrate_instance(name, target_node=target))

    def failover(self, name: str) -> None:
        target = self.other_node(name)
        self.submit("failover", name, f"to {target}",
                    lambda api: api.failover_instance(name, target_node=target,
                                                      shutdown_timeout=SHUTDOWN_TIMEOUT))

    def modify(self, name: str) -> None:
        balance = self.rng.choice([True, False])
        self.submit("modify", name, f"auto_balance={balance}",
                    lambda api: api.modify_instance(name, beparams={"auto_balance": balance}))

    def tags(self, name: str) -> None:
        tag = f"chaos:{self.rng.randrange(1000)}"
        self.submit("tags", name, tag, lambda api: api.add_instance_tags(name, [tag]))

    def remove(self, name: str) -> None:
        op = self.submit("remove", name, "", lambda api: api.delete_instance(name))
        if op.status == "success" or not self._exists(name):
            with self._lock:
                self.instances.pop(name, None)

    def move(self, name: str) -> None:
        """`herder instance move` (no RAPI route in Ganeti); its job id from the queue."""
        target = self.other_node(name)
        started = time.time()
        try:
            done = cluster.run_cli(self.state, "instance", "move", name, "-n", target,
                                   "--shutdown-timeout", str(SHUTDOWN_TIMEOUT),
                                   timeout=self.job_timeout)
            answer = (done.stdout + done.stderr).strip()
        except OSError as exc:
            answer = one_line(exc)
        job_id, status = self._move_job(name, started)
        detail = f"to {target}"
        if status != "success":
            detail += f"; {one_line(RuntimeError(answer))}"
        if job_id is None:
            self._record(Operation("move", name, started, time.time(),
                                   refused=one_line(RuntimeError(answer)), detail=detail))
        else:
            self._record(Operation("move", name, started, time.time(), job_id, status=status,
                                   detail=detail))

    def _move_job(self, name: str, since: float) -> tuple[int | None, str]:
        try:
            with self.state.rapi(timeout=60) as api:
                jobs = api.get_jobs(bulk=True)
        except (RapiError, OSError):
            return None, ""
        mine = [j for j in jobs if j.get("summary") == [f"INSTANCE_MOVE({name})"]
                and j.get("received_ts") and j["received_ts"][0] >= int(since)]
        if not mine:
            return None, ""
        job = max(mine, key=lambda j: int(j["id"]))
        return int(job["id"]), str(job.get("status", ""))

    def one_operation(self) -> None:
        with self._lock:
            names = dict(self.instances)
        if len(names) < 2 or (len(names) < self.max_instances and self.rng.random() < 0.2):
            self.create()
            return
        name = self.rng.choice(sorted(names))
        if names[name] == "file":
            kinds = ["move", "modify", "tags", "remove"]
        else:
            kinds = ["migrate", "failover", "migrate", "modify", "tags", "remove"]
        kind = self.rng.choice(kinds)
        if kind == "remove" and len(names) <= 2:
            kind = "tags"
        getattr(self, kind)(name)

    def run(self, stop: threading.Event, *, operations: int | None = None,
            pause: tuple[float, float] = (1.0, 5.0)) -> None:
        """Operations one after another (run this in several threads for concurrency) until
        `stop` or, with `operations`, until the driver has recorded that many."""
        while not stop.is_set():
            if operations is not None and len(self.operations) >= operations:
                return
            self.one_operation()
            stop.wait(self.rng.uniform(*pause))
