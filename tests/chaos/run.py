"""One chaos run on a started simulated cluster: the driver's workers, the nemesis and the
operator at once (the first two seeded from one printed seed), then every node brought back,
the final state read and the history checked. The short form (tests/chaos/test_chaos_sim.py)
and the long one (bench/chaos.py) differ only in their limits."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from herder.sim import cluster
from tests.chaos import checker, observe
from tests.chaos.driver import Driver
from tests.chaos.history import History
from tests.chaos.nemesis import Nemesis


@dataclass(frozen=True)
class Limits:
    seconds: float  # how long the driver and the nemesis go on at most (a fault is healed)
    workers: int = 2  # concurrent driver threads
    operations: int | None = None  # at most this many operations (None: until `seconds`)
    events: int | None = None  # at most this many faults (None: until `seconds`)
    max_instances: int = 4
    fault_pause: tuple[float, float] = (3.0, 15.0)
    down_seconds: tuple[float, float] = (5.0, 30.0)  # a node powered off, a disk full
    cut_seconds: tuple[float, float] = (2.0, 25.0)  # a network cut (the lease is 6 s)
    operation_pause: tuple[float, float] = (1.0, 5.0)
    operator_pause: float = 15.0  # between two of the operator's rounds during the run


def new_seed() -> int:
    return random.SystemRandom().randrange(1 << 32)


def operate(state: cluster.SimState, nemesis: Nemesis, stop: threading.Event,
            pause: float) -> None:
    """The operator during the run: once maintd's incident about a node is over, a node it
    fenced is powered on and set online again (`observe.restore_nodes`), so the cluster keeps
    its nodes as a real one would; every action is an event of the history ("operator")."""
    booted: dict[str, int] = {}

    def say(text: str) -> None:
        node = next((n.name for n in state.nodes if n.name in text), "")
        nemesis.record("operator", node, text.replace(f"{node}: ", "").replace(f" {node}", ""))

    while not stop.wait(pause):
        try:
            observe.restore_nodes(state, say, booted, settled=False, held=nemesis.held)
        except Exception as err:  # a round that failed is tried again, and recorded
            first = str(err).splitlines()[0] if str(err) else repr(err)
            nemesis.record("operator", "", f"failed: {first}")


def run(state: cluster.SimState, seed: int, limits: Limits,
        say: Callable[[str], None] = print) -> tuple[History, list[checker.Violation]]:
    """Drive, inject, settle, check: the history and its violations."""
    say(f"chaos seed {seed}")
    driver = Driver(state, random.Random(seed), max_instances=limits.max_instances)
    nemesis = Nemesis(state, random.Random(seed + 1), cut_seconds=limits.cut_seconds,
                      down_seconds=limits.down_seconds)
    stop = threading.Event()
    threads = [threading.Thread(target=driver.run, args=(stop,), daemon=True,
                                kwargs={"operations": limits.operations,
                                        "pause": limits.operation_pause})
               for _ in range(limits.workers)]
    faults = threading.Thread(target=nemesis.run, args=(stop,), daemon=True,
                              kwargs={"events": limits.events, "pause": limits.fault_pause})
    threads.append(faults)
    threads.append(threading.Thread(target=operate, args=(state, nemesis, stop,
                                                          limits.operator_pause), daemon=True))
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + limits.seconds
    # a fixed number of faults ends the run once they are healed; else the time does
    while time.monotonic() < deadline and faults.is_alive():
        time.sleep(1)
    stop.set()
    for thread in threads:  # an operation waits for its job at most the driver's job timeout
        thread.join(driver.job_timeout + 120)
    say(f"{len(driver.operations)} operations, {len(nemesis.events)} nemesis events; "
        "bringing every node back")
    starts = observe.bring_back(state, say)
    nemesis.free_leftovers()
    operations = driver.operations + starts
    final = observe.final_state(state, [op.job_id for op in operations if op.job_id is not None])
    history = History(seed, operations, nemesis.events, final)
    return history, checker.check(history)
