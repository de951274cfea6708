"""The chaos test's long form (issue 35 item 17; the short form is tests/chaos/test_chaos_sim.py).

A simulated cluster of three nodes with real guests (`herder cluster simulate`); for N minutes
the driver's workers run concurrent jobs (create, migrate, failover, move, modify, remove,
tags) while the nemesis kills daemons with -9, powers nodes off and on through their BMC, cuts
and heals their networks and fills their file storage, all chosen at random from the printed
seed. Then every node is brought back and the checker's properties are checked
(tests/chaos/checker.py). Printed: the seed, the figures (operations by kind and outcome,
nemesis events by kind, violations) and the whole history; exit 1 on a violation.

    python bench/chaos.py --minutes 15 [--seed S] [--workers 2] [--dir /tmp/herder-bench-chaos]
                          [--hosts debian|namespace]

The nodes are Debian 12 hosts by default, as in the short form (`--hosts namespace`: the
namespaced hosts, whose supervisor restarts a killed daemon).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from herder.sim import cluster  # noqa: E402
from tests import simaddresses  # noqa: E402
from tests.chaos import checker, run  # noqa: E402
from tests.chaos.history import History  # noqa: E402


def figures(history: History, violations: list[checker.Violation], took: float) -> str:
    outcomes = Counter((op.kind, op.status if op.job_id is not None else "refused")
                       for op in history.operations)
    kinds = Counter(event.kind for event in history.events)
    failed = sum(event.detail.startswith("failed:") for event in history.events)
    lines = [f"seed {history.seed}: {took / 60:.1f} min, {len(history.operations)} operations, "
             f"{len(history.events)} nemesis events ({failed} failed to inject), "
             f"{len(violations)} violations",
             "operations: " + ", ".join(f"{kind} {status} {n}" for (kind, status), n
                                         in sorted(outcomes.items())),
             "nemesis: " + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, required=True,
                        help="how long the driver and the nemesis go on")
    parser.add_argument("--seed", type=int, default=None, help="repeat a run's choices")
    parser.add_argument("--workers", type=int, default=2, help="concurrent driver threads")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/herder-bench-chaos"),
                        help="the simulated cluster's directory (replaced)")
    parser.add_argument("--hosts", choices=cluster.HOSTS, default="debian",
                        help="the simulated hosts (default: Debian 12 hosts booting systemd)")
    args = parser.parse_args()
    if args.minutes <= 0 or args.workers < 1:
        parser.error("--minutes must be positive and --workers at least 1")
    seed = run.new_seed() if args.seed is None else args.seed
    state = cluster.start(args.dir, 3, guests="qemu", hosts=args.hosts, progress=print,
                          first_ip=simaddresses.first_ip("chaos_bench"))
    try:
        began = time.monotonic()
        history, violations = run.run(state, seed, run.Limits(seconds=args.minutes * 60,
                                                              workers=args.workers))
        took = time.monotonic() - began
    finally:
        cluster.stop(args.dir)
    print(checker.report(history, violations))
    print(figures(history, violations, took))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
