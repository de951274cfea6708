"""Running one opcode: find its LU, take its locks (design-2.1's retry strategy), check, act.

Locks: the cluster lock (BGL) first — exclusive when the LU changes the cluster as a whole,
else shared — then each level in Ganeti's order. A try that cannot get all of a level's locks
within its timeout releases what it got and backs off; the timeouts grow, and the last try
waits without limit, keeping its place in the lock queues. While waiting the opcode shows
`waiting`; canceling the job ends the wait at once (the job's cancel token). The locks are
released when the opcode ends, whatever happens.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from herder.core.errors import HerderError, OpPrereqError
from herder.masterd import locking, lu
from herder.masterd.jobs import opcodes
from herder.masterd.jobs.queue import JobContext
from herder.masterd.lu.base import (
    JobResult,
    LockRequest,
    LogicalUnit,
    MasterEnv,
    ResultWithJobs,
)

log = logging.getLogger("herder.masterd")


def child_opcodes(op: opcodes.OpCode, job: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The opcodes of a job an LU asked for, with the submitting opcode's priority, reason
    trail and comment (Ganeti's mcpu._SetBaseOpParams)."""
    return [{**child, "priority": child.get("priority", op.priority),
             "reason": [*op.reason, *child.get("reason", [])],
             "comment": child.get("comment") or f"Submitted by {op.op_id}"} for child in job]


def submit_jobs(ctx: JobContext, op: opcodes.OpCode, result: ResultWithJobs) -> dict[str, Any]:
    """Queue the jobs of an LU's ResultWithJobs: Ganeti's `{"jobs": [[true, id] or [false,
    error]], ...}` (a job the queue refuses is reported, the others still run)."""
    submitted: list[list[object]] = []
    for job in result.jobs:
        try:
            submitted.append([True, ctx.queue.submit(child_opcodes(op, job))])
        except HerderError as err:
            submitted.append([False, str(err)])
    for ok, what in submitted:
        ctx.feedback(f"submitted job {what}" if ok else f"a job was refused: {what}")
    return {**result.other, "jobs": submitted}


class Processor:
    def __init__(self, env: MasterEnv,
                 strategy_factory: Callable[[], locking.LockAttemptTimeoutStrategy]
                 = locking.LockAttemptTimeoutStrategy) -> None:
        self.env = env
        self.strategy_factory = strategy_factory

    def make_lu(self, op: opcodes.OpCode,
                feedback: Callable[[str], None] = lambda message: None
                ) -> LogicalUnit[opcodes.OpCode]:
        try:
            cls = lu.registry()[op.op_id]
        except KeyError:
            raise opcodes.OpcodeError(f"opcode {op.op_id} is not implemented by herder") from None
        return cls(op, self.env, feedback)

    def after_master_death(self, op: opcodes.OpCode) -> list[dict[str, object]]:
        """What must follow `op`, interrupted by the master's death (the job queue's recovery
        submits it): its LU's `after_master_death` (e.g. a move's cleanup)."""
        cls = lu.registry().get(op.op_id)
        return cls.after_master_death(op) if cls is not None else []

    def __call__(self, ctx: JobContext, op: opcodes.OpCode) -> JobResult:
        unit = self.make_lu(op, ctx.feedback)
        unit.log_entry = ctx.log_entry
        # read only: the shared copy; to declare the locks, as this masterd knows it (the locks
        # order its own jobs, whose writes it holds; `check` below reads the current one)
        snapshot = self.env.store.recent_snapshot()
        plan = [LockRequest(locking.LEVEL_CLUSTER, [locking.BGL], shared=not unit.REQ_BGL),
                *sorted(unit.declare_locks(snapshot), key=lambda r: r.level)]
        ctx.set_waiting()
        held: list[int] = []
        try:
            self._acquire_all(ctx, plan, held)
            ctx.set_running()
            config = self.env.store.snapshot()  # as it is now that we hold the locks
            unit.check(config)
            if op.dry_run:
                ctx.feedback("dry run: all checks passed, nothing changed")
                return unit.dry_run_result()
            result = unit.execute()
        finally:
            self._release(held)
        if isinstance(result, ResultWithJobs):
            return submit_jobs(ctx, op, result)
        return result

    def _release(self, held: list[int]) -> None:
        for level in reversed(held):
            try:
                self.env.locks.release(level)
            except locking.LockError:  # e.g. the LU removed the locks it held
                log.debug("release of level %s: nothing held", level)
        held.clear()

    def _ensure_names(self, request: LockRequest) -> None:
        """Locks for objects created since the manager was built (e.g. by an offline edit).
        Called holding the BGL and no later level, as adding locks requires."""
        if request.names is None or request.level == locking.LEVEL_CLUSTER:
            return
        for name in request.names:
            with contextlib.suppress(locking.LockError):  # it exists already
                self.env.locks.add(request.level, [name])

    def _try(self, request: LockRequest, timeout: float | None,
             cancel: locking.CancelToken | None = None) -> bool:
        try:
            got = self.env.locks.acquire(request.level, request.names, shared=request.shared,
                                         timeout=timeout, cancel=cancel)
        except (locking.LockDeletedError, locking.LockError):
            raise OpPrereqError(f"a {locking.LEVEL_NAMES[request.level]} this opcode needs was "
                                "removed meanwhile", "unknown_entity") from None
        return got is not None

    def _acquire_all(self, ctx: JobContext, plan: list[LockRequest], held: list[int]) -> None:
        """design-2.1's retry: each attempt takes every level within a growing timeout, or
        drops everything and backs off; the last attempt waits until it gets them or the job is
        canceled."""
        strategy = self.strategy_factory()
        while True:
            ctx.check_cancel()
            timeout = strategy.next_attempt()
            deadline = None if timeout is None else time.monotonic() + timeout
            complete = True
            for request in plan:
                self._ensure_names(request)
                if deadline is None:
                    # Wait in the queue for as long as it takes (keeping our place); a cancel
                    # of the job ends the wait at once through its token.
                    while not self._try(request, None, ctx.cancel_token):
                        ctx.check_cancel()
                elif not self._try(request, max(0.0, deadline - time.monotonic())):
                    complete = False
                    break
                held.append(request.level)
            if complete:
                return
            self._release(held)
            time.sleep(strategy.backoff())
