"""A short master-lease TTL held for an hour under guest load, no spurious election (issue 36).

A simulated cluster on the etcd backend (`herder cluster simulate --store etcd --guests qemu`,
3 nodes, one external etcd member) with the cluster's `master_lease_ttl` set to the short value
the takeover figures used (`--ttl 2`; docs/ha.md "The lease TTL is a cluster setting"). A
lease keeps the TTL it was granted with, so the bench restarts the standbys' masterd, then the
master's: the candidate that takes over holds a lease of the new TTL, and that election is the
run's first (the baseline). Then, for `--minutes`:

- guest load: `--guests-per-node` real QEMU guests (TCG) of the `herder-guest` OS on every
  node; each writes its disk every second (a record of its write sequence, fsync'd) and reads
  and hashes the disk's first MiB with O_DIRECT (herder.sim.guest), on top of the emulation's
  own CPU;
- a job stream, so masterd works: every `--job-interval` seconds one job through RAPI (cluster
  tags added and removed, instance tags, an instance modify of a config-only parameter);
- what is recorded: every change of the etcd master key (holder, create_revision: its epoch,
  lease), read every 0.25 s by a watcher on the last node; masterd's lines of campaign,
  takeover, lost mastership and step-down on every node; every second a client's `GET /2/info`
  at the cluster's published address (the master IP) and whether it answered; the load
  average every 10 s.

At the end: the elections (expected: none after the first), the longest RAPI gap, the load
average's range, the jobs done and failed, the guests' acknowledged disk writes. Exits 1 when a
spurious election happened (or the master key went away), 2 when the set-up failed.

    sudo PYTHONPATH=src:. .venv/bin/python bench/etcd_ttl_soak.py [--minutes 60] [--ttl 2]

The cluster is published on 127.0.0.180-183 (`--first-ip`, tests/simaddresses.py keeps the
span free of the test modules'); its directory is `--dir` (/tmp/ttlsoak-sim); it is stopped at
the end, also on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NODES = 3
# what masterd says about the master lease (herder.masterd.lease, herder.masterd.etcd_master):
# the pattern of each kind of line, in the order they are tried
MASTERD_EVENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("elected", re.compile(r"master lease: (?P<node>\S+) is master \(epoch (?P<epoch>\d+)\)")),
    ("took-over", re.compile(r"master on etcd: (?P<node>\S+) took over at epoch (?P<epoch>\d+)")),
    ("lost", re.compile(r"master lease: (?P<node>\S+) lost mastership \(epoch (?P<epoch>\d+)\)"
                        r": (?P<reason>.*)")),
    ("deposed", re.compile(r"master on etcd: (?P<node>\S+) deposed: (?P<reason>.*)")),
    ("standby", re.compile(r"master on etcd: (?P<node>\S+)(?: is a standby candidate|: standby)"
                           r"(?P<reason>.*)")),
    ("lease-error", re.compile(r"master lease \((?P<node>[^)]+)\): (?P<reason>.*)")),
)
TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)?) ")

# The watcher of the master key, run on a node (its etcd client settings and certificates):
# one JSON line per change of the key, and one at start. The key's create_revision is the
# election's epoch (herder.masterd.lease): a new value is a new election, even by the same node.
WATCHER = r"""
import json, os, sys, time
from herder.core.fence import master_key
from herder.core.store_etcd import open_client
client, cluster = open_client(os.environ["HERDER_CONFIG"])
client = client.clone(timeout=1.0, retry_for=1.0)
key = master_key(cluster)
last = ()
while True:
    try:
        kv = client.get(key)
        now = (kv.value.decode(), kv.create_revision, kv.lease) if kv else (None, 0, 0)
        error = None
    except Exception as err:
        now, error = last, str(err)
    if now != last or error:
        holder, revision, lease = now if now else (None, 0, 0)
        print(json.dumps({"t": time.time(), "holder": holder, "revision": revision,
                          "lease": lease, "error": error}), flush=True)
        last = now
    time.sleep(0.25)
"""


# --- what was seen, and what it adds up to (pure: tests/unit/test_etcd_ttl_soak.py) ------------


@dataclass(frozen=True)
class MasterdEvent:
    """One of masterd's lines about the master lease."""

    node: str  # the host whose log it is
    kind: str  # a key of MASTERD_EVENTS
    stamp: str  # the log line's own time ("" when it had none)
    text: str  # the line


def parse_masterd_line(node: str, line: str) -> MasterdEvent | None:
    """The lease event a masterd log line says, None for any other line."""
    for kind, pattern in MASTERD_EVENTS:
        if pattern.search(line):
            found = TIMESTAMP.match(line)
            return MasterdEvent(node, kind, found.group(1) if found else "", line.rstrip("\n"))
    return None


@dataclass(frozen=True)
class KeySample:
    """The etcd master key as the watcher read it: holder None while there is no key."""

    t: float  # the watcher's wall clock
    holder: str | None
    revision: int  # create_revision: the election's epoch (0: no key)
    error: str | None = None


def parse_watcher_line(line: str) -> KeySample | None:
    """One line of the watcher's output (None: not one of its lines)."""
    try:
        data = json.loads(line)
        return KeySample(float(data["t"]), data["holder"], int(data["revision"]),
                         data.get("error"))
    except (ValueError, KeyError, TypeError):
        return None


def elections(samples: Iterable[KeySample]) -> list[KeySample]:
    """The elections the samples saw: each first sample of a new epoch (create_revision), in
    order. A key held again by the same node after a lost lease has a new epoch: an election."""
    found: list[KeySample] = []
    seen: set[int] = set()
    for sample in samples:
        if sample.error is None and sample.revision and sample.revision not in seen:
            seen.add(sample.revision)
            found.append(sample)
    return found


def keyless_seconds(samples: Sequence[KeySample], end: float) -> list[tuple[float, float]]:
    """The spans (start, seconds) in which etcd had no master key, up to `end`."""
    spans = []
    since: float | None = None
    for sample in samples:
        if sample.error is not None:
            continue
        if sample.holder is None and since is None:
            since = sample.t
        elif sample.holder is not None and since is not None:
            spans.append((since, sample.t - since))
            since = None
    if since is not None:
        spans.append((since, end - since))
    return spans


def rapi_gaps(polls: Sequence[tuple[float, bool]]) -> list[tuple[float, float]]:
    """The spans (start, seconds) in which the client's polls failed: from the first failed
    poll to the next that answered (or the last poll)."""
    gaps = []
    since: float | None = None
    for t, answered in polls:
        if not answered and since is None:
            since = t
        elif answered and since is not None:
            gaps.append((since, t - since))
            since = None
    if since is not None and polls:
        gaps.append((since, polls[-1][0] - since))
    return gaps


@dataclass
class Verdict:
    """What the run adds up to."""

    elections: int  # all, the first (the baseline, under the new TTL) included
    spurious: int  # after the first
    masters_lost: int  # masterd's "lost mastership" lines in the window
    keyless: float  # the longest span without a master key, seconds
    longest_gap: float  # the longest RAPI unavailability, seconds
    gaps: int
    failed_polls: int
    polls: int
    load: tuple[float, float]  # the 1-minute load average's range
    notes: list[str] = field(default_factory=list)

    @property
    def stable(self) -> bool:
        return self.spurious == 0 and self.masters_lost == 0 and self.keyless == 0.0


def verdict(samples: Sequence[KeySample], events: Sequence[MasterdEvent],
            polls: Sequence[tuple[float, bool]], loads: Sequence[float], end: float) -> Verdict:
    """The run's figures from what was recorded in its window (after the baseline election)."""
    found = elections(samples)
    gaps = rapi_gaps(polls)
    keyless = keyless_seconds(samples, end)
    notes = [f"election at epoch {e.revision}: {e.holder}" for e in found[1:]]
    notes += [f"{e.node}: {e.text}" for e in events if e.kind in ("lost", "deposed")]
    notes += [f"no master key for {seconds:.1f} s" for _, seconds in keyless]
    return Verdict(
        elections=len(found), spurious=max(0, len(found) - 1),
        masters_lost=sum(1 for e in events if e.kind == "lost"),
        keyless=max((seconds for _, seconds in keyless), default=0.0),
        longest_gap=max((seconds for _, seconds in gaps), default=0.0), gaps=len(gaps),
        failed_polls=sum(1 for _, answered in polls if not answered), polls=len(polls),
        load=(min(loads, default=0.0), max(loads, default=0.0)), notes=notes)


# --- the run ------------------------------------------------------------------------------------


class Recorder:
    """The threads that record while the run goes on; each appends to its own list."""

    def __init__(self, state: Any, watcher_node: str) -> None:
        self.state = state
        self.stop = threading.Event()
        self.samples: list[KeySample] = []
        self.polls: list[tuple[float, bool]] = []
        self.poll_errors: list[str] = []
        self.loads: list[float] = []
        self.jobs_done = 0
        self.jobs_failed: list[str] = []
        self.watcher = state.host(watcher_node).popen(
            [sys.executable, "-c", WATCHER], env=state.node_environment,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.threads = [threading.Thread(target=target, daemon=True) for target in
                        (self._watch, self._poll, self._load)]
        for thread in self.threads:
            thread.start()

    def _watch(self) -> None:
        assert self.watcher.stdout is not None
        for line in self.watcher.stdout:
            sample = parse_watcher_line(line)
            if sample is not None:
                self.samples.append(sample)
                print(f"  etcd master key: {sample.holder} epoch {sample.revision}"
                      + (f" ({sample.error})" if sample.error else ""), flush=True)

    def _poll(self) -> None:
        """`GET /2/info` every second at the published address, as a client sees the master."""
        with self.state.rapi(timeout=2.0) as api:
            while not self.stop.is_set():
                began = time.time()
                try:
                    api.get_info()
                    self.polls.append((began, True))
                except Exception as err:  # any failure is a client's unavailability
                    self.polls.append((began, False))
                    self.poll_errors.append(f"{time.strftime('%H:%M:%S')} {err}")
                self.stop.wait(max(0.0, 1.0 - (time.time() - began)))

    def _load(self) -> None:
        while not self.stop.is_set():
            self.loads.append(float(Path("/proc/loadavg").read_text().split()[0]))
            self.stop.wait(10.0)

    def jobs(self, instances: list[str], interval: float, until: float) -> None:
        """The job stream, in this thread, until `until` (monotonic)."""
        from herder.core.errors import HerderError

        number = 0
        while time.monotonic() < until and not self.stop.is_set():
            number += 1
            instance = instances[number % len(instances)]
            tag = f"soak-{number}"
            step = number % 4
            try:
                with self.state.rapi(timeout=30.0) as api:
                    if step == 0:
                        job = api.add_cluster_tags([tag])
                    elif step == 1:
                        job = api.delete_cluster_tags([f"soak-{number - 1}"])
                    elif step == 2:
                        job = api.add_instance_tags(instance, [tag])
                    else:  # config only: Ganeti's auto_balance flag, flipped each time
                        job = api.modify_instance(
                            instance, beparams={"auto_balance": bool(number % 8 == 3)})
                    api.wait_for_job(job, timeout=120)
                self.jobs_done += 1
            except (HerderError, OSError) as err:
                self.jobs_failed.append(f"{time.strftime('%H:%M:%S')} {step}: {err}")
            time.sleep(interval)

    def dump(self, path: Path, events: Sequence[MasterdEvent]) -> None:
        """Everything recorded so far, as JSON (written every minute: a run cut short keeps
        its records)."""
        path.write_text(json.dumps({
            "samples": [vars(s) for s in self.samples], "polls": self.polls,
            "poll_errors": self.poll_errors, "loads": self.loads, "jobs_done": self.jobs_done,
            "jobs_failed": self.jobs_failed, "masterd": [vars(e) for e in events]}, indent=1))

    def close(self) -> None:
        self.stop.set()
        from herder.sim.host import terminate

        terminate(self.watcher, grace=2)
        for thread in self.threads:
            thread.join(timeout=5)


def masterd_events(state: Any, nodes: list[str], offsets: dict[str, int]) -> list[MasterdEvent]:
    """masterd's lease lines on every node since `offsets` (bytes into each log)."""
    found = []
    for node in nodes:
        path = state.host(node).path("/var/log/herder/masterd.log")
        with open(path, "rb") as log:
            log.seek(offsets.get(node, 0))
            for line in log.read().decode(errors="replace").splitlines():
                event = parse_masterd_line(node, line)
                if event is not None:
                    found.append(event)
    return found


def log_sizes(state: Any, nodes: list[str]) -> dict[str, int]:
    return {node: state.host(node).path("/var/log/herder/masterd.log").stat().st_size
            for node in nodes}


def master_of(state: Any) -> str | None:
    try:
        with state.rapi(timeout=5.0) as api:
            return str(api.get_info()["master"])
    except Exception:
        return None


def wait_until(what: str, predicate: Any, timeout: float, interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise SystemExit(f"set-up: timed out waiting for {what}")


def herder_cli(state: Any, *args: str, timeout: float = 600) -> str:
    from herder.sim.cluster import run_cli

    done = run_cli(state, *args, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"set-up: herder {' '.join(args)}: {done.stdout}{done.stderr}")
    return done.stdout


def set_short_ttl(state: Any, nodes: list[str], ttl: int) -> str:
    """The cluster's master_lease_ttl set, then every masterd restarted (standbys first) so
    that the leases are granted with it; the master after the restarts."""
    herder_cli(state, "cluster", "modify", "--master-lease-ttl", str(ttl))
    old = wait_until("the master", lambda: master_of(state), 120)
    for node in [n for n in nodes if n != old]:
        before = log_sizes(state, [node])
        state.host(node).supervisor("restart", ["masterd"])
        wait_until(f"{node}'s masterd a standby with ttl {ttl}",
                   lambda node=node, before=before: any(
                       e.kind == "standby" and f"lease ttl {ttl} s" in e.text
                       for e in masterd_events(state, [node], before)), 180)
    state.host(old).supervisor("restart", ["masterd"])
    new = wait_until("a new master", lambda: (m := master_of(state)) and m != old and m, 180)
    return str(new)


def add_guests(state: Any, nodes: list[str], per_node: int) -> list[str]:
    names = []
    for index, node in enumerate(nodes, 1):
        for number in range(per_node):
            name = f"soak{index}{chr(ord('a') + number)}"
            herder_cli(state, "instance", "add", name, "--no-name-check", "-t", "file", "-o",
                       "herder-guest", "--disk", "0:size=32M", "-n", node)
            names.append(name)
            print(f"  {name} on {node}", flush=True)
    return names


def heartbeats(state: Any, nodes: list[str], name: str) -> tuple[int, int]:
    """(heartbeats, acknowledged disk writes) in `name`'s serial logs."""
    from herder.sim import guest

    beats = []
    for node in nodes:
        log = state.host(node).path(f"/var/log/herder/instances/{name}.serial.log")
        if log.exists():
            beats += guest.parse_heartbeats(log.read_text(errors="replace"))
    return len(beats), sum(1 for beat in beats if beat.seq is not None)


def run(options: argparse.Namespace) -> int:
    from herder.sim import cluster as sim_cluster

    nodes = [f"node{i}.sim.herder.test" for i in range(1, NODES + 1)]
    print(f"{time.strftime('%H:%M:%S')} simulated cluster in {options.dir} "
          f"(127.0.0.{options.first_ip}), etcd, qemu guests", flush=True)
    began = time.monotonic()
    state = sim_cluster.start(options.dir, NODES, first_ip=options.first_ip, guests="qemu",
                              store="etcd", progress=lambda line: print("  " + line, flush=True))
    print(f"  up after {time.monotonic() - began:.0f} s", flush=True)
    instances = add_guests(state, nodes, options.guests_per_node)
    master = set_short_ttl(state, nodes, options.ttl)
    print(f"{time.strftime('%H:%M:%S')} master_lease_ttl {options.ttl} s; {master} elected "
          f"under it", flush=True)
    offsets = log_sizes(state, nodes)
    recorder = Recorder(state, nodes[-1])
    window = time.time()
    until = time.monotonic() + options.minutes * 60
    jobs = threading.Thread(target=recorder.jobs,
                            args=(instances, options.job_interval, until), daemon=True)
    jobs.start()
    try:
        while time.monotonic() < until:
            time.sleep(min(60.0, max(0.0, until - time.monotonic())))
            events = masterd_events(state, nodes, offsets)
            recorder.dump(options.records, events)
            figures = verdict(recorder.samples, events, recorder.polls, recorder.loads,
                              time.time())
            print(f"{time.strftime('%H:%M:%S')} elections {figures.elections}, RAPI gaps "
                  f"{figures.gaps} (longest {figures.longest_gap:.1f} s), jobs "
                  f"{recorder.jobs_done} done {len(recorder.jobs_failed)} failed, load "
                  f"{recorder.loads[-1] if recorder.loads else 0:.1f}", flush=True)
    finally:
        recorder.stop.set()
        jobs.join(timeout=150)
        recorder.close()
    end = time.time()
    events = masterd_events(state, nodes, offsets)
    recorder.dump(options.records, events)
    figures = verdict(recorder.samples, events, recorder.polls, recorder.loads, end)
    writes = {name: heartbeats(state, nodes, name) for name in instances}
    print(f"\n{options.minutes:g} min from {time.strftime('%H:%M:%S', time.localtime(window))}, "
          f"master_lease_ttl {options.ttl} s, {len(instances)} QEMU guests, a job every "
          f"{options.job_interval:g} s:")
    print(f"  elections: {figures.elections} (the first: the baseline), spurious "
          f"{figures.spurious}; masterd's lost mastership {figures.masters_lost}; longest "
          f"span without a master key {figures.keyless:.1f} s")
    print(f"  RAPI /2/info every second: {figures.polls} polls, {figures.failed_polls} "
          f"failed, {figures.gaps} gaps, the longest {figures.longest_gap:.1f} s")
    print(f"  load average (1 min): {figures.load[0]:.1f}-{figures.load[1]:.1f} on "
          f"{len(recorder.loads)} samples")
    print(f"  jobs: {recorder.jobs_done} done, {len(recorder.jobs_failed)} failed")
    for name, (beats, acked) in writes.items():
        print(f"  {name}: {beats} heartbeats, {acked} acknowledged disk writes")
    for line in [*figures.notes, *recorder.poll_errors[:20], *recorder.jobs_failed[:20]]:
        print(f"  | {line}")
    for event in events:
        print(f"  masterd {event.node}: {event.text}")
    return 0 if figures.stable else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--ttl", type=int, default=2, help="the cluster's master_lease_ttl")
    parser.add_argument("--guests-per-node", type=int, default=1)
    parser.add_argument("--job-interval", type=float, default=2.0,
                        help="seconds between two jobs of the job stream")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/ttlsoak-sim"))
    parser.add_argument("--first-ip", type=int, default=180,
                        help="127.0.0.N of the cluster (tests/simaddresses.py: ttl_soak_bench)")
    parser.add_argument("--records", type=Path, default=Path("/tmp/ttlsoak-records.json"),
                        help="where the raw records go (JSON, written every minute)")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    options = parser.parse_args()

    def stopped(signum: int, frame: object) -> None:
        raise SystemExit(f"signal {signum}")

    signal.signal(signal.SIGTERM, stopped)
    from herder.sim import cluster as sim_cluster

    code = 2
    try:
        code = run(options)
    finally:
        if not options.keep:
            sim_cluster.stop(options.dir)
    sys.exit(code)


if __name__ == "__main__":
    main()
