"""maintd's round at 1,000 agents, 10 of them dead: wall time and the poller's CPU per round.

    .venv/bin/python bench/maintd_agents.py [--agents 1000] [--dead 10] [--rounds 6]
                                            [--repeats 5] [--timeout 5]

The agents are one process serving `/1/report/all` on `--agents` loopback addresses (an
inst-status report of 10 instances and a cpu-avg-load report each, as `bench/scale.py`'s);
`--dead` of them take the connection and never answer (a hung mond). maintd's poller
(`maintd.agents.AgentPoller`) polls them all `--rounds` times back to back, `--repeats` times
(a new poller each: the first round of each waits for every dead agent's timeout once, the
later ones leave the dead agents in back-off). Prints per repeat the rounds' wall and CPU
times, then the median and range over the repeats of the rounds after the first, with the load
average: the machine is shared, so the CPU time is the steadier figure.
There is no peer to compare with: Ganeti has no daemon that polls every node's mond.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import maintd_round


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--dead", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=5.0, help="an agent's timeout (s)")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(args.repeats):
        figures = maintd_round(args.agents, timeout=args.timeout, dead=args.dead,
                               rounds=args.rounds)
        print(json.dumps(figures), flush=True)
        walls += figures["round_s"][1:]
        cpus += figures["poller_cpu_s"][1:]
    print(json.dumps({
        "round_s_after_first": {"median": round(statistics.median(walls), 3),
                                "min": min(walls), "max": max(walls)},
        "poller_cpu_s_after_first": {"median": round(statistics.median(cpus), 3),
                                     "min": min(cpus), "max": max(cpus)},
        "load_average_after": [round(x, 1) for x in os.getloadavg()]}), flush=True)


if __name__ == "__main__":
    main()
