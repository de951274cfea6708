"""A record of which daemons a caller cannot reach, and since when, with a back-off between
tries. masterd keeps one of its node daemons, shared by the callers that ask every node on
their own (the live cache, the redistribution), so a dead node costs masterd a connection
attempt per back-off, not one per reader, per change and per caller; its web console keeps
one of the monds, and maintd one of the agents it polls (`maintd.agents`).

- A call that got no answer (`core.noderpc.NoAnswerError`: no connection, or none within the
  timeout) starts or continues the node's failure streak; the node is *in back-off* until
  `retry_at`. The back-off is `BASE` after the first failure and doubles with each failed
  retry, up to `CAP`: a blip (noded restarting, a lost SYN) is retried within a second or
  two, a node that stays down costs one attempt a minute per caller (1,000 dead nodes: ~17
  attempts a second, where every change and every 10 s of reads tried all 1,000).
- Any answer of the node daemon (an error answer too: the daemon was reached) ends the streak:
  the node is *seen again*, and is asked at once by whoever next wants it. A node is seen again
  when any masterd component's call reaches it (a job, `cluster redist-conf`, the console) or
  when it announces itself (noded at start, `seen`), not only when its back-off runs out.
- Outcomes are ordered by when their calls started: a failure of a call that started before
  the last answer is older news and changes nothing, and so does an answer of a call that
  started before the failure now on record. A failure while the node is still in back-off
  (calls that were under way together, a caller that does not consult the record) does not
  grow the back-off: it grows once per retry the schedule allowed.

Pure logic: the clocks are passed in (`clock`: monotonic seconds for the schedule; `wall`: the
time shown to operators).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from herder.core import model
from herder.core.errors import RpcError
from herder.core.noderpc import NoAnswerError, NodeRpc
from herder.core.rpcdefs.base import AnswerT, Call

BASE = 1.0  # seconds of back-off after a node's first failed call
CAP = 60.0  # the longest back-off


@dataclass(frozen=True)
class Down:
    """A node's failure streak: since when (wall clock), how many failed tries, when it may be
    tried again (monotonic), and the last error."""

    since: float
    failures: int
    retry_at: float
    error: str
    started: float  # when the call on record started (monotonic)

    def describe(self, now: float, what: str = "node") -> str:
        """One line for an operator: node unreachable (since ..., next try in N s): error
        (`what`: the daemon's kind when it is not the node daemon, e.g. "mond")."""
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.since))
        wait = max(0.0, self.retry_at - now)
        return (f"{what} unreachable (since {since} UTC, {self.failures} failed "
                f"{'try' if self.failures == 1 else 'tries'}, next in {wait:.0f} s): "
                f"{self.error}")


def backoff(failures: int, base: float = BASE, cap: float = CAP) -> float:
    """The back-off after `failures` failed tries in a row (1: `base`; doubling; at most
    `cap`)."""
    return min(cap, base * 2.0 ** min(failures - 1, 62))


class Reachability:
    """Node UUID -> its failure streak, if any; the last answer's call start per node."""

    def __init__(self, *, base: float = BASE, cap: float = CAP,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.base = base
        self.cap = cap
        self.clock = clock
        self.wall = wall
        self._lock = threading.Lock()
        self._down: dict[str, Down] = {}
        self._answered: dict[str, float] = {}  # node -> start of the last answered call

    # --- outcomes ----------------------------------------------------------------------------

    def failed(self, uuid: str, error: str, started: float | None = None) -> None:
        """A call to the node, started at `started` (monotonic; None: now), got no answer."""
        now = self.clock()
        started = now if started is None else started
        with self._lock:
            if self._answered.get(uuid, float("-inf")) > started:
                return  # the node answered a later call
            down = self._down.get(uuid)
            if down is None:
                self._down[uuid] = Down(self.wall(), 1, now + self.base, error, started)
            elif now >= down.retry_at:
                failures = down.failures + 1
                self._down[uuid] = Down(down.since, failures,
                                        now + backoff(failures, self.base, self.cap), error,
                                        max(started, down.started))
            else:  # under way together with the failure on record: the same outage
                self._down[uuid] = Down(down.since, down.failures, down.retry_at, error,
                                        max(started, down.started))

    def answered(self, uuid: str, started: float | None = None) -> None:
        """A call to the node, started at `started` (None: now), got an answer: seen again."""
        started = self.clock() if started is None else started
        with self._lock:
            down = self._down.get(uuid)
            if down is not None and down.started > started:
                return  # a later call failed
            self._down.pop(uuid, None)
            if started > self._answered.get(uuid, float("-inf")):
                self._answered[uuid] = started

    def seen(self, uuid: str) -> None:
        """The node showed it is up without a call of ours (it announced itself)."""
        self.answered(uuid)

    # --- questions ---------------------------------------------------------------------------

    def down(self, uuid: str) -> Down | None:
        """The node's failure streak (also once its back-off has passed); None: no known
        failure since its last answer."""
        with self._lock:
            return self._down.get(uuid)

    def avoid(self, uuid: str) -> Down | None:
        """The node's streak while it is in back-off (callers do not try it then); None: try
        it."""
        now = self.clock()
        with self._lock:
            down = self._down.get(uuid)
        return down if down is not None and now < down.retry_at else None

    def heard_from(self, uuid: str) -> bool:
        """Whether any call to the node got an answer (or it announced itself) since this
        record began (masterd's start)."""
        with self._lock:
            return uuid in self._answered

    def answered_since(self, uuid: str, since: float) -> bool:
        """Whether a call started at or after `since` (monotonic) got an answer."""
        with self._lock:
            return self._answered.get(uuid, float("-inf")) >= since


class ReachabilityRpc:
    """A node RPC that tells `record` each call's outcome (it never skips a call: whether to
    try a node in back-off is the caller's choice)."""

    def __init__(self, rpc: NodeRpc, record: Reachability) -> None:
        self.rpc = rpc
        self.reachability = record

    def call(self, node: model.Node, request: Call[AnswerT],
             timeout: float | None = None) -> AnswerT:
        started = self.reachability.clock()
        try:
            answer = self.rpc.call(node, request, timeout=timeout)
        except NoAnswerError as err:
            self.reachability.failed(node.uuid, str(err), started)
            raise
        except RpcError:
            self.reachability.answered(node.uuid, started)  # the daemon answered: an error
            raise
        self.reachability.answered(node.uuid, started)
        return answer
